"""A bare diskannpy query loop: the reference bench/diskann_overhead.py holds our DiskANN run
against. It opens the index as a query rank does (diskannpy and numpy 1.25 from the engine's
prefix, two search contexts, no node cache, one search thread), runs one untimed query, then
times `index.search` over the same query set, search list and beam width, and prints its
queries/s as a line `BARE <json>` (DiskANN prints lines of its own).

    .venv/bin/python bench/diskann_bare.py INDEX_DIR SEED DISTRIBUTION DIM QUERY_VECTORS QUERIES SEARCH_LIST BEAM
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mlpstorage_py.vectordb import diskann_engine  # after the path

diskann_engine.activate()

import diskannpy  # from the engine's prefix

from mlpstorage_py.vectordb import generate


def main(argv: list[str]) -> int:
    index_dir, seed, dist, dim, count, total, search_list, beam = argv
    queries = generate.queries(int(seed), dist, int(dim), int(count))
    index = diskannpy.StaticDiskIndex(index_directory=index_dir, num_threads=diskann_engine.SEARCH_CONTEXTS,
                                      num_nodes_to_cache=0)
    index.search(queries[0], 10, int(search_list), int(beam))  # warm-up, like a rank's
    t0 = time.perf_counter()
    for i in range(int(total)):
        index.search(queries[i % int(count)], 10, int(search_list), int(beam))
    seconds = time.perf_counter() - t0
    print(f'BARE {{"qps": {int(total) / seconds}, "seconds": {seconds}}}', flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
