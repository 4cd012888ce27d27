"""Section 5, where and on what a vector database run ran: path arguments and filesystems (5.4),
object storage (5.5) and the CLOSED backend, index types and parameters (5.6.2-5.6.5). The leaf
reader (Vdb) and the shared helpers live in vdb_leaves.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from mlpstorage_py.results.tree.files import FILE, entries, read_text
from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.checker.registry import INVALID, Finding, finding, rule
from mlpstorage_py.checker.structure_helpers import apart, dig, sanctioned, system_description
from mlpstorage_py.checker.vdb_leaves import FAMILY, LOG_LIMIT, Vdb, _cannot, _leaves, _not_checked
from mlpstorage_py.rules import tables
from mlpstorage_py.rules.core_config import canonical, flatten

DF_LINE = re.compile(r"\bdf (?P<label>.+?): (?P<path>\S.*)$")
DF_HEADER = re.compile(r"\bFilesystem\b.*\bMounted on\s*$")
OBJECT_TYPES = ("s3", "object", "minio", "gcs", "azure")


def _api(pkg: Package, v: Vdb) -> str | None:
    sut, problem, _ = system_description(pkg, v.division, v.leaf.org, v.leaf.system)
    return None if problem else dig(sut, "solution", "architecture", "benchmark_API")


@rule("5.4.1", "vdbPathArgs", parts=True)
def path_args(pkg: Package) -> Iterable[Finding]:
    """File-API leaves record a storage root and a results directory, and they are apart."""
    for v in _leaves(pkg):
        if _api(pkg, v) == "object":
            continue  # 5.5.1 validates the backend instead
        if v.parameters[0] is None and v.meta is None:
            # the missing metadata is reported once, under LEAF-01 / 1.1
            yield _not_checked("5.4.1", v, "the storage root and results directory", v.evidence_problem())
            continue
        root = v.param("storage", "storage_root") or dig(v.meta, "args", "data_dir")
        results = dig(v.meta, "args", "results_dir") or dig(v.meta, "result_dir")
        if not root:
            yield finding("5.4.1", INVALID, v.path, "no storage root recorded (--storage-root, storage.storage_root)")
        if not results:
            yield finding("5.4.1", INVALID, v.rec.meta_path, "no results directory recorded (--results-dir)")
        if root and results and not apart(str(root), str(results)):
            yield finding("5.4.1", INVALID, v.path, f"the storage root {root} and the results directory {results} are not different directories")


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


def _df_from_log(v: Vdb) -> tuple[tuple[dict, dict] | None, str]:
    for name, kind, path in entries(v.path):
        if kind != FILE or not (name.endswith(".log")):
            continue
        text, _ = read_text(path, LOG_LIMIT)
        records = _df_entries(text or "")
        data = next((r for label, r in records.items() if "data" in label or "storage" in label), None)
        logs = next((r for label, r in records.items() if "result" in label or "log" in label), None)
        if data and logs and "mount" in data and "mount" in logs:
            return (data, logs), name
    return None, ""


@rule("5.4.2", "vdbFilesystemCheck", parts=True)
def filesystem_check(pkg: Package) -> Iterable[Finding]:
    """The leaf's log holds a df of the data directory and of the results directory, on different filesystems."""
    for v in _leaves(pkg):
        if _api(pkg, v) == "object":
            continue
        found, log = _df_from_log(v)
        if found:
            data, logs = found
            if (data.get("filesystem"), data["mount"]) == (logs.get("filesystem"), logs["mount"]):
                yield finding("5.4.2", INVALID, v.path / log, f"the data directory {data['path']} and the results directory "
                                                              f"{logs['path']} are on one filesystem ({data['mount']})")
            continue
        fs = dig(v.summary, "filesystems")
        if isinstance(fs, dict) and isinstance(fs.get("data"), dict) and isinstance(fs.get("results"), dict):
            if fs.get("same_filesystem") is not False:
                yield finding("5.4.2", INVALID, v.rec.summary_path, "summary.json's df records put the data and the results on one filesystem")
            continue
        recorded, problem = v.rec.fs_separation
        if recorded is not None:
            if recorded.get("same_filesystem") is not False:
                yield finding("5.4.2", INVALID, v.path / "fs_separation.json", "fs_separation.json shows the data and results on one filesystem")
            continue
        why = "" if problem == "missing" else f": {problem}"
        logs = [n for n, k, _ in entries(v.path) if k == FILE and n.endswith(".log")]
        absent = [n for n, present in v.named_outputs() if not present]
        read = f"read {', '.join(logs)}" if logs else "the leaf holds no log"
        gone = f"; {', '.join(absent)}, named in the metadata, {'is' if len(absent) == 1 else 'are'} absent" if absent else ""
        yield finding("5.4.2", INVALID, v.path, "no df of the data directory and the results directory in the leaf's log "
                                                f"(nor a filesystem record in summary.json or fs_separation.json{why}; {read}{gone})")


