"""Rules 2.1.9, against the description: every client host a run recorded (mlpstorage's host
survey, client_hosts in *_metadata.json) is one that systems/<system>.yaml describes, with the
devices its sidecar systems/<system>.hosts.md lists (systems/host_sidecar.py).

A run of another tool records no such survey, so published packages draw nothing here; the
run-against-run comparison of the same rule stays in rules_structure.identical_system.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from mlpstorage_py.results.tree.files import read_text
from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.checker.registry import WARNING, Finding, finding
from mlpstorage_py.checker.structure_helpers import system_description
from mlpstorage_py.systems import host_sidecar
from mlpstorage_py.systems.profile import differences, host_records


def _sidecar(pkg: Package, path: Path) -> dict[str, dict[str, Any]]:
    """The sidecar's hosts beside a description, read once per validation ({} without one)."""
    cache = vars(pkg).setdefault("_host_sidecars", {})
    if path not in cache:
        text, problem = read_text(host_sidecar.path_for(path))
        cache[path] = (host_sidecar.parse(text) if problem is None else None) or {}
    return cache[path]


def description_drift(pkg: Package) -> Iterable[Finding]:
    """A WARNING per run whose recorded host matches no client of its system's description,
    naming the fields that differ from the closest client (and the sidecar entry of that host,
    else the closest entry)."""
    for leaf in pkg.leaves:
        records = host_records(leaf.metadata)
        if not records:
            continue
        sut, problem, path = system_description(pkg, leaf.division, leaf.org, leaf.system)
        clients = sut.get("clients") if problem is None and isinstance(sut, dict) else None
        if not isinstance(clients, list) or not clients:
            continue  # 2.1.7 / 2.1.8 report a missing or empty description
        hosts = _sidecar(pkg, path)
        described = f"systems/{path.name}" + (f" and {host_sidecar.path_for(path).name}" if hosts else "")
        for record in records:
            entries = [hosts[record["hostname"]]] if record["hostname"] in hosts else list(hosts.values()) or [None]
            diffs = min((differences(record, client, entry) for client in clients for entry in entries), key=len)
            if diffs:
                yield finding("2.1.9", WARNING, leaf.path,
                              f"client host {record['hostname']} as the run recorded it differs from "
                              f"{described}: {'; '.join(diffs)}: a changed configuration belongs "
                              "under a new system name (or the description needs correcting)")
