"""Build launcher command lines (Open MPI mpirun/mpiexec, MPICH Hydra mpiexec, Slurm srun) as
argv lists, never shell strings."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mlpstorage_py.errors import NotFoundError, UsageError
from mlpstorage_py.launch.hostnames import is_loopback
from mlpstorage_py.launch.launchers import (
    MPICH,
    OPENMPI,
    SLURM,
    SRUN_MPI,
    Launcher,
    default_libmpi_prefix,
    detect,
    launcher_libmpi,
    rank_mpi,
)
from mlpstorage_py.launch.options import LaunchOptions

DEFAULT_HOSTS = ["127.0.0.1"]
# Placeholders in planned commands, filled once the leaf and the scratch directory exist.
LEAF, SCRATCH = "{leaf}", "{scratch}"
# A rank of this Python started with `-m` in a scratch directory of the results tree would find
# that directory first on sys.path (a module planted there would run): -P keeps it off (3.11+).
SAFE_PATH: list[str] = ["-P"] if sys.version_info >= (3, 11) else []
# Environment forwarded to every rank by name (-x NAME): values never appear on the command
# line, so secrets such as AWS_SECRET_ACCESS_KEY are not printed or recorded.
FORWARD_PREFIXES = ("DLIO_", "AWS_", "S3DLIO_", "MLPSTORAGE_", "OMPI_ALLOW_RUN_AS_ROOT", "PYTHONPATH",
                    "OPENBLAS_", "OMP_NUM_THREADS", "MPI4PY_")


@dataclass
class MpiOptions:
    """The MPI flags of one command, resolved for the launcher (the defaults applied)."""

    hosts: list[str] = field(default_factory=lambda: list(DEFAULT_HOSTS))
    mpi_bin: str | None = None  # None: srun inside a Slurm allocation, else mpirun
    oversubscribe: bool = False
    allow_run_as_root: bool = False
    extra: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, launch: LaunchOptions) -> MpiOptions:
        """The launch options of a command with the defaults applied and --mpi-params split."""
        extra: list[str] = []
        for chunk in launch.mpi_params:
            try:
                extra.extend(shlex.split(chunk))
            except ValueError as exc:  # an unbalanced quote: bad input, not an internal error
                raise UsageError(f"--mpi-params {chunk!r}: {exc}") from None
        return cls(hosts=list(launch.hosts or DEFAULT_HOSTS), mpi_bin=launch.mpi_bin or None,
                   oversubscribe=launch.oversubscribe,
                   allow_run_as_root=launch.allow_run_as_root or os.geteuid() == 0,
                   extra=extra)


LAUNCHER_NAMES = ("mpirun", "mpiexec", "srun")


def mpi_bin_arg(value: str) -> str:
    """argparse type of --mpi-bin: mpirun, mpiexec, srun, or the path of a launcher binary
    (for instance another installation's mpiexec), which must be an executable file."""
    if value in LAUNCHER_NAMES:
        return value
    if "/" in value:
        path = Path(value).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            return str(path.absolute())
        raise argparse.ArgumentTypeError(f"{value!r} is not an executable file")
    raise argparse.ArgumentTypeError(f"expected mpirun, mpiexec, srun or a launcher's path, got {value!r}")


def launcher_path(name: str) -> str:
    """The MPI launcher next to this Python (the venv's Open MPI wheel) first, then PATH."""
    if "/" in name:
        if os.path.isfile(name) and os.access(name, os.X_OK):
            return name
        raise NotFoundError(f"MPI launcher {name} is not an executable file")
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if not found:
        hint = "install Slurm's client" if name == "srun" else "install Open MPI, or `make install`"
        raise NotFoundError(f"MPI launcher {name!r} not found ({hint})")
    return found


def in_slurm_allocation(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return bool(env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID"))


def resolve_launcher(opts: MpiOptions, env: dict[str, str] | None = None) -> Launcher:
    """The launcher a command will use: --mpi-bin as given; without it, `srun` inside a Slurm
    allocation (SLURM_JOB_ID set) and `mpirun` elsewhere. Its kind comes from its --version."""
    name = opts.mpi_bin
    if name is None:
        name = "srun" if in_slurm_allocation(env) and shutil.which("srun") else "mpirun"
    return detect(launcher_path(name))



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


def placement(layout: list[tuple[str, int]]) -> list[str]:
    """The host each rank is asked for by `--host h1:s1,h2:s2` (slots filled in order, as Open
    MPI and MPICH map them); what the ranks report is what the leaf records."""
    return [host for host, slots in layout for _ in range(slots)]


def forwarded_env(env: dict[str, str]) -> list[str]:
    return sorted(k for k in env if k.startswith(FORWARD_PREFIXES))


def fill(argv: list[str], leaf: Path, scratch: Path) -> list[str]:
    return [a.replace(LEAF, str(leaf)).replace(SCRATCH, str(scratch)) for a in argv]


def _user_gave(extra: list[str], *flags: str) -> bool:
    return any(a.split("=")[0] in flags for a in extra)


def _rank_libmpi(launcher: Launcher, env: dict[str, str]) -> Path | None:
    """The launcher's own libmpi when mpi4py would not load it by itself (another prefix than
    this Python's) and the user did not choose one (MPI4PY_LIBMPI)."""
    if env.get("MPI4PY_LIBMPI") or env.get("MPI4PY_MPIABI"):
        return None
    lib = launcher_libmpi(launcher)
    if lib is None or lib.parent.parent == default_libmpi_prefix():
        return None
    return lib


def mpi_command(opts: MpiOptions, processes: int, program: list[str], env: dict[str, str] | None = None) -> list[str]:
    """argv that starts `program` as `processes` ranks of one MPI world, for the launcher in use:

    Open MPI:  mpirun -n N --host h:s,... [--oversubscribe] [--allow-run-as-root] --bind-to none [-x NAME ...]
    MPICH:     mpiexec -n N -hosts h:s,... [-genvlist NAME,...] [-genv MPI4PY_LIBMPI <its libmpi>]
    Slurm:     srun --mpi=pmix|pmi2 -n N [--nodelist h,h,... --distribution=arbitrary] --kill-on-bad-exit=1
                    --cpu-bind=none [--overcommit]

    then --mpi-params and the program. Environment variables go by name only, never by value."""
    env = dict(os.environ) if env is None else env
    layout = host_slots(opts.hosts, processes)
    launcher = resolve_launcher(opts, env)
    forwarded = forwarded_env(env)
    if launcher.kind == OPENMPI:
        argv = [launcher.path, "-n", str(processes), "--host", ",".join(f"{h}:{s}" for h, s in layout)]
        if opts.oversubscribe:
            argv.append("--oversubscribe")
        if opts.allow_run_as_root:
            argv.append("--allow-run-as-root")
        if not _user_gave(opts.extra, "--bind-to"):
            argv += ["--bind-to", "none"]  # simulated accelerators are not pinned to cores
        for name in forwarded:
            argv += ["-x", name]
        lib = _rank_libmpi(launcher, env)
        if lib is not None:
            argv += ["-x", f"MPI4PY_LIBMPI={lib}"]
    elif launcher.kind == MPICH:
        # Hydra passes its whole environment by default; forward by name like Open MPI's -x.
        argv = [launcher.path, "-n", str(processes), "-hosts", ",".join(f"{h}:{s}" for h, s in layout)]
        if forwarded:
            argv += ["-genvlist", ",".join(forwarded)]
        lib = _rank_libmpi(launcher, env)
        if lib is not None:
            argv += ["-genv", "MPI4PY_LIBMPI", str(lib)]
    else:  # Slurm: srun starts the ranks itself and wires the ranks' MPI through PMIx or PMI-2
        argv = [launcher.path]
        if not _user_gave(opts.extra, "--mpi"):
            argv.append(f"--mpi={SRUN_MPI[rank_mpi(env)[0]]}")
        argv += ["-n", str(processes)]
        names = [h for h, _ in layout]
        if not all(is_loopback(n) for n in names):
            # Ranks in the order --hosts lays them out (srun's arbitrary distribution). This host's
            # own name is a node of the allocation and is named; a loopback name is none.
            argv += ["--nodelist", ",".join(h for h, s in layout for _ in range(s)), "--distribution=arbitrary"]
        argv.append("--kill-on-bad-exit=1")
        if not _user_gave(opts.extra, "--cpu-bind"):
            argv.append("--cpu-bind=none")
        if opts.oversubscribe:
            argv.append("--overcommit")
    return argv + opts.extra + program


def launcher_record(opts: MpiOptions, env: dict[str, str] | None = None) -> dict[str, str]:
    """What a leaf can record about the launcher: kind (openmpi, mpich, slurm), path, version,
    and under srun the ranks' MPI library and the PMI it wires."""
    env = dict(os.environ) if env is None else env
    launcher = resolve_launcher(opts, env)
    record = launcher.record()
    if launcher.kind == SLURM:
        kind, line = rank_mpi(env)
        record.update(rank_mpi=kind, rank_mpi_version=line, pmi=SRUN_MPI[kind],
                      slurm_job_id=env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or "")
    return record


def uses_remote_shell(opts: MpiOptions, env: dict[str, str] | None = None) -> bool:
    """Whether the launcher reaches the hosts over ssh (Open MPI, MPICH) rather than through
    Slurm's daemons (srun), i.e. whether an ssh preflight of the hosts means anything."""
    return resolve_launcher(opts, env).kind != SLURM

