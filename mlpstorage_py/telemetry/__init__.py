"""Client hosts\x27 activity over time (sample.py), read from /proc and /sys inside each rank."""
