"""Reports: the submission manifest and the results tables."""
