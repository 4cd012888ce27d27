"""A submission package (or a live results tree) read back: Package -> System -> Result -> Leaf.

Listing the tree is cheap and done at once (Package.load); a leaf's records are read when first
asked for and kept until its system is released (System.release), so a reader that walks the
systems in turn holds one system's records at a time. Every record comes back as a Record: its
value, or the one sentence that says why there is none.
"""

from __future__ import annotations

import functools
import gc
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from fnmatch import translate
from pathlib import Path
from typing import Any, NamedTuple

from mlpstorage_py.results import code_image
from mlpstorage_py.results.schema import JsonObject, Schema, of_record
from mlpstorage_py.results.tree import aside, files, layout
from mlpstorage_py.results.tree.layout import DIVISIONS, PRIVATE_DIR, RESULTS_TABLE, TIMESTAMP, TRASH_DIR
from mlpstorage_py.results.tree.once import once
from mlpstorage_py.results.tree.values import as_number, dig, leaf_time, parse_time
from mlpstorage_py.rules import tables

__all__ = ["DIVISIONS", "PRIVATE_DIR", "TIMESTAMP", "TRASH_DIR", "Leaf", "Package", "Phase", "Record", "Result", "System",
           "read_object"]

# A submission.yaml this large is parsed beside the listing (Package.load): about 30 ms of
# parsing, several times what the fork and the pickled answer cost.
ASIDE_BYTES = 512 * 1024
# Each organization's submission.yaml, by (division, org): its path and parsed value (None: none),
# and the head of it every leaf's checks ask about (Package.manifest_head).
Manifests = dict[tuple[str, str], tuple[Path, Any] | None]
Heads = dict[tuple[str, str], dict[str, Any] | None]


class Record(NamedTuple):
    """One file read back: `value` when it was read, else `problem` says why not (missing,
    a link, not a file, not UTF-8, not valid JSON, not an object, a schema version this tool
    does not read). `path` is the entry, or None when there is none; `kind` what the entry is
    (files.FILE, LINK, DIR, OTHER; None: missing). A record of a leaf is its family's schema
    (results/schema.of_record) as typed(kind) reads it. A named tuple, not a frozen dataclass:
    made for every record of every leaf, it costs a third as much."""
    value: JsonObject | None
    problem: str | None
    path: Path | None
    kind: str | None = None

    @property
    def missing(self) -> bool:
        return self.kind is None

    @property
    def ok(self) -> bool:
        return self.problem is None


def read_object(path: Path) -> Record:
    """A JSON file that must hold an object, read through the tree's one reading."""
    return _object(path, files.kind_of(path))


def _object(path: Path, kind: str | None) -> Record:
    """read_object of a path whose kind the caller has (a leaf's records: from its listing)."""
    if kind is None:
        return Record(None, f"{path.name} is missing", None)
    if kind == files.LINK:
        return Record(None, f"{path.name} is a symbolic link (not followed)", path, kind)
    if kind != files.FILE:
        return Record(None, f"{path.name} is a {kind}, not a file", path, kind)
    data, problem = files.load_strict_json(path, regular=True)
    if problem:
        return Record(None, problem, path, kind)
    if not isinstance(data, dict):
        return Record(None, f"{path.name} is not a JSON object", path, kind)
    return Record(data, None, path, kind)


