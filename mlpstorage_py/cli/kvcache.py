"""`mlpstorage <mode> kvcache run`.

CLOSED registers no workload flag at all (Rules 6.6.1: only --systemname, --cache-dir,
--results-dir and the client topology may vary), so nothing a user types can reach kv-cache.py.
OPEN/whatif flags default to None: only a flag the user actually gave supersedes the Option's
value (Rules 6.6.2), never an argparse default.
"""

from __future__ import annotations

from typing import Any

from mlpstorage_py.cli.common import (
    add_mpi,
    add_open_only,
    add_params,
    add_trace,
    add_universal,
    command_parser,
    non_negative_float,
    non_negative_int,
    positive_int,
)
from mlpstorage_py.rules.tables import workloads


def register(bench: Any, mode: str) -> None:
    """Its commands and flags under its parser (benchmarks/table.py's row)."""
    table = workloads()["kv_cache"]
    bench.set_defaults(model=table["closed_model"])
    commands = bench.add_subparsers(dest="command", metavar="<command>", required=True)
    for name, text in (("datasize", "estimate how much KV cache each Option can place on the storage tier"),
                       ("run", "run the Options and aggregate the ranks' results (Rules 6.3.4)")):
        p = command_parser(commands, name, text)
        p.add_argument("--cache-dir", help="the storage tier under test; each rank uses <cache-dir>/rank_<N>/ "
                                           "(must be on another file system than --results-dir)")
        p.add_argument("--num-processes", "-np", type=positive_int, help="total ranks (clients) over all hosts")
        p.add_argument("--npernode", "--num-processes-per-client", type=positive_int, help="ranks per host")
        add_mpi(p)
        w = p.add_argument_group("workload (open and whatif only; each flag given replaces that value in every Option)")
        add_open_only(w, mode, "--option", dest="kv_options", type=int, nargs="+", choices=[1, 2, 3],
                      help="run only these Options (default 1 2 3)")
        add_open_only(w, mode, "--model", "-m", dest="kv_model", choices=table["models"],
                      help="model whose KV cache is simulated (default: each Option's)")
        add_open_only(w, mode, "--num-users", "-nu", type=positive_int, help="simulated users per rank")
        add_open_only(w, mode, "--duration", "-d", type=positive_int, help="seconds per trial")
        add_open_only(w, mode, "--gpu-mem-gb", type=non_negative_float, help="GPU tier GiB per rank (0 disables)")
        add_open_only(w, mode, "--cpu-mem-gb", type=non_negative_float, help="CPU tier GiB per rank (0 disables)")
        add_open_only(w, mode, "--generation-mode", choices=["none", "fast", "realistic"],
                      help="simulated decode time per token")
        add_open_only(w, mode, "--performance-profile", choices=["latency", "throughput"],
                      help="pass/fail criteria kv-cache.py reports (default throughput)")
        add_open_only(w, mode, "--disable-multi-turn", action="store_true", default=None,
                      help="no multi-turn KV reuse")
        add_open_only(w, mode, "--disable-prefix-caching", action="store_true", default=None,
                      help="no shared system-prompt KV")
        add_open_only(w, mode, "--enable-rag", action="store_true", default=None, help="RAG document retrieval")
        add_open_only(w, mode, "--rag-num-docs", type=positive_int, help="RAG corpus size")
        add_open_only(w, mode, "--config", dest="kv_config", help="kv-cache.py simulation YAML (validated strictly)")
        add_open_only(w, mode, "--seed", type=int, help="base seed; rank N uses seed + N (default 42)")
        add_open_only(w, mode, "--trials", type=positive_int, help="trials per Option (default 3)")
        add_open_only(w, mode, "--inter-option-delay", type=non_negative_int,
                      help="seconds to wait between Options (default 90)")
        if name == "run":
            add_trace(p, mode, "--enable-latency-tracing")  # the reference's spelling too
        add_params(p, mode)
        add_universal(p)
