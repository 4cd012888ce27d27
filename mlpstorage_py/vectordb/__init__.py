"""The vector database benchmark's engine: vector generation, the Milvus backends (embedded
Milvus Lite or a server over gRPC), exact ground truth and the query workers.

Nothing here imports pymilvus or numpy at module import time except the modules that need
them, and those are only imported by commands that run (so `--help` stays fast).

gRPC's fork support is turned off before pymilvus can load grpcio: with it on, grpcio 1.80 and
later (grpc/grpc#43055) restart its epoll poller around every fork, and a process holding a
live channel that starts a child through a plain fork (subprocess with a preexec_fn) aborts now
and then on `epoll_wait error: Bad file descriptor`: here 4 of 300 such children failed with it
on, none with it off (tests/test_vectordb_fork.py). Every child we start execs at once, so
nothing needs gRPC to survive a fork; launch/process.py no longer forks that way either."""

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

VECTOR_FIELD = "vector"
ID_FIELD = "id"
