"""Sections 1 and 2: what a package holds and where (Rules 1.1, 1.2, 2.1.1-2.1.10; the
workload, timestamp and leaf-file rules 2.1.11-2.1.26 and 2.29 are rules_leaves').

2.1.2 (top level) and 2.1.6 (code images) live in rules_common. Every directory listing is
made with lstat: a symbolic link is reported (1.1) and never followed, so the walk cannot
leave the package. A missing or malformed file is a finding about that file, never a crash.

What a leaf records is judged leaf by leaf, what a system's runs share system by system;
what the package holds beside its systems (divisions, submitter directories, systems/) by
the package checks, which read listings and descriptions only.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from mlpstorage_py.checker import judging
from mlpstorage_py.checker.judging import checker_block, families, judged_system, package_of, sanctioned
from mlpstorage_py.checker.registry import LEAF, PACKAGE, SYSTEM, Finding, Rule, not_applicable, rule
from mlpstorage_py.checker.system_drift import description_drift
from mlpstorage_py.checker.system_schema import description_shape
from mlpstorage_py.results.leaf import NAME_PATTERN
from mlpstorage_py.results.tree.files import (
    DIR,
    FILE,
    LINK,
    OTHER,
    child,
    kind_of,
    names,
    read_text,
    real_dir,
    real_file,
    visible,
)
from mlpstorage_py.results.tree.package import DIVISIONS, Leaf, Package, System
from mlpstorage_py.results.tree.values import as_int, as_number, dig
from mlpstorage_py.rules import tables

# reportgen's organization rollup tables sit in results/ (RPT-01).
ROLLUP_FILES = frozenset({"results.json", "results.csv", "public_ids.json"})
MANIFEST = "submission.yaml"
# Rules 1.2: storage-backend variables are those of the Storage-backend table of ManPage.md's
# ENVIRONMENT section (rules/storage_env.yaml): s3dlio's S3DLIO_* variables, listed or not (a run
# that set an unlisted one could not declare it).
STORAGE_BACKEND_PREFIXES = tuple(tables.storage_env()["backend_prefixes"])
FORWARDED = re.compile(r"(?:^|\s)-x\s+([A-Za-z_][A-Za-z0-9_]*)")
# 2.1.4/2.1.8: Hydra's run.dir, at the head of the dlio_config/hydra.yaml every DLIO run writes:
# the rest of the `dir:` line below a `run:` line, its trailing blanks cut by rstrip (a lazy group
# before `\s*$` cost five times as much, on every DLIO leaf).
HYDRA_RUN_DIR = re.compile(r"^\s*run:\s*\n\s+dir:[ \t]*(\S[^\n]*)", re.M)
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


@judging.per_unit  # 1.1, 1.2 and 2.1.9 ask in turn
def judged(leaf: Leaf) -> bool:
    """judging.judged as sections 1 and 2 read a leaf's place: by the directory right under its
    benchmark directory (a vector database's engine, which the edition sanctions, where
    Leaf.model is its index type), and below no dot-named directory at any depth (the listing
    rules report such clutter; its leaves are not judged again)."""
    return (bool(checker_block(leaf)) and leaf.parts[0] in sanctioned(leaf, leaf.benchmark)
            and not leaf.system.startswith(".") and not any(name.startswith(".") for name in leaf.parts))


def _strays(directory: Path, skip: frozenset[str] = frozenset()) -> Iterator[Path]:
    """Every symbolic link and special file (FIFO, socket, device) at or below an entry,
    unfollowed and unopened; directories named in `skip` are not entered."""
    stack = [directory]
    while stack:
        path = stack.pop()
        for name, inner in names(path).items():
            if inner == FILE:
                continue
            entry = child(path, name)
            if inner in (LINK, OTHER):
                yield entry
            elif str(entry) not in skip:
                stack.append(entry)


def _stray_findings(r: Rule, strays: Iterable[Path]) -> Iterator[Finding]:
    """1.1 INVALIDs for links and special files, each named for what it is (a link by its target)."""
    for link in strays:
        if not link.is_symlink():
            yield r.invalid(link, "a special file (FIFO, socket or device): mlpstorage writes none, "
                                  "and the checker does not open it")
            continue
        try:
            target = os.readlink(link)
        except OSError:
            target = "?"
        yield r.invalid(link, f"symbolic link to {target}: mlpstorage writes none, and the checker does not follow it")


HIERARCHY = rule("1.1", "mlpstorageGeneratesHierarchy")


@HIERARCHY.check(LEAF)
def generated_leaf(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """No symlinks; no hand-made files beside submission.yaml; every leaf carries mlpstorage's metadata."""
    if not judged(leaf):
        return
    if not leaf.has("metadata"):
        # 1.1 fails a file mlpstorage did not write; an absent record is not such a file. The
        # rule that requires the metadata (2.1.14, 3.1.1, 4.3.3, LEAF-01, ...) reports it.
        yield r.info(leaf.path, "not checked: no *_metadata.json records what wrote this leaf")
        return
    meta, where = leaf.metadata, leaf.path_of("metadata")
    if meta is None:
        yield r.invalid(where, f"{leaf.problem('metadata')}: mlpstorage writes a readable metadata object")
        return
    many = [n for n in names(leaf.path) if n.endswith("_metadata.json")]
    if len(many) > 1 and leaf.benchmark in ("training", "checkpointing"):
        yield r.invalid(leaf.path, f"{len(many)} *_metadata.json files ({', '.join(many)}): one leaf, one record")
    recorded = meta.get("benchmark_type")
    if recorded is not None and recorded != leaf.benchmark:
        yield r.invalid(where, f"metadata says benchmark_type {recorded!r}, but the leaf is under {leaf.benchmark}/")
    stamp = meta.get("run_datetime")
    if stamp is not None and stamp != leaf.path.name:
        yield r.invalid(where, f"metadata says run_datetime {stamp!r}, but the leaf is named {leaf.path.name}: "
                               "the directory was renamed after mlpstorage wrote it")
    command = meta.get("command")
    if leaf.benchmark == "training" and command is not None and command != leaf.command:
        yield r.invalid(where, f"metadata says command {command!r}, but the leaf is under {leaf.command}/")


