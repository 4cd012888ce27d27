"""provenance.json (schema mlps-run-provenance/1): which tool, engine and workload made a leaf."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from typing import Any

from mlpstorage_py import LAYOUT_VERSION, RULES_EDITION, __version__
from mlpstorage_py.results import libraries
from mlpstorage_py.results.code_image import git_sha, pointer_text
from mlpstorage_py.rules.configs import source_root
from mlpstorage_py.results.io import utc_now, write_json
from mlpstorage_py.rules.core_config import core_config

FILE_NAME = "provenance.json"
SCHEMA = "mlps-run-provenance/1"
UNKNOWN = "unknown"


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
    write_json(leaf / FILE_NAME, stamp)
