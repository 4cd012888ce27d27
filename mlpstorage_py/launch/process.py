"""Run a child process with its output captured into the leaf and progress on the console."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from mlpstorage_py.errors import BenchmarkFailed
from mlpstorage_py.results.redact import redact_bytes, secret_values
from mlpstorage_py.results.logs import log

PROGRESS_EVERY_S = 15.0
GRACE_S = 10.0


def _pump(stream: IO[bytes], sink: IO[bytes], echo: IO[str] | None, last: list[str], secrets: list[bytes]) -> None:
    """Copy a child's output line by line, masking secret values before anything is written."""
    for raw in iter(stream.readline, b""):
        raw = redact_bytes(raw, secrets)
        sink.write(raw)
        sink.flush()
        line = raw.decode("utf-8", "replace").rstrip()
        if line:
            last[0] = line
        if echo is not None:
            echo.write(line + "\n")
            echo.flush()


def run_logged(argv: list[str], *, stdout_path: Path, stderr_path: Path, cwd: Path,
               env: dict[str, str] | None = None, label: str = "child", echo: bool = False) -> int:
    """Run argv (a list, never a shell string) in cwd; stream stdout/stderr into the two files
    (and to the console when echo), print a progress line every PROGRESS_EVERY_S seconds, and
    stop the whole process group if we are interrupted. Returns the exit code."""
    log.info(f"{label}: {shlex.join(argv)}")
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        child = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 start_new_session=True)
        last = [""]
        secrets = [s.encode() for s in secret_values(env)]
        pumps = [threading.Thread(target=_pump, args=(child.stdout, out, sys.stdout if echo else None, last, secrets), daemon=True),
                 threading.Thread(target=_pump, args=(child.stderr, err, sys.stderr if echo else None, last, secrets), daemon=True)]
        for pump in pumps:
            pump.start()
        started = time.monotonic()
        try:
            while True:
                try:
                    code = child.wait(timeout=PROGRESS_EVERY_S)
                    break
                except subprocess.TimeoutExpired:
                    if not echo:
                        log.info(f"{label}: running {time.monotonic() - started:.0f} s; last output: {last[0][:160]}")
        except BaseException:
            _stop(child)
            raise
        finally:
            for pump in pumps:
                pump.join(timeout=5)
    log.info(f"{label}: exit {code} after {time.monotonic() - started:.1f} s")
    return code


def _stop(child: subprocess.Popen) -> None:
    """SIGTERM the child's process group, then SIGKILL after a grace period."""
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            return
        try:
            child.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def require_success(code: int, label: str, stderr_path: Path) -> None:
    """A non-zero exit is a failed run; quote the child's last error line."""
    if code == 0:
        return
    lines = [l.strip() for l in stderr_path.read_text(encoding="utf-8", errors="replace").splitlines()]
    meaningful = [l for l in lines if l and not set(l) <= set("-=*")]
    errors = [l for l in meaningful if "error" in l.lower() and not l.startswith(("prterun", "mpirun", "Primary job"))]
    pick = (errors or meaningful)[-1:]
    detail = f": {pick[0][:300]}" if pick else ""
    raise BenchmarkFailed(f"{label} exited with code {code}{detail} (see {stderr_path})")
