"""`mlpstorage <mode> vectordb <INDEX> <datasize|datagen|run> [file|object]`.

Which flags exist where follows the rules' VectorDB tables: the CLOSED tunables (Rules 5.6.4)
exist in every mode; the parameters only the OPEN table lists (database.host/port, 5.6.5) and
the ones neither table lets CLOSED change (seed, distribution, top-K, query-set size, manual
compaction, IVF nlist) are registered with add_open_only, so CLOSED explains its refusal.
"""

from __future__ import annotations

import argparse
from typing import Any

from mlpstorage_py.cli import vectordb_diskann
from mlpstorage_py.cli.common import (
    HOST_PATTERN,
    add_mpi,
    add_open_only,
    add_params,
    add_storage,
    add_trace,
    add_universal,
    command_parser,
    positive_int,
)
from mlpstorage_py.rules.predicates import vdb_closed_values
from mlpstorage_py.rules.tables import checker, workloads

METRICS = ["COSINE", "L2", "IP"]
DISTRIBUTIONS = ["uniform", "normal", "zipfian"]
RUN_MODES = ["timed", "query_count"]


def _host(text: str) -> str:
    """A database host is a name or address, never anything a shell or URL could reinterpret."""
    if not HOST_PATTERN.match(text) or ":" in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid host name or address")
    return text


def _port(text: str) -> int:
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (1-65535)")
    return value


