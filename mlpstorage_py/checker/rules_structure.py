"""Sections 1 and 2: what a package holds and where (Rules 1.1, 1.2, 2.1.1-2.1.10; the
workload, timestamp and leaf-file rules 2.1.11-2.1.26 and 2.29 are rules_leaves').

2.1.2 (top level) and 2.1.6 (code images) live in rules_common. Every directory listing is
made with lstat: a symbolic link is reported (1.1) and never followed, so the walk cannot
leave the package. A missing or malformed file is a finding about that file, never a crash.

Listing and reading are files.py's, made once per validation. The shared helpers (leaf
records, timestamps, the edition a submission is judged under) are structure_helpers', used by
the section 4-6 rules as well.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

from mlpstorage_py.results.tree.files import DIR, FILE, LINK, OTHER, child, names, read_text, real_dir, real_file, visible
from mlpstorage_py.results.tree.package import DIVISIONS, Leaf, Package
from mlpstorage_py.checker.registry import INFO, INVALID, WARNING, Finding, finding, not_applicable, rule
from mlpstorage_py.checker.system_drift import description_drift
from mlpstorage_py.checker.system_schema import description_shape
from mlpstorage_py.checker.structure_helpers import (
    LeafRecord, as_int, as_number, checker_of, checkpointing_leaves, dig, record, sanctioned, system_description,
    timestamp_dirs, training_leaves, workloads)
from mlpstorage_py.results.leaf import NAME_PATTERN
from mlpstorage_py.rules import tables

DIVISION_FAMILIES = ("training", "checkpointing", "vector_database", "kv_cache")
# reportgen's organization rollup tables sit in results/ (RPT-01).
ROLLUP_FILES = frozenset({"results.json", "results.csv", "public_ids.json"})
MANIFEST = "submission.yaml"
# Rules 1.2: storage-backend variables are those of the Storage-backend table of ManPage.md's
# ENVIRONMENT section (rules/storage_env.yaml): s3dlio's S3DLIO_* variables, listed or not (a run
# that set an unlisted one could not declare it).
STORAGE_BACKEND_PREFIXES = tuple(tables.storage_env()["backend_prefixes"])
FORWARDED = re.compile(r"(?:^|\s)-x\s+([A-Za-z_][A-Za-z0-9_]*)")
# 2.1.4/2.1.8: Hydra's run.dir, at the head of the dlio_config/hydra.yaml every DLIO run writes.
HYDRA_RUN_DIR = re.compile(r"^\s*run:\s*\n\s+dir:[ \t]*(\S[^\n]*?)\s*$", re.M)
HYDRA_HEAD = 4096
# 2.1.9: the same client host measured in two runs may differ by rounding, not by a part.
MEMORY_TOLERANCE = 0.01


# --- 1. Introduction ---------------------------------------------------------------------

not_applicable("1.3", "defines run, result and submission; the run counts it records are checked by "
                      "2.1.17, 2.1.23, 5.3.1 and 6.3")
not_applicable("2.1.3", "states that closed/ and open/ are each optional and built by the same rules, "
                        "which every rule applies to both")
not_applicable("2.1.5", "a heading: its two cases are checked as 2.1.5.a (closed) and 2.1.5.b (open)")
not_applicable("2.1.18a", "grants permission to delete runs; the 6 that remain are checked by 2.1.17 and 2.1.18")
not_applicable("2.1.24a", "grants permission to delete runs; what remains is checked by 2.1.23 and 2.1.24")
not_applicable("2.1.27", "a picture of the hierarchy the other 2.1.x rules state")


def _symlinks(pkg: Package) -> Iterator[Path]:
    """Every symbolic link and special file (FIFO, socket, device) below the package root
    (top-level dot entries excluded), unfollowed and unopened: in a part of the package, below
    its systems, and in the part that opens it, everywhere else."""
    systems = pkg.whole.system_keys if pkg.whole is not None else frozenset()
    stack = [(path, kind) for _, kind, path in visible(pkg.root)] if pkg.opens else []
    if systems:  # each part walks its systems (their subtrees come out whole, in the same order)
        stack = [(d, DIR) for d, _ in reversed(pkg.system_dirs)] + stack
    while stack:
        path, kind = stack.pop()
        if kind in (LINK, OTHER):
            yield path
        elif kind == DIR:
            for name, inner in names(path).items():
                if inner == FILE:
                    continue
                entry = child(path, name)
                if not (systems and inner == DIR and str(entry) in systems):
                    stack.append((entry, inner))


def _leaf_dirs(pkg: Package) -> Iterator[tuple[str, Path]]:
    """(family, timestamp directory) of every real leaf of the judged submissions."""
    for family in DIVISION_FAMILIES:
        for wl in workloads(pkg, family):
            if family == "checkpointing":
                for leaf in timestamp_dirs(wl.path):
                    yield family, leaf
            elif family == "vector_database":
                for index, kind, index_dir in visible(wl.path):
                    for phase, pkind, phase_dir in visible(index_dir) if kind == DIR else []:
                        for leaf in timestamp_dirs(phase_dir) if pkind == DIR else []:
                            yield family, leaf
            else:
                for phase, kind, phase_dir in visible(wl.path):
                    for leaf in timestamp_dirs(phase_dir) if kind == DIR else []:
                        yield family, leaf


@rule("1.1", "mlpstorageGeneratesHierarchy", parts=True)
def generated_hierarchy(pkg: Package) -> Iterable[Finding]:
    """No symlinks; no hand-made files beside submission.yaml; every leaf carries mlpstorage's metadata."""
    for link in _symlinks(pkg):
        if not link.is_symlink():
            yield finding("1.1", INVALID, link, "a special file (FIFO, socket or device): mlpstorage writes none, "
                                                "and the checker does not open it")
            continue
        try:
            target = os.readlink(link)
        except OSError:
            target = "?"
        yield finding("1.1", INVALID, link, f"symbolic link to {target}: mlpstorage writes none, and the checker does not follow it")
    for division, org, org_dir in pkg.orgs if pkg.opens else ():
        for name, kind, path in visible(org_dir):
            if kind == FILE and name != MANIFEST:
                yield finding("1.1", INVALID, path, f"{name} beside results/ and systems/ is not written by mlpstorage "
                                                   "(only submission.yaml is)")
    for family, leaf in _leaf_dirs(pkg):
        rec = record(pkg, leaf)
        if rec.meta is None and rec.meta_problem == "no *_metadata.json":
            # 1.1 fails a file mlpstorage did not write; an absent record is not such a file. The
            # rule that requires the metadata (2.1.14, 3.1.1, 4.3.3, LEAF-01, ...) reports it.
            yield finding("1.1", INFO, leaf, "not checked: no *_metadata.json records what wrote this leaf")
            continue
        if rec.meta is None:
            yield finding("1.1", INVALID, rec.meta_path, f"{rec.meta_problem}: mlpstorage writes a readable metadata object")
            continue
        many = [n for n in names(leaf) if n.endswith("_metadata.json")]
        if len(many) > 1 and family in ("training", "checkpointing"):
            yield finding("1.1", INVALID, leaf, f"{len(many)} *_metadata.json files ({', '.join(many)}): one leaf, one record")
        recorded = rec.meta.get("benchmark_type")
        if recorded is not None and recorded != family:
            yield finding("1.1", INVALID, rec.meta_path, f"metadata says benchmark_type {recorded!r}, but the leaf is under {family}/")
        stamp = rec.meta.get("run_datetime")
        if stamp is not None and stamp != leaf.name:
            yield finding("1.1", INVALID, rec.meta_path, f"metadata says run_datetime {stamp!r}, but the leaf is named {leaf.name}: "
                                                         "the directory was renamed after mlpstorage wrote it")
        command = rec.meta.get("command")
        phase = leaf.parent.name
        if family == "training" and command is not None and command != phase:
            yield finding("1.1", INVALID, rec.meta_path, f"metadata says command {command!r}, but the leaf is under {phase}/")