@contextmanager
def uncollected() -> Iterator[None]:
    """Python's cycle collector paused while a reader builds long-lived objects only (the
    listing, the result names): there is nothing for it to find, and at 100,000 leaves its
    passes over the growing heap took 2 of the listing's 3.4 s. It simply resumes after: skipping
    its next pass (gc.freeze + unfreeze) left dropped packages uncollected (tests/test_uncollected.py)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@functools.cache
def _glob_pattern(pattern: str) -> Callable[[str], re.Match[str] | None]:
    """A shell pattern as the match Path.glob applies to names (case-sensitive, dots not special)."""
    return re.compile(translate(pattern)).match


@functools.cache
def _record_patterns(kind: str, benchmark: str) -> tuple[Callable[[dict[str, str]], str | None], ...]:
    """The name tests of a record kind, in the order they are tried: its names, then (for a
    benchmark that has them) the older names; each gives the first name of a listing it matches."""
    spec = layout.record_kinds()[kind]
    sets = (spec["names"], (spec.get("older") or {}).get(benchmark) or ())
    return tuple(_first_match(tuple(patterns)) for patterns in sets if patterns)


_WILDCARDS = frozenset("*?[")


def _first_match(patterns: tuple[str, ...]) -> Callable[[dict[str, str]], str | None]:
    """The first name of a listing (in its order) that one of some shell patterns matches, as
    one compiled alternation of them finds it: a name without wildcards is looked up and a
    "*suffix" is an endswith, so no pattern is run over every name of every leaf (a regex
    starting ".*" tries each position of each name); any other pattern is fnmatch's."""
    exact = frozenset(p for p in patterns if not _WILDCARDS.intersection(p))
    suffixes = tuple(p[1:] for p in patterns if p[:1] == "*" and not _WILDCARDS.intersection(p[1:]))
    others = [p for p in patterns if p not in exact and not (p[:1] == "*" and p[1:] in suffixes)]
    regex = re.compile("|".join(f"(?:{translate(p)})" for p in others)).match if others else None
    if not suffixes and regex is None:
        return lambda names: min((name for name in exact if name in names), default=None)

    def first(names: dict[str, str]) -> str | None:
        for name in names:
            if name in exact or name.endswith(suffixes) or (regex is not None and regex(name) is not None):
                return name
        return None
    return first


