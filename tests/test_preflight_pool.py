"""The ssh preflight probes hosts through a bounded pool (issue 44): no more than PROBES_IN_FLIGHT
remote shells at once, every host still probed and named. The remote shell here is a script
(PRTE_MCA_plm_ssh_agent, as MPI would use) that counts the probes running beside it under a lock
and fails for one host, so the bound is read from what ran, not from timing."""

from __future__ import annotations

import stat
from pathlib import Path

from mlpstorage_py.launch import preflight

AGENT = """#!/bin/sh
# argv: [ssh options...] HOST true
host=""
for a; do [ "$a" = true ] && break; host="$a"; done
exec 9>"{dir}/lock"
flock 9; n=$(( $(cat "{dir}/running") + 1 )); echo $n > "{dir}/running"
[ $n -gt $(cat "{dir}/peak") ] && echo $n > "{dir}/peak"; flock -u 9
sleep 0.3
flock 9; echo $(( $(cat "{dir}/running") - 1 )) > "{dir}/running"; flock -u 9
[ "$host" = 127.0.0.4 ] && {{ echo "Permission denied (publickey)." >&2; exit 255; }}
exit 0
"""


def test_probes_run_at_most_the_bound_at_once_and_every_host_is_named(tmp_path: Path, monkeypatch) -> None:
    for name in ("running", "peak"):
        (tmp_path / name).write_text("0\n")
    agent = tmp_path / "agent"
    agent.write_text(AGENT.format(dir=tmp_path))
    agent.chmod(agent.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(preflight, "PROBES_IN_FLIGHT", 2)
    monkeypatch.setattr(preflight, "is_local", lambda name: False)  # loopback addresses stand for hosts
    hosts = [f"127.0.0.{i}" for i in range(1, 7)]
    probes = preflight.probe_hosts(hosts, deadline_s=30, env={"PRTE_MCA_plm_ssh_agent": str(agent)})
    assert [p.host for p in probes] == hosts
    assert [p.ok for p in probes] == [True, True, True, False, True, True]
    assert probes[3].detail == "Permission denied (publickey)."
    assert int((tmp_path / "peak").read_text()) <= 2, "more remote shells at once than the bound"
