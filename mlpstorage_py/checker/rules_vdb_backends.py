"""Section 5, where and on what a vector database run ran: path arguments and filesystems (5.4),
object storage (5.5) and the CLOSED backend, index types and parameters (5.6.2-5.6.5). Each rule
judges one leaf, but 5.5.1, which also judges the system's description once per system. The
readings of a leaf's files beyond its records are the leaf model's (results/vdb).
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterable
from typing import Any

from mlpstorage_py.checker.judging import checker_block, package_of, sanctioned
from mlpstorage_py.checker.registry import LEAF, SYSTEM, Finding, Rule, rule
from mlpstorage_py.checker.rules_vdb import cannot, not_checked
from mlpstorage_py.results.tree.files import FILE, entries, read_text
from mlpstorage_py.results.tree.package import Leaf, System
from mlpstorage_py.results.tree.values import apart, dig
from mlpstorage_py.results.vdb import (
    FAMILY,
    LOG_LIMIT,
    config,
    database,
    engine,
    evidence_problem,
    fact,
    index_type,
    missing_summary,
    named_outputs,
    resolved,
    value,
)
from mlpstorage_py.rules import predicates, tables
from mlpstorage_py.rules.core_config import canonical, flatten

DF_LINE = re.compile(r"\bdf (?P<label>.+?): (?P<path>\S.*)$")
DF_HEADER = re.compile(r"\bFilesystem\b.*\bMounted on\s*$")
OBJECT_TYPES = ("s3", "object", "minio", "gcs", "azure")


def _api(leaf: Leaf) -> str | None:
    sut, problem, _ = package_of(leaf).system_description(leaf.division, leaf.org, leaf.system)
    return None if problem else dig(sut, "solution", "architecture", "benchmark_API")


@rule("5.4.1", "vdbPathArgs").check(LEAF, benchmark=FAMILY)
def path_args(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """File-API leaves record a storage root and a results directory, and they are apart."""
    if not checker_block(leaf) or _api(leaf) == "object":
        return  # an object-API leaf: 5.5.1 validates the backend instead
    meta = leaf.metadata
    if resolved(leaf)[0] is None and meta is None:
        # the missing metadata is reported once, under LEAF-01 / 1.1
        yield not_checked(r, leaf, "the storage root and results directory", evidence_problem(leaf))
        return
    root, _ = fact(leaf, "storage_root")
    results, _ = fact(leaf, "results_dir")
    if not root:
        yield r.invalid(leaf.path, "no storage root recorded (--storage-root, storage.storage_root)")
    if not results:
        yield r.invalid(leaf.path_of("metadata"), "no results directory recorded (--results-dir)")
    if root and results and not apart(str(root), str(results)):
        yield r.invalid(leaf.path, f"the storage root {root} and the results directory {results} are not different directories")


def _df_entries(text: str) -> dict[str, dict[str, str]]:
    """{label: {path, filesystem, mount}} from the tool's 'df <label>: <path>' log records, each
    followed by df's header and one data row (with or without the Type column)."""
    found: dict[str, dict[str, str]] = {}
    current, typed = None, False
    for line in text.splitlines():
        match = DF_LINE.search(line)
        if match:
            current = match.group("label").strip()
            found[current] = {"path": match.group("path").strip()}
            continue
        if current is None:
            continue
        if DF_HEADER.search(line):
            typed = " Type " in line
            continue
        fields = line.split()
        use = next((i for i, f in enumerate(fields) if re.fullmatch(r"\d+%|-", f) and i >= 4
                    and all(x.isdigit() for x in fields[i - 3:i])), None)
        if use is not None and use + 1 < len(fields):
            found[current].update(filesystem=fields[use - (5 if typed else 4)], mount=" ".join(fields[use + 1:]))
            current = None
    return found


def _df_from_log(leaf: Leaf) -> tuple[tuple[dict[str, Any], dict[str, Any]] | None, str]:
    for name, kind, path in entries(leaf.path):
        if kind != FILE or not (name.endswith(".log")):
            continue
        text, _ = read_text(path, LOG_LIMIT)
        records = _df_entries(text or "")
        data = next((r for label, r in records.items() if "data" in label or "storage" in label), None)
        logs = next((r for label, r in records.items() if "result" in label or "log" in label), None)
        if data and logs and "mount" in data and "mount" in logs:
            return (data, logs), name
    return None, ""


