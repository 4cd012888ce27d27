"""I/O tracing of a run (--trace-io, issue 27): one bpftrace per client host (session.py, bpf.py,
agent.py, parse.py, devices.py) into the leaf's io_trace.json; and what is made of the trace:
the distilled fio job of a leaf (replay.py) and `mlpstorage replay` running it (replay_run.py)."""
