"""Which library versions the work ran with, as each rank imported them.

The launcher's environment says nothing certain about its ranks: an engine from another venv
(--dlio-bin-path) imports that venv's s3dlio and torch, and a client host whose venv differs
imports its own. So every rank (DLIO's through dlio_rank, our checkpoint engine's, kv-cache.py's
through mlperf_wrapper.py, the vectordb query clients) writes, once its work is done, one record
into the leaf's `rank_libraries/`: its hostname, rank, python, and for each of LIBRARIES the
distribution version (importlib.metadata of the distribution that holds the module it loaded),
the commit where pip recorded one (PEP 610), and the module's file, or "not imported". The
lifecycle groups the records by host into provenance.json and the metadata (and removes the
directory); validate judges those (EDN-03, EDN-05, EDN-06).

Only the standard library is imported here: it runs in every rank, in any environment.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

# Module -> the distribution that provides it.
LIBRARIES = {"dlio_benchmark": "dlio-benchmark", "s3dlio": "s3dlio", "torch": "torch", "numpy": "numpy",
             "mpi4py": "mpi4py"}
NOT_IMPORTED = "not imported"
DIR_NAME = "rank_libraries"
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID")


def _distribution(module: Any, name: str) -> metadata.Distribution | None:
    """The distribution beside the module's own files (the one this process loaded), else the
    first on sys.path (an editable install keeps its metadata elsewhere)."""
    file = getattr(module, "__file__", None)
    if file:
        path = Path(file)
        site = path.parent.parent if path.name == "__init__.py" else path.parent
        found = next(iter(metadata.distributions(name=name, path=[str(site)])), None)
        if found is not None:
            return found
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def _record(module: Any, name: str) -> dict[str, str]:
    dist = _distribution(module, name)
    record = {"version": dist.version if dist else str(getattr(module, "__version__", "unknown"))}
    direct = dist.read_text("direct_url.json") if dist else None
    if direct:
        commit = (json.loads(direct).get("vcs_info") or {}).get("commit_id")
        if commit:
            record["commit"] = str(commit)
    record["file"] = str(getattr(module, "__file__", None) or "unknown")
    return record


def imported() -> dict[str, dict[str, str] | str]:
    """This process's view: each library's record, or NOT_IMPORTED."""
    return {module: _record(sys.modules[module], dist) if module in sys.modules else NOT_IMPORTED
            for module, dist in LIBRARIES.items()}


def rank_from_environment() -> int | None:
    for name in RANK_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def report(directory: str | Path, rank: int | None = None) -> None:
    """Write this process's record into `directory`. A record that cannot be written is said on
    stderr and never fails the work: the leaf then lacks that rank, and says which hosts it has."""
    host, pid = socket.gethostname(), os.getpid()
    rank = rank_from_environment() if rank is None else rank
    record = {"hostname": host, "rank": rank, "pid": pid, "python": sys.executable, "libraries": imported()}
    folder = Path(directory)
    target = folder / f"{host}.{rank}.{pid}.json"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{target.name}.tmp"
        tmp.write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, target)
    except OSError as exc:
        print(f"mlpstorage: rank {rank} on {host} could not record its library versions in {folder}: {exc}",
              file=sys.stderr)


def collect(directory: Path) -> list[dict[str, Any]]:
    """The rank records grouped by host and what they imported (ranks of one host that imported
    different versions make two entries), sorted by hostname; the directory is then removed."""
    groups: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            key = json.dumps([record["hostname"], record["python"], record["libraries"]], sort_keys=True)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        entry = groups.setdefault(key, {"hostname": record["hostname"], "ranks": [], "python": record["python"],
                                        "libraries": record["libraries"]})
        if isinstance(record.get("rank"), int) and record["rank"] not in entry["ranks"]:
            entry["ranks"].append(record["rank"])  # once, though a leaf may hold several jobs (kv-cache's Options)
    shutil.rmtree(directory, ignore_errors=True)
    for entry in groups.values():
        entry["ranks"].sort()
    return sorted(groups.values(), key=lambda e: (str(e["hostname"]), e["ranks"][:1]))


def host_entries(value: Any) -> list[dict[str, Any]]:
    """The well-formed host entries of a recorded `libraries.hosts` (anything else is skipped,
    so a malformed leaf is never a crash)."""
    hosts = value.get("hosts") if isinstance(value, dict) else None
    return [h for h in hosts if isinstance(h, dict) and isinstance(h.get("libraries"), dict)
            and isinstance(h.get("hostname"), str)] if isinstance(hosts, list) else []


def version_of(entry: dict[str, Any], module: str) -> str:
    """A host entry's version of `module`, or NOT_IMPORTED."""
    record = entry["libraries"].get(module)
    return str(record.get("version", "unknown")) if isinstance(record, dict) else NOT_IMPORTED


def disagreements(entries: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, list[str]]]]:
    """Each library whose hosts did not all import the same version: (module, {version: hosts})."""
    for module in LIBRARIES:
        by_version: dict[str, list[str]] = {}
        for entry in entries:
            hosts = by_version.setdefault(version_of(entry, module), [])
            if entry["hostname"] not in hosts:
                hosts.append(entry["hostname"])
        if len(by_version) > 1:
            yield module, by_version


def describe(module: str, by_version: dict[str, list[str]]) -> str:
    """One line: `numpy differs between hosts: 2.2.6 on h1, h2; 1.26.4 on h3`."""
    return f"{module} differs between hosts: " + "; ".join(f"{v} on {', '.join(h)}" for v, h in by_version.items())
