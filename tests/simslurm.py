"""A one-node Slurm cluster on this machine, for launcher tests.

Debian's slurm-wlm (slurmctld, slurmd) with munge: a minimal slurm.conf in a scratch directory
(this host as the controller and the one node, with its CPUs and RealMemory; non-default
ports; state, spool, logs and pid files in the scratch directory), munged started first, then
slurmctld and slurmd, each by its own pid and stopped by it afterwards. The daemons read the
configuration through SLURM_CONF, which the fixture also sets for the test so srun, salloc and
sinfo talk to this cluster. Skips with the reason where it cannot run (not root, slurm-wlm or
munge not installed).

Use as a pytest fixture: ``from simslurm import slurm_cluster`` in a test module.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SLURMCTLD, SLURMD, MUNGED = "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged"
MUNGE_KEY = Path("/etc/munge/munge.key")
MUNGE_RUN = Path("/run/munge")


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "a test Slurm cluster needs root (SlurmUser=root, munged)"
    for tool in (SLURMCTLD, SLURMD, MUNGED):
        if not os.access(tool, os.X_OK):
            return f"a test Slurm cluster needs {tool} (Debian slurm-wlm and munge; `make system-deps` as root)"
    for tool in ("srun", "salloc", "sinfo"):
        if not shutil.which(tool):
            return f"a test Slurm cluster needs {tool!r} on PATH (Debian slurm-client)"
    if not MUNGE_KEY.is_file():
        return f"munge has no key at {MUNGE_KEY} (reinstall munge)"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def node_line() -> str:
    """This host's NodeName line as slurmd measures it (`slurmd -C`), without UpTime."""
    done = subprocess.run([SLURMD, "-C"], capture_output=True, text=True, timeout=30, check=True)
    line = next(l for l in done.stdout.splitlines() if l.startswith("NodeName="))
    return re.sub(r"\s+UpTime=\S+", "", line).strip()


@dataclass
class SlurmCluster:
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mlps-slurm-")))
    node: str = ""
    cpus: int = 1
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    _munge_socket: Path | None = None

    @property
    def conf(self) -> Path:
        return self.workdir / "slurm.conf"

    def env(self) -> dict[str, str]:
        """What a client (srun, salloc, sinfo) needs to reach this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def client_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(self.env())
        return env

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=self.client_env())

    # -- lifecycle ----------------------------------------------------------------------
    def __enter__(self) -> "SlurmCluster":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        try:
            self._write_conf()
            self._start_munged()
            env = self.client_env()
            for name, argv in (("slurmctld", [SLURMCTLD, "-D", "-i", "-f", str(self.conf)]),
                               ("slurmd", [SLURMD, "-D", "-f", str(self.conf)])):
                log = open(self.workdir / f"{name}.console.log", "wb")
                self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                                    start_new_session=True)
                log.close()
                if name == "slurmctld":
                    self._wait(lambda: self.run("scontrol", "ping", timeout=10).stdout.count("UP") > 0,
                               "slurmctld did not answer `scontrol ping`")
            self._wait(self._node_idle, f"node {self.node} did not become idle in sinfo")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        # Job steps slurmd started (slurmstepd) live in their own sessions; none should be left,
        # but never leave one of ours behind.
        for pid in self._stepds():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _stepds(self) -> list[int]:
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"slurmstepd") and str(self.workdir).encode() in b" ".join(cmd) + self._environ(entry.name):
                found.append(int(entry.name))
        return found

    @staticmethod
    def _environ(pid: str) -> bytes:
        try:
            return Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return b""

    def _write_conf(self) -> None:
        line = node_line()
        self.node = line.split()[0].split("=", 1)[1]
        self.cpus = int(re.search(r"CPUs=(\d+)", line).group(1))
        for sub in ("state", "spool", "log", "run"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        w = self.workdir
        self.conf.write_text(
            f"ClusterName=mlpstest\nSlurmctldHost={self.node}\n"
            f"SlurmctldPort={_free_port()}\nSlurmdPort={_free_port()}\n"
            "SlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\nCryptoType=crypto/munge\n"
            f"AuthInfo=socket={self._munge_socket_path()}\n"
            f"StateSaveLocation={w / 'state'}\nSlurmdSpoolDir={w / 'spool'}\n"
            f"SlurmctldPidFile={w / 'run' / 'slurmctld.pid'}\nSlurmdPidFile={w / 'run' / 'slurmd.pid'}\n"
            f"SlurmctldLogFile={w / 'log' / 'slurmctld.log'}\nSlurmdLogFile={w / 'log' / 'slurmd.log'}\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSelectType=select/cons_tres\n"
            "SelectTypeParameters=CR_Core\nMpiDefault=none\nReturnToService=2\nSchedulerType=sched/backfill\n"
            "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
            "SlurmctldTimeout=30\nSlurmdTimeout=30\nInactiveLimit=0\nKillWait=5\nMinJobAge=5\n"
            f"{line} State=UNKNOWN\n"
            f"PartitionName=test Nodes={self.node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n",
            encoding="utf-8")

    def _munge_socket_path(self) -> Path:
        if self._munge_socket is None:
            self._munge_socket = self.workdir / "munge" / "munge.socket"
        return self._munge_socket

    def _start_munged(self) -> None:
        """A munged of our own (own socket, pid and log files) with the installed key."""
        sock = self._munge_socket_path()
        sock.parent.mkdir(parents=True, exist_ok=True)
        MUNGE_RUN.mkdir(exist_ok=True)  # munged checks its default run directory exists
        shutil.chown(MUNGE_RUN, "munge", "munge")
        shutil.chown(sock.parent, "munge", "munge")
        pid_file = sock.parent / "munged.pid"
        log = open(sock.parent / "munged.console.log", "wb")
        # In the foreground, as our child: stopped and reaped by its pid afterwards.
        self.procs["munged"] = subprocess.Popen(
            [MUNGED, "--foreground", "--force", f"--socket={sock}", f"--pid-file={pid_file}",
             f"--log-file={sock.parent / 'munged.log'}", f"--seed-file={sock.parent / 'munged.seed'}",
             f"--key-file={MUNGE_KEY}"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self._wait(sock.exists, "munged did not create its socket")

    def _node_idle(self) -> bool:
        done = self.run("sinfo", "-h", "-N", "-o", "%N %t", timeout=10)
        return done.returncode == 0 and f"{self.node} idle" in done.stdout

    def _wait(self, ready, what: str, timeout_s: float = 60) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}: {self._log_tail(name)}")
            try:
                if ready():
                    return
            except (OSError, subprocess.SubprocessError):
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{what} within {timeout_s:.0f} s")

    def _log_tail(self, name: str) -> str:
        for path in (self.workdir / "log" / f"{name}.log", self.workdir / f"{name}.console.log"):
            if path.is_file():
                lines = path.read_text(errors="replace").strip().splitlines()
                if lines:
                    return lines[-1]
        return "no log"


@pytest.fixture(scope="session")
def _slurm_session():
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with SlurmCluster() as cluster:
        yield cluster


@pytest.fixture
def slurm_cluster(_slurm_session, monkeypatch):
    """The session's one-node Slurm cluster, with SLURM_CONF set for this test (and no
    SLURM_* variables of an outer allocation)."""
    for name in list(os.environ):
        if name.startswith("SLURM_"):
            monkeypatch.delenv(name)
    for name, value in _slurm_session.env().items():
        monkeypatch.setenv(name, value)
    yield _slurm_session