def _scale(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("collection scale")
    group.add_argument("--num-vectors", type=positive_int, default=1_000_000, help="collection size (default 1,000,000)")
    group.add_argument("--dimension", type=positive_int, default=1536, help="vector dimension (default 1536)")
    group.add_argument("--num-shards", type=positive_int, default=1, help="collection shards (default 1)")
    group.add_argument("--vector-dtype", choices=["FLOAT_VECTOR"], default="FLOAT_VECTOR", help="vector data type")
    group.add_argument("--index-type", help="the index family; if given it must equal <INDEX>")
    group.add_argument("--vdb-engine", choices=workloads()["vector_database"]["engines"], default="milvus",
                       help="database engine: milvus (Lite or a server), or diskann, the embedded DiskANN "
                            "engine (OPEN, DISKANN only; default milvus)")


def _build(p: argparse.ArgumentParser, mode: str) -> None:
    group = p.add_argument_group("index build (Rules 5.6.4 tunables)")
    group.add_argument("--metric-type", choices=METRICS, default="COSINE", help="distance metric (default COSINE)")
    group.add_argument("--max-degree", "--M", dest="max_degree", type=positive_int, default=64,
                       help="graph degree: DISKANN/AISAQ max_degree, HNSW M (default 64)")
    group.add_argument("--ef-construction", type=positive_int, default=200, help="HNSW efConstruction (default 200)")
    group.add_argument("--search-list-size", type=positive_int, default=200,
                       help="DISKANN/AISAQ build search_list_size (default 200)")
    group.add_argument("--inline-pq", type=positive_int, default=16, help="AISAQ inline_pq (default 16)")
    add_open_only(group, mode, "--nlist", type=positive_int,
                  help="IVF_FLAT/IVF_SQ8 cells (default about 4 x sqrt(num-vectors))")


def _database(p: argparse.ArgumentParser, mode: str) -> None:
    group = p.add_argument_group("database")
    # The endpoint says where the database under test runs, not what the workload is, so CLOSED
    # has it too: without it CLOSED could only use Milvus Lite, which cannot build DISKANN/AISAQ.
    group.add_argument("--host", type=_host, help="Milvus server host; without --host/--port the embedded Milvus Lite is used")
    group.add_argument("--port", type=_port, help="Milvus server gRPC port (default 19530; host default 127.0.0.1)")
    group.add_argument("--collection", help="collection name (default derived from the scale and index)")
    group.add_argument("--storage-root", "--data-dir", dest="data_dir",
                       help="directory where the database keeps its data: Milvus Lite's database lives here "
                            "(else MLPSTORAGE_DATA_DIR); must not be the results filesystem (Rules 5.4.1)")
    group.add_argument("--storage-type", choices=["local_fs", "s3"], default="local_fs",
                       help="storage behind the database (default local_fs)")
    fixed = vdb_closed_values(checker())
    add_open_only(group, mode, "--seed", type=int, default=fixed["seed"],
                  help=f"seed of the vectors and the query set (default {fixed['seed']})")
    add_open_only(group, mode, "--distribution", choices=DISTRIBUTIONS, default=fixed["distribution"],
                  help=f"vector distribution; rows are L2-normalised (default {fixed['distribution']})")


def register(bench: Any, mode: str) -> None:
    """Its indexes, commands and flags under its parser (benchmarks/table.py's row)."""
    table = workloads()["vector_database"]
    indexes = bench.add_subparsers(dest="model", metavar="<INDEX>", required=True)
    for index in table["index_types"]["closed" if mode == "closed" else "open"]:
        ip = indexes.add_parser(index, help=f"{index} index")
        commands = ip.add_subparsers(dest="command", metavar="<command>", required=True)

        p = command_parser(commands, "datasize", "estimate the storage a collection needs")
        _scale(p)
        _build(p, mode)
        p.add_argument("--storage-root", "--data-dir", dest="data_dir",
                       help="optional: compare the estimate with the free space there")
        add_params(p, mode)
        add_universal(p)

        p = command_parser(commands, "datagen", "load vectors and build the index")
        _scale(p)
        _build(p, mode)
        _database(p, mode)
        group = p.add_argument_group("load")
        group.add_argument("--batch-size", type=positive_int, default=1000, help="vectors per insert (default 1000)")
        group.add_argument("--chunk-size", type=positive_int, default=10_000,
                           help="vectors generated per chunk (default 10,000)")
        group.add_argument("--force", action="store_true", help="drop and recreate an existing collection")
        add_open_only(group, mode, "--compact", action="store_true",
                      help="compact the collection after the load and wait for it")
        vectordb_diskann.add_datagen(p, mode)
        add_storage(p)
        add_trace(p, mode)
        add_params(p, mode)
        add_universal(p)

        p = command_parser(commands, "run", "run queries and measure recall")
        _scale(p)
        _database(p, mode)
        group = p.add_argument_group("queries")
        group.add_argument("--mode", "--benchmark-mode", dest="run_mode", choices=RUN_MODES,
                           help="timed (--runtime) or query_count (--queries); default from whichever is given, else timed")
        exclusive = group.add_mutually_exclusive_group()
        exclusive.add_argument("--runtime", type=positive_int, help="seconds of timed queries (default 60)")
        exclusive.add_argument("--queries", type=positive_int, help="number of queries (default 1000 in query_count mode)")
        group.add_argument("--num-query-processes", "-np", dest="num_query_processes", type=positive_int,
                           help="query clients: local worker processes, or MPI ranks over --hosts (default 1; "
                                "with --hosts the slots given there, else one per host)")
        group.add_argument("--batch-size", type=positive_int, default=1, help="query vectors per search request (default 1)")
        group.add_argument("--report-count", type=positive_int, default=100,
                           help="progress line every N queries per worker (default 100)")
        group.add_argument("--search-ef", type=positive_int,
                           help="search-time list: HNSW ef, DISKANN/AISAQ search_list, IVF nprobe "
                                "(default 200; IVF 16)")
        fixed = vdb_closed_values(checker())
        add_open_only(group, mode, "--search-limit", type=positive_int, default=fixed["search_limit"],
                      help=f"top-K, the k of recall@k (default {fixed['search_limit']})")
        add_open_only(group, mode, "--num-query-vectors", type=positive_int, default=fixed["num_query_vectors"],
                      help=f"size of the fixed query set recall is measured on (default {fixed['num_query_vectors']})")
        vectordb_diskann.add_run(p, mode)
        add_storage(p)
        add_params(p, mode)
        add_mpi(p)  # --hosts spreads the query clients over client hosts as MPI ranks (needs --host/--port)
        add_trace(p, mode)
        add_universal(p)
