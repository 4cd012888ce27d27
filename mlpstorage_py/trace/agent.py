"""The traced host's side, run there over the remote shell (`python -m mlpstorage_py.trace.agent`):

    probe PATH...    print the host's facts (trace/devices.py) as one JSON line
    run PROGRAM [DRAIN]  run bpftrace on PROGRAM, its JSON output on our stdout, until our stdin
                     ends (the session closed it, or the remote shell died): then SIGINT, so it
                     prints its maps, and SIGKILL after STOP_GRACE_S; a last line says it ended.
                     A line `drain` on stdin first makes the program drain (getpgid(DRAIN): it
                     counts nothing new while what it counted completes, trace/bpf.py)
    reap MARKER      SIGKILL every bpftrace whose command line holds MARKER (a program path):
                     what the session runs when a host's agent did not say it ended

A remote shell does not pass a signal on to the remote command, but it does close its stdin: so
the agent is stopped by closing its stdin, and a session killed outright stops it the same way.
"""

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mlpstorage_py.launch import process
from mlpstorage_py.launch.pids import alive
from mlpstorage_py.trace.devices import facts

STOP_GRACE_S = 20.0  # bpftrace reads and prints every map after SIGINT; a big one takes seconds
ENDED = "agent_ended"
# bpftrace's kernel maps: the default 4096 keys is a few hundred streams once a histogram's
# buckets count as keys; memory stays bounded either way (a full map drops new keys).
MAP_KEYS_MAX = "16384"
DRAIN_LINE = b"drain\n"


def skipped_runs(pid: int) -> int | None:
    """How many times the kernel skipped one of this bpftrace's probes (recursion_misses of its
    programs, /proc/PID/fdinfo: a probe does not run while another BPF program runs on that CPU,
    as when a request's completion interrupts one); None where it does not say."""
    total, found = 0, False
    try:
        entries = list(os.scandir(f"/proc/{pid}/fdinfo"))
    except OSError:
        return None
    for entry in entries:
        try:
            text = Path(entry.path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("recursion_misses:") and line.split()[-1].isdigit():
                total, found = total + int(line.split()[-1]), True
    return total if found else None


def drain(number: int) -> None:
    """getpgid() of the program's drain number (no process has it: it fails at once); the
    tracer's probe on the call makes it drain."""
    try:
        os.getpgid(number)
    except OSError:
        pass


def bpftrace_argv(bpftrace: str, program: Path) -> list[str]:
    return [bpftrace, "-f", "json", str(program)]


def bpftrace_env() -> dict[str, str]:
    return {**os.environ, "BPFTRACE_MAP_KEYS_MAX": MAP_KEYS_MAX}


def start(argv: list[str], **popen: Any) -> subprocess.Popen:
    """bpftrace started through launch/process's exec guard (SIGTERM when its starter dies, even
    by SIGKILL; no Python between fork and exec in a process with threads), with as much locked
    memory as we may have, which it inherits (bpftrace raises RLIMIT_MEMLOCK itself and warns
    where it may not; kernels since 5.11 charge BPF maps to the memory cgroup instead)."""
    try:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (OSError, ValueError):
        pass
    return subprocess.Popen(process.guarded(argv, os.getpid()), start_new_session=True, **popen)


def stop(child: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> int:
    """SIGINT (bpftrace prints its maps and exits), SIGKILL after grace_s; the exit status."""
    if child.poll() is None:
        child.send_signal(signal.SIGINT)
        try:
            return child.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            child.kill()
    return child.wait()


def _run(program: Path, drain_number: int | None = None) -> int:
    if not program.is_file():
        print(f"ERROR: the trace program {program} is not visible on this host: the session's work directory "
              "must be on a filesystem every client host shares", file=sys.stderr)
        return 1
    bpftrace = shutil.which("bpftrace") or "bpftrace"
    ending: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: ending.append(signum))
    child = start(bpftrace_argv(bpftrace, program), stdin=subprocess.DEVNULL, env=bpftrace_env())
    while child.poll() is None and not ending:
        try:
            ready, _, _ = select.select([sys.stdin.fileno()], [], [], 0.5)
        except InterruptedError:
            continue
        if not ready:
            continue
        got = os.read(sys.stdin.fileno(), 4096)
        if not got:
            break  # stdin ended: the session asked us to stop, or is gone
        if DRAIN_LINE.strip() in got and drain_number is not None:
            drain(drain_number)
    skipped = skipped_runs(child.pid)
    code = stop(child)
    try:
        sys.stdout.write(json.dumps({"type": ENDED, "exit": code, "skipped": skipped}) + "\n")
        sys.stdout.flush()
    except OSError:  # the session is gone: nobody to tell
        pass
    return 0


def reap(marker: str) -> int:
    """SIGKILL the bpftrace processes running `marker`'s program; how many there were."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"bpftrace" and marker.encode() in argv:
            found.append(int(entry.name))
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    end = time.monotonic() + 5.0
    while time.monotonic() < end and any(alive(pid) for pid in found):
        time.sleep(0.05)
    return len(found)


def main(argv: list[str]) -> int:
    if len(argv) >= 1 and argv[0] == "probe":
        print(json.dumps(facts(argv[1:])))
        return 0
    if len(argv) in (2, 3) and argv[0] == "run":
        return _run(Path(argv[1]), int(argv[2]) if len(argv) == 3 and argv[2].isdigit() else None)
    if len(argv) == 2 and argv[0] == "reap":
        print(json.dumps({"type": "reaped", "count": reap(argv[1])}))
        return 0
    print("usage: python -m mlpstorage_py.trace.agent probe PATH... | run PROGRAM [DRAIN] | reap MARKER", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
