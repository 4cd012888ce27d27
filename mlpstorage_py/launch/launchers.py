"""Which launcher a command will use, and which MPI it is.

Three launcher kinds build different command lines: Open MPI's `mpirun`/`mpiexec` (PRRTE),
MPICH's Hydra `mpiexec`, and Slurm's `srun`. A launcher binary is identified by its own
`--version` output (cached per path and modification time), never by its name: `mpiexec` is
Open MPI in this project's virtual environment and Hydra in one built with the `mpich` wheel.

Under `srun` there is no MPI launcher to ask, so the MPI library the ranks will load is asked
instead (mpi4py, without initialising MPI, in a child Python with the same environment); srun
then wires the matching process-management interface (`--mpi=pmix` for Open MPI, `--mpi=pmi2`
for MPICH), so the ranks form one world instead of N singletons.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from mlpstorage_py.errors import BenchmarkFailed

OPENMPI, MPICH, SLURM = "openmpi", "mpich", "slurm"
VERSION_TIMEOUT_S = 20
# The soname each MPI's library carries (mpi4py picks its extension module by the library).
LIBMPI_SONAME = {OPENMPI: "libmpi.so.40", MPICH: "libmpi.so.12"}
# srun's process-management interface for the ranks' MPI library.
SRUN_MPI = {OPENMPI: "pmix", MPICH: "pmi2"}

_version_cache: dict[tuple[str, float], tuple[str, str]] = {}
_rank_mpi_cache: dict[tuple[str, str, str], tuple[str, str]] = {}


@dataclass(frozen=True)
class Launcher:
    """A resolved launcher: its kind (openmpi, mpich, slurm), absolute path and version line."""

    kind: str
    path: str
    version: str

    def record(self) -> dict[str, str]:
        return {"kind": self.kind, "path": self.path, "version": self.version}


def classify(text: str) -> str | None:
    """openmpi, mpich or slurm from a launcher's `--version` output, or None."""
    if re.search(r"Open MPI|OpenRTE|PRRTE|prterun|prte", text, re.IGNORECASE):
        return OPENMPI
    if re.search(r"HYDRA|MPICH|Intel\(R\) MPI", text):
        return MPICH
    if re.match(r"\s*slurm\b", text, re.IGNORECASE):
        return SLURM
    return None


def first_line(text: str) -> str:
    return next((l.strip() for l in text.splitlines() if l.strip()), "")


def detect(path: str) -> Launcher:
    """Run `<path> --version` once per (path, mtime) and classify it. A launcher that cannot
    run, or answers with something that is no known launcher, is a launch failure (exit 6)
    quoting its first output line."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError as exc:
        raise BenchmarkFailed(f"MPI launcher {path} cannot be run: {exc.strerror}") from None
    key = (path, mtime)
    if key not in _version_cache:
        try:
            done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:
            raise BenchmarkFailed(f"MPI launcher {path} did not answer `--version` within {VERSION_TIMEOUT_S} s") from None
        except OSError as exc:
            raise BenchmarkFailed(f"MPI launcher {path} cannot be run: {exc.strerror}") from None
        text = (done.stdout or "") + "\n" + (done.stderr or "")
        kind = classify(text)
        if kind is None:
            detail = first_line(done.stderr) or first_line(done.stdout) or f"exit {done.returncode}, no output"
            raise BenchmarkFailed(f"{path} is not an MPI launcher this tool knows (Open MPI, MPICH Hydra or Slurm srun): "
                                  f"`--version` said: {detail[:200]}")
        _version_cache[key] = (kind, _version_line(kind, text))
    kind, version = _version_cache[key]
    return Launcher(kind, path, version)


def _version_line(kind: str, text: str) -> str:
    if kind == MPICH:
        match = re.search(r"Version:\s*(\S+)", text)
        return f"MPICH Hydra {match.group(1)}" if match else "MPICH Hydra"
    return first_line(text)


def rank_mpi(env: dict[str, str] | None = None) -> tuple[str, str]:
    """(openmpi|mpich, library version line) of the MPI library the ranks' mpi4py loads with
    this environment (MPI4PY_LIBMPI / MPI4PY_MPIABI honoured), asked without MPI_Init."""
    env = dict(os.environ) if env is None else env
    key = (sys.executable, env.get("MPI4PY_LIBMPI", ""), env.get("MPI4PY_MPIABI", ""))
    if key not in _rank_mpi_cache:
        probe = ("import mpi4py; mpi4py.rc.initialize = False; mpi4py.rc.finalize = False\n"
                 "from mpi4py import MPI; print(MPI.Get_library_version().strip().splitlines()[0])")
        try:
            done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                                  timeout=VERSION_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:
            raise BenchmarkFailed("asking mpi4py which MPI library the ranks load took more than "
                                  f"{VERSION_TIMEOUT_S} s") from None
        line = first_line(done.stdout.replace("\0", ""))
        kind = classify(line)
        if done.returncode != 0 or kind not in (OPENMPI, MPICH):
            detail = [l for l in done.stderr.splitlines() if l.strip()]
            raise BenchmarkFailed("cannot tell which MPI library the ranks load (mpi4py): "
                                  f"{(detail[-1] if detail else line or 'no output')[:200]}")
        _rank_mpi_cache[key] = (kind, line)
    return _rank_mpi_cache[key]


def launcher_libmpi(launcher: Launcher) -> Path | None:
    """The MPI library installed with a launcher (`<prefix>/lib/<soname>`), if there is one."""
    soname = LIBMPI_SONAME.get(launcher.kind)
    if soname is None:
        return None
    candidate = Path(launcher.path).resolve().parent.parent / "lib" / soname
    return candidate if candidate.is_file() else None


def default_libmpi_prefix() -> Path:
    """Where mpi4py looks first for libmpi when nothing says otherwise: this Python's prefix."""
    return Path(sys.prefix).resolve()