def _backend_vars(rec: LeafRecord) -> set[str]:
    """Storage-backend variables the run's launch forwarded (the launcher forwards only set ones)."""
    meta = rec.meta or {}
    found: set[str] = set()
    commands = [meta.get("executed_command")]
    argv = meta.get("executed_argv")
    if isinstance(argv, list):
        for item in argv:
            if isinstance(item, list):
                commands.append(" ".join(str(a) for a in item))
            elif isinstance(item, str):
                commands.append(item)
    for text in commands:
        if isinstance(text, str):
            found.update(FORWARDED.findall(text))
    env = meta.get("environment")
    if isinstance(env, dict):
        found.update(str(k) for k in env)
    elif isinstance(env, list):
        found.update(str(e.get("name")) if isinstance(e, dict) else str(e).split("=")[0] for e in env)
    return {name for name in found if name.startswith(STORAGE_BACKEND_PREFIXES)}


def _declared_text(rec: LeafRecord) -> str:
    """Everything the run's configuration records, as text to look a variable's name up in."""
    meta = rec.meta or {}
    parts = [json.dumps({k: meta.get(k) for k in ("parameters", "override_parameters", "yaml_params",
                                                  "storage_backend_env", "declared_env")}, default=str)]
    for name in ("config.yaml", "overrides.yaml") if real_dir(rec.path / "dlio_config") else ():
        text, problem = read_text(rec.path / "dlio_config" / name)
        if text:
            parts.append(text)
    return "\n".join(parts)


