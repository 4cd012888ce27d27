"""From a results tree to a submitted package: status, submit and runs (issue 13)."""
