"""I/O tracing of a run (--trace-io, issue 27) and what is made of the trace: the distilled fio
job of a leaf (replay.py) and `mlpstorage replay` running it (replay_run.py)."""
