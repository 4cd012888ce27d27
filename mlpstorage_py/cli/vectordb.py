"""`mlpstorage <mode> vectordb <INDEX> <datasize|datagen|run> [file|object]`."""

from __future__ import annotations

from typing import Any

from mlpstorage_py.cli.common import (add_open_only, add_params, add_storage, add_universal, command_parser,
                                      positive_int)
from mlpstorage_py.rules.tables import workloads


def register(benches: Any, mode: str) -> None:
    table = workloads()["vector_database"]
    bench = benches.add_parser("vectordb", help="vector database load and query (Milvus)",
                               description="Vector database benchmark on Milvus: load + index, then timed queries with recall.")
    indexes = bench.add_subparsers(dest="model", metavar="<INDEX>", required=True)
    for index in table["index_types"]["closed" if mode == "closed" else "open"]:
        ip = indexes.add_parser(index, help=f"{index} index")
        commands = ip.add_subparsers(dest="command", metavar="<command>", required=True)
        for name, text in (("datasize", "estimate the storage a collection needs"),
                           ("datagen", "load vectors and build the index"),
                           ("run", "run timed queries and measure recall")):
            p = command_parser(commands, name, text, "vectordb")
            p.add_argument("--num-vectors", type=positive_int, default=1_000_000, help="collection size (default 1,000,000)")
            p.add_argument("--dimension", type=positive_int, default=1536, help="vector dimension (default 1536)")
            p.add_argument("--num-shards", type=positive_int, default=1, help="collection shards (default 1)")
            if name != "datasize":
                p.add_argument("--vdb-engine", choices=table["engines"], default="milvus", help="database engine")
                p.add_argument("--host", help="database server host (default: embedded Milvus Lite)")
                p.add_argument("--port", type=positive_int, default=19530, help="database server port")
                p.add_argument("--collection", help="collection name (default derived from the scale)")
                p.add_argument("--storage-root", help="where the embedded database keeps its data (file runs)")
                add_storage(p)
            if name == "datagen":
                p.add_argument("--batch-size", type=positive_int, default=1000, help="vectors per insert")
                p.add_argument("--distribution", choices=["uniform", "normal", "zipfian"], default="uniform")
                p.add_argument("--force", action="store_true", help="drop and recreate an existing collection")
                add_open_only(p, mode, "--metric-type", choices=["COSINE", "L2", "IP"], default="COSINE")
                add_open_only(p, mode, "--M", type=positive_int, default=64, help="HNSW graph degree")
                add_open_only(p, mode, "--ef-construction", type=positive_int, default=200)
            if name == "run":
                p.add_argument("--num-query-processes", type=positive_int, default=1)
                p.add_argument("--batch-size", type=positive_int, default=1, help="queries per request")
                p.add_argument("--search-limit", type=positive_int, default=10, help="top-K (recall@K)")
                p.add_argument("--search-ef", type=positive_int, default=200)
                group = p.add_mutually_exclusive_group()
                group.add_argument("--runtime", type=positive_int, help="seconds of timed queries")
                group.add_argument("--queries", type=positive_int, help="number of timed queries")
            add_params(p, mode)
            add_universal(p)