@dataclass(eq=False)
class Leaf:
    """A timestamp directory: one invocation's records."""
    path: Path
    division: str
    org: str
    system: str
    benchmark: str
    parts: tuple[str, ...]  # the directory names between the benchmark directory and the leaf
    package: Package | None = field(default=None, repr=False)
    # From the layout table, once: every check the runner offers a leaf asks for them.
    model: str = field(init=False)
    command: str = field(init=False)
    _records: dict[str, Record] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        spec = layout.benchmarks()[self.benchmark]
        self.model = self.parts[spec["model_at"] - 1]
        self.command = self.parts[-1] if "{command}" in spec["tail"] else "run"

    @once
    def workload_dir(self) -> Path:
        spec = layout.benchmarks()[self.benchmark]
        depth: int = len(spec["tail"]) - spec["result_depth"]
        return self.path.parents[depth]

    @property
    def workload_key(self) -> str:
        """str(workload_dir), cut from the path's string (the parents of 100,000 Paths took a second)."""
        spec = layout.benchmarks()[self.benchmark]
        return str(self.path).rsplit("/", len(spec["tail"]) - spec["result_depth"] + 1)[0]

    # -- records ------------------------------------------------------------------------
    def glob(self, pattern: str) -> list[Path]:
        """Entries of the leaf whose names match a glob pattern, in name order."""
        matches = _glob_pattern(pattern)
        return [files.child(self.path, name) for name in filter(matches, files.names(self.path))]

    def record(self, kind: str) -> Record:
        """A record the layout table names (metadata, summary, fs_separation, provenance)."""
        found = self._records.get(kind)
        if found is None:
            found = self._records[kind] = self._read(kind)
        return found

    def _read(self, kind: str) -> Record:
        names = files.names(self.path)
        for first in _record_patterns(kind, self.benchmark):
            found = first(names)
            if found is not None:
                read = _object(files.child(self.path, found), names[found])
                schema = of_record(kind, self.benchmark) if read.value is not None else None
                unread = schema.unread(read.value) if schema is not None and read.value is not None else None
                return read if unread is None else Record(None, unread.text(), read.path, read.kind)
        return Record(None, layout.record_kinds()[kind]["missing"], None)

    def typed(self, kind: str) -> Schema | None:
        """The record as its family's schema reads it (results/schema.of_record), None when it
        has no value (missing, or why not is its problem)."""
        value = self.record(kind).value
        schema = of_record(kind, self.benchmark)
        found = schema.from_json(value) if schema is not None and value is not None else None
        return found if isinstance(found, Schema) else None

    def json_object(self, name: str) -> Record:
        """A JSON object at a path inside the leaf (e.g. 0_per_epoch_stats.json)."""
        cache: dict[str, Record] = self.__dict__.setdefault("_objects", {})
        if name not in cache:
            cache[name] = read_object(self.path / name)
        return cache[name]

    # The three records every check asks for, kept on the leaf once read (until forget()):
    # a leaf's checks ask for them some forty times.
    @once
    def metadata(self) -> dict[str, Any] | None:
        return self.record("metadata").value

    @once
    def summary(self) -> dict[str, Any] | None:
        return self.record("summary").value

    @once
    def provenance(self) -> dict[str, Any] | None:
        return self.record("provenance").value

    def problem(self, kind: str) -> str | None:
        """Why a record has no value (missing or broken), None when it was read."""
        return self.record(kind).problem

    def broken(self, kind: str) -> str | None:
        """Why a record that is there cannot be read; None when it was read or is missing."""
        found = self.record(kind)
        return None if found.missing else found.problem

    def has(self, kind: str) -> bool:
        """Whether the leaf holds a file of this kind, readable or not."""
        return not self.record(kind).missing

    def path_of(self, kind: str) -> Path:
        """The record's file, or the leaf itself when there is none (where a finding points)."""
        return self.record(kind).path or self.path

    @property
    def metadata_files(self) -> list[Path]:
        return [p for pattern in layout.record_kinds()["metadata"]["names"] for p in self.glob(pattern)]

    @property
    def results_table(self) -> Record:
        """The result's results.json, which reportgen writes beside the run leaves."""
        return read_object(self.path.parent / RESULTS_TABLE)

    @once
    def pointer(self) -> str | None:
        return files.strict_text(files.child(self.path, code_image.POINTER_FILE))

    @once
    def stamped_edition(self) -> str:
        edition = (self.provenance or {}).get("rules_edition")
        return edition if isinstance(edition, str) else "unknown"  # a malformed stamp names no edition

    @property
    def args(self) -> dict[str, Any]:
        value = dig(self.metadata, "args")
        return value if isinstance(value, dict) else {}

    @property
    def parameters(self) -> dict[str, Any]:
        value = dig(self.metadata, "parameters")
        return value if isinstance(value, dict) else {}

    @once
    def workload_config(self) -> dict[str, Any] | None:
        """dlio_config/config.yaml's workload block: the configuration the engine actually ran."""
        folder = files.child(self.path, "dlio_config")
        if not files.real_dir(folder):
            return None
        data, problem = files.load_yaml(files.child(folder, "config.yaml"))
        workload = dig(data, "workload") if not problem else None
        return workload if isinstance(workload, dict) else None

    # -- times --------------------------------------------------------------------------
    @property
    def name_time(self) -> datetime | None:
        return leaf_time(self.path.name)

    def aware_start_times(self) -> list[datetime]:
        """Timezone-aware instants recorded at the start of the invocation."""
        meta, fs_record = self.metadata, self.record("fs_separation").value
        candidates = [dig(meta, "invocation_start_time"), dig(fs_record, "probed_at"),
                      dig(meta, "cluster_snapshots", "start", "collection_timestamp"),
                      dig(meta, "system_info", "collection_timestamp")]
        found = [parse_time(c) for c in candidates]
        return [t for t in found if t is not None and t.tzinfo is not None]

    @once
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

    @once
    def end_local(self) -> datetime | None:
        """When the invocation ended, on the clock of the leaf names."""
        end = self.to_local(self.summary_time("end"))
        if end is not None:
            return end
        meta = self.metadata
        runtime = as_number(dig(meta, "runtime"))
        if self.name_time is not None and runtime is not None and runtime >= 0:
            return self.name_time + timedelta(seconds=runtime)
        start, stop = parse_time(dig(meta, "invocation_start_time")), parse_time(dig(meta, "invocation_end_time"))
        if self.name_time is not None and start is not None and stop is not None and \
                (start.tzinfo is None) == (stop.tzinfo is None):
            return self.name_time + (stop - start)
        return None

    def forget(self) -> None:
        """Drop what was read for this leaf; asked again, it is read again."""
        self._records.clear()
        for name in ("metadata", "summary", "provenance", "_objects", "pointer", "stamped_edition", "workload_config",
                     "utc_offset", "end_local"):
            self.__dict__.pop(name, None)


