"""OBJ-01 (ours, not the edition's): an object run given several S3 endpoints whose bytes all went
to one of them measured one gateway, not the store the list describes (a rank count below the
endpoint count under per_rank, a strategy that did not spread, the others unreachable). The
ranks' own per-endpoint figures (engine_parameters.object_endpoints.per_endpoint, written by
benchmarks/object_endpoints.py) say so; a warning, since the rules do not require several
endpoints. Rules.md, OBJ-01."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mlpstorage_py.checker.registry import LEAF, Finding, Rule, rule
from mlpstorage_py.results.tree.package import Leaf


def endpoint_record(leaf: Leaf) -> dict[str, Any] | None:
    """The leaf's object_endpoints record, where its metadata has one."""
    params = (leaf.metadata or {}).get("engine_parameters")
    record = params.get("object_endpoints") if isinstance(params, dict) else None
    return record if isinstance(record, dict) else None


def _moved(row: Any) -> int:
    if not isinstance(row, dict):
        return 0
    values = [row.get("read_bytes"), row.get("written_bytes")]
    return sum(v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0)


@rule("OBJ-01", "objectEndpointBalance").check(LEAF)
def endpoint_balance(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """An object run whose bytes went to only one of several listed S3 endpoints (a warning)."""
    record = endpoint_record(leaf)
    if record is None:
        return
    rows = record.get("per_endpoint")
    listed = record.get("endpoints")
    if not isinstance(rows, list) or not isinstance(listed, list) or len(listed) < 2:
        return
    used = [str(row.get("endpoint")) for row in rows if _moved(row)]
    if len(used) == 1:
        yield r.warning(leaf.path, f"all the bytes went to {used[0]}, one of the {len(listed)} endpoints listed "
                                   f"(strategy {record.get('strategy')}): the run measured one gateway, not the store")
    failed = record.get("failed")
    if isinstance(failed, dict) and failed:
        yield r.warning(leaf.path, "endpoint(s) " + "; ".join(f"{url} {why}" for url, why in failed.items())
                        + " during the run")
