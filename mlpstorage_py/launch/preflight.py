"""Before anything is launched on client hosts: every host's name resolves and its sshd answers,
the hosts probed in parallel (up to 64 at once, each under the deadline), so a dead or frozen host
is one line naming it within seconds instead of an MPI launch that waits forever.

The probe uses the same remote shell MPI will use (``PRTE_MCA_plm_ssh_agent``, Open MPI's older
``OMPI_MCA_plm_rsh_agent``, MPICH's ``HYDRA_LAUNCHER_EXEC``, else ``ssh``), with BatchMode and a
ConnectTimeout; a host that accepts TCP but never answers is caught by the deadline.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from mlpstorage_py.errors import HostUnreachable
from mlpstorage_py.launch.hostnames import is_local
from mlpstorage_py.launch.process import stop_tree
from mlpstorage_py.results.logs import log

AGENT_VARIABLES = ("PRTE_MCA_plm_ssh_agent", "OMPI_MCA_plm_rsh_agent", "HYDRA_LAUNCHER_EXEC")
CONNECT_TIMEOUT_S = 10
DEADLINE_S = 30.0
# ssh clients in flight at once. 64 hosts all start together (up to that, as before); a longer list
# queues, so the preflight of N hosts that all answer takes about ceil(N / 64) handshakes, and one of
# N frozen hosts ceil(N / 64) x DEADLINE_S at most.
PROBES_IN_FLIGHT = 64


@dataclass(frozen=True)
class Probe:
    host: str
    ok: bool
    detail: str
    seconds: float


def remote_shell(env: dict[str, str] | None = None) -> list[str]:
    """The remote shell command MPI is configured to use, as an argv prefix."""
    env = dict(os.environ) if env is None else env
    for name in AGENT_VARIABLES:
        if env.get(name, "").strip():
            return shlex.split(env[name])
    return ["ssh"]


def probe_hosts(hosts: list[str], deadline_s: float = DEADLINE_S, env: dict[str, str] | None = None) -> list[Probe]:
    """Resolve and ssh to every non-local host, at most PROBES_IN_FLIGHT at once (a bounded pool:
    up to that many hosts all start together, as before; a longer list does not start one ssh
    client per host at once); each gets `true` run remotely and `deadline_s` from its own start."""
    names = [h.split(":")[0] for h in hosts]
    shell = remote_shell(env)
    options = ["-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}", "-o", "BatchMode=yes"] if "ssh" in os.path.basename(shell[0]) else []
    remote = [n for n in dict.fromkeys(names) if not is_local(n)]
    results: dict[str, Probe] = {n: Probe(n, True, "local", 0.0) for n in names if is_local(n)}
    if remote:
        with ThreadPoolExecutor(max_workers=min(PROBES_IN_FLIGHT, len(remote)), thread_name_prefix="ssh-probe") as pool:
            for probe in pool.map(lambda name: _probe(name, [*shell, *options, name, "true"], deadline_s), remote):
                results[probe.host] = probe
    return [results[n] for n in names]


def _probe(name: str, argv: list[str], deadline_s: float) -> Probe:
    """One host: its name resolves, and `argv` (the remote shell running `true` there) succeeds
    within `deadline_s`."""
    started = time.monotonic()
    try:
        socket.getaddrinfo(name, 22)
    except socket.gaierror as exc:
        return Probe(name, False, f"name does not resolve ({exc.strerror})", 0.0)
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True)
    try:
        _, err = child.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        stop_tree(child)
        child.communicate()
        return Probe(name, False, f"no answer within {deadline_s:.0f} s", time.monotonic() - started)
    took = time.monotonic() - started
    if child.returncode == 0:
        return Probe(name, True, "ssh ok", took)
    lines = [line.strip() for line in err.decode("utf-8", "replace").splitlines() if line.strip()]
    return Probe(name, False, lines[-1][:200] if lines else f"ssh exit {child.returncode}", took)


def check_hosts(hosts: list[str], deadline_s: float = DEADLINE_S) -> list[Probe]:
    """Raise HostUnreachable (one line naming every failed host) unless all hosts answer."""
    if all(is_local(h) for h in hosts):
        return [Probe(h.split(":")[0], True, "local", 0.0) for h in hosts]
    started = time.monotonic()
    probes = probe_hosts(hosts, deadline_s)
    bad = [p for p in probes if not p.ok]
    if bad:
        raise HostUnreachable(f"{len(bad)} of {len(probes)} host(s) unreachable: "
                              + "; ".join(f"{p.host}: {p.detail}" for p in bad))
    log.info(f"ssh preflight: {len(probes)} host(s) answered in {time.monotonic() - started:.1f} s")
    return probes
