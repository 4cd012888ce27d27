"""Pieces every command parser shares: one-line errors, universal, MPI and --params flags."""

from __future__ import annotations

import argparse
import functools
import re
from collections.abc import Callable
from typing import Any, NoReturn

from mlpstorage_py.errors import UsageError

MODES = {
    "closed": "CLOSED division: only the rules' tunables may change",
    "open": "OPEN division: the rules' open tunables may change too",
    "whatif": "plan only: print the resolved workload and exact commands, execute nothing",
}
# Flags that exist only outside CLOSED; used to explain an argparse rejection in closed.
OPEN_ONLY_FLAGS: set[str] = set()
HOST_PATTERN = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,4})?$")


# argparse passes its group titles through gettext for every parser it makes, and each call
# searches the locale directories on disk again: ~40 % of building the tree at each start-up.
# The messages do not change while the process runs, so one lookup per message is enough.
argparse._ = functools.cache(argparse._)  # type: ignore[attr-defined]  # argparse's own gettext alias, not in its stubs


class Parser(argparse.ArgumentParser):
    """argparse with a single-line error that main() turns into exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see --help)")


def _number(text: str, cast: Callable[[str], Any], noun: str, ok: Callable[[Any], bool], rule: str) -> Any:
    """Parse a numeric flag value with a one-line argparse error for bad input."""
    try:
        value = cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
    if value != value or value in (float("inf"), float("-inf")):  # nan, inf: no size, count or deadline
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{value:g} {rule}")
    return value


def positive_int(text: str) -> int:
    return _number(text, int, "an integer", lambda v: v >= 1, "must be at least 1")


def positive_float(text: str) -> float:
    return _number(text, float, "a number", lambda v: v > 0, "must be greater than 0")


def non_negative_int(text: str) -> int:
    return _number(text, int, "an integer", lambda v: v >= 0, "must not be negative")


def non_negative_float(text: str) -> float:
    return _number(text, float, "a number", lambda v: v >= 0, "must not be negative")


def host_list(text: str) -> list[str]:
    """--hosts accepts spaces or commas; each entry is a host name or address, optional :slots."""
    hosts = [h for h in re.split(r"[,\s]+", text.strip()) if h]
    for host in hosts:
        if not HOST_PATTERN.match(host):
            raise argparse.ArgumentTypeError(f"{host!r} is not a valid host name (letters, digits, '.', '-', optional :slots)")
    return hosts


class _HostsAction(argparse.Action):
    """Flatten `--hosts a,b c` (and repeats) into one list of hosts."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        hosts = list(getattr(namespace, self.dest, None) or [])
        for value in values:
            hosts.extend(value)
        setattr(namespace, self.dest, hosts)


def add_universal(parser: argparse.ArgumentParser, *, writes_leaf: bool = True) -> None:
    group = parser.add_argument_group("results")
    group.add_argument("--results-dir", "-rd", help="results tree root (else MLPSTORAGE_RESULTS_DIR, else the default `init` recorded)")
    if writes_leaf:
        group.add_argument("--systemname", "-sn", help="system under test, a directory name (else MLPSTORAGE_SYSTEMNAME); required to write a leaf")
    group.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks and debug logging")
    group.add_argument("--verbose", action="store_true", help="more detail on the console")


def add_open_only(parser: argparse._ActionsContainer, mode: str, *flags: str, **kwargs: Any) -> None:
    """Register a flag only outside CLOSED, remembering it so a closed use is explained."""
    OPEN_ONLY_FLAGS.update(flags)
    if mode != "closed":
        parser.add_argument(*flags, **kwargs)


def add_trace(parser: argparse.ArgumentParser, mode: str, *aliases: str) -> None:
    """--trace-io: OPEN only (Rules 6.6.2 places latency tracing in OPEN)."""
    add_open_only(parser, mode, "--trace-io", *aliases, dest="trace_io", action="store_true",
                  help="trace the I/O that reaches the storage on every client host (bpftrace, as root) into "
                       "io_trace.json and a distilled replay.fio in the leaf")


