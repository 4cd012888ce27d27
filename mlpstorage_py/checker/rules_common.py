"""Section 2: package structure, code images, provenance stamps and editions."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable, Iterable

from mlpstorage_py.results.tree import files
from mlpstorage_py.results.tree.package import TIMESTAMP, Package
from mlpstorage_py.checker.registry import INVALID, INFO, WARNING, Finding, finding, rule
from mlpstorage_py.launch import libraries
from mlpstorage_py.results import code_image
from mlpstorage_py.rules import tables


def section(stamp: dict, key: str) -> dict:
    """One object of a provenance stamp; a value of another type reads as empty (its own rule
    reports the malformed stamp), so a wrong type is never a crash."""
    value = stamp.get(key)
    return value if isinstance(value, dict) else {}


@rule("2.1.2", "topLevelSubdirectories")
def top_level(pkg: Package) -> Iterable[Finding]:
    """Top level holds closed/ and/or open/, code-images/, dot entries and marked org pools only."""
    allowed = {"closed", "open", code_image.POOL_DIR}
    for entry in sorted(pkg.root.iterdir()):
        if entry.name.startswith(".") or entry.name in allowed:
            continue
        if entry.is_dir() and (entry / code_image.POOL_MARKER).is_file():
            continue
        if entry.name == "mlperf-results.yaml":  # the live results tree's own sentinel
            continue
        yield finding("2.1.2", INVALID, entry, f"unexpected top-level entry {entry.name!r}")
    if not any((pkg.root / d).is_dir() for d in ("closed", "open")):
        yield finding("2.1.2", INVALID, pkg.root, "neither closed/ nor open/ is present")


@rule("2.1.6", "codeDirectoryContents", parts=True)
def code_images(pkg: Package) -> Iterable[Finding]:
    """Every leaf points at a pool image; every image re-hashes to its recorded hash."""
    for leaf in pkg.leaves:
        if leaf.pointer is None:
            yield finding("2.1.6", INVALID, leaf.path, f"no {code_image.POINTER_FILE}")
            continue
        digest = code_image.parse_pointer(leaf.pointer)
        if digest is None:
            yield finding("2.1.6", INVALID, leaf.path, f"malformed {code_image.POINTER_FILE}: {leaf.pointer.strip()!r}")
        elif pkg.resolve_image(leaf, digest) is None:
            yield finding("2.1.6", INVALID, leaf.path, f"code image code-{digest[:8]} is not in the pool")
    for image in pkg.image_dirs() if pkg.closes else ():
        stamp_path = image / code_image.HASH_FILE
        if not stamp_path.is_file():
            yield finding("2.1.6", INVALID, image, f"no {code_image.HASH_FILE}")
            continue
        stamp = files.json_or_unreadable(stamp_path)
        recorded = stamp.get("hash") if isinstance(stamp, dict) else None
        if not isinstance(recorded, str):
            yield finding("2.1.6", INVALID, stamp_path, "unreadable .code-hash.json or no \"hash\" in it")
            continue
        if not recorded.startswith(image.name[len("code-"):]):
            yield finding("2.1.6", INVALID, image, f"recorded hash {recorded} does not begin with the directory's {image.name}")
        if len(list(image.iterdir())) == 1:
            yield finding("2.1.6", INVALID, image, "image holds only its .code-hash.json: the source tree was not captured")
            continue
        actual = code_image.tree_hash(image)
        if actual != recorded:
            # What is known is that the files present do not re-hash to the recorded tree: some
            # of it is missing (a partial copy) or altered; which one the pool cannot tell.
            count = sum(1 for path in image.rglob("*") if path.is_file() and path.name != code_image.HASH_FILE)
            yield finding("2.1.6", INVALID, image, f"the {count} file(s) present re-hash to {actual}, not the recorded {recorded}: "
                                                   "the captured source tree is incomplete or altered")


@functools.cache
def reference_digests(edition: str) -> list[str]:
    """Published reference digests of the sanctioned release (code-images/reference-digests.yaml)."""
    path = code_image.source_root() / "code-images" / "reference-digests.yaml"
    if not path.is_file():
        return []
    table = files.yaml_or_unreadable(path) or {}
    return list((table.get("editions") or {}).get(edition) or [])


def closed_checksum(pkg: Package, number: str, benchmarks: tuple[str, ...]) -> Iterable[Finding]:
    """Shared by 3.6.1 and 5.6.1: CLOSED images must be the sanctioned release, where published."""
    for leaf in pkg.leaves:
        if leaf.division != "closed" or leaf.benchmark not in benchmarks or leaf.pointer is None:
            continue
        edition = leaf.stamped_edition if leaf.stamped_edition != "unknown" else tables.editions()["current_edition"]
        published = reference_digests(edition) + ([pkg.reference_digest] if pkg.reference_digest else [])
        digest = code_image.parse_pointer(leaf.pointer)
        if published and digest not in published:
            yield finding(number, INVALID, leaf.path, f"code image {digest} is not a sanctioned {edition} release")


@rule("3.6.1", "trainingClosedSubmissionChecksum", parts=True)
def training_checksum(pkg: Package) -> Iterable[Finding]:
    """CLOSED training leaves run the sanctioned release (no finding while none is published)."""
    yield from closed_checksum(pkg, "3.6.1", ("training",))


@rule("5.6.1", "vdbClosedSubmissionChecksum", parts=True)
def vdb_checksum(pkg: Package) -> Iterable[Finding]:
    """CLOSED vector-database leaves run the sanctioned release (no finding while none is published)."""
    yield from closed_checksum(pkg, "5.6.1", ("vector_database",))


@rule("PROV-01", "leafProvenance", parts=True)
def leaf_provenance(pkg: Package) -> Iterable[Finding]:
    """A present provenance.json parses and names the leaf's code image; a declared one exists."""
    for leaf in pkg.leaves:
        declared = (leaf.metadata or {}).get("provenance_file")
        stamp = leaf.provenance
        if stamp is None:
            if declared:
                yield finding("PROV-01", INVALID, leaf.path, f"metadata declares {declared} but it is missing")
            continue
        if "__unreadable__" in stamp:
            yield finding("PROV-01", INVALID, leaf.path, f"provenance does not parse: {stamp['__unreadable__']}")
            continue
        pointer = (leaf.pointer or "").strip()
        if section(stamp, "tool").get("code_image") != pointer:
            yield finding("PROV-01", INVALID, leaf.path, f"provenance names {section(stamp, 'tool').get('code_image')}, pointer says {pointer}")


