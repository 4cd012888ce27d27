"""`mlpstorage reports reportgen`: regenerate each organization's submission.yaml."""

from __future__ import annotations

from pathlib import Path

import yaml

from mlpstorage_py.checker.package import Package
from mlpstorage_py.report import manifest
from mlpstorage_py.results.io import atomic_write_text


def generate(root: Path) -> list[Path]:
    """Write <mode>/<org>/submission.yaml for every organization in the tree; returns the paths."""
    pkg = Package.load(root)
    written = []
    for division, org, org_dir in pkg.orgs:
        path = org_dir / "submission.yaml"
        atomic_write_text(path, yaml.safe_dump(manifest.build(pkg, division, org, org_dir), sort_keys=False))
        written.append(path)
    return written