@rule("5.4.2", "vdbFilesystemCheck").check(LEAF, benchmark=FAMILY)
def filesystem_check(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """The leaf's log holds a df of the data directory and of the results directory, on different filesystems."""
    if not checker_block(leaf) or _api(leaf) == "object":
        return
    found, log = _df_from_log(leaf)
    if found:
        data, results = found
        if (data.get("filesystem"), data["mount"]) == (results.get("filesystem"), results["mount"]):
            yield r.invalid(leaf.path / log, f"the data directory {data['path']} and the results directory "
                                             f"{results['path']} are on one filesystem ({data['mount']})")
        return
    fs = dig(leaf.summary, "filesystems")
    if isinstance(fs, dict) and isinstance(fs.get("data"), dict) and isinstance(fs.get("results"), dict):
        if fs.get("same_filesystem") is not False:
            yield r.invalid(leaf.path_of("summary"), "summary.json's df records put the data and the results on one filesystem")
        return
    separation = leaf.record("fs_separation")
    if separation.value is not None:
        if separation.value.get("same_filesystem") is not False:
            yield r.invalid(leaf.path / "fs_separation.json", "fs_separation.json shows the data and results on one filesystem")
        return
    why = "" if separation.missing else f": {separation.problem}"
    logs = [n for n, k, _ in entries(leaf.path) if k == FILE and n.endswith(".log")]
    absent = [n for n, present in named_outputs(leaf) if not present]
    read = f"read {', '.join(logs)}" if logs else "the leaf holds no log"
    gone = f"; {', '.join(absent)}, named in the metadata, {'is' if len(absent) == 1 else 'are'} absent" if absent else ""
    yield r.invalid(leaf.path, "no df of the data directory and the results directory in the leaf's log "
                               f"(nor a filesystem record in summary.json or fs_separation.json{why}; {read}{gone})")


def _is_object(found: Any) -> bool:
    return isinstance(found, str) and any(t in found.lower() for t in OBJECT_TYPES)


@rule("5.5.1", "vdbObjectStorageBackend").check(SYSTEM)
def object_backend(r: Rule, system: System) -> Iterable[Finding]:
    """An object-API system records an S3-compatible backend; each leaf's storage type agrees with the declared API."""
    leaves = [leaf for leaf in system.leaves if leaf.benchmark == FAMILY and checker_block(leaf)]
    if not leaves:
        return
    sut, problem, sys_path = system.package.system_description(system.division, system.org, system.name)
    if problem:
        return  # 2.1.7 / 2.1.8 report the description
    api = dig(sut, "solution", "architecture", "benchmark_API")
    if api == "object":
        architecture = dig(sut, "solution", "architecture") or {}
        backend = dig(sut, "solution", "storage_backend") or architecture.get("storage_backend")
        product = architecture.get("product_API")
        if not (_is_object(backend) or product == "object"):
            yield r.invalid(sys_path, f"the object-API system records no S3-compatible storage backend "
                                      f"(solution.architecture.product_API is {product!r}, no storage_backend)")
    for leaf in leaves:
        storage_type, _ = value(leaf, "storage_type", "storage", "storage_type")
        if api == "object" and storage_type is not None and not _is_object(storage_type):
            yield r.invalid(leaf.path, f"storage.storage_type {storage_type!r} is not object storage, "
                                       "but the system declares the object API")
        elif api == "file" and _is_object(storage_type):
            yield r.invalid(leaf.path, f"storage.storage_type {storage_type!r} is object storage, but the system "
                                       "declares the file API")


# --- 5.6 CLOSED / OPEN --------------------------------------------------------------------

def _judged(leaf: Leaf, division: str) -> bool:
    """5.6.2-5.6.5 judge one division's leaves of a checkable edition (section 5 filters on the
    edition alone: see rules_vdb.phase)."""
    return leaf.division == division and bool(checker_block(leaf))


def _backend(r: Rule, leaf: Leaf, allowed: list[str], refused: str) -> Generator[Finding, None, str | None]:
    """5.6.2's and 5.6.5's reading of the backend a leaf records: it must be one of `allowed` (else
    an INVALID, `refused` saying why after its name) and the engine directory the leaf sits under.
    Returns the backend recorded, None when none is."""
    found, where = database(leaf)
    if found is None:
        yield cannot(r, leaf, "the database backend", leaf.problem("summary") or "summary.json and config.json record no database.database")
    elif found not in allowed:
        yield r.invalid(leaf.path_of("summary"), f"database {found!r} ({where}){refused}")
    elif engine(leaf) != found:
        yield r.invalid(leaf.path, f"the leaf is under vector_database/{engine(leaf)}/ but records database {found!r}")
    return found


@rule("5.6.2", "vdbClosedDatabaseBackend").check(LEAF, benchmark=FAMILY)
def closed_backend(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """CLOSED leaves record database.database milvus, under vector_database/milvus/."""
    if not _judged(leaf, "closed"):
        return
    allowed = sorted(sanctioned(leaf, FAMILY))
    yield from _backend(r, leaf, allowed, f"; CLOSED runs {', '.join(allowed)}")


@rule("5.6.3", "vdbClosedIndexTypes").check(LEAF, benchmark=FAMILY)
def closed_index_types(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """CLOSED leaves record, and sit under, one of the CLOSED index types (DISKANN, HNSW, AISAQ)."""
    if not _judged(leaf, "closed"):
        return
    allowed = tables.workloads()[FAMILY]["index_types"]["closed"]
    if leaf.model not in allowed:
        yield r.invalid(leaf.workload_dir, f"index directory {leaf.model!r} is not a CLOSED index type ({', '.join(allowed)})")
    kind, where = index_type(leaf)
    if kind is None:
        why = missing_summary(leaf) if leaf.summary is None else "summary.json records no index_type"
        yield not_checked(r, leaf, "the index type", f"{why}; config.json and the metadata record none either")
    elif kind not in allowed:
        yield r.invalid(leaf.path_of("summary"), f"index_type {kind!r} ({where}) is not a CLOSED index type ({', '.join(allowed)})")
    elif kind != leaf.model:
        yield r.invalid(leaf.path_of("summary"), f"index_type {kind!r} ({where}) differs from its directory {leaf.model!r}")


def _overrides(leaf: Leaf) -> dict[str, Any]:
    found = dig(leaf.metadata, "override_parameters")
    return found if isinstance(found, dict) else {}


@rule("5.6.4", "vdbClosedSubmissionParameters").check(LEAF, benchmark=FAMILY)
def closed_parameters(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """CLOSED leaves change only the CLOSED tunables; the OPEN-only settings keep their CLOSED values."""
    if not _judged(leaf, "closed"):
        return
    allowed = tables.param_allowlist(FAMILY, "closed") | tables.tool_injected_params(FAMILY)
    params, where = resolved(leaf)
    config_problem = config(leaf)[1]
    if config_problem:
        yield r.invalid(leaf.path / "config.json", f"cannot read the run's parameters: {config_problem}")
    if params is None and leaf.metadata is None:
        if not config_problem:  # a broken config.json is reported above; a missing metadata under LEAF-01 / 1.1
            yield not_checked(r, leaf, "the parameters", evidence_problem(leaf))
        return
    overrides = _overrides(leaf)
    for key in sorted(k for k in overrides if k not in allowed):
        yield r.invalid(leaf.path_of("metadata"), f"{key} is not a CLOSED tunable (--params {key}={overrides[key]})")
    flat = flatten(params) if params else {}
    for key, fixed in sorted(predicates.vdb_closed_fixed(checker_block(leaf)).items()):
        found = flat.get(key)
        if found is not None and canonical(found) != canonical(fixed):
            yield r.invalid(leaf.path, f"{key} = {found!r} ({where}) is an OPEN setting; CLOSED runs with {fixed!r}")
    verdict = dig(leaf.metadata, "verification")
    if isinstance(verdict, str) and verdict.upper() not in ("CLOSED",):
        yield r.invalid(leaf.path_of("metadata"), f"the tool judged this run {verdict}, not CLOSED")


def _embedded_diskann(r: Rule, leaf: Leaf, kind: str | None) -> Iterable[Finding]:
    """The embedded DiskANN engine builds DISKANN only, and its leaf names diskannpy and its
    version, never Milvus (benchmarks/vectordb_diskann.py)."""
    if kind is not None and kind != "DISKANN":
        yield r.invalid(leaf.path_of("summary"), f"index_type {kind!r} on the embedded diskann engine, which builds DISKANN only")
    named = dig(leaf.summary, "engine")
    if leaf.summary is not None and (not isinstance(named, str) or not named.startswith("diskannpy ")
                                     or "milvus" in named.lower().replace("not milvus", "")):
        yield r.invalid(leaf.path_of("summary"), f"a diskann leaf must name its engine as diskannpy <version>, "
                                                 f"never Milvus; summary.json engine is {named!r}")


@rule("5.6.5", "vdbOpenSubmissionParameters").check(LEAF, benchmark=FAMILY)
def open_parameters(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """OPEN leaves record a supported backend and change only CLOSED, OPEN or backend-native index parameters."""
    if not _judged(leaf, "open"):
        return
    allowed = tables.param_allowlist(FAMILY, "open") | tables.tool_injected_params(FAMILY)
    milvus_types = tables.workloads()[FAMILY]["index_types"]["open"]
    backends = checker_block(leaf).get("vdb_open_backends") or sorted(sanctioned(leaf, FAMILY))
    found = yield from _backend(r, leaf, backends, f" is not a supported backend ({', '.join(backends)})")
    kind, _ = index_type(leaf)
    if found == "milvus" and kind is not None and kind not in milvus_types:
        yield r.invalid(leaf.path_of("summary"), f"index_type {kind!r} is not a Milvus index type ({', '.join(milvus_types)})")
    if found == "diskann":
        yield from _embedded_diskann(r, leaf, kind)
    overrides = _overrides(leaf)
    for key in sorted(k for k in overrides if k not in allowed and not k.startswith("index.")):
        yield r.invalid(leaf.path_of("metadata"), f"{key} is neither a CLOSED nor an OPEN tunable (--params {key}={overrides[key]})")