@rule("PROV-02", "submissionManifest", parts=True)
def submission_manifest(pkg: Package) -> Iterable[Finding]:
    """A present submission.yaml parses, lists exactly the tree's run leaves and their edition."""
    declared: dict[tuple[str, str], str] = {}
    for division, org, org_dir in pkg.orgs:
        found = pkg.manifest(division, org)
        if found is None:
            continue
        path, manifest = found
        if not isinstance(manifest, dict) or "__unreadable__" in manifest:
            if pkg.opens:
                yield finding("PROV-02", INVALID, path, "submission.yaml does not parse")
            continue
        declared[(division, org)] = str(manifest.get("rules_edition"))
        if not pkg.opens:
            continue
        listed = {e.get("path") for e in manifest.get("leaves") or []}
        actual = {pkg.relative(leaf.path) for leaf in (pkg.whole or pkg).leaves  # the paths report.manifest lists
                  if (leaf.division, leaf.org) == (division, org)}
        for missing in sorted(actual - listed):
            yield finding("PROV-02", INVALID, path, f"stale manifest: leaf {missing} is not listed")
        for extra in sorted(listed - actual):
            yield finding("PROV-02", INVALID, path, f"stale manifest: lists {extra}, which the tree does not hold")
    for leaf in pkg.leaves:
        edition = declared.get((leaf.division, leaf.org))
        if edition is not None and leaf.stamped_edition not in ("unknown", edition):
            yield finding("PROV-02", INVALID, leaf.path, f"leaf stamped {leaf.stamped_edition}, manifest declares {edition}")


@rule("LEAF-01", "runLeafMetadata", parts=True)
def run_leaf_metadata(pkg: Package) -> Iterable[Finding]:
    """kv_cache and vector_database run leaves carry exactly one *_metadata.json."""
    for leaf in pkg.leaves:
        if leaf.benchmark in ("kv_cache", "vector_database") and leaf.command == "run":
            count = len(leaf.metadata_files)
            if count != 1:
                yield finding("LEAF-01", INVALID, leaf.path, f"{count} *_metadata.json files (exactly one required)")


def _manifest_edition(pkg: Package, division: str, org: str) -> str | None:
    found = pkg.manifest(division, org)
    return str(found[1].get("rules_edition")) if found and isinstance(found[1], dict) else None