@HIERARCHY.check(SYSTEM)
def generated_system(r: Rule, system: System) -> Iterable[Finding]:
    """The links and special files below a system directory."""
    yield from _stray_findings(r, _strays(system.path))


@HIERARCHY.check(PACKAGE)
def generated_package(r: Rule, pkg: Package) -> Iterable[Finding]:
    """The links and special files outside the systems (top-level dot entries excluded), and
    files beside results/ and systems/."""
    systems = frozenset(str(system.path) for system in pkg.systems)
    for _, kind, path in visible(pkg.root):
        if kind in (LINK, OTHER):
            yield from _stray_findings(r, [path])
        elif kind == DIR:
            yield from _stray_findings(r, _strays(path, systems))
    for _division, _org, org_dir in pkg.orgs:
        for name, kind, path in visible(org_dir):
            if kind == FILE and name != MANIFEST:
                yield r.invalid(path, f"{name} beside results/ and systems/ is not written by mlpstorage "
                                      "(only submission.yaml is)")


def _backend_vars(leaf: Leaf) -> set[str]:
    """Storage-backend variables the run's launch forwarded (the launcher forwards only set ones)."""
    meta = leaf.metadata or {}
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


def _declared_text(leaf: Leaf) -> str:
    """Everything the run's configuration records, as text to look a variable's name up in."""
    meta = leaf.metadata or {}
    parts = [json.dumps({k: meta.get(k) for k in ("parameters", "override_parameters", "yaml_params",
                                                  "storage_backend_env", "declared_env")}, default=str)]
    for name in ("config.yaml", "overrides.yaml") if real_dir(leaf.path / "dlio_config") else ():
        text, problem = read_text(leaf.path / "dlio_config" / name)
        if text:
            parts.append(text)
    return "\n".join(parts)


