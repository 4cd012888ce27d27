"""The vector database benchmark's engine: vector generation, the Milvus backends (embedded
Milvus Lite or a server over gRPC), exact ground truth and the query workers.

Nothing here imports pymilvus or numpy at module import time except the modules that need
them, and those are only imported by commands that run (so `--help` stays fast)."""

VECTOR_FIELD = "vector"
ID_FIELD = "id"
