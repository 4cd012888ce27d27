"""Rules 2.1.9, against the description: every client host a run recorded (mlpstorage's host
survey, client_hosts in *_metadata.json) is one that systems/<system>.yaml describes, with the
devices its sidecar systems/<system>.hosts.md lists (results/host_sidecar.py).

A run of another tool records no such survey, so published packages draw nothing here; the
run-against-run comparison of the same rule stays in rules_structure.identical_system.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mlpstorage_py.checker.registry import Finding, Rule
from mlpstorage_py.results import host_sidecar
from mlpstorage_py.results.host_profile import differences, host_records
from mlpstorage_py.results.tree.files import read_text
from mlpstorage_py.results.tree.package import System


def description_drift(r: Rule, system: System) -> Iterable[Finding]:
    """A WARNING per run whose recorded host matches no client of its system's description,
    naming the fields that differ from the closest client (and the sidecar entry of that host,
    else the closest entry). The description and its sidecar are read once for the system."""
    surveyed = [(leaf, records) for leaf in system.leaves if (records := host_records(leaf.metadata))]
    if not surveyed:
        return
    sut, problem, path = system.package.system_description(system.division, system.org, system.name)
    clients = sut.get("clients") if problem is None and isinstance(sut, dict) else None
    if not isinstance(clients, list) or not clients:
        return  # 2.1.7 / 2.1.8 report a missing or empty description
    text, unread = read_text(host_sidecar.path_for(path))
    hosts = (host_sidecar.parse(text) if text is not None and unread is None else None) or {}
    described = f"systems/{path.name}" + (f" and {host_sidecar.path_for(path).name}" if hosts else "")
    for leaf, records in surveyed:
        for record in records:
            entries: list[dict[str, Any] | None] = \
                [hosts[record["hostname"]]] if record["hostname"] in hosts else [*hosts.values()] or [None]
            diffs = min((differences(record, client, entry) for client in clients for entry in entries), key=len)
            if diffs:
                yield r.warning(leaf.path,
                                f"client host {record['hostname']} as the run recorded it differs from "
                                f"{described}: {'; '.join(diffs)}: a changed configuration belongs "
                                "under a new system name (or the description needs correcting)")
