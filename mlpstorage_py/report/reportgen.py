"""`mlpstorage reports reportgen`: per-result results.json, per-organization rollups
(results.json and results.csv) and submission.yaml, all computed from the leaves."""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlpstorage_py.errors import ConfigurationError
from mlpstorage_py.report import figures, kv_rows, leaf_cells, manifest, table
from mlpstorage_py.results.io import atomic_write_text
from mlpstorage_py.results.logs import log
from mlpstorage_py.results.provenance import leaf_class, section
from mlpstorage_py.results.summary import training
from mlpstorage_py.results.tree import files, shares
from mlpstorage_py.results.tree.package import Leaf, Package, System
from mlpstorage_py.results.tree.run_state import FAILED, INCOMPLETE, state
from mlpstorage_py.rules.tables import editions

PUBLIC_IDS = "public_ids.json"


def _group(system: System) -> dict[Path, list[Leaf]]:
    """A system's run leaves per result (workload directory), those that finished (a KV cache
    workload keeps every run: its row names the runs it drops, kv_rows.choose)."""
    results: dict[Path, list[Leaf]] = defaultdict(list)
    for leaf in system.leaves:
        if leaf.command == "run" and (_finished(leaf) or leaf.benchmark == "kv_cache"):
            results[leaf.workload_dir].append(leaf)
    return results


def _finished(leaf: Leaf) -> bool:
    """A failed run, or one killed before it wrote its end record, counts in no result: the
    leaf's state as status, runs and submit read it (a published package may lack the metadata only)."""
    return state(leaf)[0] not in (FAILED, INCOMPLETE)


def _edition_and_class(leaves: list[Leaf], declared: str) -> tuple[str, str | None]:
    """Rules 2.1.6: the edition and class every leaf of the row resolves to (class blank otherwise)."""
    stamped = {leaf.stamped_edition if leaf.stamped_edition != "unknown" else declared for leaf in leaves}
    edition = stamped.pop() if len(stamped) == 1 else ""
    classes = set()
    for leaf in leaves:
        stamp = leaf.provenance or {}
        digest = str(section(stamp, "core_config").get("hash", "unknown"))
        classes.add(leaf_class(leaf.division, leaf.benchmark, leaf.model, (leaf.metadata or {}).get("accelerator"),
                               edition, digest))
    return edition, classes.pop() if len(classes) == 1 and None not in classes else None


