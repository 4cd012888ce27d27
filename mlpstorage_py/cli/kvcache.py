"""`mlpstorage <mode> kvcache <datasize|run>`: CLOSED exposes no workload flags at all."""

from __future__ import annotations

from typing import Any

from mlpstorage_py.cli.common import add_mpi, add_open_only, add_params, add_universal, command_parser, positive_int
from mlpstorage_py.rules.tables import workloads


def register(benches: Any, mode: str) -> None:
    table = workloads()["kv_cache"]
    bench = benches.add_parser("kvcache", help="KV cache offload to storage (kv-cache.py per MPI rank)",
                               description="KV cache benchmark: three fixed Options x trials, one kv-cache.py per rank.")
    bench.set_defaults(model=table["closed_model"])
    commands = bench.add_subparsers(dest="command", metavar="<command>", required=True)
    for name, text in (("datasize", "estimate the cache tier sizes"), ("run", "run the Options and aggregate")):
        p = command_parser(commands, name, text, "kvcache")
        p.add_argument("--cache-dir", help="the storage (NVMe) tier directory under test")
        p.add_argument("--num-processes", "-np", type=positive_int, help="total ranks (clients)")
        p.add_argument("--npernode", "--num-processes-per-client", type=positive_int, help="ranks per host")
        add_mpi(p)
        add_open_only(p, mode, "--model", "-m", choices=table["models"], default=table["closed_model"],
                      help=f"model whose KV cache is simulated (default {table['closed_model']})")
        add_open_only(p, mode, "--num-users", "-nu", type=positive_int, help="simulated users per rank")
        add_open_only(p, mode, "--duration", "-d", type=positive_int, help="seconds per trial")
        add_open_only(p, mode, "--seed", type=int, help="base seed (rank adds its number)")
        add_open_only(p, mode, "--trials", type=positive_int, help="trials per Option")
        add_open_only(p, mode, "--inter-option-delay", type=int, help="seconds between Options")
        add_params(p, mode)
        add_universal(p)