@dataclass(eq=False)
class Phase:
    """One phase of a result (datasize, datagen, run): its leaves, which the rules count and
    order. Its path is the phase's directory (the result's own for a benchmark whose leaves sit
    directly in it)."""
    path: Path
    result: Result
    command: str
    leaves: list[Leaf]

    @property
    def benchmark(self) -> str:
        return self.result.benchmark

    @property
    def model(self) -> str:
        return self.result.model

    @property
    def system(self) -> System:
        return self.result.system


@dataclass(eq=False)
class Result:
    """A workload directory (Rules 1.3's result): one model's phases on one system."""
    path: Path
    system: System
    benchmark: str
    model: str
    leaves: list[Leaf] = field(default_factory=list)

    def phase(self, command: str) -> list[Leaf]:
        return [leaf for leaf in self.leaves if leaf.command == command]

    @property
    def phases(self) -> list[Phase]:
        """The phases holding leaves, in the order their first leaves were listed."""
        by_command: dict[str, list[Leaf]] = {}
        for leaf in self.leaves:
            by_command.setdefault(leaf.command, []).append(leaf)
        return [Phase(leaves[0].path.parent, self, command, leaves) for command, leaves in by_command.items()]

    @property
    def division(self) -> str:
        return self.system.division

    @property
    def org(self) -> str:
        return self.system.org


@dataclass(eq=False)
class System:
    """<division>/<org>/results/<system>/: every result of one system under test."""
    path: Path
    division: str
    org: str
    name: str
    package: Package
    leaves: list[Leaf] = field(default_factory=list)

    @once
    def results(self) -> list[Result]:
        """Every real workload directory of the system (with leaves or none), in name order."""
        found = []
        for bench, spec in layout.benchmarks().items():
            by_dir: dict[str, list[Leaf]] = {}
            for leaf in self.leaves:
                if leaf.benchmark == bench:
                    by_dir.setdefault(leaf.workload_key, []).append(leaf)
            for path, rel in _dirs_at(self.path / bench, spec["result_depth"] - 2):
                found.append(Result(path, self, bench, rel[-1], by_dir.pop(str(path), [])))
        return found

    def release(self, since: tuple[int, ...]) -> None:
        """Forget what was read below this system since a files.mark(): its rules are done."""
        files.forget_below(frozenset({str(self.path)}), since)
        for leaf in self.leaves:
            leaf.forget()


def _subdirs(directory: Path) -> list[Path]:
    """Real subdirectories, sorted; a symlinked directory is never entered (rule 1.1 reports it)."""
    return [files.child(directory, name) for name, kind in files.names(directory).items() if kind == files.DIR]


def _dirs_at(directory: Path, depth: int, rel: tuple[str, ...] = ()) -> Iterator[tuple[Path, tuple[str, ...]]]:
    """Real directories `depth` levels below `directory` (depth 0: its children), with the names between."""
    for sub in _subdirs(directory):
        if depth == 0:
            yield sub, rel + (sub.name,)
        else:
            yield from _dirs_at(sub, depth - 1, rel + (sub.name,))


