"""Before anything is launched on client hosts: every host's name resolves and its sshd answers,
all hosts probed in parallel under one deadline, so a dead or frozen host is one line naming it
within seconds instead of an MPI launch that waits forever.

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
from dataclasses import dataclass

from mlpstorage_py.errors import HostUnreachable
from mlpstorage_py.launch.hostnames import is_local
from mlpstorage_py.launch.process import stop_tree
from mlpstorage_py.results.logs import log

AGENT_VARIABLES = ("PRTE_MCA_plm_ssh_agent", "OMPI_MCA_plm_rsh_agent", "HYDRA_LAUNCHER_EXEC")
CONNECT_TIMEOUT_S = 10
DEADLINE_S = 30.0


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
    """Resolve and ssh to every non-local host at once; each gets `true` run remotely."""
    names = [h.split(":")[0] for h in hosts]
    shell = remote_shell(env)
    options = ["-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}", "-o", "BatchMode=yes"] if "ssh" in os.path.basename(shell[0]) else []
    started = time.monotonic()
    results: dict[str, Probe] = {}
    children: dict[str, subprocess.Popen[bytes]] = {}
    for name in names:
        if is_local(name):
            results[name] = Probe(name, True, "local", 0.0)
            continue
        try:
            socket.getaddrinfo(name, 22)
        except socket.gaierror as exc:
            results[name] = Probe(name, False, f"name does not resolve ({exc.strerror})", 0.0)
            continue
        children[name] = subprocess.Popen([*shell, *options, name, "true"], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    for name, child in children.items():
        remaining = max(0.1, deadline_s - (time.monotonic() - started))
        try:
            _, err = child.communicate(timeout=remaining)
        except subprocess.TimeoutExpired:
            stop_tree(child)
            child.communicate()
            results[name] = Probe(name, False, f"no answer within {deadline_s:.0f} s", time.monotonic() - started)
            continue
        took = time.monotonic() - started
        if child.returncode == 0:
            results[name] = Probe(name, True, "ssh ok", took)
        else:
            lines = [l.strip() for l in err.decode("utf-8", "replace").splitlines() if l.strip()]
            results[name] = Probe(name, False, lines[-1][:200] if lines else f"ssh exit {child.returncode}", took)
    return [results[n] for n in names]


def check_hosts(hosts: list[str], deadline_s: float = DEADLINE_S) -> list[Probe]:
    """Raise HostUnreachable (one line naming every failed host) unless all hosts answer."""
    if all(is_local(h) for h in hosts):
        return [Probe(h.split(":")[0], True, "local", 0.0) for h in hosts]
    probes = probe_hosts(hosts, deadline_s)
    bad = [p for p in probes if not p.ok]
    if bad:
        raise HostUnreachable(f"{len(bad)} of {len(probes)} host(s) unreachable: "
                              + "; ".join(f"{p.host}: {p.detail}" for p in bad))
    log.info(f"ssh preflight: {len(probes)} host(s) answered in {max(p.seconds for p in probes):.1f} s")
    return probes
