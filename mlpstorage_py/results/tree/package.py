"""A submission package (or a live results tree) read once, as data the rules inspect."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, fields
from fnmatch import translate
from pathlib import Path
from typing import Any, Callable, Iterator

from mlpstorage_py.results.tree import files
from mlpstorage_py.results import code_image

TIMESTAMP = re.compile(r"^\d{8}_\d{6}$")
DIVISIONS = ("closed", "open")
# Where timestamp leaves sit below results/<system>/, by benchmark directory:
# the number of path segments between the benchmark directory and the timestamp.
LEAF_DEPTH = {"training": 2, "checkpointing": 1, "vector_database": 3, "kv_cache": 2}
# The tool's own corner of a results tree (history, scratch, submissions) and the trash that
# `mlpstorage runs rm` moves leaves to: never read as part of the package.
PRIVATE_DIR = ".mlps"
TRASH_DIR = Path(PRIVATE_DIR) / "trash"
# The KV cache aggregate under the name older tool versions wrote (and Rules 6.3.4 still uses),
# read where a leaf has no summary.json: kvcache_run_summary.json or kvcache_run_summary_<ts>.json.
OLDER_KV_SUMMARY = "kvcache_run_summary*.json"


@dataclass
class Leaf:
    path: Path
    division: str
    org: str
    system: str
    benchmark: str
    parts: tuple[str, ...]

    @property
    def model(self) -> str:
        return self.parts[1] if self.benchmark == "vector_database" else self.parts[0]

    @property
    def command(self) -> str:
        return "run" if self.benchmark == "checkpointing" else self.parts[-1]

    @functools.cached_property
    def workload_dir(self) -> Path:
        return self.path.parent if self.benchmark == "checkpointing" else self.path.parent.parent

    def glob(self, pattern: str) -> list[Path]:
        """Entries of the leaf whose names match a glob pattern, in name order."""
        matches = _glob_pattern(pattern)
        return [files.child(self.path, name) for name in files.names(self.path) if matches(name)]

    @functools.cached_property
    def metadata_files(self) -> list[Path]:
        return self.glob("*_metadata.json")

    @functools.cached_property
    def metadata(self) -> dict[str, Any] | None:
        """The *_metadata.json object; None when absent, {"__unreadable__": why} when broken."""
        found = self.metadata_files
        return read_object(found[0]) if found else None

    @functools.cached_property
    def summary(self) -> dict[str, Any] | None:
        found = self.glob("*summary.json") or (self.glob(OLDER_KV_SUMMARY) if self.benchmark == "kv_cache" else [])
        return read_object(found[0]) if found else None

    @functools.cached_property
    def provenance(self) -> dict[str, Any] | None:
        path = self.path / "provenance.json"
        return read_object(path) if files.kind_of(path) in (files.FILE, files.LINK) else None

    def json_object(self, name: str) -> dict[str, Any] | None:
        """A JSON object at a path inside the leaf (e.g. 0_per_epoch_stats.json); None when absent
        or a link, {"__unreadable__": why} when broken."""
        path = self.path / name
        return read_object(path) if files.kind_of(path) == files.FILE else None

    @functools.cached_property
    def results_table(self) -> dict[str, Any] | None:
        """The result's results.json, which reportgen writes beside the run leaves; None when absent."""
        path = self.path.parent / "results.json"
        return read_object(path) if files.kind_of(path) == files.FILE else None

    def broken(self, what: str) -> str | None:
        """Why the leaf's metadata/summary/provenance cannot be read, or None."""
        data = getattr(self, what)
        return data.get(files.UNREADABLE) if isinstance(data, dict) else None

    @functools.cached_property
    def pointer(self) -> str | None:
        return files.strict_text(self.path / code_image.POINTER_FILE)

    @functools.cached_property
    def stamped_edition(self) -> str:
        edition = (self.provenance or {}).get("rules_edition")
        return edition if isinstance(edition, str) else "unknown"  # a malformed stamp names no edition

    def forget(self) -> None:
        """Drop what was read for this leaf (its part is done); asked again, it is read again."""
        for name in _LEAF_READINGS:
            self.__dict__.pop(name, None)


