"""Simulated client hosts on this machine, for multi-host tests and benches.

Each host is a network namespace with a veth into a bridge in the root namespace, its own UTS
namespace and hostname, and its own sshd with a key made for the run; the names resolve through
/etc/hosts. The filesystem is shared, like NFS on a real cluster. Open MPI reaches the hosts
through ``PRTE_MCA_plm_ssh_agent`` (MPICH through ``HYDRA_LAUNCHER_EXEC``), both pointing at an
ssh wrapper that uses the test client config.

Several test processes may build clusters at once (helpers, CI): every name carries a tag, the
subnet comes from a slot held by an flock, and /etc/hosts is edited under a lock, adding and
removing only this cluster's tagged lines. Addresses are used only inside namespaces made here.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from mlpstorage_py.launch import rank_temp, shm_orphans
from mlpstorage_py.launch.session_dirs import remove_stale

LOCK_DIR = Path("/run/mlps-simhosts")
HOSTS_FILE = Path("/etc/hosts")
SUBNET = "10.213.{slot}"
SSHD = "/usr/sbin/sshd"
READY_S = 300.0  # a cluster whose sshds have not answered by then never will


def unavailable_reason() -> str | None:
    """Why simulated hosts cannot be built here, or None."""
    if os.geteuid() != 0:
        return "simulated hosts need root (network namespaces, /etc/hosts)"
    for tool in ("ip", "unshare", "ssh", "ssh-keygen"):
        if not shutil.which(tool):
            return f"simulated hosts need {tool!r} on PATH"
    if not os.access(SSHD, os.X_OK):
        return f"simulated hosts need {SSHD} (Debian openssh-server; `make install-hosts`)"
    probe = f"mlpsprobe{uuid.uuid4().hex[:4]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done


@dataclass
class SimHost:
    name: str
    netns: str
    address: str
    veth: str
    config: Path
    pid_file: Path

    def sshd_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def pids(self) -> list[int]:
        """Every live process in this host's network namespace (sshd, sessions, daemons, ranks)."""
        try:
            inode = os.stat(f"/run/netns/{self.netns}").st_ino
        except OSError:
            return []
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                if os.stat(f"/proc/{entry.name}/ns/net").st_ino != inode:
                    continue
                state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in ("Z", "X"):
                found.append(int(entry.name))
        return found