def _row(pkg: Package, division: str, org: str, leaves: list[Leaf]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(the row, or None when it is withheld; the result's detail for its results.json)."""
    runs = sorted(leaves, key=lambda l: l.path.name)
    kv = kv_rows.kv_row([(leaf, _finished(leaf), state(leaf)[1]) for leaf in runs]) if runs[0].benchmark == "kv_cache" else None
    if kv is not None:  # the row's identity cells are those of the one run it publishes
        leaves = [l for l in runs if l.path.name == kv.figures.get("published_run")] or runs
    first = leaves[0]
    rel = first.workload_dir.relative_to(pkg.root).as_posix()
    edition, klass = _edition_and_class(leaves, editions()["current_edition"])
    row: dict[str, Any] = {"Organization": org, "Division": division.upper(),
                           "Benchmark Type": table.BENCHMARK_LABELS[first.benchmark],
                           "Model": table.MODEL_LABELS.get(first.model, ""), "Rules Edition": edition,
                           "Comparability Class": klass}
    row.update(table.system_columns(pkg.root / division / org, first.system))
    code, code_note = leaf_cells.code(pkg, first)
    notes = [code_note]  # where a cell came from a fallback in the leaf's own files (leaf_cells)
    logs = table.link(first.system, rel)
    hosts = max((table.leaf_hosts(l) or 0) for l in leaves) or None
    if first.benchmark == "training":
        values, issues = training(leaves)
        accelerator, note = leaf_cells.accelerator(first)
        notes.append(note)
        row.update({"Training - Accelerator Type": accelerator, "Training - # Client Nodes": hosts,
                    "Training - Code": code, "Training - Logs": logs,
                    "Training - # Simulated Accelerators": (first.summary or {}).get("num_accelerators"),
                    "Training - Read B/W (GiB/s)": values["read_bw_gib_s"]})
    elif first.benchmark == "checkpointing":
        values, issues = figures.checkpointing(leaves)
        (mode, mode_note), (dp, dp_note) = leaf_cells.checkpoint_mode(first), leaf_cells.dp_instances(first)
        notes += [mode_note, dp_note]
        row.update({"Checkpointing - Checkpoint Mode": mode, "Checkpointing - # Client Nodes": hosts,
                    "Checkpointing - DP Instances": dp,
                    "Checkpointing - Code": code, "Checkpointing - Logs": logs,
                    "Checkpointing - Write B/W (GiB/s)": values["write_bw_gib_s"],
                    "Checkpointing - Write Duration (secs)": values["write_duration_s"],
                    "Checkpointing - Read B/W (GiB/s)": values["read_bw_gib_s"],
                    "Checkpointing - Read Duration (secs)": values["read_duration_s"]})
    elif first.benchmark == "vector_database":
        values, issues = figures.vector_database(leaves)
        row.update({"VDB - # Client Nodes": hosts or values["client_nodes"], "VDB - Code": code, "VDB - Logs": logs,
                    "VDB - Vector Count": values["num_vectors"], "VDB - Vector Dimension": values["dimension"],
                    "VDB - Index Type": values["index_type"], "VDB - Queries per Sec": values["qps"],
                    "VDB - Query Latency (ms)": values["p99_latency_ms"],
                    "VDB - Recall Percentage": values["recall_percentage"], "VDB - Storage IOPs": values["read_iops"],
                    "VDB - Read B/W (GiB/s)": values["read_bw_gib_s"]})
    elif kv is not None:
        values, issues = kv.figures, kv.issues
        row.update({"KVCache - # Client Nodes": hosts, "KVCache - Code": code, "KVCache - Logs": logs, **kv.cells})
    issues = [*issues, *(n for n in notes if n)]
    row = {column: table.tidy(value) for column, value in row.items()}
    row["Issues"] = issues
    # runs a killed or failed leaf never counts in; a KV row names those it dropped apart
    detail = {"result": rel, "runs": [l.path.name for l in runs if _finished(l)], "figures": values, "issues": issues}
    if any(not _finished(l) for l in runs):
        detail["unfinished_runs"] = [l.path.name for l in runs if not _finished(l)]
    if kv is not None and kv.withheld:
        detail["withheld"] = kv.withheld
        return None, detail
    return row, detail


def _public_ids(results_dir: Path, keys: list[str], prefix: str) -> dict[str, str]:
    """Every ID ever minted for this organization (public_ids.json), plus new ones numbered after
    the highest: an ID stays with its result and a retired one is never reused."""
    path = results_dir / PUBLIC_IDS
    pinned = _pinned_ids(path, prefix)
    next_id = max((int(v.rsplit("-", 1)[1]) for v in pinned.values()), default=0) + 1
    for key in keys:
        if key not in pinned:
            pinned[key] = f"{prefix}-{next_id:04d}"
            next_id += 1
    return pinned


def _pinned_ids(path: Path, prefix: str) -> dict[str, str]:
    """The minted IDs; a table that is not {result: "<prefix>-NNNN"} is refused, never rebuilt,
    since minting afresh could hand a retired ID to another result."""
    if not path.exists() and not path.is_symlink():
        return {}
    try:
        if path.is_symlink() or not path.is_file():
            raise ValueError("not a regular file")
        pinned = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(pinned, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and v.rsplit("-", 1)[-1].isdigit() for k, v in pinned.items()):
            raise ValueError(f"not an object of result -> {prefix}-NNNN")
    except (OSError, ValueError, RecursionError) as exc:
        raise ConfigurationError(f"{path} cannot be read as the Public ID table ({exc}); restore it, it pins every "
                                 "ID minted for this organization") from None
    return pinned


@dataclass
class Share:
    """What some systems give the tables, taken while their records are held (small: a worker
    sends it back): per result, in order, its (row, detail) or the error that stops reportgen;
    per organization, its submission.yaml part or the error that stops it there."""
    results: list[tuple[tuple[str, str], Path, str, Any]] = field(default_factory=list)
    manifests: dict[tuple[str, str], manifest.Part | ConfigurationError] = field(default_factory=dict)


def _read(systems: list[System]) -> Share:
    """The rows and manifest parts of some systems, each system's records released once read."""
    share = Share()
    for system in systems:
        since = files.mark()
        pkg, where = system.package, (system.division, system.org)
        for workload, leaves in sorted(_group(system).items()):
            try:
                row = _shaped(functools.partial(_row, pkg, system.division, system.org, leaves), workload)
            except ConfigurationError as exc:  # reportgen stops at it: nothing after it counts
                share.results.append((where, workload, leaves[0].benchmark, exc))
                return share
            share.results.append((where, workload, leaves[0].benchmark, row))
        known = share.manifests.get(where)
        if not isinstance(known, ConfigurationError):
            try:
                found = _shaped(functools.partial(manifest.part, pkg, system.leaves), system.path.parents[1])
                share.manifests[where] = manifest.Part(known.text + found.text, known.images | found.images,
                                                       known.tools | found.tools,
                                                       known.commits | found.commits) if known else found
            except ConfigurationError as exc:
                share.manifests[where] = exc
        system.release(since)
    return share


def generate(root: Path) -> list[Path]:
    """Write every table and manifest of the tree; returns the paths written. The systems are read
    one at a time (in forked workers for a large package: results.tree.shares), the tables written here."""
    root = root.resolve()  # below it, a path that resolves elsewhere went through a link (see _write)
    pkg = Package.load(root)
    written: list[Path] = []
    per_org: dict[tuple[str, str], list[tuple[Any, Any, Path, str]]] = defaultdict(list)
    parts: dict[tuple[str, str], list[manifest.Part | ConfigurationError]] = defaultdict(list)
    prefix = f"v{editions()['current_edition']}"
    for share in shares.walk(pkg.systems, _read, shares.pool_for(pkg)):
        for where, workload, benchmark, computed in share.results:
            if isinstance(computed, ConfigurationError):
                raise computed
            per_org[where].append((*computed, workload, benchmark))
        for where, found in share.manifests.items():
            parts[where].append(found)
    for division, org, org_dir in pkg.orgs:
        entries = per_org.get((division, org), [])
        ids = _public_ids(org_dir / "results", [d["result"] for r, d, _, _ in entries if r is not None], prefix)
        rows, withheld = [], []
        for row, detail, workload, benchmark in entries:
            target = workload if benchmark == "checkpointing" else workload / "run"
            if row is None:  # no ID: a row that never published holds none (kv_rows)
                log.warning(f"reportgen: the row of {detail['result']} is withheld: {detail['withheld']}")
                withheld.append({"result": detail["result"], "why": detail["withheld"]})
                written.append(_write(target / "results.json", json.dumps({"rows": [], **detail}, indent=2, default=str)))
                continue
            row["Public ID"] = detail["public_id"] = ids[detail["result"]]
            written.append(_write(target / "results.json", json.dumps({"rows": [row], **detail}, indent=2, default=str)))
            rows.append(row)
        results = org_dir / "results"
        if results.is_symlink() or (results.exists() and not results.is_dir()):
            raise ConfigurationError(f"{results} is not a directory; reportgen writes the organization's tables there")
        results.mkdir(parents=True, exist_ok=True)
        written.append(_write(results / "results.json", json.dumps({"columns": table.columns(rows), "rows": rows,
                                                                    **({"withheld": withheld} if withheld else {})},
                                                                   indent=2, default=str)))
        written.append(_write(results / "results.csv", table.to_csv(rows)))
        if ids:
            written.append(_write(results / PUBLIC_IDS, json.dumps(ids, indent=2, sort_keys=True)))
        org_parts: list[manifest.Part] = []
        for found in parts.get((division, org), []):
            if isinstance(found, ConfigurationError):
                raise found
            org_parts.append(found)
        written.append(_write(org_dir / "submission.yaml", manifest.text(division, org, org_dir, org_parts)))
    return written


def _shaped(compute: Callable[[], Any], where: Path) -> Any:
    """A table computed from the records, or one line saying a record's shape is wrong (validate
    names the record), never an internal error."""
    try:
        return compute()
    except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as exc:
        raise ConfigurationError(f"cannot compute the tables of {where}: a record has an unexpected shape "
                                 f"({type(exc).__name__}: {exc}); `mlpstorage validate` names it") from None


def _write(path: Path, text: str) -> Path:
    if path.parent.resolve() != path.parent:  # a linked directory would take the write out of the tree
        raise ConfigurationError(f"refusing to write {path}: a symbolic link on its path leads to {path.parent.resolve()}")
    atomic_write_text(path, text if text.endswith("\n") else text + "\n")
    return path