@rule("1.2", "storageBackendEnvVarDeclaration", parts=True)
def backend_env(pkg: Package) -> Iterable[Finding]:
    """A CLOSED run with a storage-backend variable set must declare it in its configuration."""
    for family in ("training", "checkpointing"):
        for wl in workloads(pkg, family):
            if wl.division != "closed":
                continue
            leaves = timestamp_dirs(wl.path) if family == "checkpointing" else timestamp_dirs(wl.path / "run")
            for leaf in leaves:
                rec = record(pkg, leaf)
                used = _backend_vars(rec)
                if not used:
                    continue
                text = _declared_text(rec)
                for name in sorted(used):
                    if name not in text:
                        yield finding("1.2", INVALID, rec.meta_path, f"storage-backend variable {name} was set during the run but "
                                                                     "is not declared in its configuration (valid only under open)")


# --- 2.1 package structure ---------------------------------------------------------------

@rule("2.1.1", "submitterRootDirectory")
def submitter_names(pkg: Package) -> Iterable[Finding]:
    """Submitter directory names use filename-safe characters (blanks and the like become dashes)."""
    if not NAME_PATTERN.match(pkg.root.name):
        yield finding("2.1.1", WARNING, pkg.root, f"top-level directory {pkg.root.name!r} is not a filename-safe submitter "
                                                  "name (blanks and other unsafe characters become dashes)")
    for division, org, org_dir in pkg.orgs:
        if not NAME_PATTERN.match(org):
            yield finding("2.1.1", INVALID, org_dir, f"submitter directory {org!r} uses characters outside letters, digits and . _ + - "
                                                     "(replace blanks and the like with dashes)")


@rule("2.1.4", "closedSubmitterDirectory", parts=True)
def submitter_directories(pkg: Package) -> Iterable[Finding]:
    """closed/ and open/ hold one directory per submitter and nothing else."""
    for division in DIVISIONS if pkg.opens else ():
        base = pkg.root / division
        if not real_dir(base):
            continue
        orgs = [n for n, k, _ in visible(base) if k == DIR]
        for name, kind, path in visible(base):
            if kind in (FILE, OTHER):
                yield finding("2.1.4", INVALID, path, f"{division}/ holds a {kind} {name!r}; only submitter directories belong there")
        if not orgs and not any(k == LINK for _, k, _ in visible(base)):
            yield finding("2.1.4", INVALID, base, f"{division}/ holds no submitter directory")
    for number, leaf, message in recorded_filing(pkg):
        if number == "2.1.4":
            yield finding("2.1.4", WARNING, leaf, message)


def _submitter_dirs(pkg: Package, division: str, number: str) -> Iterable[Finding]:
    for div, org, org_dir in pkg.orgs:
        if div != division:
            continue
        dirs = {n: k for n, k, _ in visible(org_dir) if k in (DIR, LINK)}
        for required in ("results", "systems"):
            if dirs.get(required) != DIR:
                yield finding(number, INVALID, org_dir, f"{division} submitter {org} has no {required}/ directory")
        for name, kind in sorted(dirs.items()):
            if name not in ("results", "systems") and kind == DIR:
                yield finding(number, INVALID, org_dir / name, f"unexpected directory {name!r}: a {division} submitter directory "
                                                               "holds exactly results/ and systems/")


