"""A client host's configuration as the host survey records it, beyond its hardware: the kernel
tunables, the environment variables (rules/host_survey.yaml says which) and the drives with
their block-layer settings. Read on every host the survey reaches (launch/hostinfo.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlpstorage_py.results.redact import MASK, redact, secret_values
from mlpstorage_py.rules.tables import host_survey


def _text(path: Path) -> str | None:
    try:
        return " ".join(path.read_text(encoding="ascii", errors="replace").split())
    except OSError:
        return None


def sysctls(root: Path = Path("/proc/sys")) -> dict[str, str]:
    """{sysctl name: value} for the table's tunables this kernel has (whitespace collapsed)."""
    found = {}
    for name in host_survey()["sysctl"]:
        value = _text(root.joinpath(*name.split(".")))
        if value is not None:
            found[name] = value
    return found


def environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """{name: value} of the table's variables that are set; a secret-looking name's value is
    masked, and so is any S3 secret a value holds."""
    table = host_survey()["environment"]
    env = os.environ if environ is None else environ
    names, prefixes, skip = set(table["names"]), tuple(table["prefixes"]), set(table["launcher_set"])
    secret_words, secrets = tuple(table["secret_words"]), secret_values(env)
    found = {}
    for name in sorted(env):
        if name in skip or not (name in names or name.startswith(prefixes)):
            continue
        found[name] = MASK if any(word in name.upper() for word in secret_words) else redact(env[name], secrets)
    return found


def _number(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def drives(root: Path = Path("/sys/block")) -> list[dict[str, Any]]:
    """Block devices with hardware behind them (not loop, zram, device-mapper or md): name,
    model, vendor, size in GiB, rotational, and the queue settings that shape their I/O."""
    found = []
    for path in sorted(root.iterdir()) if root.is_dir() else []:
        if not (path / "device").exists():
            continue
        queue = path / "queue"
        scheduler = _text(queue / "scheduler") or ""
        active = next((w.strip("[]") for w in scheduler.split() if w.startswith("[")), scheduler or None)
        sectors = _number(_text(path / "size"))
        found.append({"name": path.name, "model": _text(path / "device" / "model") or None,
                      "vendor": _text(path / "device" / "vendor") or None,
                      "size_gib": round(sectors * 512 / 2 ** 30, 1) if sectors is not None else None,
                      "rotational": {"1": True, "0": False}.get(_text(queue / "rotational") or ""),
                      "scheduler": active, "read_ahead_kb": _number(_text(queue / "read_ahead_kb")),
                      "nr_requests": _number(_text(queue / "nr_requests"))})
    return found


def host_config() -> dict[str, Any]:
    return {"sysctl": sysctls(), "environment": environment(), "drives": drives()}
