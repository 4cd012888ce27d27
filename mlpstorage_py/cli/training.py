"""`mlpstorage <mode> training <model> <datasize|datagen|run|configview> [file|object]`."""

from __future__ import annotations

from typing import Any

from mlpstorage_py.cli.common import (
    add_endpoints,
    add_mpi,
    add_params,
    add_storage,
    add_trace,
    add_universal,
    command_parser,
    positive_float,
    positive_int,
)
from mlpstorage_py.rules.tables import checker, edition


def _models(mode: str) -> dict[str, list[str]]:
    """Models and accelerators a division accepts: the edition's table; whatif adds the
    older accelerators the rules' Table 3 lists."""
    models = {m: list(a) for m, a in edition()["closed"]["training"].items()}
    if mode == "whatif":
        extra = [a for a in checker()["accelerator_memory_gb"] if a not in {x for v in models.values() for x in v}]
        for accels in models.values():
            accels.extend(extra)
    return models


def register(bench: Any, mode: str) -> None:
    """Its models, commands and flags under its parser (benchmarks/table.py's row)."""
    models = bench.add_subparsers(dest="model", metavar="<model>", required=True)
    for model, accels in _models(mode).items():
        mp = models.add_parser(model, help=f"{model} ({', '.join(accels)})")
        commands = mp.add_subparsers(dest="command", metavar="<command>", required=True)
        _datasize(command_parser(commands, "datasize", "compute the dataset size the rules require (Rules 3.1.2)"), mode, accels)
        _datagen(command_parser(commands, "datagen", "generate the dataset with DLIO"), mode)
        _run(command_parser(commands, "run", "run the training workload with DLIO"), mode, accels)
        _run(command_parser(commands, "configview", "show the resolved DLIO configuration without running"), mode, accels)


def add_dlio_bin_path(p: Any) -> None:
    p.add_argument("--dlio-bin-path", metavar="DIR",
                   help="run the DLIO installed in another environment: DIR is its bin directory (its python and "
                        "dlio_benchmark), e.g. the working group's fork; else MLPSTORAGE_DLIO_BIN_PATH, else this "
                        "environment's DLIO")


def _common(p: Any, mode: str) -> None:
    p.add_argument("--data-dir", "-dd", help="dataset directory on the storage under test (else MLPSTORAGE_DATA_DIR)")
    add_params(p, mode)
    add_universal(p)


def _sizing(p: Any, accels: list[str]) -> None:
    p.add_argument("--accelerator-type", "-at", required=True, choices=accels, help="simulated accelerator")
    p.add_argument("--client-host-memory-in-gb", "-cm", type=positive_float, required=True,
                   help="memory of each client host in GiB")
    p.add_argument("--num-client-hosts", "-nc", type=positive_int, help="number of client hosts (default: the number of --hosts where the command has it, else 1)")


def _datasize(p: Any, mode: str, accels: list[str]) -> None:
    _sizing(p, accels)
    p.add_argument("--max-accelerators", "-ma", type=positive_int, required=True,
                   help="size the dataset for up to this many simulated accelerators")
    add_mpi(p)
    _common(p, mode)


def _datagen(p: Any, mode: str) -> None:
    p.add_argument("--num-processes", "-np", type=positive_int, required=True, help="MPI ranks generating data")
    p.add_argument("--overwrite", action="store_true", help="replace an existing dataset in <data-dir>/<model>")
    add_storage(p)
    add_endpoints(p)
    add_mpi(p)
    add_trace(p, mode)
    add_dlio_bin_path(p)
    _common(p, mode)


def _run(p: Any, mode: str, accels: list[str]) -> None:
    _sizing(p, accels)
    p.add_argument("--num-accelerators", "-na", type=positive_int, required=True,
                   help="simulated accelerators (= MPI ranks)")
    add_storage(p)
    add_endpoints(p)
    add_mpi(p)
    add_trace(p, mode)
    add_dlio_bin_path(p)
    _common(p, mode)
