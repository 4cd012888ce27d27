"""The flags only the embedded DiskANN engine (`--vdb-engine diskann`, OPEN) reads. The index
flags every engine shares (--max-degree, --search-list-size, --search-ef, --metric-type) stay in
cli/vectordb.py with their meaning; ManPage's vectordb section maps them to diskannpy.
"""

from __future__ import annotations

import argparse

from mlpstorage_py.cli.common import add_open_only, non_negative_float, non_negative_int, positive_float, positive_int

ENGINE_NOTE = "(--vdb-engine diskann only)"


def add_datagen(p: argparse.ArgumentParser, mode: str) -> None:
    group = p.add_argument_group(f"embedded DiskANN build {ENGINE_NOTE}")
    add_open_only(group, mode, "--pq-code-budget-ratio", type=positive_float, default=0.125,
                  help="PQ codes kept in memory at search, as a fraction of the raw vector bytes (Milvus "
                       "pq_code_budget_gb_ratio; default 0.125: 4d x 0.125 bytes per vector)")
    add_open_only(group, mode, "--build-memory-gb", type=positive_float, default=4.0,
                  help="memory the index build may use, GiB (diskannpy build_memory_maximum; default 4)")
    add_open_only(group, mode, "--build-threads", type=non_negative_int, default=0,
                  help="index build threads (default 0: every core)")


def add_run(p: argparse.ArgumentParser, mode: str) -> None:
    group = p.add_argument_group(f"embedded DiskANN search {ENGINE_NOTE}")
    add_open_only(group, mode, "--beam-width", type=positive_int, default=4,
                  help="sector reads each search round issues (DiskANN beam width W; default 4)")
    add_open_only(group, mode, "--search-cache-budget-ratio", type=non_negative_float, default=0.0,
                  help="node cache per query client, as a fraction of the raw vector bytes (Milvus "
                       "search_cache_budget_gb_ratio; default 0: every node past the medoid is read from storage)")
    add_open_only(group, mode, "--index-copy-dir",
                  help="a copy per host: each host's first rank copies the index here (untimed) and that "
                       "host's ranks search the copy; default: every rank searches the one index under --storage-root")
