"""kvcache_sim: a KV-cache offload simulator for LLM inference storage benchmarking.

Simulated users send requests to a serving system whose KV cache lives in tiers (GPU memory,
CPU memory, a storage directory). Every storage-tier object is a real .npy file written in
chunks + fsync and read in chunks after a page-cache drop, so the storage numbers are
measured, not modelled. The request stream is the MLCommons reference's (see the README).
The package does not depend on mlpstorage.

Modules: models (KV bytes per token), config (defaults and the strict --config loader),
workload (users, QoS, conversations, prefixes, RAG, trace replay), payload (entry bytes,
unique per 512 B, and the reused I/O buffers), tiers (GPU and CPU tiers), storage (the .npy
tier), cache (the tiered LRU cache), stats (latency series), engine (the timed run), report
(the output JSON), cli (kv-cache.py).
"""

__version__ = "1.0.0"
