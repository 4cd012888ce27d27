"""LLM checkpoint I/O: the layout arithmetic (shards) and the MPI engine that writes and reads it."""
