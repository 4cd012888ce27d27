"""submission.yaml (schema mlps-submission-manifest/1): an inventory of an organization's leaves."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mlpstorage_py import LAYOUT_VERSION, RULES_EDITION, __version__
from mlpstorage_py.results import code_image
from mlpstorage_py.results.io import utc_now
from mlpstorage_py.results.provenance import section
from mlpstorage_py.results.tree import files
from mlpstorage_py.results.tree.package import Leaf, Package

SCHEMA = "mlps-submission-manifest/1"
FAST_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def stamped(leaf: Leaf) -> bool:
    """Whether the leaf holds a provenance stamp, readable or not (a file or link named
    provenance.json; a directory of that name is none): an unreadable one still says the leaf
    was stamped, and its tool version and DLIO commit are then unknown."""
    return leaf.record("provenance").kind in (files.FILE, files.LINK)


def _entry(pkg: Package, leaf: Leaf) -> dict[str, Any]:
    """A leaf's entry, keyed by its path relative to the package root."""
    stamp = leaf.provenance or {}
    path = leaf.path.relative_to(pkg.root).as_posix()
    return {
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
    }


@dataclass
class Part:
    """Some leaves' share of submission.yaml, taken while their records are held: the entries
    already as YAML (a long list is most of the dump's time, and the parts are dumped in the
    workers that read them), with the images and stamps' versions the whole file gathers."""
    text: str
    images: set[str]
    tools: set[str]
    commits: set[str]


def part(pkg: Package, leaves: list[Leaf]) -> Part:
    entries = [_entry(pkg, leaf) for leaf in leaves]
    stamps = [leaf.provenance or {} for leaf in leaves if stamped(leaf)]
    return Part(_dump(entries) if entries else "", {e["code_image"] for e in entries if e["code_image"] != "unknown"},
                {str(section(s, "tool").get("version", "unknown")) for s in stamps},
                {str(section(s, "dlio").get("commit", "unknown")) for s in stamps})


def _dump(entries: list[dict[str, Any]]) -> str:
    """The entries as the block sequence yaml.safe_dump writes under `leaves:` (a sequence in a
    mapping is not indented, so it reads the same at the top); libyaml's emitter where every
    value is a printable ASCII string, which it writes as PyYAML's own emitter does, three times faster."""
    plain = all(isinstance(v, str) and v.isascii() and v.isprintable() for e in entries for v in e.values())
    return yaml.dump(entries, Dumper=FAST_DUMPER if plain else yaml.SafeDumper, sort_keys=False)


def text(division: str, org: str, org_dir: Path, parts: list[Part]) -> str:
    """submission.yaml from the organization's parts, in leaf order: yaml.safe_dump's text of the
    whole mapping (a block mapping's entries are written one after another, each on its own)."""
    systems = sorted(p.name for p in (org_dir / "systems").glob("*")) if (org_dir / "systems").is_dir() else []
    images = sorted(set().union(*(p.images for p in parts)))
    head = {
        "schema": SCHEMA,
        "organization": org,
        "division": division,
        "rules_edition": RULES_EDITION,
        "layout_version": LAYOUT_VERSION,
        "generated_by": f"mlpstorage {__version__}",
        "tool_versions": sorted(set().union(*(p.tools for p in parts))),
        "dlio_commits": sorted(set().union(*(p.commits for p in parts))),
        "systems": systems,
    }
    tail = {
        "code_images": [{"pointer": p, "directory": f"{code_image.POOL_DIR}/code-{p.split(':')[-1][:8]}"} for p in images],
        "generated_at": utc_now(),
    }
    leaves = "".join(p.text for p in parts)
    if not leaves:
        return yaml.safe_dump({**head, "leaves": [], **tail}, sort_keys=False)
    return yaml.safe_dump(head, sort_keys=False) + "leaves:\n" + leaves + yaml.safe_dump(tail, sort_keys=False)