def _is_object(value: Any) -> bool:
    return isinstance(value, str) and any(t in value.lower() for t in OBJECT_TYPES)


@rule("5.5.1", "vdbObjectStorageBackend", parts=True)
def object_backend(pkg: Package) -> Iterable[Finding]:
    """An object-API system records an S3-compatible backend; each leaf's storage type agrees with the declared API."""
    told: set[tuple[str, str, str]] = set()
    for v in _leaves(pkg):
        sut, problem, sys_path = system_description(pkg, v.division, v.leaf.org, v.leaf.system)
        if problem:
            continue  # 2.1.7 / 2.1.8 report the description
        api = dig(sut, "solution", "architecture", "benchmark_API")
        storage_type, _ = v.value("storage_type", "storage", "storage_type")
        key = (v.division, v.leaf.org, v.leaf.system)
        if api == "object":
            architecture = dig(sut, "solution", "architecture") or {}
            backend = dig(sut, "solution", "storage_backend") or architecture.get("storage_backend")
            product = architecture.get("product_API")
            if key not in told and not (_is_object(backend) or product == "object"):
                told.add(key)
                yield finding("5.5.1", INVALID, sys_path, f"the object-API system records no S3-compatible storage backend "
                                                          f"(solution.architecture.product_API is {product!r}, no storage_backend)")
            if storage_type is not None and not _is_object(storage_type):
                yield finding("5.5.1", INVALID, v.path, f"storage.storage_type {storage_type!r} is not object storage, "
                                                        "but the system declares the object API")
        elif api == "file" and _is_object(storage_type):
            yield finding("5.5.1", INVALID, v.path, f"storage.storage_type {storage_type!r} is object storage, but the system "
                                                    "declares the file API")


# --- 5.6 CLOSED / OPEN --------------------------------------------------------------------

@rule("5.6.2", "vdbClosedDatabaseBackend", parts=True)
def closed_backend(pkg: Package) -> Iterable[Finding]:
    """CLOSED leaves record database.database milvus, under vector_database/milvus/."""
    for v in _leaves(pkg):
        if v.division != "closed":
            continue
        allowed = sorted(sanctioned(pkg, v.division, v.leaf.org, FAMILY))
        database, where = v.database()
        if database is None:
            yield _cannot("5.6.2", v, "the database backend", v.summary_problem or "summary.json and config.json record no database.database")
            continue
        if database not in allowed:
            yield finding("5.6.2", INVALID, v.rec.summary_path, f"database {database!r} ({where}); CLOSED runs {', '.join(allowed)}")
        elif v.engine != database:
            yield finding("5.6.2", INVALID, v.path, f"the leaf is under vector_database/{v.engine}/ but records database {database!r}")


@rule("5.6.3", "vdbClosedIndexTypes", parts=True)
def closed_index_types(pkg: Package) -> Iterable[Finding]:
    """CLOSED leaves record, and sit under, one of the CLOSED index types (DISKANN, HNSW, AISAQ)."""
    allowed = tables.workloads()[FAMILY]["index_types"]["closed"]
    for v in _leaves(pkg):
        if v.division != "closed":
            continue
        if v.index_dir not in allowed:
            yield finding("5.6.3", INVALID, v.leaf.workload_dir,
                f"index directory {v.index_dir!r} is not a CLOSED index type ({', '.join(allowed)})")
        kind, where = v.index_type()
        if kind is None:
            why = v.missing_summary() if v.summary is None else "summary.json records no index_type"
            yield _not_checked("5.6.3", v, "the index type", f"{why}; config.json and the metadata record none either")
        elif kind not in allowed:
            yield finding("5.6.3", INVALID, v.rec.summary_path,
                f"index_type {kind!r} ({where}) is not a CLOSED index type ({', '.join(allowed)})")
        elif kind != v.index_dir:
            yield finding("5.6.3", INVALID, v.rec.summary_path, f"index_type {kind!r} ({where}) differs from its directory {v.index_dir!r}")


