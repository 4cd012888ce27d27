"""Each rank's progress lines (rank_progress.py) and its host's activity over time (sample.py), read
from /proc and /sys inside the ranks; standard library only, below every engine and store."""