@dataclass(eq=False)
class Package:
    """The package: its organizations, systems and leaves, listed once; records read on demand."""
    root: Path
    leaves: list[Leaf] = field(default_factory=list)
    reference_digest: str | None = None  # --reference-checksum
    letter: bool = False  # validate --letter: calibrated sentences judged as written (checker.calibrations)
    orgs: list[tuple[str, str, Path]] = field(default_factory=list)
    systems: list[System] = field(default_factory=list)
    _manifests: Manifests = field(default_factory=dict, repr=False)
    _heads: Heads = field(default_factory=dict, repr=False)
    _parsing: aside.Aside[Manifests, Heads] | None = field(default=None, repr=False)  # parsed in a forked process
    _images: dict[tuple[str, str], Path | None] = field(default_factory=dict, repr=False)
    _listed: dict[tuple[str, str], Path | None] = field(default_factory=dict, repr=False)
    _editions: dict[tuple[str, str], str] = field(default_factory=dict, repr=False)
    _descriptions: dict[tuple[str, str, str], tuple[dict[str, Any] | None, str | None, Path]] = \
        field(default_factory=dict, repr=False)
    # What checks of a smaller scope leave for a package check of the same rule (Rule.note):
    # rule number -> items, in the order the systems were walked.
    notes: dict[str, list[Any]] = field(default_factory=dict, repr=False)

    @classmethod
    @uncollected()
    def load(cls, root: Path, submitters: set[str] | None = None, manifests: bool = False) -> Package:
        """The package's leaves and organizations; a new Package is a new reading of the files.
        With `manifests` (validate asks for them before any leaf is checked), large submission.yaml
        files are parsed in a forked process while the systems are listed; their heads are taken
        in here, the whole manifests when first asked for (the package's checks, at the end)."""
        files.start(root)
        pkg = cls(root)
        for division in DIVISIONS:  # only <division>/: the trash below .mlps/ is never a leaf
            for org_dir in _subdirs(root / division):
                if not submitters or org_dir.name in submitters:
                    pkg.orgs.append((division, org_dir.name, org_dir))
        parsing = aside.Aside(pkg._parsed_manifests, _heads_of) if manifests and pkg._manifest_bytes() >= ASIDE_BYTES \
            and aside.forkable() else None
        for division, org, org_dir in pkg.orgs:
            for system_dir in _subdirs(org_dir / "results"):
                system = System(system_dir, division, org, system_dir.name, pkg)
                for bench in layout.benchmarks():
                    for leaf_dir, rel in _dirs_at(system_dir / bench, layout.leaf_depth(bench)):
                        if TIMESTAMP.match(leaf_dir.name):
                            system.leaves.append(Leaf(leaf_dir, division, org, system_dir.name, bench, rel[:-1], pkg))
                pkg.systems.append(system)
                pkg.leaves.extend(system.leaves)
        if parsing is not None:
            pkg._heads.update(parsing.head())
            pkg._parsing = parsing
        return pkg

    def _manifest_path(self, division: str, org: str) -> Path:
        return self.root / division / org / "submission.yaml"

    def _manifest_bytes(self) -> int:
        """The size of the organizations' submission.yaml files (regular files only)."""
        paths = [str(self._manifest_path(d, o)) for d, o, _ in self.orgs]
        return sum(os.lstat(p).st_size for p in paths if files.kind_of(Path(p)) == files.FILE)

    def _parsed_manifests(self) -> Manifests:
        return {(d, o): self.manifest(d, o) for d, o, _ in self.orgs}

    def relative(self, path: Path | str) -> str:
        """A path below the root as the reports name it, relative to the root (a string cut:
        Path.relative_to costs 20 us, and a large package asks it of every leaf)."""
        return str(path)[self._cut:]

    @once
    def _cut(self) -> int:
        """Where a path below the root starts its relative part: after the root and a separator."""
        return len(str(self.root).rstrip("/")) + 1

    @once
    @uncollected()
    def result_names(self) -> dict[str, str]:
        """{path: name relative to the root} of the workload directories holding leaves, in order."""
        found = {leaf.workload_key for leaf in self.leaves}
        # Path order (part by part), without making 20,000 Paths compare at 100,000 leaves.
        return {path: self.relative(path) for path in sorted(found, key=lambda path: path.split("/"))}

    def results(self) -> list[Path]:
        """Workload directories holding leaves (Rules 1.3 results), in order."""
        return [Path(p) for p in self.result_names]

    def result_of(self, path: str) -> str:
        """The result a path belongs to, or 'package': the outermost result directory among the
        path and its parents."""
        names, found, probe = self.result_names, "package", path
        while probe:
            found = names.get(probe, found)
            parent = probe.rpartition("/")[0]
            probe = parent if parent != probe else ""
        return found

    def image_dirs(self) -> list[Path]:
        """Every code-<hash8> directory: the tree-level pool, then the per-organization pools.
        A linked pool or image is skipped, never hashed outside the package (rule 1.1 reports
        the link)."""
        pools = [files.child(self.root, name) for name, kind in files.names(self.root).items() if kind == files.DIR
                 and name != PRIVATE_DIR and (name == code_image.POOL_DIR
                                              or files.real_file(self.root / name / code_image.POOL_MARKER))]
        pools.sort(key=lambda pool: pool.name != code_image.POOL_DIR)
        return [files.child(pool, name) for pool in pools for name, kind in files.names(pool).items()
                if kind == files.DIR and name.startswith("code-")]

    def resolve_image(self, leaf: Leaf, digest: str) -> Path | None:
        """A pointer resolves against code-images/ first, then the leaf's organization pool
        (looked up once per organization and image: the leaves of a submission share a few)."""
        key = (leaf.org, digest[:8])
        if key not in self._images:
            self._images[key] = None
            for pool in (self.root / code_image.POOL_DIR, self.root / leaf.org):
                candidate = pool / f"code-{digest[:8]}"
                if (candidate / code_image.HASH_FILE).is_file():
                    self._images[key] = candidate
                    break
        return self._images[key]

    def listed_image(self, leaf: Leaf, digest: str) -> Path | None:
        """resolve_image's image when the tree reader lists it: a real directory of the package
        holding a real stamp (rule 2.1.6; a linked pool, image or stamp is none, and rule 1.1
        reports the link). Looked up once per organization and image, as resolve_image is."""
        key = (leaf.org, digest[:8])
        if key not in self._listed:
            image = self.resolve_image(leaf, digest)
            self._listed[key] = image if image is not None and files.real_file(image / code_image.HASH_FILE) else None
        return self._listed[key]

    def manifest(self, division: str, org: str) -> tuple[Path, Any] | None:
        """<division>/<org>/submission.yaml, parsed once per reading."""
        if self._parsing is not None:
            self._manifests.update(self._parsing.result())
            self._parsing = None
        if (division, org) not in self._manifests:
            path = self._manifest_path(division, org)
            present = files.kind_of(path) in (files.FILE, files.LINK)  # a link is named unreadable, not followed
            self._manifests[(division, org)] = (path, files.yaml_or_unreadable(path)) if present else None
        return self._manifests[(division, org)]

    def manifest_head(self, division: str, org: str) -> dict[str, Any] | None:
        """The entries of submission.yaml that every leaf's checks ask about (its edition, and
        whether it was unreadable), None when there is none or it is not a mapping: known before
        the whole manifest is taken in."""
        if (division, org) not in self._heads:
            self._heads[(division, org)] = _head_of(self.manifest(division, org))
        return self._heads[(division, org)]

    def edition_of(self, division: str, org: str) -> str:
        """The edition a submission declares in submission.yaml, else the current edition."""
        if (division, org) not in self._editions:
            known = tables.editions()["editions"]
            chosen = tables.editions()["current_edition"]
            head = self.manifest_head(division, org)
            if head is not None and str(head.get("rules_edition")) in known:
                chosen = str(head.get("rules_edition"))
            self._editions[(division, org)] = chosen
        return self._editions[(division, org)]

    def system_description(self, division: str, org: str, system: str) -> tuple[dict[str, Any] | None, str | None, Path]:
        """(system_under_test, problem, path) of systems/<system>.yaml, looked up once per system."""
        key = (division, org, system)
        if key not in self._descriptions:
            path = self.root / division / org / "systems" / f"{system}.yaml"
            data, problem = files.load_yaml(path) if files.real_dir(path.parent) else (None, "systems/ is not a directory")
            if problem is None:
                sut = dig(data, "system_under_test")
                if not isinstance(sut, dict):
                    data, problem = None, f"{path.name} has no system_under_test mapping"
                else:
                    data = sut
            self._descriptions[key] = (data, problem, path)
        return self._descriptions[key]


# The entries of a manifest that a leaf's checks read (Package.manifest_head).
HEAD_KEYS = ("rules_edition", files.UNREADABLE)


def _head_of(found: tuple[Path, Any] | None) -> dict[str, Any] | None:
    manifest = found[1] if found is not None else None
    return {k: manifest[k] for k in HEAD_KEYS if k in manifest} if isinstance(manifest, dict) else None


def _heads_of(manifests: Manifests) -> Heads:
    return {key: _head_of(found) for key, found in manifests.items()}