def add_params(parser: argparse.ArgumentParser, mode: str) -> None:
    parser.add_argument("--params", "--param", "-p", nargs="+", action="extend", metavar="KEY=VALUE",
                        help="workload parameter overrides (dotted keys); CLOSED accepts only the rules' tunables")
    add_open_only(parser, mode, "--allow-invalid-params", "-aip", action="store_true",
                  help="accept overrides outside the OPEN allowlist; the run is recorded as INVALID")
    add_open_only(parser, mode, "--loops", type=positive_int, default=1, help="repeat the command N times")


def mpi_bin_arg(value: str) -> str:
    """argparse type of --mpi-bin; the launcher module loads only when the flag is given."""
    from mlpstorage_py.launch.mpi import mpi_bin_arg as check

    return check(value)


def add_mpi(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("MPI")
    group.add_argument("--hosts", "-s", type=host_list, nargs="+", action=_HostsAction, metavar="HOST[:SLOTS]",
                       help="client hosts, space- or comma-separated (default 127.0.0.1)")
    group.add_argument("--mpi-bin", type=mpi_bin_arg, metavar="{mpirun,mpiexec,srun,PATH}", help="launcher: mpirun, mpiexec (Open MPI or MPICH, told apart by --version), srun, or a launcher's path (default: srun inside a Slurm allocation, else mpirun)")
    group.add_argument("--oversubscribe", action="store_true", help="allow more ranks than cores")
    group.add_argument("--allow-run-as-root", action="store_true", help="let Open MPI run as root (containers)")
    group.add_argument("--mpi-params", action="append", metavar="'ARGS'",
                       help="extra launcher arguments, split like a shell would; use --mpi-params='...'")
    group.add_argument("--deadline", type=positive_float, metavar="SECONDS",
                       help="stop a launched job whose work runs longer than this, counted once every rank "
                            "has started, even one that is making progress (default: 10x the work's estimate)")
    group.add_argument("--stall-timeout", type=positive_float, metavar="SECONDS",
                       help="stop a launched job once a rank with work left, or the whole job, has made no progress "
                            "for this long, naming the ranks and hosts (default: derived from one unit of work, "
                            "at least 120 s); a job that keeps making progress is never stopped for being slow")
    group.add_argument("--telemetry-interval", type=non_negative_float, metavar="SECONDS",
                       help="sample each client host's CPU, memory, network and devices this often into the leaf's "
                            "telemetry/ (default 2; 0: no telemetry)")
    group.add_argument("--startup-allowance", type=positive_float, metavar="SECONDS",
                       help="stop a launched job whose ranks have not all started within this, naming those "
                            "that did not (default: 180 s + 10 s per host + 1 s per rank)")


def add_storage(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("storage", nargs="?", choices=["file", "object"], default="file",
                        help="storage API under test: file (POSIX, default) or object (S3)")
    parser.add_argument("--skip-fs-separation-gate", action="store_true",
                        help="record the filesystem probe but do not refuse a shared filesystem")


def add_endpoints(parser: argparse.ArgumentParser) -> None:
    """Several S3 endpoints for an `object` run (storage/endpoints.py)."""
    group = parser.add_argument_group("object endpoints")
    group.add_argument("--s3-endpoints", nargs="+", action="extend", metavar="URL",
                       help="S3 endpoints (gateways) of one object store, http(s)://host[:port], space- or "
                            "comma-separated (else --s3-endpoints-file, else S3_ENDPOINT_URIS, else S3_ENDPOINT_FILE; "
                            "none: AWS_ENDPOINT_URL alone)")
    group.add_argument("--s3-endpoints-file", metavar="PATH", help="a file of endpoint URLs, one a line (# comments)")
    group.add_argument("--s3-endpoint-strategy", choices=["per_rank", "round_robin", "least_connections"],
                       help="per_rank: rank i uses endpoint i mod n (default); round_robin, least_connections: "
                            "s3dlio's MultiEndpointStore chooses per request (else S3_LOAD_BALANCE_STRATEGY)")


def command_parser(subparsers: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(name, help=help_text, description=help_text)
    parser.set_defaults(command=name)
    return parser