_LEAF_READINGS = tuple(name for name, value in vars(Leaf).items()
                       if isinstance(value, functools.cached_property) and name != "workload_dir")


@functools.cache
def _glob_pattern(pattern: str) -> Callable[[str], re.Match | None]:
    """A shell pattern as the match Path.glob applies to names (case-sensitive, dots not special)."""
    return re.compile(translate(pattern)).match


def _subdirs(directory: Path) -> list[Path]:
    """Real subdirectories, sorted; a symlinked directory is never entered (rule 1.1 reports it)."""
    return [path for _, kind, path in files.entries(directory) if kind == files.DIR]


def _leaf_dirs(bench_dir: Path, depth: int, rel: tuple[str, ...] = ()) -> Iterator[tuple[Path, tuple[str, ...]]]:
    """Timestamp directories `depth` levels below a benchmark directory, with the names between."""
    for sub in _subdirs(bench_dir):
        if depth == 0:
            if TIMESTAMP.match(sub.name):
                yield sub, rel
        else:
            yield from _leaf_dirs(sub, depth - 1, rel + (sub.name,))


def read_object(path: Path) -> dict[str, Any]:
    """A JSON file that must hold an object; any other shape is reported like a parse error."""
    data = files.json_or_unreadable(path)
    return data if isinstance(data, dict) else {files.UNREADABLE: f"{path.name}: not a JSON object"}


