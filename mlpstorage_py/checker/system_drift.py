"""Rules 2.1.9, against the description: every client host a run recorded (mlpstorage's host
survey, client_hosts in *_metadata.json) is one that systems/<system>.yaml describes.

A run of another tool records no such survey, so published packages draw nothing here; the
run-against-run comparison of the same rule stays in rules_structure.identical_system.
"""

from __future__ import annotations

from typing import Iterable

from mlpstorage_py.checker.package import Package
from mlpstorage_py.checker.registry import WARNING, Finding, finding
from mlpstorage_py.checker.structure_helpers import system_description
from mlpstorage_py.systems.profile import differences, host_records


def description_drift(pkg: Package) -> Iterable[Finding]:
    """A WARNING per run whose recorded host matches no client of its system's description,
    naming the fields that differ from the closest client."""
    for leaf in pkg.leaves:
        records = host_records(leaf.metadata)
        if not records:
            continue
        sut, problem, path = system_description(pkg, leaf.division, leaf.org, leaf.system)
        clients = sut.get("clients") if problem is None and isinstance(sut, dict) else None
        if not isinstance(clients, list) or not clients:
            continue  # 2.1.7 / 2.1.8 report a missing or empty description
        for record in records:
            diffs = min((differences(record, client) for client in clients), key=len)
            if diffs:
                yield finding("2.1.9", WARNING, leaf.path,
                              f"client host {record['hostname']} as the run recorded it differs from "
                              f"systems/{path.name}: {'; '.join(diffs)}: a changed configuration belongs "
                              "under a new system name (or the description needs correcting)")