# -- reading a launcher's failure ----------------------------------------------------------
# Lines that are a launcher's own trace or banner rather than the cause of a failure.
# A launcher's own warnings ("[h:pid] plm:ssh: Warning: setpgid ... Permission denied") are noise
# too: they name a harmless condition, never why the job failed.
_NOISE = re.compile(r"^(\[mpiexec@[^\]]*\]|\[proxy:[^\]]*\]|-{5,}|={5,}|\*{5,}|prterun noticed|mpirun noticed|"
                    r"(\[[^\]]*\]\s*)?([\w-]+:)*[\w-]+: Warning\b|"
                    r"Primary job|srun: Job step aborted|srun: launch/slurm: _step_signal|"
                    r"srun: error: Timed out waiting for job step|srun: cluster configuration lacks support|"
                    r"srun: Job \d+ step creation|srun: Step created|\s*$)")
_CAUSE = re.compile(r"^(ssh: |ssh_exchange|kex_exchange|Permission denied|Host key verification failed|"
                    r"srun: error: |salloc: error: |sbatch: error: |prterun: Error|mpirun: Error|"
                    r"\S+: (error|Error|ERROR)\b|.*(Could not resolve|Name or service not known|"
                    r"Connection refused|Connection timed out|No route to host|not found|unable to|"
                    r"Unable to|cannot|Cannot|failed|Failed|invalid|Invalid|unknown option|unrecognized))")


def first_error_line(text: str) -> str:
    """The launcher's first line that names the cause of a launch failure (the remote shell's
    `ssh: Could not resolve hostname ...`, `srun: error: ...`, Open MPI's `prterun: Error ...`
    or the first sentence of its help block), skipping Hydra's `[mpiexec@host]` trace and
    PRRTE's banners; '' if none."""
    lines = [l.rstrip() for l in text.splitlines()]
    for line in lines:
        if _CAUSE.match(line.strip()) and not _NOISE.match(line.strip()):
            return line.strip()[:300]
    # Open MPI's help blocks: the first sentence between the dashed rules.
    for i, line in enumerate(lines):
        if re.match(r"^-{20,}$", line.strip()) and i + 1 < len(lines) and lines[i + 1].strip():
            sentence = []
            for nxt in lines[i + 1:]:
                if not nxt.strip() or re.match(r"^-{20,}$", nxt.strip()):
                    break
                sentence.append(nxt.strip())
                if nxt.strip().endswith((".", ":")):
                    break
            return " ".join(sentence)[:300]
    # Hydra's trace: its first line is the deepest cause ("[mpiexec@h] match_arg (...): unrecognized ...").
    for line in lines:
        match = re.match(r"^\s*(\[(?:mpiexec|proxy)[^\]]*\])\s+\S+\s+\([^)]*\):\s*(.+)$", line)
        if match:
            return f"{match.group(1)} {match.group(2).strip()}"[:300]
    for line in lines:
        if line.strip() and not _NOISE.match(line.strip()):
            return line.strip()[:300]
    return ""
