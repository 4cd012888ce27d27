"""mlpstorage: run MLPerf Storage workloads and build submission packages a reviewer can trust."""

__version__ = "3.0.0"
RULES_EDITION = "3.0"
LAYOUT_VERSION = 3
