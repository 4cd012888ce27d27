"""`mlpstorage <mode> checkpointing <model> <datasize|run|configview> [file|object]`."""

from __future__ import annotations

from typing import Any

from mlpstorage_py.cli.common import (
    add_endpoints,
    add_mpi,
    add_open_only,
    add_params,
    add_storage,
    add_trace,
    add_universal,
    command_parser,
    positive_float,
    positive_int,
)
from mlpstorage_py.cli.training import add_dlio_bin_path
from mlpstorage_py.rules import predicates
from mlpstorage_py.rules.tables import checker, edition


def register(bench: Any, mode: str) -> None:
    """Its models, commands and flags under its parser (benchmarks/table.py's row)."""
    models = bench.add_subparsers(dest="model", metavar="<model>", required=True)
    table = edition()["closed"]["checkpointing"]
    count, (subset_model, subset_processes) = checker()["checkpoint_closed_count"], predicates.checkpoint_subset(checker())
    accels = sorted({a for v in table.values() for a in v})
    if mode == "whatif":
        accels += [a for a in checker()["accelerator_memory_gb"] if a not in accels]
    for model in table:
        mp = models.add_parser(model, help=f"{model} checkpoint ({checker()['checkpoint_size_gb'][model]} GiB)")
        commands = mp.add_subparsers(dest="command", metavar="<command>", required=True)
        for name, text in (("datasize", "estimate checkpoint size and host memory needs"),
                           ("run", "write and/or read checkpoints"),
                           ("configview", "show the resolved configuration without running")):
            p = command_parser(commands, name, text)
            p.add_argument("--client-host-memory-in-gb", "-cm", type=positive_float, required=True,
                           help="memory of each client host in GiB")
            p.add_argument("--num-processes", "-np", type=positive_int, required=True,
                           help=f"MPI ranks (CLOSED: {checker()['closed_mpi_processes'][model]})")
            p.add_argument("--accelerator-type", "-at", choices=accels, required=name != "datasize",
                           help="simulated accelerator (its memory x ranks must hold the checkpoint)")
            if name != "datasize":
                counts: dict[str, Any] = {"choices": [0, count]} if mode == "closed" else {}
                p.add_argument("--num-checkpoints-write", "-ncw", type=int, default=count, **counts,
                               help=f"checkpoints to write (CLOSED: {count}, or 0 for a read-only invocation)")
                p.add_argument("--num-checkpoints-read", "-ncr", type=int, default=count, **counts,
                               help=f"checkpoints to read (CLOSED: {count}, or 0 for a write-only invocation)")
                p.add_argument("--checkpoint-folder", "-cf", help="where checkpoints go (else MLPSTORAGE_CHECKPOINT_FOLDER)")
                add_open_only(p, mode, "--o-direct", action="store_true",
                              help="O_DIRECT checkpoint writes and reads (files only; recorded in the leaf)")
                add_storage(p)
                add_endpoints(p)
                add_mpi(p)
                if name == "run":
                    add_trace(p, mode)
                add_open_only(p, mode, "--engine", choices=["mlpstorage", "dlio"], default="mlpstorage",
                              help="mlpstorage: our MPI checkpoint engine (default); dlio: the working group's DLIO "
                                   "(3.0.x, with --dlio-bin-path or installed here) as a cross-check, write and read "
                                   "as two invocations with a page-cache drop between")
                add_dlio_bin_path(p)
            add_params(p, mode)
            p.add_argument("--subset", dest="checkpoint_subset", action="store_true",
                           help=f"declare an {subset_processes}-process subset run (CLOSED: {subset_model} only, Rules 4.3.5)")
            add_universal(p)