@dataclass
class SimCluster:
    """`count` hosts; use as a context manager (or call start/stop)."""

    count: int = 3
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:4])
    hosts: list[SimHost] = field(default_factory=list)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mlps-simhosts-")))
    slot: int = -1
    _slot_fd: int = -1
    bridge: str = ""

    # -- client side ------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    @property
    def ssh_config(self) -> Path:
        return self.workdir / "ssh_config"

    @property
    def ssh_wrapper(self) -> Path:
        return self.workdir / "ssh"

    def env(self) -> dict[str, str]:
        """What a launcher needs to reach the hosts (Open MPI's PRRTE and MPICH's Hydra)."""
        # Hydra connects back to the head by its hostname, which resolves to loopback here: the
        # bridge is the head's address the hosts can reach.
        return {"PRTE_MCA_plm_ssh_agent": str(self.ssh_wrapper), "HYDRA_LAUNCHER": "ssh",
                "HYDRA_LAUNCHER_EXEC": str(self.ssh_wrapper), "HYDRA_IFACE": self.bridge}

    def ssh(self, host: str, *command: str, timeout: float = 20) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.ssh_wrapper), host, *command], capture_output=True, text=True, timeout=timeout)

    def host(self, name: str) -> SimHost:
        return next(h for h in self.hosts if h.name == name)

    def freeze(self, name: str) -> None:
        """The host accepts TCP but never answers: its sshd is stopped (SIGSTOP)."""
        pid = self.host(name).sshd_pid()
        assert pid, f"no sshd pid for {name}"
        os.kill(pid, signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        pid = self.host(name).sshd_pid()
        if pid:
            os.kill(pid, signal.SIGCONT)

    def running(self, marker: bytes, hosts: list[str] | None = None) -> dict[str, list[int]]:
        """Per host (all, or those named), the processes whose command line contains `marker`."""
        found: dict[str, list[int]] = {}
        for host in self.hosts:
            if hosts is not None and host.name not in hosts:
                continue
            found[host.name] = []
            for pid in host.pids():
                try:
                    if marker in Path(f"/proc/{pid}/cmdline").read_bytes():
                        found[host.name].append(pid)
                except OSError:
                    continue
        return found

    def stray_processes(self, settle_s: float = 10.0) -> list[int]:
        """Processes left in the hosts' namespaces other than their sshd listeners, after
        giving sessions that are closing up to `settle_s` to end."""
        listeners = {h.sshd_pid() for h in self.hosts}
        end = time.monotonic() + settle_s
        while True:
            left = sorted(({p for h in self.hosts for p in h.pids()} | set(self._local_clients())) - listeners)
            if not left or time.monotonic() > end:
                return left
            time.sleep(0.2)

    def _local_clients(self) -> list[int]:
        """ssh clients (and launchers driving them) on the head still using this cluster's config."""
        marker = str(self.workdir).encode()
        found = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes()
                    state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
                except (OSError, IndexError):
                    continue
                if marker in cmdline and state not in ("Z", "X"):
                    found.append(int(entry.name))
        return found

    # -- lifecycle --------------------------------------------------------------------
    def __enter__(self) -> "SimCluster":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        self._take_slot()
        self.bridge = f"mlpsbr{self.tag}"
        try:
            self._keys()
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            _run("ip", "addr", "add", f"{SUBNET.format(slot=self.slot)}.1/24", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
            for i in range(1, self.count + 1):
                self.hosts.append(self._make_host(i))
            self._edit_hosts_file(add=True)
            for host in self.hosts:
                self._start_sshd(host)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for host in self.hosts:
            self.thaw(host.name)
            for pid in host.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _run("ip", "netns", "del", host.netns, check=False)
            _run("ip", "link", "del", host.veth, check=False)
            remove_stale(hostname=host.name)  # session directories of its killed PRRTE daemons
            rank_temp.sweep(tempfile.gettempdir(), hostname=host.name)  # its killed ranks' own
            shm_orphans.sweep(hostname=host.name)  # and their Open MPI segments in /dev/shm
        if self.bridge:
            _run("ip", "link", "del", self.bridge, check=False)
        self._edit_hosts_file(add=False)
        self.hosts = []
        if self._slot_fd >= 0:
            os.close(self._slot_fd)
            self._slot_fd = -1
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _take_slot(self) -> None:
        """The first free subnet slot. Its lock file names the cluster that held it last: one
        whose session was killed before its teardown left namespaces, a bridge and /etc/hosts
        lines on this subnet, which would answer for ours; they are removed first."""
        for slot in range(10, 250):
            fd = os.open(LOCK_DIR / f"slot-{slot}.lock", os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            previous = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            if previous and previous != self.tag:
                self._remove_left_behind(previous)
            os.ftruncate(fd, 0)
            os.pwrite(fd, self.tag.encode("ascii"), 0)
            self.slot, self._slot_fd = slot, fd
            return
        raise RuntimeError("no free simulated-host subnet slot")

    def _remove_left_behind(self, tag: str) -> None:
        """What a dead cluster `tag` left: its hosts' processes and namespaces, veths, bridge and
        /etc/hosts lines (we hold its slot's lock, so nothing of it is in use)."""
        spaces = [line.split()[0] for line in _run("ip", "netns", "list", check=False).stdout.splitlines()
                  if line.split() and line.split()[0].startswith(f"mlps{tag}h")]
        for netns in spaces:
            for pid in _run("ip", "netns", "pids", netns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            _run("ip", "netns", "del", netns, check=False)
        for line in _run("ip", "-o", "link", "show", check=False).stdout.splitlines():
            name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
            if name.startswith(f"mv{tag}") or name == f"mlpsbr{tag}":
                _run("ip", "link", "del", name, check=False)
        self._edit_hosts_file(add=False, tag=tag)

    def _keys(self) -> None:
        key = self.workdir / "id_ed25519"
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.workdir / "host_key"))
        shutil.copy(key.with_suffix(".pub"), self.workdir / "authorized_keys")
        self.ssh_config.write_text(
            "Host *\n"
            f"  IdentityFile {key}\n  User root\n  IdentitiesOnly yes\n  BatchMode yes\n"
            "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n", encoding="utf-8")
        self.ssh_wrapper.write_text(f'#!/bin/sh\nexec ssh -F {self.ssh_config} "$@"\n', encoding="utf-8")
        self.ssh_wrapper.chmod(0o755)

    def _make_host(self, i: int) -> SimHost:
        name, netns = f"mlps-{self.tag}-h{i}", f"mlps{self.tag}h{i}"
        address = f"{SUBNET.format(slot=self.slot)}.{10 + i}"
        veth, peer = f"mv{self.tag}{i}", f"mv{self.tag}{i}p"
        _run("ip", "netns", "add", netns)
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", peer)
        _run("ip", "link", "set", peer, "netns", netns)
        _run("ip", "link", "set", veth, "master", self.bridge)
        _run("ip", "link", "set", veth, "up")
        _run("ip", "netns", "exec", netns, "ip", "link", "set", "lo", "up")
        _run("ip", "netns", "exec", netns, "ip", "addr", "add", f"{address}/24", "dev", peer)
        _run("ip", "netns", "exec", netns, "ip", "link", "set", peer, "up")
        _run("ip", "netns", "exec", netns, "ip", "route", "add", "default", "via", f"{SUBNET.format(slot=self.slot)}.1")
        config = self.workdir / f"sshd_config_h{i}"
        pid_file = self.workdir / f"sshd_h{i}.pid"
        config.write_text(
            f"ListenAddress {address}\nPort 22\nHostKey {self.workdir / 'host_key'}\nPidFile {pid_file}\n"
            f"AuthorizedKeysFile {self.workdir / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "PrintMotd no\nAcceptEnv *\nMaxStartups 100\nMaxSessions 100\nLoginGraceTime 60\n", encoding="utf-8")
        return SimHost(name, netns, address, veth, config, pid_file)

    def _start_sshd(self, host: SimHost) -> None:
        Path("/run/sshd").mkdir(exist_ok=True)
        script = f"hostname {host.name} && exec {SSHD} -f {host.config}"
        _run("ip", "netns", "exec", host.netns, "unshare", "--uts", "sh", "-c", script)

    def _wait_ready(self) -> None:
        """Each sshd has written its pid file (it is listening) and answers `hostname` as its
        host. On a busy machine an ssh handshake alone can take seconds: a try that runs long is
        a try that failed, and the wait gives up only after READY_S, which is there to end a
        build that cannot succeed, not to judge a slow one."""
        deadline = time.monotonic() + READY_S
        pending = list(self.hosts)
        while pending:
            host = pending[0]
            try:
                done = self.ssh(host.name, "hostname", timeout=60) if host.pid_file.is_file() else None
            except subprocess.TimeoutExpired:
                done = None
            if done is not None and done.returncode == 0 and done.stdout.strip() == host.name:
                pending.pop(0)
                continue
            if time.monotonic() > deadline:
                why = "no pid file" if done is None else done.stderr.strip()
                raise RuntimeError(f"{host.name}: sshd did not answer within {READY_S:.0f} s ({why})")
            time.sleep(0.2)

    def _edit_hosts_file(self, add: bool, tag: str | None = None) -> None:
        marker = f"# mlps-simhosts {tag or self.tag}"
        fd = os.open(LOCK_DIR / "etc-hosts.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            lines = [l for l in HOSTS_FILE.read_text(encoding="utf-8").splitlines() if not l.endswith(marker)]
            if add:
                lines += [f"{h.address} {h.name} {marker}" for h in self.hosts]
            # Rewritten in place: /etc/hosts is often a bind mount that cannot be replaced.
            with open(HOSTS_FILE, "w", encoding="utf-8") as fh:
                fh.write("\n".join(lines) + "\n")
        finally:
            os.close(fd)