BACKEND_ENV = rule("1.2", "storageBackendEnvVarDeclaration")


@BACKEND_ENV.check(LEAF, benchmark="training", command="run")
def backend_env(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A CLOSED run with a storage-backend variable set must declare it in its configuration."""
    if leaf.division != "closed" or not judged(leaf):
        return
    used = _backend_vars(leaf)
    if not used:
        return
    text = _declared_text(leaf)
    for name in sorted(used):
        if name not in text:
            yield r.invalid(leaf.path_of("metadata"), f"storage-backend variable {name} was set during the run but "
                                                      "is not declared in its configuration (valid only under open)")


BACKEND_ENV.check(LEAF, benchmark="checkpointing")(backend_env)


# --- 2.1 package structure ---------------------------------------------------------------

@rule("2.1.1", "submitterRootDirectory").check(PACKAGE)
def submitter_names(r: Rule, pkg: Package) -> Iterable[Finding]:
    """Submitter directory names use filename-safe characters (blanks and the like become dashes)."""
    if not NAME_PATTERN.match(pkg.root.name):
        yield r.warning(pkg.root, f"top-level directory {pkg.root.name!r} is not a filename-safe submitter "
                                  "name (blanks and other unsafe characters become dashes)")
    for _division, org, org_dir in pkg.orgs:
        if not NAME_PATTERN.match(org):
            yield r.invalid(org_dir, f"submitter directory {org!r} uses characters outside letters, digits and . _ + - "
                                     "(replace blanks and the like with dashes)")


SUBMITTERS = rule("2.1.4", "closedSubmitterDirectory")


@SUBMITTERS.check(PACKAGE)
def submitter_directories(r: Rule, pkg: Package) -> Iterable[Finding]:
    """closed/ and open/ hold one directory per submitter and nothing else."""
    for division in DIVISIONS:
        base = pkg.root / division
        if not real_dir(base):
            continue
        orgs = [n for n, k, _ in visible(base) if k == DIR]
        for name, kind, path in visible(base):
            if kind in (FILE, OTHER):
                yield r.invalid(path, f"{division}/ holds a {kind} {name!r}; only submitter directories belong there")
        if not orgs and not any(k == LINK for _, k, _ in visible(base)):
            yield r.invalid(base, f"{division}/ holds no submitter directory")


@SUBMITTERS.check(LEAF)
def recorded_submitter(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A leaf whose records name another submitter than the directory it is filed under."""
    orgs, _ = _recorded_names(leaf)
    wrong_org = {k: v for k, v in orgs.items() if v != leaf.org}
    if wrong_org:
        shown = ", ".join(f"{v!r} ({k})" for k, v in wrong_org.items())
        yield r.warning(leaf.path, f"the run was recorded for submitter {shown} but is filed under "
                                   f"{leaf.division}/{leaf.org}/")


def _submitter_dirs(r: Rule, pkg: Package, division: str) -> Iterable[Finding]:
    for div, org, org_dir in pkg.orgs:
        if div != division:
            continue
        dirs = {n: k for n, k, _ in visible(org_dir) if k in (DIR, LINK)}
        for required in ("results", "systems"):
            if dirs.get(required) != DIR:
                yield r.invalid(org_dir, f"{division} submitter {org} has no {required}/ directory")
        for name, kind in sorted(dirs.items()):
            if name not in ("results", "systems") and kind == DIR:
                yield r.invalid(org_dir / name, f"unexpected directory {name!r}: a {division} submitter directory "
                                                "holds exactly results/ and systems/")


@rule("2.1.5.a", "requiredSubdirectoriesClosed").check(PACKAGE)
def closed_subdirectories(r: Rule, pkg: Package) -> Iterable[Finding]:
    """A CLOSED submitter directory holds exactly the directories results/ and systems/."""
    yield from _submitter_dirs(r, pkg, "closed")


@rule("2.1.5.b", "requiredSubdirectoriesOpen").check(PACKAGE)
def open_subdirectories(r: Rule, pkg: Package) -> Iterable[Finding]:
    """An OPEN submitter directory holds exactly the directories results/ and systems/."""
    yield from _submitter_dirs(r, pkg, "open")


SYSTEMS_FILES = rule("2.1.7", "systemsDirectoryFiles")


@SYSTEMS_FILES.check(PACKAGE)
def systems_files(r: Rule, pkg: Package) -> Iterable[Finding]:
    """systems/ holds a <name>.yaml and a <name>.pdf per system, Markdown, and nothing else; each
    description has the published shape (system_schema: INVALID where the v3.0 review rejected
    the shape, a WARNING for the schema's other rules)."""
    for division, org, org_dir in pkg.orgs:
        systems = org_dir / "systems"
        if not real_dir(systems):
            continue
        for name, kind, path in visible(systems):
            stem, dot, ext = name.rpartition(".")
            if kind == FILE and dot and ext in ("md", "yaml", "pdf"):
                continue
            if kind != LINK:
                yield r.invalid(path, f"unexpected {kind} {name!r} in systems/ (only <system>.yaml, <system>.pdf and *.md)")
        walked = {s.name for s in pkg.systems if (s.division, s.org) == (division, org)}
        for stem, exts in sorted(_described_stems(systems).items()):
            for missing in sorted({"yaml", "pdf"} - exts):
                yield r.invalid(systems / f"{stem}.{missing}", f"system {stem} has no {stem}.{missing}")
            if stem not in walked:  # a walked system's own files are its system check's
                yield from _description_files(r, pkg, division, org, stem, exts)


@SYSTEMS_FILES.check(SYSTEM)
def system_files(r: Rule, system: System) -> Iterable[Finding]:
    """A system's own description and PDF, checked with the system (its workers parse the
    description anyway), not once more for the whole package."""
    systems = system.path.parent.parent / "systems"
    if real_dir(systems) and not system.name.startswith("."):  # visible() lists no dot-named file
        exts = {ext for ext in ("yaml", "pdf") if kind_of(systems / f"{system.name}.{ext}") == FILE}
        if exts:
            yield from _description_files(r, system.package, system.division, system.org, system.name, exts)


def _described_stems(systems: Path) -> dict[str, set[str]]:
    """{stem: {"yaml", "pdf"} present} of the regular files of systems/."""
    stems: dict[str, set[str]] = {}
    for name, kind, _ in visible(systems):
        stem, dot, ext = name.rpartition(".")
        if kind == FILE and dot and ext in ("yaml", "pdf"):
            stems.setdefault(stem, set()).add(ext)
    return stems


def _description_files(r: Rule, pkg: Package, division: str, org: str, stem: str, exts: set[str]) -> Iterable[Finding]:
    """A described system's <stem>.yaml parses with the published shape; its <stem>.pdf is a PDF."""
    if "yaml" in exts:
        data, problem, path = pkg.system_description(division, org, stem)
        if problem:
            yield r.invalid(path, f"system description does not parse: {problem}")
        else:
            yield from description_shape(r, path)
    if "pdf" in exts:
        pdf = pkg.root / division / org / "systems" / f"{stem}.pdf"
        head, problem = read_text(pdf, 8)
        if problem is None and not (head or "").startswith("%PDF"):
            yield r.invalid(pdf, f"{stem}.pdf is not a PDF document")


RESULTS_SYSTEMS = rule("2.1.8", "resultsDirectorySystems")


@RESULTS_SYSTEMS.check(PACKAGE)
def results_systems(r: Rule, pkg: Package) -> Iterable[Finding]:
    """results/ holds one directory per system, each described by systems/<name>.yaml and .pdf."""
    for _division, _org, org_dir in pkg.orgs:
        results = org_dir / "results"
        if not real_dir(results):
            continue
        if not any(k == DIR for _, k, _ in visible(results)):
            yield r.invalid(results, "results/ holds no system directory")
        for name, kind, path in visible(results):
            if kind in (FILE, OTHER) and name not in ROLLUP_FILES:
                yield r.invalid(path, f"unexpected {kind} {name!r} in results/ (system directories and the "
                                      "organization's results tables only)")


@RESULTS_SYSTEMS.check(SYSTEM)
def described_system(r: Rule, system: System) -> Iterable[Finding]:
    """A system that systems/ does not describe at all (one with one of its two files is
    reported once, by 2.1.7, which names the other)."""
    systems = system.path.parent.parent / "systems"
    if not system.name.startswith(".") and \
            not any(real_file(systems / f"{system.name}.{ext}") for ext in ("yaml", "pdf")):
        yield r.invalid(system.path, f"system {system.name} has neither systems/{system.name}.yaml nor "
                                     f"systems/{system.name}.pdf describing it")


@RESULTS_SYSTEMS.check(LEAF)
def recorded_system(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A leaf whose records name another system than the one it is filed under, or another
    number of client hosts than its description."""
    _, systems = _recorded_names(leaf)
    wrong_system = {k: v for k, v in systems.items() if v != leaf.system}
    if wrong_system:
        shown = ", ".join(f"{v!r} ({k})" for k, v in wrong_system.items())
        yield r.warning(leaf.path, f"the run was recorded as system {shown} but is filed under results/{leaf.system}/: "
                                   "the system name identifies the configuration its results were collected from")
    ran, described = _recorded_client_hosts(leaf), _described_clients(leaf)
    if ran is not None and described is not None and ran != described:
        yield r.warning(leaf.path, f"the run recorded {ran} client host(s) but systems/{leaf.system}.yaml "
                                   f"describes {described} client(s)")


def _written_under(path: Any, leaf: Leaf) -> tuple[str, str] | None:
    """(org, system) of the <division>/<org>/results/<system>/ part of a path a run was written to
    (its names as Path.parts has them, without making a Path: every leaf is asked)."""
    parts = [name for name in path.split("/") if name not in ("", ".")] if isinstance(path, str) else []
    for i in range(len(parts) - 4, -1, -1):
        if parts[i] == leaf.division and parts[i + 2] == "results":
            return parts[i + 1], parts[i + 3]
    return None


def _hydra_head(leaf: Leaf) -> str | None:
    """The head of dlio_config/hydra.yaml. A judged DLIO leaf's whole file is read anyway (2.1.15,
    2.1.20, 2.1.26 parse it), so it is read once, whole, and cut; of any other leaf only the head."""
    if names(leaf.path).get("dlio_config") != DIR:
        return None
    path = child(child(leaf.path, "dlio_config"), "hydra.yaml")
    if leaf.benchmark in ("training", "checkpointing") and judging.judged(leaf):
        text, _ = read_text(path)
        return text[:HYDRA_HEAD] if text is not None else None
    return read_text(path, limit=HYDRA_HEAD)[0]


@judging.per_unit  # 2.1.4 and 2.1.8 ask in turn of each leaf: read once
def _recorded_names(leaf: Leaf) -> tuple[dict[str, str], dict[str, str]]:
    """({source: org}, {source: system}) the run recorded: its metadata's args.systemname and
    result_dir, and Hydra's run.dir in dlio_config/hydra.yaml, which the reference writes for
    every DLIO run, so a leaf published without its metadata still says where it was written."""
    orgs: dict[str, str] = {}
    systems: dict[str, str] = {}
    args = dig(leaf.metadata, "args")
    for key in ("systemname", "system_name"):
        if isinstance(args, dict) and isinstance(args.get(key), str) and args[key].strip():
            systems[f"args.{key}"] = args[key].strip()
            break
    run_dir = HYDRA_RUN_DIR.search(_hydra_head(leaf) or "")
    for source, path in (("result_dir", dig(leaf.metadata, "result_dir")),
                         ("dlio_config/hydra.yaml run.dir", run_dir.group(1).rstrip().strip("'\"") if run_dir else None)):
        named = _written_under(path, leaf)
        if named:
            orgs[source], systems[source] = named
    return orgs, systems


def _recorded_client_hosts(leaf: Leaf) -> int | None:
    """How many client hosts the run recorded: mlpstorage's host survey, else the engine summary."""
    meta, summary = leaf.metadata or {}, leaf.summary or {}
    for value in (meta.get("num_client_hosts"), summary.get("num_hosts"), summary.get("host_count")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _described_clients(leaf: Leaf) -> int | None:
    """The client hosts systems/<system>.yaml describes (the sum of its clients' quantities)."""
    sut, problem, _ = package_of(leaf).system_description(leaf.division, leaf.org, leaf.system)
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


def _host_profiles(leaf: Leaf) -> dict[tuple[str, str], dict[str, Any]]:
    """{(source, hostname): {memory_gib, cpus, os}} as one run recorded its client hosts."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    summary = leaf.summary or {}
    memory, cpus, host = summary.get("host_memory_GB"), summary.get("host_cpu_count"), summary.get("hostname")
    if isinstance(host, str) and isinstance(memory, list) and len(memory) == 1 and as_int(summary.get("num_hosts")) in (None, 1):
        found[("summary.json", host)] = {"memory_gib": as_number(memory[0]),
                                         "cpus": as_int(cpus[0]) if isinstance(cpus, list) and len(cpus) == 1 else None}
    meta = leaf.metadata or {}
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


# The phases whose runs 2.1.9 compares: each measures the client hosts.
COMPARED = {"training": ("run", "datasize", "datagen"), "checkpointing": ("run",)}


@rule("2.1.9", "identicalSystemConfig").check(SYSTEM)
def identical_system(r: Rule, system: System) -> Iterable[Finding]:
    """Every run under one system name records the same client hosts (memory, cores, OS), and the ones its description states."""
    yield from description_drift(r, system)
    leaves = [leaf for leaf in system.leaves if leaf.command in COMPARED.get(leaf.benchmark, ()) and judged(leaf)]
    first: dict[tuple[str, str], tuple[Leaf, dict[str, Any]]] = {}
    for leaf in sorted(leaves, key=lambda found: (found.path.name, str(found.path))):
        for key, profile in sorted(_host_profiles(leaf).items()):
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
                    yield r.invalid(leaf.path, f"host {host} ({source}) has {label} {shown(b)} here but "
                                               f"{shown(a)} in {system.package.relative(seen_leaf.path)}: a changed "
                                               f"configuration belongs under a new system name")


@rule("2.1.10", "workloadCategories").check(SYSTEM)
def workload_categories(r: Rule, system: System) -> Iterable[Finding]:
    """A system directory holds only benchmark directories the edition sanctions (training, checkpointing, ...)."""
    if judged_system(system):
        yield from only_sanctioned(r, system.path, sorted(families(system)),
                                   f"system directory {system.name} holds no benchmark directory")


def only_sanctioned(r: Rule, directory: Path, allowed: list[str], empty: str, inside: str = "") -> Iterable[Finding]:
    """A directory of a judged system holds some directory and only those in `allowed` (links are
    1.1's): shared by 2.1.10 (benchmark directories) and 2.1.11/2.1.21 (workload directories)."""
    content = visible(directory)
    if not [n for n, k, _ in content if k == DIR]:
        yield r.invalid(directory, empty)
    for name, ekind, path in content:
        if ekind == LINK:
            continue
        if ekind != DIR or name not in allowed:
            yield r.invalid(path, f"unexpected {ekind} {name!r}{inside} (allowed: {', '.join(allowed)})")
