"""TEL-01 (ours, not the edition's): a CLOSED result whose clients, not the storage, set its
pace. The run's own telemetry (launch/watch.py wrote telemetry/bottleneck.json from each client
host's samples) names a saturated client CPU, client memory or network link in a phase: the
figure then says what the clients could drive, and a reviewer will ask. A warning, never INVALID:
the rules do not require client headroom; Rules.md, TEL-01."""

from __future__ import annotations

from collections.abc import Iterable

from mlpstorage_py.checker.registry import LEAF, Finding, Rule, rule
from mlpstorage_py.results import bottleneck
from mlpstorage_py.results.schema import Unread
from mlpstorage_py.results.tree import files
from mlpstorage_py.results.tree.package import Leaf

TELEMETRY = "telemetry"


def records(leaf: Leaf) -> tuple[list[bottleneck.Bottleneck], list[Unread]]:
    """The leaf's bottleneck records (telemetry/bottleneck.json) and those of a version this tool
    does not read; none where it has no telemetry."""
    if files.names(leaf.path).get(TELEMETRY) != files.DIR:
        return [], []
    folder = files.child(leaf.path, TELEMETRY)
    if files.names(folder).get(bottleneck.FILE) != files.FILE:
        return [], []
    return bottleneck.read_records(files.json_or_unreadable(files.child(folder, bottleneck.FILE)))


@rule("TEL-01", "clientsLimitedResult").check(LEAF, command="run")
def clients_limited(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A CLOSED run leaf whose telemetry shows a saturated client CPU, memory or link (a warning)."""
    if leaf.division != "closed":
        return
    where = files.child(files.child(leaf.path, TELEMETRY), bottleneck.FILE)
    read, unread = records(leaf)
    for record in read:
        saturated = record.data.get("saturated")
        found = [s for s in saturated if isinstance(s, dict) and s.get("what") in bottleneck.CLIENT_KINDS] \
            if isinstance(saturated, list) else []
        if found:
            texts = "; ".join(str(s.get("text") or s.get("what")) for s in found)
            yield r.warning(where, f"the clients, not the storage, limited {record.text('phase') or 'a phase'}: {texts}")
    for unknown in unread[:1]:
        yield r.warning(where, f"not judged: {unknown.text()}")
