"""submission.yaml (schema mlps-submission-manifest/1): an inventory of an organization's leaves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlpstorage_py import LAYOUT_VERSION, RULES_EDITION, __version__
from mlpstorage_py.results.tree import files
from mlpstorage_py.results.tree.package import Leaf, Package
from mlpstorage_py.checker.rules_common import section
from mlpstorage_py.results import code_image
from mlpstorage_py.results.io import utc_now

SCHEMA = "mlps-submission-manifest/1"


def stamped(leaf: Leaf) -> bool:
    """Whether the leaf holds a provenance stamp, readable or not (a file or link named
    provenance.json; a directory of that name is none): an unreadable one still says the leaf
    was stamped, and its tool version and DLIO commit are then unknown."""
    return leaf.record("provenance").kind in (files.FILE, files.LINK)


def leaf_entries(pkg: Package, division: str, org: str) -> list[dict[str, Any]]:
    """One entry per leaf of the organization, keyed by its path relative to the package root."""
    entries = []
    for leaf in pkg.leaves:
        if (leaf.division, leaf.org) != (division, org):
            continue
        stamp = leaf.provenance or {}
        path = leaf.path.relative_to(pkg.root).as_posix()
        entries.append({
            "path": path,
            "benchmark": leaf.benchmark,
            "model": leaf.model,
            "command": leaf.command,
            "accelerator": (leaf.metadata or {}).get("accelerator") or "n/a",
            "system": leaf.system,
            "rules_edition": leaf.stamped_edition,
            "core_config_hash": str(section(stamp, "core_config").get("hash", "unknown")),
            "code_image": (leaf.pointer or "unknown").strip(),
            "stamp": f"{path}/provenance.json" if stamped(leaf) else "derived",
        })
    return entries


def build(pkg: Package, division: str, org: str, org_dir: Path) -> dict[str, Any]:
    leaves = leaf_entries(pkg, division, org)
    stamps = [leaf.provenance or {} for leaf in pkg.leaves if (leaf.division, leaf.org) == (division, org) and stamped(leaf)]
    systems = sorted(p.name for p in (org_dir / "systems").glob("*")) if (org_dir / "systems").is_dir() else []
    images = sorted({e["code_image"] for e in leaves if e["code_image"] != "unknown"})
    return {
        "schema": SCHEMA,
        "organization": org,
        "division": division,
        "rules_edition": RULES_EDITION,
        "layout_version": LAYOUT_VERSION,
        "generated_by": f"mlpstorage {__version__}",
        "tool_versions": sorted({str(section(s, "tool").get("version", "unknown")) for s in stamps}),
        "dlio_commits": sorted({str(section(s, "dlio").get("commit", "unknown")) for s in stamps}),
        "systems": systems,
        "leaves": leaves,
        "code_images": [{"pointer": p, "directory": f"{code_image.POOL_DIR}/code-{p.split(':')[-1][:8]}"} for p in images],
        "generated_at": utc_now(),
    }