@rule("EDN-01", "rulesEdition", parts=True)
def rules_edition(pkg: Package) -> Iterable[Finding]:
    """Stamps and manifests declare an edition the editions table knows."""
    known = tables.editions()["editions"]
    for leaf in pkg.leaves:
        if leaf.provenance and leaf.stamped_edition not in known and leaf.stamped_edition != "unknown":
            yield finding("EDN-01", INVALID, leaf.path, f"unknown rules edition {leaf.stamped_edition!r}")
    for division, org, org_dir in pkg.orgs if pkg.opens else ():
        edition = _manifest_edition(pkg, division, org)
        if edition is not None and edition not in known:
            yield finding("EDN-01", INVALID, org_dir / "submission.yaml", f"unknown rules edition {edition!r}")


def leaf_class(leaf_division: str, family: str, model: str, accelerator: str | None, edition: str,
               digest: str) -> str | None:
    """The comparability class a stamped run resolves to, or None."""
    for entry in tables.comparability_classes():
        if (entry["division"] == leaf_division and entry["family"] == family and entry["model"] == model
                and entry["accelerator"] in ("any", accelerator) and edition in entry["editions"]
                and digest in entry["core_configs"]):
            return entry["id"]
    return None


@rule("EDN-02", "comparabilityClass", parts=True)
def comparability_class(pkg: Package) -> Iterable[Finding]:
    """A stamped run leaf resolves to a class: INVALID under closed, INFO under open."""
    for leaf in pkg.leaves:
        stamp = leaf.provenance
        if leaf.command != "run" or not stamp or "__unreadable__" in stamp:
            continue
        digest = str(section(stamp, "core_config").get("hash", "unknown"))
        if digest == "unknown":
            continue
        accelerator = (leaf.metadata or {}).get("accelerator")
        found = leaf_class(leaf.division, leaf.benchmark, leaf.model, accelerator, leaf.stamped_edition, digest)
        if found is None:
            severity = INVALID if leaf.division == "closed" else INFO
            yield finding("EDN-02", severity, leaf.path,
                          f"core config {digest} of {leaf.benchmark} {leaf.model} ({accelerator}) is in no comparability class")


def _hosts(stamp: dict) -> list[dict]:
    """The per-host records of what the ranks imported (launch/libraries.py); [] for a leaf
    written before they were recorded, whose launcher-side fields are then judged."""
    return libraries.host_entries(stamp.get("libraries"))


def _by_value(hosts: list[dict], value: Callable[[dict], str]) -> dict[str, list[str]]:
    """{value(host entry): [hostnames]}, in host order."""
    grouped: dict[str, list[str]] = {}
    for entry in hosts:
        names = grouped.setdefault(value(entry), [])
        if entry["hostname"] not in names:
            names.append(entry["hostname"])
    return grouped


@rule("EDN-03", "dlioRevision", parts=True)
def dlio_revision(pkg: Package) -> Iterable[Finding]:
    """A stamped run leaf's DLIO commit, as each host's ranks imported it, is in its edition's accepted list (else a warning)."""
    for leaf in pkg.leaves:
        stamp = leaf.provenance
        if leaf.command != "run" or not stamp or leaf.benchmark not in ("training", "checkpointing"):
            continue
        accepted = tables.edition(leaf.stamped_edition).get("dlio_revisions", []) if leaf.stamped_edition in tables.editions()["editions"] else []
        hosts = _hosts(stamp)
        if hosts:
            ran = [h for h in hosts if isinstance(h["libraries"].get("dlio_benchmark"), dict)]  # none: our engine ran
            commits = _by_value(ran, lambda h: str(h["libraries"]["dlio_benchmark"].get("commit", "unknown")))
            for commit, names in commits.items():
                if commit not in accepted:
                    yield finding("EDN-03", WARNING, leaf.path, f"DLIO commit {commit}, imported by the ranks on "
                                                                f"{', '.join(names)}, is not an accepted {leaf.stamped_edition} revision")
            continue
        commit = str(section(stamp, "dlio").get("commit", "unknown"))
        if commit != "n/a" and commit not in accepted:
            yield finding("EDN-03", WARNING, leaf.path, f"DLIO commit {commit} is not an accepted {leaf.stamped_edition} revision")