@dataclass
class Package:
    """The package, or one part of it (Package.parts): a part holds some of its systems, each
    with all its leaves, and shares its organizations and submission.yaml."""
    root: Path
    leaves: list[Leaf] = field(default_factory=list)
    reference_digest: str | None = None  # --reference-checksum
    orgs: list[tuple[str, str, Path]] = field(default_factory=list)
    # Every real directory below <division>/<org>/results/, with how many leaves it holds, in
    # the order of the leaves.
    system_dirs: list[tuple[Path, int]] = field(default_factory=list)
    # For a part: the package it is part of, and whether it is the first part (which says what
    # a rule says of the package as a whole) or the last.
    whole: "Package | None" = None
    opens: bool = True
    closes: bool = True

    @classmethod
    def load(cls, root: Path, submitters: set[str] | None = None) -> "Package":
        """The package's leaves and organizations; a new Package is a new reading of the files."""
        files.start(root)
        pkg = cls(root)
        for division in DIVISIONS:  # only <division>/: the trash below .mlps/ is never a leaf
            for org_dir in _subdirs(root / division):
                if submitters and org_dir.name not in submitters:
                    continue
                pkg.orgs.append((division, org_dir.name, org_dir))
                for system_dir in _subdirs(org_dir / "results"):
                    before = len(pkg.leaves)
                    for bench, depth in LEAF_DEPTH.items():
                        for leaf, rel in _leaf_dirs(system_dir / bench, depth):
                            pkg.leaves.append(Leaf(leaf, division, org_dir.name, system_dir.name, bench, rel))
                    pkg.system_dirs.append((system_dir, len(pkg.leaves) - before))
        return pkg

    def parts(self, most_leaves: int) -> list["Package"]:
        """The package as consecutive runs of whole systems of at most `most_leaves` leaves each
        (a bigger system is a part alone); the package itself when it fits one part. The rules
        that allow it (Rule.parts) run part after part, so what they read of one part is
        released before the next (checker.validate): memory stays that of one part."""
        if len(self.leaves) <= most_leaves:
            return [self]
        groups: list[list[tuple[Path, int]]] = [[]]
        held = 0
        for system_dir, count in self.system_dirs:
            if groups[-1] and held + count > most_leaves:
                groups.append([])
                held = 0
            groups[-1].append((system_dir, count))
            held += count
        found, start = [], 0
        for i, group in enumerate(groups):
            count = sum(n for _, n in group)
            found.append(Package(self.root, self.leaves[start:start + count], self.reference_digest, self.orgs,
                                 system_dirs=group, whole=self, opens=i == 0, closes=i == len(groups) - 1))
            start += count
        return found

    @functools.cached_property
    def system_keys(self) -> frozenset[str]:
        """The system directories' paths, as strings."""
        return frozenset(str(d) for d, _ in self.system_dirs)

    def relative(self, path: Path) -> str:
        """A path below the root as the reports name it, relative to the root (a string cut:
        Path.relative_to costs 20 us, and a large package asks it of every leaf)."""
        return str(path)[len(str(self.root).rstrip("/")) + 1:]

    def includes(self, system_dir: Path) -> bool:
        """Whether a directory below <division>/<org>/results/ is one of this part's systems."""
        return self.whole is None or str(system_dir) in self.system_keys

    def release(self, since: tuple[int, ...]) -> None:
        """Forget what was read below this part's systems since a files.mark(), and what the
        rules kept on the part (a part of a package, once done)."""
        if self.whole is not None:
            files.forget_below(frozenset(str(d.parent) for d, _ in self.system_dirs), since)
            for leaf in self.leaves:
                leaf.forget()
            for name in [name for name in vars(self) if name not in _PACKAGE_FIELDS]:
                del self.__dict__[name]

    @functools.cached_property
    def _index(self) -> dict[tuple[Path, str], list[Leaf]]:
        index: dict[tuple[Path, str], list[Leaf]] = {}
        for leaf in self.leaves:
            index.setdefault((leaf.workload_dir, leaf.command), []).append(leaf)
        return index

    def in_workload(self, workload: Path, command: str) -> list[Leaf]:
        """The leaves of one phase of one workload directory (kept linear for large packages)."""
        return self._index.get((workload, command), [])

    def results(self) -> list[Path]:
        """Workload directories holding leaves (Rules 1.3 results), in order."""
        return sorted({leaf.workload_dir for leaf in self.leaves})

    def image_dirs(self) -> list[Path]:
        """Every code-<hash8> directory: the tree-level pool and per-organization pools."""
        pools = [self.root / code_image.POOL_DIR]
        pools += [p for p in self.root.iterdir() if p.is_dir() and (p / code_image.POOL_MARKER).is_file()
                  and p.name not in (code_image.POOL_DIR, PRIVATE_DIR)]
        return [d for pool in pools if pool.is_dir() for d in sorted(pool.glob("code-*")) if d.is_dir()]

    def resolve_image(self, leaf: Leaf, digest: str) -> Path | None:
        """A pointer resolves against code-images/ first, then the leaf's organization pool
        (looked up once per organization and image: the leaves of a submission share a few)."""
        cache = vars(self).setdefault("_images", {})
        key = (leaf.org, digest[:8])
        if key not in cache:
            cache[key] = None
            for pool in (self.root / code_image.POOL_DIR, self.root / leaf.org):
                candidate = pool / f"code-{digest[:8]}"
                if (candidate / code_image.HASH_FILE).is_file():
                    cache[key] = candidate
                    break
        return cache[key]

    def manifest(self, division: str, org: str) -> tuple[Path, Any] | None:
        """<division>/<org>/submission.yaml, parsed once per validation (a part asks its package)."""
        if self.whole is not None:
            return self.whole.manifest(division, org)
        cache = vars(self).setdefault("_manifests", {})
        if (division, org) not in cache:
            path = self.root / division / org / "submission.yaml"
            present = files.kind_of(path) in (files.FILE, files.LINK)  # a link is named unreadable, not followed
            cache[(division, org)] = (path, files.yaml_or_unreadable(path)) if present else None
        return cache[(division, org)]


_PACKAGE_FIELDS = frozenset(f.name for f in fields(Package))
