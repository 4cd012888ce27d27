"""Sections 1 and 2: what a package holds and where (Rules 1.1, 1.2, 2.1.1-2.1.27, 2.29).

2.1.2 (top level) and 2.1.6 (code images) live in rules_common. Every directory listing is
made with lstat: a symbolic link is reported (1.1) and never followed, so the walk cannot
leave the package. A missing or malformed file is a finding about that file, never a crash.

Listing and reading are files.py's, made once per validation. The helpers at the top (leaf
records, timestamps, the edition a submission is judged under) are shared with the section 4-6
rules.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator

from mlpstorage_py.checker.files import (
    DIR, FILE, LINK, MAPPING, OTHER, SEQUENCE, entries, kind_of, load_json, load_yaml, read_text, real_dir, real_file,
    visible, yaml_shape)
from mlpstorage_py.checker.package import DIVISIONS, Leaf, Package
from mlpstorage_py.checker.registry import INFO, INVALID, WARNING, Finding, finding, not_applicable, rule
from mlpstorage_py.results.leaf import DATETIME_FORMAT, NAME_PATTERN
from mlpstorage_py.rules import tables

TIMESTAMP = re.compile(r"^\d{8}_\d{6}$")
PHASES = ("datasize", "datagen", "run")
DIVISION_FAMILIES = ("training", "checkpointing", "vector_database", "kv_cache")
# reportgen's identity/result tables may sit beside the timestamp directories of a phase or
# checkpointing workload directory; the organization rollup sits in results/ (RPT-01).
PHASE_TABLES = frozenset({"results.json", "results.csv"})
ROLLUP_FILES = frozenset({"results.json", "results.csv", "public_ids.json"})
MANIFEST = "submission.yaml"
LOG_READ_LIMIT = 1 << 16
# A log record carries a date-time; an empty, pruned or placeholder dlio.log has none (2.29).
LOG_RECORD = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}")
# Rules 1.2: storage-backend variables are those of the Storage-backend table of ManPage.md's
# ENVIRONMENT section (rules/storage_env.yaml): s3dlio's S3DLIO_* variables, listed or not (a run
# that set an unlisted one could not declare it).
STORAGE_BACKEND_PREFIXES = tuple(tables.storage_env()["backend_prefixes"])
FORWARDED = re.compile(r"(?:^|\s)-x\s+([A-Za-z_][A-Za-z0-9_]*)")
# 2.1.9: the same client host measured in two runs may differ by rounding, not by a part.
MEMORY_TOLERANCE = 0.01


# --- names and values --------------------------------------------------------------------

@functools.cache
def leaf_time(name: str) -> datetime | None:
    """The local date-time a timestamp directory's name states, or None when it is not one
    (remembered: every rule that orders runs asks about every leaf)."""
    if not TIMESTAMP.match(name):
        return None
    try:
        return datetime.strptime(name, DATETIME_FORMAT)
    except ValueError:
        return None


def dig(data: Any, *keys: str) -> Any:
    """data[k1][k2]...; None as soon as a level is missing or not a mapping."""
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        return int(value)
    return None


def as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def parse_time(value: Any) -> datetime | None:
    """An ISO-8601 string (naive = the host's local time, or with Z/offset) or epoch seconds."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            return datetime.fromtimestamp(float(value), tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str) and value.strip():
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            return None
    return None


# --- the leaf as recorded ------------------------------------------------------------------

class LeafRecord:
    """A timestamp directory's own records, each read once and safely."""

    def __init__(self, path: Path):
        self.path = path

    @functools.cached_property
    def listing(self) -> list[tuple[str, str, Path]]:
        return entries(self.path)

    def _one(self, matches) -> tuple[Any, str | None, Path | None]:
        files = [(n, k, p) for n, k, p in self.listing if matches(n)]
        if not files:
            return None, "missing", None
        name, kind, path = files[0]
        if kind != FILE:
            return None, f"{name} is a {kind}, not a file", path
        data, problem = load_json(path)
        if problem:
            return None, problem, path
        if not isinstance(data, dict):
            return None, f"{name} is not a JSON object", path
        return data, None, path

    @functools.cached_property
    def _metadata(self):
        return self._one(lambda n: n.endswith("_metadata.json") or n == "metadata.json")

    @functools.cached_property
    def _summary(self):
        return self._one(lambda n: n.endswith("summary.json"))

    @functools.cached_property
    def _fs_separation(self):
        return self._one(lambda n: n == "fs_separation.json")

    @property
    def meta(self) -> dict | None:
        return self._metadata[0]

    @property
    def meta_problem(self) -> str | None:
        data, problem, _ = self._metadata
        return None if data is not None else ("no *_metadata.json" if problem == "missing" else problem)

    @property
    def meta_path(self) -> Path:
        return self._metadata[2] or self.path

    @property
    def summary(self) -> dict | None:
        return self._summary[0]

    @property
    def summary_problem(self) -> str | None:
        data, problem, _ = self._summary
        return None if data is not None else ("no *summary.json" if problem == "missing" else problem)

    @property
    def summary_path(self) -> Path:
        return self._summary[2] or self.path

    @property
    def fs_separation(self) -> tuple[dict | None, str | None]:
        data, problem, _ = self._fs_separation
        return data, problem

    @functools.cached_property
    def workload_config(self) -> dict | None:
        """dlio_config/config.yaml's workload block: the configuration the engine actually ran."""
        path = self.path / "dlio_config" / "config.yaml"
        if not real_dir(self.path / "dlio_config"):
            return None
        data, problem = load_yaml(path)
        workload = dig(data, "workload") if not problem else None
        return workload if isinstance(workload, dict) else None

    @property
    def args(self) -> dict:
        value = dig(self.meta, "args")
        return value if isinstance(value, dict) else {}

    @property
    def parameters(self) -> dict:
        value = dig(self.meta, "parameters")
        return value if isinstance(value, dict) else {}

    @functools.cached_property
    def name_time(self) -> datetime | None:
        return leaf_time(self.path.name)

    def aware_start_times(self) -> list[datetime]:
        """Timezone-aware instants recorded at the start of the invocation."""
        fs_record, _ = self.fs_separation
        candidates = [dig(self.meta, "invocation_start_time"), dig(fs_record, "probed_at"),
                      dig(self.meta, "cluster_snapshots", "start", "collection_timestamp"),
                      dig(self.meta, "system_info", "collection_timestamp")]
        found = [parse_time(c) for c in candidates]
        return [t for t in found if t is not None and t.tzinfo is not None]

    @functools.cached_property
    def utc_offset(self) -> timedelta | None:
        """The host's UTC offset, from the (local) leaf name against an aware start instant."""
        if self.name_time is None:
            return None
        quarter = timedelta(minutes=15)
        for instant in self.aware_start_times():
            delta = self.name_time - instant.astimezone(timezone.utc).replace(tzinfo=None)
            offset = round(delta / quarter) * quarter
            if abs(delta - offset) <= timedelta(minutes=5) and abs(offset) <= timedelta(hours=14):
                return offset
        return None

    def to_utc(self, value: datetime | None, fallback_offset: timedelta | None = None) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is not None:
            return value.astimezone(timezone.utc)
        offset = self.utc_offset if self.utc_offset is not None else fallback_offset
        return None if offset is None else (value - offset).replace(tzinfo=timezone.utc)

    def to_local(self, value: datetime | None) -> datetime | None:
        """A naive local date-time comparable with leaf names, or None."""
        if value is None or value.tzinfo is None:
            return value
        if self.utc_offset is None:
            return None
        return value.astimezone(timezone.utc).replace(tzinfo=None) + self.utc_offset

    def summary_time(self, which: str) -> datetime | None:
        """'start' or 'end' of the benchmark as its summary records it (DLIO: naive local)."""
        summary = self.summary or {}
        return parse_time(summary.get(which, summary.get(f"{which}_time")))

    @functools.cached_property
    def end_local(self) -> datetime | None:
        """When the invocation ended, on the clock of the leaf names."""
        end = self.to_local(self.summary_time("end"))
        if end is not None:
            return end
        runtime = as_number(dig(self.meta, "runtime"))
        if self.name_time is not None and runtime is not None and runtime >= 0:
            return self.name_time + timedelta(seconds=runtime)
        start, stop = parse_time(dig(self.meta, "invocation_start_time")), parse_time(dig(self.meta, "invocation_end_time"))
        if self.name_time is not None and start is not None and stop is not None and \
                (start.tzinfo is None) == (stop.tzinfo is None):
            return self.name_time + (stop - start)
        return None


def records(pkg: Package) -> dict[Path, LeafRecord]:
    """One LeafRecord per path, shared by every rule of this validation."""
    return vars(pkg).setdefault("_leaf_records", {})


def record(pkg: Package, path: Path) -> LeafRecord:
    cache = records(pkg)
    if path not in cache:
        cache[path] = LeafRecord(path)
    return cache[path]


# --- which edition judges a submission -----------------------------------------------------

def edition_of(pkg: Package, division: str, org: str) -> str:
    """The edition a submission declares in submission.yaml, else the current edition."""
    cache = vars(pkg).setdefault("_editions", {})
    if (division, org) not in cache:
        known = tables.editions()["editions"]
        chosen = tables.editions()["current_edition"]
        found = pkg.manifest(division, org)
        if found and isinstance(found[1], dict) and str(found[1].get("rules_edition")) in known:
            chosen = str(found[1].get("rules_edition"))
        cache[(division, org)] = chosen
    return cache[(division, org)]


def checker_of(pkg: Package, division: str, org: str) -> dict:
    """The edition's checker block; empty when the edition is not checkable (EDN-04 skips it)."""
    return tables.checker(edition_of(pkg, division, org))


def sanctioned(pkg: Package, division: str, org: str, family: str | None = None) -> dict:
    """{family: {model: [accelerators]}} the edition sanctions for a division (or one family's)."""
    table = tables.edition(edition_of(pkg, division, org)).get(division) or {}
    return table if family is None else (table.get(family) or {})


def system_description(pkg: Package, division: str, org: str, system: str) -> tuple[dict | None, str | None, Path]:
    """(system_under_test, problem, path) of systems/<system>.yaml, looked up once per system."""
    cache = vars(pkg).setdefault("_systems", {})
    if (division, org, system) not in cache:
        path = pkg.root / division / org / "systems" / f"{system}.yaml"
        data, problem = load_yaml(path) if real_dir(path.parent) else (None, "systems/ is not a directory")
        if problem is None:
            sut = dig(data, "system_under_test")
            if not isinstance(sut, dict):
                data, problem = None, f"{path.name} has no system_under_test mapping"
            else:
                data = sut
        cache[(division, org, system)] = (data, problem, path)
    return cache[(division, org, system)]


@dataclass(frozen=True)
class Workload:
    division: str
    org: str
    system: str
    family: str
    model: str
    path: Path
    checker: dict


def workloads(pkg: Package, family: str) -> list[Workload]:
    """Every real workload directory of a family the edition sanctions, in the submissions the
    checker can judge (a directory of any other name is reported by 2.1.11/2.1.21 alone).
    Listed once per validation: many rules ask."""
    cache = vars(pkg).setdefault("_workloads", {})
    if family not in cache:
        cache[family] = list(_find_workloads(pkg, family))
    return cache[family]


def _find_workloads(pkg: Package, family: str) -> Iterator[Workload]:
    for division, org, org_dir in pkg.orgs:
        block = checker_of(pkg, division, org)
        if not block:
            continue
        models = sanctioned(pkg, division, org, family)
        for system, kind, system_dir in visible(org_dir / "results"):
            family_dir = system_dir / family
            if kind != DIR or not real_dir(family_dir):
                continue
            for model, mkind, path in visible(family_dir):
                if mkind == DIR and model in models:
                    yield Workload(division, org, system, family, model, path, block)


def timestamp_dirs(directory: Path) -> list[Path]:
    return [p for n, k, p in entries(directory) if k == DIR and TIMESTAMP.match(n)]


def training_leaves(pkg: Package, phase: str) -> list[tuple[Workload, Path]]:
    """The timestamp directories of one phase of every training workload (listed once)."""
    cache = vars(pkg).setdefault("_leaves", {})
    if phase not in cache:
        cache[phase] = [(wl, leaf) for wl in workloads(pkg, "training") for leaf in timestamp_dirs(wl.path / phase)]
    return cache[phase]


def checkpointing_leaves(pkg: Package) -> list[tuple[Workload, Path]]:
    """The timestamp directories of every checkpointing workload (listed once)."""
    cache = vars(pkg).setdefault("_leaves", {})
    if "checkpointing" not in cache:
        cache["checkpointing"] = [(wl, leaf) for wl in workloads(pkg, "checkpointing") for leaf in timestamp_dirs(wl.path)]
    return cache["checkpointing"]


# --- 1. Introduction ---------------------------------------------------------------------

not_applicable("1.3", "defines run, result and submission; the run counts it records are checked by "
                      "2.1.17, 2.1.23, 5.3.1 and 6.3")
not_applicable("2.1.3", "states that closed/ and open/ are each optional and built by the same rules, "
                        "which every rule applies to both")
not_applicable("2.1.5", "a heading: its two cases are checked as 2.1.5.a (closed) and 2.1.5.b (open)")
not_applicable("2.1.18a", "grants permission to delete runs; the 6 that remain are checked by 2.1.17 and 2.1.18")
not_applicable("2.1.24a", "grants permission to delete runs; what remains is checked by 2.1.23 and 2.1.24")
not_applicable("2.1.27", "a picture of the hierarchy the other 2.1.x rules state")


def _symlinks(root: Path) -> Iterator[Path]:
    """Every symbolic link below the package root (top-level dot entries excluded), unfollowed."""
    stack = visible(root)
    while stack:
        _, kind, path = stack.pop()
        if kind == LINK:
            yield path
        elif kind == DIR:
            stack.extend(entries(path))


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


@rule("1.1", "mlpstorageGeneratesHierarchy")
def generated_hierarchy(pkg: Package) -> Iterable[Finding]:
    """No symlinks; no hand-made files beside submission.yaml; every leaf carries mlpstorage's metadata."""
    for link in _symlinks(pkg.root):
        try:
            target = os.readlink(link)
        except OSError:
            target = "?"
        yield finding("1.1", INVALID, link, f"symbolic link to {target}: mlpstorage writes none, and the checker does not follow it")
    for division, org, org_dir in pkg.orgs:
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
        many = [n for n, k, _ in rec.listing if n.endswith("_metadata.json")]
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


@rule("1.2", "storageBackendEnvVarDeclaration")
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


@rule("2.1.4", "closedSubmitterDirectory")
def submitter_directories(pkg: Package) -> Iterable[Finding]:
    """closed/ and open/ hold one directory per submitter and nothing else."""
    for division in DIVISIONS:
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
    """systems/ holds a <name>.yaml and a <name>.pdf per system, Markdown, and nothing else."""
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
            if "pdf" in exts:
                head, problem = read_text(systems / f"{stem}.pdf", 8)
                if problem is None and not head.startswith("%PDF"):
                    yield finding("2.1.7", INVALID, systems / f"{stem}.pdf", f"{stem}.pdf is not a PDF document")


@rule("2.1.8", "resultsDirectorySystems")
def results_systems(pkg: Package) -> Iterable[Finding]:
    """results/ holds one directory per system, each described by systems/<name>.yaml and .pdf."""
    for division, org, org_dir in pkg.orgs:
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


def recorded_filing(pkg: Package) -> list[tuple[str, Path, str]]:
    """(rule, leaf, message) for every leaf whose metadata records another submitter or system
    than the directories it is filed under: args.systemname, and the <division>/<org>/results/
    <system>/ part of the result_dir mlpstorage wrote it to. Computed once per validation."""
    cache = vars(pkg)
    if "_filing" in cache:
        return cache["_filing"]
    found: list[tuple[str, Path, str]] = []
    for leaf in pkg.leaves:
        rec = record(pkg, leaf.path)
        meta = rec.meta
        if meta is None:
            continue
        systems: dict[str, str] = {}
        orgs: dict[str, str] = {}
        args = dig(meta, "args") or {}
        for key in ("systemname", "system_name"):
            if isinstance(args, dict) and isinstance(args.get(key), str) and args[key].strip():
                systems[f"args.{key}"] = args[key].strip()
                break
        result_dir = meta.get("result_dir")
        if isinstance(result_dir, str):
            parts = Path(result_dir).parts
            for i in range(len(parts) - 3, -1, -1):
                if parts[i] == leaf.division and parts[i + 2] == "results":
                    orgs["result_dir"] = parts[i + 1]
                    systems["result_dir"] = parts[i + 3]
                    break
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


@rule("2.1.9", "identicalSystemConfig")
def identical_system(pkg: Package) -> Iterable[Finding]:
    """Every run under one system name records the same client hosts (memory, cores, OS)."""
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


def _models(pkg: Package, family: str, number: str) -> Iterable[Finding]:
    for division, org, org_dir in pkg.orgs:
        if not checker_of(pkg, division, org):
            continue
        allowed = sorted(sanctioned(pkg, division, org, family))
        for system, kind, system_dir in visible(org_dir / "results"):
            family_dir = system_dir / family
            if kind != DIR or not real_dir(family_dir):
                continue
            content = visible(family_dir)
            if not [n for n, k, _ in content if k == DIR]:
                yield finding(number, INVALID, family_dir, f"{family}/ holds no workload directory")
            for name, ekind, path in content:
                if ekind == LINK:
                    continue
                if ekind != DIR or name not in allowed:
                    yield finding(number, INVALID, path, f"unexpected {ekind} {name!r} in {family}/ (allowed: {', '.join(allowed)})")


@rule("2.1.11", "trainingWorkloads")
def training_workloads(pkg: Package) -> Iterable[Finding]:
    """training/ holds only the edition's training models (unet3d, retinanet)."""
    yield from _models(pkg, "training", "2.1.11")


@rule("2.1.21", "checkpointingWorkloads")
def checkpointing_workloads(pkg: Package) -> Iterable[Finding]:
    """checkpointing/ holds only the edition's checkpointing models (llama3-8b ... llama3-1t)."""
    yield from _models(pkg, "checkpointing", "2.1.21")


@rule("2.1.12", "trainingPhases")
def training_phases(pkg: Package) -> Iterable[Finding]:
    """A training workload directory holds datasize/, datagen/ and run/, and nothing else."""
    for wl in workloads(pkg, "training"):
        content = {n: (k, p) for n, k, p in visible(wl.path)}
        for phase in PHASES:
            if content.get(phase, (None,))[0] != DIR:
                yield finding("2.1.12", INVALID, wl.path, f"training/{wl.model} has no {phase}/ phase directory")
        for name, (kind, path) in sorted(content.items()):
            if name not in PHASES and kind != LINK:
                yield finding("2.1.12", INVALID, path, f"unexpected {kind} {name!r} in training/{wl.model} (datasize, datagen and run only)")


def _timestamps(directory: Path, number: str, expected: tuple[int, int], what: str) -> Iterable[Finding]:
    """Exactly `expected` (lo, hi) valid timestamp directories and only results tables beside them."""
    stamps = []
    for name, kind, path in visible(directory):
        if kind == LINK:
            continue
        if kind == DIR and TIMESTAMP.match(name):
            if leaf_time(name) is None:
                yield finding(number, INVALID, path, f"{name} is not a real date and time (YYYYMMDD_HHmmss)")
            stamps.append(name)
        elif not (kind == FILE and name in PHASE_TABLES):
            yield finding(number, INVALID, path, f"unexpected {kind} {name!r} beside the timestamp directories")
    lo, hi = expected
    if not lo <= len(stamps) <= hi:
        count = str(lo) if lo == hi else f"{lo} to {hi}"
        yield finding(number, INVALID, directory, f"{what} holds {len(stamps)} timestamp directories; {count} required")


@rule("2.1.13", "datagenTimestamp")
def datagen_timestamp(pkg: Package) -> Iterable[Finding]:
    """datagen/ holds exactly one timestamp directory."""
    for wl in workloads(pkg, "training"):
        if real_dir(wl.path / "datagen"):
            yield from _timestamps(wl.path / "datagen", "2.1.13", (1, 1), f"training/{wl.model}/datagen")


@rule("2.1.17", "runTimestamps")
def run_timestamps(pkg: Package) -> Iterable[Finding]:
    """run/ holds exactly runs_per_result (edition 3.0: 6) timestamp directories."""
    for wl in workloads(pkg, "training"):
        if real_dir(wl.path / "run"):
            count = int(wl.checker["runs_per_result"]["training"])
            yield from _timestamps(wl.path / "run", "2.1.17", (count, count), f"training/{wl.model}/run")


@rule("2.1.23", "checkpointingTimestamps")
def checkpointing_timestamps(pkg: Package) -> Iterable[Finding]:
    """A checkpointing workload holds one (combined) or two (write, then read) timestamp directories."""
    for wl in workloads(pkg, "checkpointing"):
        count = int(wl.checker["runs_per_result"]["checkpointing"])
        yield from _timestamps(wl.path, "2.1.23", (1, count), f"checkpointing/{wl.model}")


def _gaps(pkg: Package, directory: Path, number: str) -> Iterable[Finding]:
    """Neighbouring runs are separated by less than one run's duration (2.1.18, 2.1.24).

    The names state when each invocation began; the idle time between the end of one run and
    the name of the next must be shorter than a run: otherwise a run could have been removed
    from between them."""
    leaves = sorted((leaf_time(p.name), p) for p in timestamp_dirs(directory) if leaf_time(p.name) is not None)
    for (t0, first), (t1, second) in zip(leaves, leaves[1:]):
        end0, end1 = record(pkg, first).end_local, record(pkg, second).end_local
        durations = [end - start for end, start in ((end0, t0), (end1, t1)) if end is not None and end >= start]
        if end0 is None or not durations:
            yield finding(number, WARNING, second, f"cannot check the gap after {first.name}: no readable summary.json or "
                                                   "metadata records when the runs ended")
            continue
        idle, longest = t1 - end0, max(durations)
        if idle >= longest:
            yield finding(number, INVALID, second, f"{second.name} starts {idle.total_seconds():,.0f} s after {first.name} ended, "
                                                   f"not less than one run ({longest.total_seconds():,.0f} s): runs are not consecutive")


@rule("2.1.18", "runTimestampGap")
def run_gap(pkg: Package) -> Iterable[Finding]:
    """Consecutive training runs leave less than one run's duration between them."""
    for wl in workloads(pkg, "training"):
        yield from _gaps(pkg, wl.path / "run", "2.1.18")


@rule("2.1.24", "checkpointingTimestampGap")
def checkpointing_gap(pkg: Package) -> Iterable[Finding]:
    """Consecutive checkpointing invocations leave less than one invocation's duration between them."""
    for wl in workloads(pkg, "checkpointing"):
        yield from _gaps(pkg, wl.path, "2.1.24")


def _leaf_files(leaf: Path, number: str, patterns: list[str], folders: list[str]) -> Iterable[Finding]:
    listing = entries(leaf)
    for pattern in patterns:
        regex = re.compile(pattern)
        matched = [(n, k, p) for n, k, p in listing if regex.search(n)]
        files = [(n, p) for n, k, p in matched if k == FILE]
        if not files:
            why = f"{matched[0][0]} is a {matched[0][1]}, not a file" if matched else f"no file matching {pattern!r}"
            yield finding(number, INVALID, leaf, why)
            continue
        if pattern.endswith(r"json$"):
            for name, path in files:
                data, problem = load_json(path)
                if problem is None and not isinstance(data, dict):
                    problem = f"{name} is not a JSON object"
                if problem:
                    yield finding(number, INVALID, path, problem)
    for folder in folders:
        if not real_dir(leaf / folder):
            yield finding(number, INVALID, leaf, f"no {folder}/ subdirectory")


def _dlio_config(leaf: Path, number: str, expected: list[str], parent: str = "") -> Iterable[Finding]:
    folder = leaf / "dlio_config"
    if not real_dir(folder):
        # the missing folder is reported once, by the files rule that requires it (2.1.14, 2.1.19, 2.1.25)
        yield finding(number, INFO, leaf, f"not checked: no dlio_config/ subdirectory (reported under {parent})")
        return
    content = {n: (k, p) for n, k, p in visible(folder)}
    for name in expected:
        kind, path = content[name] if name in content else (None, folder / name)
        if kind != FILE:
            yield finding(number, INVALID, path, f"dlio_config/{name} is {'missing' if kind is None else f'a {kind}'}")
            continue
        shape, problem = yaml_shape(path, "workload" if name == "config.yaml" else None)
        if problem is None:
            shape_ok = {"config.yaml": shape.value_kind == MAPPING, "overrides.yaml": shape.kind in (None, SEQUENCE)}.get(
                name, shape.kind == MAPPING and not shape.empty)
            if not shape_ok:
                problem = f"{name} does not hold a DLIO {name[:-5]} record (empty, truncated or of the wrong shape)"
        if problem:
            yield finding(number, INVALID, path, problem)
    for name, (kind, path) in sorted(content.items()):
        if name not in expected:
            yield finding(number, INVALID, path, f"unexpected {kind} {name!r} in dlio_config/ (only {', '.join(expected)})")


@rule("2.1.14", "datagenFiles")
def datagen_files(pkg: Package) -> Iterable[Finding]:
    """A datagen leaf holds the logs, metadata and dlio_config/ the edition's checker block lists."""
    for wl, leaf in training_leaves(pkg, "datagen"):
        yield from _leaf_files(leaf, "2.1.14", wl.checker["datagen_required_files"], wl.checker["datagen_required_folders"])


@rule("2.1.15", "datagenDlioConfig")
def datagen_dlio_config(pkg: Package) -> Iterable[Finding]:
    """A datagen leaf's dlio_config/ holds exactly config.yaml, hydra.yaml and overrides.yaml, each readable."""
    for wl, leaf in training_leaves(pkg, "datagen"):
        yield from _dlio_config(leaf, "2.1.15", wl.checker["dlio_config_files"], "2.1.14")


def _results_json(directory: Path, number: str) -> Iterable[Finding]:
    path = directory / "results.json"
    data, problem = load_json(path)
    if problem is None and not isinstance(data, dict):
        problem = "results.json is not a JSON object"
    if problem:
        yield finding(number, INVALID, path if kind_of(path) is not None else directory, problem)


@rule("2.1.16", "runResultsJson")
def run_results_json(pkg: Package) -> Iterable[Finding]:
    """The training run/ directory holds a readable results.json."""
    for wl in workloads(pkg, "training"):
        if real_dir(wl.path / "run"):
            yield from _results_json(wl.path / "run", "2.1.16")


@rule("2.1.22", "checkpointingResultsJson")
def checkpointing_results_json(pkg: Package) -> Iterable[Finding]:
    """A checkpointing workload directory holds a readable results.json."""
    for wl in workloads(pkg, "checkpointing"):
        yield from _results_json(wl.path, "2.1.22")


@rule("2.1.19", "runFiles")
def run_files(pkg: Package) -> Iterable[Finding]:
    """A training run leaf holds the logs, DLIO JSON outputs and dlio_config/ the checker block lists."""
    for wl, leaf in training_leaves(pkg, "run"):
        yield from _leaf_files(leaf, "2.1.19", wl.checker["run_required_files"], wl.checker["run_required_folders"])


@rule("2.1.20", "runDlioConfig")
def run_dlio_config(pkg: Package) -> Iterable[Finding]:
    """A training run leaf's dlio_config/ holds exactly config.yaml, hydra.yaml and overrides.yaml, each readable."""
    for wl, leaf in training_leaves(pkg, "run"):
        yield from _dlio_config(leaf, "2.1.20", wl.checker["dlio_config_files"], "2.1.19")


@rule("2.1.25", "checkpointingFiles")
def checkpointing_files(pkg: Package) -> Iterable[Finding]:
    """A checkpointing leaf holds the logs, JSON outputs and dlio_config/ the checker block lists."""
    for wl, leaf in checkpointing_leaves(pkg):
        yield from _leaf_files(leaf, "2.1.25", wl.checker["checkpoint_required_files"], wl.checker["checkpoint_required_folders"])


@rule("2.1.26", "checkpointingDlioConfig")
def checkpointing_dlio_config(pkg: Package) -> Iterable[Finding]:
    """A checkpointing leaf's dlio_config/ holds exactly config.yaml, hydra.yaml and overrides.yaml, each readable."""
    for wl, leaf in checkpointing_leaves(pkg):
        yield from _dlio_config(leaf, "2.1.26", wl.checker["dlio_config_files"], "2.1.25")


@rule("2.29", "dlioLog")
def dlio_log(pkg: Package) -> Iterable[Finding]:
    """Every datagen, run and checkpointing leaf's dlio.log is a real log, not empty or pruned."""
    leaves = [leaf for phase in ("datagen", "run") for _, leaf in training_leaves(pkg, phase)]
    leaves += [leaf for _, leaf in checkpointing_leaves(pkg)]
    for leaf in leaves:
        path = leaf / "dlio.log"
        if kind_of(path) is None:
            continue  # reported as a missing file by 2.1.14, 2.1.19 or 2.1.25
        text, problem = read_text(path, LOG_READ_LIMIT)
        if problem:
            yield finding("2.29", INVALID, path, problem)
        elif not LOG_RECORD.search(text):
            size = path.stat().st_size
            yield finding("2.29", INVALID, path, f"dlio.log ({size} bytes) holds no timestamped log record: "
                                                 "empty, pruned or a placeholder")