@rule("EDN-04", "checkableEdition")
def checkable_edition(pkg: Package) -> Iterable[Finding]:
    """A manifest's edition must have a checker block."""
    for division, org, org_dir in pkg.orgs:
        edition = _manifest_edition(pkg, division, org)
        if edition in tables.editions()["editions"] and not tables.checker(edition):
            yield finding("EDN-04", INVALID, org_dir / "submission.yaml", f"edition {edition} has no checker block; workload checks skipped")


@rule("EDN-05", "storageLibraryVersion", parts=True)
def storage_library_version(pkg: Package) -> Iterable[Finding]:
    """A stamped object run leaf's storage library version, as each host's ranks imported it, is in its edition's accepted list (else a warning).

    The list is editions.yaml's storage_libraries; file runs record no library and are skipped.
    A leaf written before the ranks' versions were recorded is judged by storage_library.version."""
    known = tables.editions()["editions"]
    for leaf in pkg.leaves:
        stamp = leaf.provenance
        if leaf.command != "run" or not stamp or "__unreadable__" in stamp:
            continue
        library = stamp.get("storage_library")
        name = str(library.get("name") or "") if isinstance(library, dict) else None
        if not name or name == "none":
            continue  # a file run: no client storage library
        edition = leaf.stamped_edition
        accepted = (tables.edition(edition).get("storage_libraries") or {}).get(name, []) if edition in known else []
        listed = ", ".join(accepted) or "none"
        where = leaf.path / "provenance.json"
        hosts = _hosts(stamp) if name in libraries.LIBRARIES else []
        if not hosts:
            version = str(library.get("version", "unknown"))
            if version not in accepted:
                yield finding("EDN-05", WARNING, where,
                              f"storage library {name} {version} is not an accepted {edition} version (accepted: {listed})")
            continue
        for version, names in _by_value(hosts, lambda h: libraries.version_of(h, name)).items():
            if version == libraries.NOT_IMPORTED:
                yield finding("EDN-05", WARNING, where, f"the ranks on {', '.join(names)} did not import {name}: "
                                                        "the version that did their object I/O is not recorded")
            elif version not in accepted:
                yield finding("EDN-05", WARNING, where, f"storage library {name} {version}, imported by the ranks on "
                                                        f"{', '.join(names)}, is not an accepted {edition} version (accepted: {listed})")


@rule("EDN-06", "libraryVersionsAcrossHosts", parts=True)
def library_versions_across_hosts(pkg: Package) -> Iterable[Finding]:
    """A leaf whose ranks imported DLIO, s3dlio, torch, numpy or mpi4py at different versions on different hosts (a warning naming them)."""
    for leaf in pkg.leaves:
        stamp = leaf.provenance
        if not stamp or "__unreadable__" in stamp:
            continue
        for module, by_version in libraries.disagreements(_hosts(stamp)):
            yield finding("EDN-06", WARNING, leaf.path / "provenance.json", libraries.describe(module, by_version))


def _ids(path: Path) -> set[str]:
    data = files.json_or_unreadable(path)
    rows = data.get("rows") if isinstance(data, dict) else None
    return {str(r["Public ID"]) for r in (rows if isinstance(rows, list) else []) if isinstance(r, dict) and r.get("Public ID")}


def _workload_tables(results: Path) -> Iterable[Path]:
    """Every results.json in a real directory below results/ (the rollup's own excluded),
    short of the timestamp directories: a run's own files are no workload-level table, and
    what lies above them Package.load has listed already."""
    stack = [path for _, kind, path in files.entries(results) if kind == files.DIR]
    while stack:
        directory = stack.pop()
        for name, kind, path in files.entries(directory):
            if kind == files.DIR and not TIMESTAMP.match(name):
                stack.append(path)
            elif name == "results.json" and kind == files.FILE:
                yield path


@rule("RPT-01", "rollupTableAgreement")
def rollup_agreement(pkg: Package) -> Iterable[Finding]:
    """Public IDs in an organization's rollup and in its workload-level results.json agree."""
    for division, org, org_dir in pkg.orgs:
        rollup = org_dir / "results" / "results.json"
        if not files.real_file(rollup):
            continue
        workload = set()
        for path in _workload_tables(org_dir / "results"):
            workload |= _ids(path)
        top = _ids(rollup)
        for missing in sorted(top - workload):
            yield finding("RPT-01", INVALID, rollup, f"Public ID {missing} has no workload-level results.json row")
        for missing in sorted(workload - top):
            yield finding("RPT-01", INVALID, rollup, f"Public ID {missing} of a workload-level table is not in the rollup")