@rule("2.1.5.a", "requiredSubdirectoriesClosed")
def closed_subdirectories(pkg: Package) -> Iterable[Finding]:
    """A CLOSED submitter directory holds exactly the directories results/ and systems/."""
    yield from _submitter_dirs(pkg, "closed", "2.1.5.a")


@rule("2.1.5.b", "requiredSubdirectoriesOpen")
def open_subdirectories(pkg: Package) -> Iterable[Finding]:
    """An OPEN submitter directory holds exactly the directories results/ and systems/."""
    yield from _submitter_dirs(pkg, "open", "2.1.5.b")


@rule("2.1.7", "systemsDirectoryFiles")
def systems_files(pkg: Package) -> Iterable[Finding]:
    """systems/ holds a <name>.yaml and a <name>.pdf per system, Markdown, and nothing else; each
    description has the published shape (system_schema)."""
    for division, org, org_dir in pkg.orgs:
        systems = org_dir / "systems"
        if not real_dir(systems):
            continue
        stems: dict[str, set[str]] = {}
        for name, kind, path in visible(systems):
            stem, dot, ext = name.rpartition(".")
            if kind == FILE and dot and ext == "md":
                continue
            if kind == FILE and dot and ext in ("yaml", "pdf"):
                stems.setdefault(stem, set()).add(ext)
                continue
            if kind != LINK:
                yield finding("2.1.7", INVALID, path, f"unexpected {kind} {name!r} in systems/ (only <system>.yaml, <system>.pdf and *.md)")
        for stem, exts in sorted(stems.items()):
            for missing in sorted({"yaml", "pdf"} - exts):
                yield finding("2.1.7", INVALID, systems / f"{stem}.{missing}", f"system {stem} has no {stem}.{missing}")
            if "yaml" in exts:
                data, problem, path = system_description(pkg, division, org, stem)
                if problem:
                    yield finding("2.1.7", INVALID, path, f"system description does not parse: {problem}")
                else:
                    yield from description_shape(path)
            if "pdf" in exts:
                head, problem = read_text(systems / f"{stem}.pdf", 8)
                if problem is None and not head.startswith("%PDF"):
                    yield finding("2.1.7", INVALID, systems / f"{stem}.pdf", f"{stem}.pdf is not a PDF document")


@rule("2.1.8", "resultsDirectorySystems", parts=True)
def results_systems(pkg: Package) -> Iterable[Finding]:
    """results/ holds one directory per system, each described by systems/<name>.yaml and .pdf."""
    for division, org, org_dir in pkg.orgs if pkg.opens else ():
        results = org_dir / "results"
        if not real_dir(results):
            continue
        systems = [(n, p) for n, k, p in visible(results) if k == DIR]
        if not systems:
            yield finding("2.1.8", INVALID, results, "results/ holds no system directory")
        for name, kind, path in visible(results):
            if kind in (FILE, OTHER) and name not in ROLLUP_FILES:
                yield finding("2.1.8", INVALID, path, f"unexpected {kind} {name!r} in results/ (system directories and the "
                                                      "organization's results tables only)")
        for name, path in systems:
            # A system with one of its two files is reported once, by 2.1.7 (which names the other);
            # here only a system that systems/ does not describe at all.
            if not any(real_file(org_dir / "systems" / f"{name}.{ext}") for ext in ("yaml", "pdf")):
                yield finding("2.1.8", INVALID, path, f"system {name} has neither systems/{name}.yaml nor systems/{name}.pdf describing it")
    for number, leaf, message in recorded_filing(pkg):
        if number == "2.1.8":
            yield finding("2.1.8", WARNING, leaf, message)


def _written_under(path: Any, leaf: Leaf) -> tuple[str, str] | None:
    """(org, system) of the <division>/<org>/results/<system>/ part of a path a run was written to."""
    parts = Path(path).parts if isinstance(path, str) else ()
    for i in range(len(parts) - 4, -1, -1):
        if parts[i] == leaf.division and parts[i + 2] == "results":
            return parts[i + 1], parts[i + 3]
    return None


