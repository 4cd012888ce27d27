"""Build mpirun/mpiexec command lines as argv lists (never shell strings)."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from mlpstorage_py.errors import NotFoundError, UsageError

DEFAULT_HOSTS = ["127.0.0.1"]
# Placeholders in planned commands, filled once the leaf and the scratch directory exist.
LEAF, SCRATCH = "{leaf}", "{scratch}"
# Environment forwarded to every rank by name (-x NAME): values never appear on the command
# line, so secrets such as AWS_SECRET_ACCESS_KEY are not printed or recorded.
FORWARD_PREFIXES = ("DLIO_", "AWS_", "S3DLIO_", "MLPSTORAGE_", "OMPI_ALLOW_RUN_AS_ROOT", "PYTHONPATH",
                    "OPENBLAS_", "OMP_NUM_THREADS")


@dataclass
class MpiOptions:
    """The MPI flags of one command, as parsed by the CLI."""

    hosts: list[str] = field(default_factory=lambda: list(DEFAULT_HOSTS))
    mpi_bin: str = "mpirun"
    oversubscribe: bool = False
    allow_run_as_root: bool = False
    extra: list[str] = field(default_factory=list)

    @classmethod
    def from_args(cls, args: dict) -> "MpiOptions":
        extra: list[str] = []
        for chunk in args.get("mpi_params") or []:
            extra.extend(shlex.split(chunk))
        return cls(hosts=list(args.get("hosts") or DEFAULT_HOSTS), mpi_bin=args.get("mpi_bin") or "mpirun",
                   oversubscribe=bool(args.get("oversubscribe")),
                   allow_run_as_root=bool(args.get("allow_run_as_root")) or os.geteuid() == 0,
                   extra=extra)


def launcher_path(name: str) -> str:
    """The MPI launcher next to this Python (the venv's Open MPI wheel) first, then PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if not found:
        raise NotFoundError(f"MPI launcher {name!r} not found (install Open MPI, or `make install`)")
    return found


def host_slots(hosts: list[str], processes: int) -> list[tuple[str, int]]:
    """Spread ranks over hosts: explicit host:slots are honoured, the rest round-robin with
    any remainder on the first hosts."""
    explicit = {h.split(":")[0]: int(h.split(":")[1]) for h in hosts if ":" in h}
    names = [h.split(":")[0] for h in hosts]
    if len(set(names)) != len(names):
        raise UsageError(f"--hosts lists a host twice: {', '.join(hosts)}")
    if explicit and len(explicit) == len(names):
        if sum(explicit.values()) != processes:
            raise UsageError(f"--hosts slots add up to {sum(explicit.values())}, but {processes} processes were asked for")
        return [(n, explicit[n]) for n in names]
    if explicit:
        raise UsageError("give slots for every host in --hosts or for none")
    base, extra = divmod(processes, len(names))
    layout = [(n, base + (1 if i < extra else 0)) for i, n in enumerate(names)]
    return [(n, s) for n, s in layout if s > 0]


def forwarded_env(env: dict[str, str]) -> list[str]:
    return sorted(k for k in env if k.startswith(FORWARD_PREFIXES))


def fill(argv: list[str], leaf: Path, scratch: Path) -> list[str]:
    return [a.replace(LEAF, str(leaf)).replace(SCRATCH, str(scratch)) for a in argv]


def mpi_command(opts: MpiOptions, processes: int, program: list[str], env: dict[str, str] | None = None) -> list[str]:
    """argv for `<launcher> -n N --host h:s,... [flags] [-x VAR ...] program...`."""
    layout = host_slots(opts.hosts, processes)
    argv = [launcher_path(opts.mpi_bin), "-n", str(processes),
            "--host", ",".join(f"{h}:{s}" for h, s in layout)]
    if opts.oversubscribe:
        argv.append("--oversubscribe")
    if opts.allow_run_as_root:
        argv.append("--allow-run-as-root")
    if not any(a.split("=")[0] == "--bind-to" for a in opts.extra):
        argv += ["--bind-to", "none"]  # simulated accelerators are not pinned to cores
    for name in forwarded_env(env if env is not None else dict(os.environ)):
        argv += ["-x", name]
    return argv + opts.extra + program
