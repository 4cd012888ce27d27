"""provenance.json: which tool, engine and workload made a leaf, and the comparability class a
stamped run resolves to.

Provenance (provenance.json), key "schema":
    mlps-run-provenance/1   rules_edition, layout_version, tool, dlio, storage_library, core_config,
                            stamped_at/by and where each came from; later runs add engine and libraries
Published v3.0 leaves hold no provenance.json: there is no unversioned form to read.
"""

from __future__ import annotations

import functools
import json
from importlib import metadata
from pathlib import Path
from typing import Any

from mlpstorage_py import LAYOUT_VERSION, RULES_EDITION, __version__
from mlpstorage_py.results import libraries
from mlpstorage_py.results.code_image import git_sha, pointer_text
from mlpstorage_py.results.io import utc_now
from mlpstorage_py.results.schema import NUMBER, OBJECT, TEXT, Schema
from mlpstorage_py.rules import tables
from mlpstorage_py.rules.configs import source_root
from mlpstorage_py.rules.core_config import core_config

FILE_NAME = "provenance.json"
SCHEMA = "mlps-run-provenance/1"
UNKNOWN = "unknown"


class Provenance(Schema):
    KIND = FILE_NAME
    VERSION_KEY = "schema"
    VERSION = SCHEMA
    OLDER = ()
    FIELDS = {"rules_edition": TEXT, "layout_version": NUMBER, "tool": OBJECT, "dlio": OBJECT, "storage_library": OBJECT,
              "core_config": OBJECT, "provenance": OBJECT}


def section(stamp: dict[str, Any], key: str) -> dict[str, Any]:
    """One object of a provenance stamp; a value of another type reads as empty (its own rule
    reports the malformed stamp), so a wrong type is never a crash."""
    value = stamp.get(key)
    return value if isinstance(value, dict) else {}


def leaf_class(leaf_division: str, family: str, model: str, accelerator: str | None, edition: str,
               digest: str) -> str | None:
    """The comparability class a stamped run resolves to, or None (EDN-02 and reportgen's column)."""
    for entry in _classes_of(leaf_division, family, model):
        if entry["accelerator"] in ("any", accelerator) and edition in entry["editions"] and digest in entry["core_configs"]:
            found: str = entry["id"]
            return found
    return None


@functools.cache  # every run leaf asks: the table is searched once per workload, not per leaf
def _classes_of(division: str, family: str, model: str) -> tuple[dict[str, Any], ...]:
    """The comparability classes of one division's workload, in the table's order."""
    return tuple(entry for entry in tables.comparability_classes()
                 if entry["division"] == division and entry["family"] == family and entry["model"] == model)


def dlio_stamp() -> tuple[dict[str, str], str]:
    """The installed DLIO distribution: version from package metadata, commit from PEP 610."""
    try:
        dist = metadata.distribution("dlio-benchmark")
    except metadata.PackageNotFoundError:
        return {"version": UNKNOWN, "source": UNKNOWN, "commit": UNKNOWN}, "unknown"
    return stamp_from_metadata(dist.version, dist.read_text("direct_url.json"))


def stamp_from_metadata(version: str | None, direct: str | None) -> tuple[dict[str, str], str]:
    """A DLIO stamp from a distribution's version and PEP 610 direct_url.json text (also read
    from another environment by benchmarks.dlio_engine)."""
    stamp = {"version": version or UNKNOWN, "source": "pypi", "commit": UNKNOWN}
    if not direct:
        return stamp, "package-metadata"
    info = json.loads(direct)
    stamp["source"] = info.get("url", UNKNOWN)
    stamp["commit"] = (info.get("vcs_info") or {}).get("commit_id", UNKNOWN)
    return stamp, "direct-url"


def build(family: str, parameters: dict[str, Any], code_hash: str, engine: str | None,
          storage_library: dict[str, str] | None = None,
          dlio_engine: tuple[dict[str, str], str] | None = None,
          engine_identity: dict[str, str] | None = None,
          rank_libraries: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The stamp for one leaf; every value is a string or number, never null. `engine` names
    what ran the workload when it was not DLIO (the dlio block then says n/a); `dlio_engine`
    is the (stamp, tag) of the DLIO that ran when the benchmark chose one (--dlio-bin-path,
    checkpointing's --engine dlio); `engine_identity` is what the run printed as its engine
    (name, version, path, origin); `rank_libraries` the per-host records of what the ranks
    imported (results/libraries.collect), which also give storage_library its version when
    every host imported the same one."""
    if dlio_engine is not None:
        dlio, dlio_tag = dlio_engine
    elif engine is None:
        dlio, dlio_tag = dlio_stamp()
    else:
        dlio, dlio_tag = {"version": "n/a", "source": engine, "commit": "n/a"}, "n/a"
    storage = dict(storage_library or {"name": "none"})
    storage_tag = "runtime" if storage.get("name") != "none" else "n/a"
    if rank_libraries and storage.get("name") in libraries.LIBRARIES:
        seen = {libraries.version_of(e, storage["name"]) for e in rank_libraries} - {libraries.NOT_IMPORTED}
        if len(seen) == 1:
            storage["version"], storage_tag = seen.pop(), "ranks"
    stamp: dict[str, Any] = {
        "schema": SCHEMA,
        "rules_edition": RULES_EDITION,
        "layout_version": LAYOUT_VERSION,
        "tool": {
            "name": "mlpstorage",
            "version": __version__,
            "git_sha": git_sha(source_root()) or UNKNOWN,
            "code_image": pointer_text(code_hash),
        },
        "dlio": dlio,
        "storage_library": storage,
        "core_config": core_config(family, parameters),
        "stamped_at": utc_now(),
        "stamped_by": f"mlpstorage {__version__}",
        "provenance": {
            "rules_edition": "tool-constant",
            "layout_version": "tool-constant",
            "tool": "package-metadata",
            "dlio": dlio_tag,
            "storage_library": storage_tag,
            "core_config": "runtime",
        },
    }
    if engine_identity:
        stamp["engine"] = dict(engine_identity)
        stamp["provenance"]["engine"] = "runtime"
    if rank_libraries:
        stamp["libraries"] = {"hosts": rank_libraries}
        stamp["provenance"]["libraries"] = "ranks"
    return stamp


def write(leaf: Path, stamp: dict[str, Any]) -> None:
    Provenance(stamp).write(leaf / FILE_NAME)