def _recorded_names(leaf: Leaf, rec: LeafRecord) -> tuple[dict[str, str], dict[str, str]]:
    """({source: org}, {source: system}) the run recorded: its metadata's args.systemname and
    result_dir, and Hydra's run.dir in dlio_config/hydra.yaml, which the reference writes for
    every DLIO run, so a leaf published without its metadata still says where it was written."""
    orgs: dict[str, str] = {}
    systems: dict[str, str] = {}
    args = dig(rec.meta, "args")
    for key in ("systemname", "system_name"):
        if isinstance(args, dict) and isinstance(args.get(key), str) and args[key].strip():
            systems[f"args.{key}"] = args[key].strip()
            break
    head, _ = read_text(leaf.path / "dlio_config" / "hydra.yaml", limit=HYDRA_HEAD) \
        if real_dir(leaf.path / "dlio_config") else (None, None)
    run_dir = HYDRA_RUN_DIR.search(head or "")
    for source, path in (("result_dir", dig(rec.meta, "result_dir")),
                         ("dlio_config/hydra.yaml run.dir", run_dir.group(1).strip("'\"") if run_dir else None)):
        named = _written_under(path, leaf)
        if named:
            orgs[source], systems[source] = named
    return orgs, systems


def recorded_filing(pkg: Package) -> list[tuple[str, Path, str]]:
    """(rule, leaf, message) for every leaf whose records name another submitter or system than
    the directories it is filed under (_recorded_names). Computed once per validation."""
    cache = vars(pkg)
    if "_filing" in cache:
        return cache["_filing"]
    found: list[tuple[str, Path, str]] = []
    for leaf in pkg.leaves:
        rec = record(pkg, leaf.path)
        orgs, systems = _recorded_names(leaf, rec)
        wrong_org = {k: v for k, v in orgs.items() if v != leaf.org}
        if wrong_org:
            shown = ", ".join(f"{v!r} ({k})" for k, v in wrong_org.items())
            found.append(("2.1.4", leaf.path, f"the run was recorded for submitter {shown} but is filed under "
                                              f"{leaf.division}/{leaf.org}/"))
        wrong_system = {k: v for k, v in systems.items() if v != leaf.system}
        if wrong_system:
            shown = ", ".join(f"{v!r} ({k})" for k, v in wrong_system.items())
            found.append(("2.1.8", leaf.path, f"the run was recorded as system {shown} but is filed under results/{leaf.system}/: "
                                              "the system name identifies the configuration its results were collected from"))
        ran, described = _recorded_client_hosts(rec), _described_clients(pkg, leaf)
        if ran is not None and described is not None and ran != described:
            found.append(("2.1.8", leaf.path, f"the run recorded {ran} client host(s) but systems/{leaf.system}.yaml "
                                              f"describes {described} client(s)"))
    cache["_filing"] = found
    return found


