"""systems/<system>.hosts.md: what each client host recorded that the published description
schema has no field for (every block device with its model, size and queue settings), written
by `systems describe` beside <system>.yaml and read by validate for Rules 2.1.9.

Markdown because Rules 2.1.7 permits *.md beside the descriptions (and the working group's
checker validates every *.yaml in systems/ as a description); the facts sit in its one fenced
YAML block, so a reviewer reads what a machine compares.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from mlpstorage_py.results.tree import fast_yaml

SCHEMA = "mlps-host-config/1"
SUFFIX = ".hosts.md"
FENCE = re.compile(r"^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)


def path_for(description: Path) -> Path:
    """systems/<system>.hosts.md beside systems/<system>.yaml."""
    return description.with_name(description.stem + SUFFIX)


def render(system: str, records: list[dict[str, Any]], runs: int) -> str:
    """The sidecar for the newest record of each host (a host whose survey read no drives has none)."""
    hosts = {str(r["hostname"]): {"drives": [d for d in r["drives"] if isinstance(d, dict)]}
             for r in sorted(records, key=lambda r: str(r["hostname"])) if isinstance(r.get("drives"), list)}
    body = yaml.safe_dump({"schema": SCHEMA, "system": system, "hosts": hosts}, sort_keys=False, width=120)
    return (f"# {system}: client host configuration\n\n"
            f"Written by `mlpstorage systems describe` beside `{system}.yaml`, from the host records of {runs} run(s).\n"
            "It holds what each client host recorded that the description's schema has no field for: every block\n"
            "device with its model, size, rotational flag and queue settings (scheduler, read-ahead, queue depth).\n"
            "`mlpstorage validate` compares every run's recorded hosts with it (Rules 2.1.9): a changed setting\n"
            "belongs under a new system name. Correct it only where it is wrong.\n\n"
            f"```yaml\n{body}```\n")


def parse(text: str) -> dict[str, dict[str, Any]] | None:
    """{hostname: {"drives": [...]}} from a sidecar's fenced block; None when it holds none of
    this schema (a hand-written Markdown file is no sidecar)."""
    match = FENCE.search(text)
    try:
        data = fast_yaml.load(match.group(1), aliases=False) if match else None  # a package's: no alias bomb
    except (yaml.YAMLError, ValueError, TypeError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("hosts"), dict):
        return None
    return {str(name): entry for name, entry in data["hosts"].items() if isinstance(entry, dict)}
