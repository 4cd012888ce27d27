"""Helpers shared by the section 1-6 rules: leaf records, names and values, timestamps, the
edition a submission is judged under, system descriptions and the workload directories and
leaves of the judged submissions. Registers no rule.

Listing and reading are files.py's, made once per validation; what is derived here is kept on
the package, once per validation, too.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

from mlpstorage_py.results.tree.files import DIR, FILE, child, entries, load_json, load_yaml, names, real_dir, visible
from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.results.leaf import DATETIME_FORMAT
from mlpstorage_py.rules import tables

TIMESTAMP = re.compile(r"^\d{8}_\d{6}$")


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


def apart(a: str, b: str) -> bool:
    """Two recorded paths neither of which is, or is inside, the other (the rules' "separate")."""
    pa, pb = PurePosixPath(a), PurePosixPath(b)
    return not (pa == pb or pa in pb.parents or pb in pa.parents)


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
    if isinstance(value, (int, float, str)):
        try:
            return float(value)
        except (ValueError, OverflowError):  # not a number, or an integer beyond any float
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

    def _one(self, matches) -> tuple[Any, str | None, Path | None]:
        found = next(((n, k) for n, k in names(self.path).items() if matches(n)), None)
        if found is None:
            return None, "missing", None
        name, kind = found
        path = child(self.path, name)
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
        found = self._one(lambda n: n.endswith("summary.json"))
        if found[1] == "missing":  # a KV cache leaf of an older tool version (package.OLDER_KV_SUMMARY)
            older = self._one(lambda n: n.startswith("kvcache_run_summary") and n.endswith(".json"))
            found = older if older[1] != "missing" else found
        return found

    @property
    def summary_name(self) -> str | None:
        """The file the summary was read from (None when there is none)."""
        path = self._summary[2]
        return path.name if path is not None else None

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
    checker can judge (a directory of any other name is reported by 2.1.11/2.1.21 alone), and
    in a part of the package, its systems'.
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
            if kind != DIR or not pkg.includes(system_dir) or not real_dir(family_dir):
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