def _recorded_client_hosts(rec: LeafRecord) -> int | None:
    """How many client hosts the run recorded: mlpstorage's host survey, else the engine summary."""
    meta = rec.meta if isinstance(rec.meta, dict) else {}
    summary = rec.summary if isinstance(rec.summary, dict) else {}
    for value in (meta.get("num_client_hosts"), summary.get("num_hosts"), summary.get("host_count")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _described_clients(pkg: Package, leaf: Leaf) -> int | None:
    """The client hosts systems/<system>.yaml describes (the sum of its clients' quantities)."""
    sut, problem, _ = system_description(pkg, leaf.division, leaf.org, leaf.system)
    clients = dig(sut, "clients") if problem is None else None
    if not isinstance(clients, list) or not clients:
        return None
    total = 0
    for client in clients:
        quantity = dig(client, "quantity")
        if isinstance(quantity, str) and quantity.strip().isdigit():
            quantity = int(quantity)
        if not isinstance(quantity, int) or isinstance(quantity, bool):
            return None
        total += quantity
    return total


def _host_profiles(rec: LeafRecord) -> dict[tuple[str, str], dict[str, Any]]:
    """{(source, hostname): {memory_gib, cpus, os}} as one run recorded its client hosts."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    summary = rec.summary or {}
    memory, cpus, host = summary.get("host_memory_GB"), summary.get("host_cpu_count"), summary.get("hostname")
    if isinstance(host, str) and isinstance(memory, list) and len(memory) == 1 and as_int(summary.get("num_hosts")) in (None, 1):
        found[("summary.json", host)] = {"memory_gib": as_number(memory[0]),
                                         "cpus": as_int(cpus[0]) if isinstance(cpus, list) and len(cpus) == 1 else None}
    meta = rec.meta or {}
    for block_name in ("cluster_information", "system_info"):
        block = meta.get(block_name)
        hosts = dig(block, "hosts")
        items = [h for h in hosts if isinstance(h, dict)] if isinstance(hosts, list) else []
        if isinstance(block, dict) and isinstance(block.get("hostname"), str):
            items.append(block)
        for item in items:
            name = item.get("hostname")
            if not isinstance(name, str):
                continue
            total = item.get("memory_total_bytes", dig(item, "memory", "total"))
            total = as_number(total)
            found[(block_name, name)] = {"memory_gib": total / 2 ** 30 if total else None,
                                         "cpus": as_int(item.get("cpu_count")), "os": item.get("os")}
    return found


@rule("2.1.9", "identicalSystemConfig", parts=True)
def identical_system(pkg: Package) -> Iterable[Finding]:
    """Every run under one system name records the same client hosts (memory, cores, OS), and the ones its description states."""
    yield from description_drift(pkg)
    by_system: dict[tuple[str, str, str], list[Path]] = {}
    for family in ("training", "checkpointing"):
        leaves = training_leaves(pkg, "run") if family == "training" else checkpointing_leaves(pkg)
        for wl, leaf in leaves:
            by_system.setdefault((wl.division, wl.org, wl.system), []).append(leaf)
        if family == "training":
            for phase in ("datasize", "datagen"):
                for wl, leaf in training_leaves(pkg, phase):
                    by_system.setdefault((wl.division, wl.org, wl.system), []).append(leaf)
    for (division, org, system), leaves in sorted(by_system.items()):
        first: dict[tuple[str, str], tuple[Path, dict]] = {}
        for leaf in sorted(leaves, key=lambda p: (p.name, str(p))):
            for key, profile in sorted(_host_profiles(record(pkg, leaf)).items()):
                if key not in first:
                    first[key] = (leaf, profile)
                    continue
                seen_leaf, seen = first[key]
                source, host = key
                for field, label in (("memory_gib", "memory"), ("cpus", "CPU count"), ("os", "operating system")):
                    a, b = seen.get(field), profile.get(field)
                    if a is None or b is None:
                        continue
                    differs = abs(a - b) > MEMORY_TOLERANCE * max(a, b) if field == "memory_gib" else a != b
                    if differs:
                        shown = (lambda v: f"{v:.1f} GiB") if field == "memory_gib" else repr
                        yield finding("2.1.9", INVALID, leaf, f"host {host} ({source}) has {label} {shown(b)} here but "
                                                              f"{shown(a)} in {seen_leaf.relative_to(pkg.root)}: a changed "
                                                              f"configuration belongs under a new system name")


@rule("2.1.10", "workloadCategories")
def workload_categories(pkg: Package) -> Iterable[Finding]:
    """A system directory holds only benchmark directories the edition sanctions (training, checkpointing, ...)."""
    for division, org, org_dir in pkg.orgs:
        if not checker_of(pkg, division, org):
            continue
        allowed = sorted(sanctioned(pkg, division, org))
        for system, kind, system_dir in visible(org_dir / "results"):
            if kind != DIR:
                continue
            content = visible(system_dir)
            if not [n for n, k, _ in content if k == DIR]:
                yield finding("2.1.10", INVALID, system_dir, f"system directory {system} holds no benchmark directory")
            for name, ekind, path in content:
                if ekind == LINK:
                    continue
                if ekind != DIR or name not in allowed:
                    yield finding("2.1.10", INVALID, path, f"unexpected {ekind} {name!r} (allowed: {', '.join(allowed)})")