def _overrides(v: Vdb) -> dict:
    value = dig(v.meta, "override_parameters")
    return value if isinstance(value, dict) else {}


@rule("5.6.4", "vdbClosedSubmissionParameters", parts=True)
def closed_parameters(pkg: Package) -> Iterable[Finding]:
    """CLOSED leaves change only the CLOSED tunables; the OPEN-only settings keep their CLOSED values."""
    allowed = tables.param_allowlist(FAMILY, "closed") | tables.tool_injected_params(FAMILY)
    for v in _leaves(pkg):
        if v.division != "closed":
            continue
        params, where = v.parameters
        if v.config[1]:
            yield finding("5.6.4", INVALID, v.path / "config.json", f"cannot read the run's parameters: {v.config[1]}")
        if params is None and v.meta is None:
            if not v.config[1]:  # a broken config.json is reported above; a missing metadata under LEAF-01 / 1.1
                yield _not_checked("5.6.4", v, "the parameters", v.evidence_problem())
            continue
        for key in sorted(k for k in _overrides(v) if k not in allowed):
            yield finding("5.6.4", INVALID, v.rec.meta_path, f"{key} is not a CLOSED tunable (--params {key}={_overrides(v)[key]})")
        flat = flatten(params) if params else {}
        for key, fixed in sorted(v.checker.get("vdb_closed_fixed", {}).items()):
            value = flat.get(key)
            if value is not None and canonical(value) != canonical(fixed):
                yield finding("5.6.4", INVALID, v.path, f"{key} = {value!r} ({where}) is an OPEN setting; CLOSED runs with {fixed!r}")
        verdict = dig(v.meta, "verification")
        if isinstance(verdict, str) and verdict.upper() not in ("CLOSED",):
            yield finding("5.6.4", INVALID, v.rec.meta_path, f"the tool judged this run {verdict}, not CLOSED")


@rule("5.6.5", "vdbOpenSubmissionParameters", parts=True)
def open_parameters(pkg: Package) -> Iterable[Finding]:
    """OPEN leaves record a supported backend and change only CLOSED, OPEN or backend-native index parameters."""
    allowed = tables.param_allowlist(FAMILY, "open") | tables.tool_injected_params(FAMILY)
    milvus_types = tables.workloads()[FAMILY]["index_types"]["open"]
    for v in _leaves(pkg):
        if v.division != "open":
            continue
        backends = v.checker.get("vdb_open_backends") or sorted(sanctioned(pkg, v.division, v.leaf.org, FAMILY))
        database, where = v.database()
        if database is None:
            yield _cannot("5.6.5", v, "the database backend", v.summary_problem or "summary.json and config.json record no database.database")
        elif database not in backends:
            yield finding("5.6.5", INVALID, v.rec.summary_path,
                f"database {database!r} ({where}) is not a supported backend ({', '.join(backends)})")
        elif v.engine != database:
            yield finding("5.6.5", INVALID, v.path, f"the leaf is under vector_database/{v.engine}/ but records database {database!r}")
        kind, _ = v.index_type()
        if database == "milvus" and kind is not None and kind not in milvus_types:
            yield finding("5.6.5", INVALID, v.rec.summary_path, f"index_type {kind!r} is not a Milvus index type ({', '.join(milvus_types)})")
        for key in sorted(k for k in _overrides(v) if k not in allowed and not k.startswith("index.")):
            yield finding("5.6.5", INVALID, v.rec.meta_path,
                f"{key} is neither a CLOSED nor an OPEN tunable (--params {key}={_overrides(v)[key]})")
