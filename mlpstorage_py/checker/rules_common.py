"""Section 2: package structure, code images, provenance stamps and editions.

What a leaf holds (its pointer, its provenance stamp) is judged leaf by leaf; what the package
holds beside its systems (the top level, the code-image pool, the manifests) by its package
checks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from mlpstorage_py.checker.judging import package_of
from mlpstorage_py.checker.registry import INFO, INVALID, LEAF, PACKAGE, RESULT, SYSTEM, Finding, Rule, rule
from mlpstorage_py.results import code_image, libraries
from mlpstorage_py.results.provenance import leaf_class, section
from mlpstorage_py.results.tree import files
from mlpstorage_py.results.tree.package import TIMESTAMP, Leaf, Package, Result, System
from mlpstorage_py.rules import tables
from mlpstorage_py.rules.configs import source_root


@rule("2.1.2", "topLevelSubdirectories").check(PACKAGE)
def top_level(r: Rule, pkg: Package) -> Iterable[Finding]:
    """Top level holds closed/ and/or open/, code-images/, dot entries and marked org pools only:
    as the tree reader lists it, so a linked directory is none (rule 1.1 reports the link)."""
    allowed = {"closed", "open", code_image.POOL_DIR}
    top = files.names(pkg.root)
    for name, kind in top.items():
        if name.startswith(".") or name in allowed:
            continue
        entry = files.child(pkg.root, name)
        if kind == files.DIR and files.real_file(entry / code_image.POOL_MARKER):
            continue
        if name == "mlperf-results.yaml":  # the live results tree's own sentinel
            continue
        yield r.invalid(entry, f"unexpected top-level entry {name!r}")
    if not any(top.get(d) == files.DIR for d in ("closed", "open")):
        yield r.invalid(pkg.root, "neither closed/ nor open/ is present")


CODE_IMAGES = rule("2.1.6", "codeDirectoryContents")


@CODE_IMAGES.check(LEAF)
def code_pointer(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """Every leaf points at a pool image; every image re-hashes to its recorded hash. An image is
    one the tree reader lists: a linked pool, image or stamp is none (rule 1.1 reports the link)."""
    if leaf.pointer is None:
        yield r.invalid(leaf.path, f"no {code_image.POINTER_FILE}")
        return
    digest = code_image.parse_pointer(leaf.pointer)
    if digest is None:
        yield r.invalid(leaf.path, f"malformed {code_image.POINTER_FILE}: {leaf.pointer.strip()!r}")
    elif package_of(leaf).listed_image(leaf, digest) is None:
        yield r.invalid(leaf.path, f"code image code-{digest[:8]} is not in the pool")


@CODE_IMAGES.check(PACKAGE)
def code_images(r: Rule, pkg: Package) -> Iterable[Finding]:
    """Each pool image re-hashes to the hash it records. A linked pool or image is not one
    (Package.image_dirs): rule 1.1 reports the link, and nothing outside the package is hashed."""
    for image in pkg.image_dirs():
        stamp_path = image / code_image.HASH_FILE
        if files.kind_of(stamp_path) not in (files.FILE, files.LINK):  # a linked stamp: unreadable, below
            yield r.invalid(image, f"no {code_image.HASH_FILE}")
            continue
        stamp = files.json_or_unreadable(stamp_path)
        recorded = stamp.get("hash") if isinstance(stamp, dict) else None
        if not isinstance(recorded, str):
            yield r.invalid(stamp_path, "unreadable .code-hash.json or no \"hash\" in it")
            continue
        if not recorded.startswith(image.name[len("code-"):]):
            yield r.invalid(image, f"recorded hash {recorded} does not begin with the directory's {image.name}")
        if len(files.names(image)) == 1:
            yield r.invalid(image, "image holds only its .code-hash.json: the source tree was not captured")
            continue
        actual = code_image.tree_hash(image)
        if actual != recorded:
            # What is known is that the files present do not re-hash to the recorded tree: some
            # of it is missing (a partial copy) or altered; which one the pool cannot tell.
            count = sum(1 for path in _files_below(image) if path.name != code_image.HASH_FILE)
            yield r.invalid(image, f"the {count} file(s) present re-hash to {actual}, not the recorded {recorded}: "
                                   "the captured source tree is incomplete or altered")


def _files_below(directory: Path) -> Iterator[Path]:
    """The regular files below a directory, as the tree reader lists them (no link followed)."""
    for _, kind, path in files.entries(directory):
        if kind == files.DIR:
            yield from _files_below(path)
        elif kind == files.FILE:
            yield path


@functools.cache
def reference_digests(edition: str) -> list[str]:
    """Published reference digests of the sanctioned release (code-images/reference-digests.yaml)."""
    path = source_root() / "code-images" / "reference-digests.yaml"
    if not path.is_file():
        return []
    table = files.yaml_or_unreadable(path) or {}
    return list((table.get("editions") or {}).get(edition) or [])


def closed_checksum(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """Shared by 3.6.1 and 5.6.1: a CLOSED leaf's image must be the sanctioned release, where published."""
    if leaf.division != "closed" or leaf.pointer is None:
        return
    edition = leaf.stamped_edition if leaf.stamped_edition != "unknown" else tables.editions()["current_edition"]
    reference = package_of(leaf).reference_digest
    published = reference_digests(edition) + ([reference] if reference else [])
    digest = code_image.parse_pointer(leaf.pointer)
    if published and digest not in published:
        yield r.invalid(leaf.path, f"code image {digest} is not a sanctioned {edition} release")


@rule("3.6.1", "trainingClosedSubmissionChecksum").check(LEAF, benchmark="training")
def training_checksum(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """CLOSED training leaves run the sanctioned release (no finding while none is published)."""
    yield from closed_checksum(r, leaf)


@rule("5.6.1", "vdbClosedSubmissionChecksum").check(LEAF, benchmark="vector_database")
def vdb_checksum(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """CLOSED vector-database leaves run the sanctioned release (no finding while none is published)."""
    yield from closed_checksum(r, leaf)


def _unparsed_stamp(leaf: Leaf) -> str | None:
    """Why a provenance.json file (or link) cannot be read; a directory of that name is no
    stamp at all: it reads as absent."""
    if leaf.record("provenance").kind not in (files.FILE, files.LINK):
        return None
    return leaf.broken("provenance")


@rule("PROV-01", "leafProvenance").check(LEAF)
def leaf_provenance(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A present provenance.json parses and names the leaf's code image; a declared one exists."""
    declared = (leaf.metadata or {}).get("provenance_file")
    broken = _unparsed_stamp(leaf)
    if broken:
        yield r.invalid(leaf.path, f"provenance does not parse: {broken}")
        return
    stamp = leaf.provenance
    if stamp is None:
        if declared:
            yield r.invalid(leaf.path, f"metadata declares {declared} but it is missing")
        return
    pointer = (leaf.pointer or "").strip()
    if section(stamp, "tool").get("code_image") != pointer:
        yield r.invalid(leaf.path, f"provenance names {section(stamp, 'tool').get('code_image')}, pointer says {pointer}")


def _declared_edition(pkg: Package, division: str, org: str) -> str | None:
    """The rules_edition of a submission.yaml that parses, as PROV-02 compares stamps with it."""
    head = pkg.manifest_head(division, org)  # every leaf asks: the whole manifest may not be in yet
    if head is None or files.UNREADABLE in head:
        return None
    return str(head.get("rules_edition"))


MANIFEST = rule("PROV-02", "submissionManifest")


@MANIFEST.check(PACKAGE)
def submission_manifest(r: Rule, pkg: Package) -> Iterable[Finding]:
    """A present submission.yaml parses, lists exactly the tree's run leaves and their edition."""
    for division, org, _org_dir in pkg.orgs:
        found = pkg.manifest(division, org)
        if found is None:
            continue
        path, manifest = found
        if _declared_edition(pkg, division, org) is None:
            yield r.invalid(path, "submission.yaml does not parse")
            continue
        listed = {e.get("path") for e in manifest.get("leaves") or []}
        actual = {pkg.relative(leaf.path) for system in pkg.systems if (system.division, system.org) == (division, org)
                  for leaf in system.leaves}  # the paths report.manifest lists
        for missing in sorted(actual - listed):
            yield r.invalid(path, f"stale manifest: leaf {missing} is not listed")
        for extra in sorted(listed - actual):
            yield r.invalid(path, f"stale manifest: lists {extra}, which the tree does not hold")


@MANIFEST.check(LEAF)
def stamped_as_declared(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A leaf's stamped edition is the one its submission.yaml declares."""
    edition = _declared_edition(package_of(leaf), leaf.division, leaf.org)
    if edition is not None and leaf.stamped_edition not in ("unknown", edition):
        yield r.invalid(leaf.path, f"leaf stamped {leaf.stamped_edition}, manifest declares {edition}")


LEAF_METADATA = rule("LEAF-01", "runLeafMetadata")


@LEAF_METADATA.check(LEAF, benchmark="kv_cache", command="run")
def run_leaf_metadata(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """kv_cache and vector_database run leaves carry exactly one *_metadata.json."""
    count = len(leaf.glob("*_metadata.json"))
    if count != 1:
        yield r.invalid(leaf.path, f"{count} *_metadata.json files (exactly one required)")


LEAF_METADATA.check(LEAF, benchmark="vector_database", command="run")(run_leaf_metadata)


def _manifest_edition(pkg: Package, division: str, org: str) -> str | None:
    found = pkg.manifest(division, org)
    return str(found[1].get("rules_edition")) if found and isinstance(found[1], dict) else None


EDITION = rule("EDN-01", "rulesEdition")


@EDITION.check(LEAF)
def rules_edition(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """Stamps and manifests declare an edition the editions table knows."""
    if leaf.stamped_edition not in tables.editions()["editions"] and leaf.stamped_edition != "unknown":
        yield r.invalid(leaf.path, f"unknown rules edition {leaf.stamped_edition!r}")


@EDITION.check(PACKAGE)
def manifest_edition(r: Rule, pkg: Package) -> Iterable[Finding]:
    """A manifest declares an edition the editions table knows."""
    known = tables.editions()["editions"]
    for division, org, org_dir in pkg.orgs:
        edition = _manifest_edition(pkg, division, org)
        if edition is not None and edition not in known:
            yield r.invalid(org_dir / "submission.yaml", f"unknown rules edition {edition!r}")


@rule("EDN-02", "comparabilityClass").check(LEAF, command="run")
def comparability_class(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A stamped run leaf resolves to a class: INVALID under closed, INFO under open."""
    stamp = leaf.provenance
    if not stamp:
        return
    digest = str(section(stamp, "core_config").get("hash", "unknown"))
    if digest == "unknown":
        return
    accelerator = (leaf.metadata or {}).get("accelerator")
    if leaf_class(leaf.division, leaf.benchmark, leaf.model, accelerator, leaf.stamped_edition, digest) is None:
        yield r.finding(INVALID if leaf.division == "closed" else INFO, leaf.path,
                        f"core config {digest} of {leaf.benchmark} {leaf.model} ({accelerator}) is in no comparability class")


def _hosts(stamp: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-host records of what the ranks imported (results/libraries.py); [] for a leaf
    written before they were recorded, whose launcher-side fields are then judged."""
    return libraries.host_entries(stamp.get("libraries"))


def _by_value(hosts: list[dict[str, Any]], value: Callable[[dict[str, Any]], str]) -> dict[str, list[str]]:
    """{value(host entry): [hostnames]}, in host order."""
    grouped: dict[str, list[str]] = {}
    for entry in hosts:
        names = grouped.setdefault(value(entry), [])
        if entry["hostname"] not in names:
            names.append(entry["hostname"])
    return grouped


DLIO_REVISION = rule("EDN-03", "dlioRevision")


@DLIO_REVISION.check(LEAF, benchmark="training", command="run")
def dlio_revision(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A stamped run leaf's DLIO commit, as each host's ranks imported it, is in its edition's accepted list (else a warning)."""
    if not leaf.provenance and not _unparsed_stamp(leaf):
        return
    stamp = leaf.provenance or {}  # a stamp that does not parse records no commit: an unknown one
    accepted = tables.edition(leaf.stamped_edition).get("dlio_revisions", []) if leaf.stamped_edition in tables.editions()["editions"] else []
    hosts = _hosts(stamp)
    if hosts:
        ran = [h for h in hosts if isinstance(h["libraries"].get("dlio_benchmark"), dict)]  # none: our engine ran
        commits = _by_value(ran, lambda h: str(h["libraries"]["dlio_benchmark"].get("commit", "unknown")))
        for commit, names in commits.items():
            if commit not in accepted:
                yield r.warning(leaf.path, f"DLIO commit {commit}, imported by the ranks on "
                                           f"{', '.join(names)}, is not an accepted {leaf.stamped_edition} revision")
        return
    commit = str(section(stamp, "dlio").get("commit", "unknown"))
    if commit != "n/a" and commit not in accepted:
        yield r.warning(leaf.path, f"DLIO commit {commit} is not an accepted {leaf.stamped_edition} revision")


DLIO_REVISION.check(LEAF, benchmark="checkpointing", command="run")(dlio_revision)


@rule("EDN-04", "checkableEdition").check(PACKAGE)
def checkable_edition(r: Rule, pkg: Package) -> Iterable[Finding]:
    """A manifest's edition must have a checker block."""
    for division, org, org_dir in pkg.orgs:
        edition = _manifest_edition(pkg, division, org)
        if edition in tables.editions()["editions"] and not tables.checker(edition):
            yield r.invalid(org_dir / "submission.yaml", f"edition {edition} has no checker block; workload checks skipped")


@rule("EDN-05", "storageLibraryVersion").check(LEAF, command="run")
def storage_library_version(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A stamped object run leaf's storage library version, as each host's ranks imported it, is in its edition's accepted list (else a warning).

    The list is editions.yaml's storage_libraries; file runs record no library and are skipped.
    A leaf written before the ranks' versions were recorded is judged by storage_library.version."""
    stamp = leaf.provenance
    if not stamp:
        return
    library = stamp.get("storage_library")
    name = str(library.get("name") or "") if isinstance(library, dict) else None
    if not isinstance(library, dict) or not name or name == "none":
        return  # a file run: no client storage library
    edition = leaf.stamped_edition
    accepted = (tables.edition(edition).get("storage_libraries") or {}).get(name, []) if edition in tables.editions()["editions"] else []
    listed = ", ".join(accepted) or "none"
    where = leaf.path / "provenance.json"
    hosts = _hosts(stamp) if name in libraries.LIBRARIES else []
    if not hosts:
        version = str(library.get("version", "unknown"))
        if version not in accepted:
            yield r.warning(where, f"storage library {name} {version} is not an accepted {edition} version (accepted: {listed})")
        return
    for version, names in _by_value(hosts, lambda h: libraries.version_of(h, name)).items():
        if version == libraries.NOT_IMPORTED:
            yield r.warning(where, f"the ranks on {', '.join(names)} did not import {name}: "
                                   "the version that did their object I/O is not recorded")
        elif version not in accepted:
            yield r.warning(where, f"storage library {name} {version}, imported by the ranks on "
                                   f"{', '.join(names)}, is not an accepted {edition} version (accepted: {listed})")


@rule("EDN-06", "libraryVersionsAcrossHosts").check(LEAF)
def library_versions_across_hosts(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A leaf whose ranks imported DLIO, s3dlio, torch, numpy or mpi4py at different versions on different hosts (a warning naming them)."""
    stamp = leaf.provenance
    if not stamp:
        return
    for module, by_version in libraries.disagreements(_hosts(stamp)):
        yield r.warning(leaf.path / "provenance.json", libraries.describe(module, by_version))


def _ids(path: Path) -> set[str]:
    data = files.json_or_unreadable(path)
    rows = data.get("rows") if isinstance(data, dict) else None
    return {str(r["Public ID"]) for r in (rows if isinstance(rows, list) else []) if isinstance(r, dict) and r.get("Public ID")}


def _tables_below(directory: Path, skip: frozenset[str] = frozenset()) -> Iterable[Path]:
    """Every results.json in `directory` and the real directories below it, short of the
    timestamp directories (a run's own files are no workload-level table) and of `skip`."""
    stack = [directory]
    while stack:
        current = stack.pop()
        for name, kind, path in files.entries(current):
            if kind == files.DIR and not TIMESTAMP.match(name) and str(path) not in skip:
                stack.append(path)
            elif name == "results.json" and kind == files.FILE:
                yield path


ROLLUP = rule("RPT-01", "rollupTableAgreement")


def _note_ids(r: Rule, system: System, tables_found: Iterable[Path]) -> None:
    ids = set().union(*(_ids(path) for path in tables_found))
    if ids:
        r.note(system.package, (system.division, system.org, tuple(sorted(ids))))


def _reached(result: Result) -> bool:
    """Whether the walk from the system reaches the result (no timestamp-named directory on the way)."""
    return not any(TIMESTAMP.match(name) for name in result.path.relative_to(result.system.path).parts)


@ROLLUP.check(RESULT)
def result_tables(r: Rule, result: Result) -> Iterable[Finding]:
    """Public IDs in an organization's rollup and in its workload-level results.json agree."""
    if _reached(result):
        _note_ids(r, result.system, _tables_below(result.path))
    return ()


@ROLLUP.check(SYSTEM)
def system_tables(r: Rule, system: System) -> Iterable[Finding]:
    """The tables of a system outside its workload directories (which result_tables reads)."""
    _note_ids(r, system, _tables_below(system.path, frozenset(str(result.path) for result in system.results)))
    return ()


@ROLLUP.check(PACKAGE)
def rollup_agreement(r: Rule, pkg: Package) -> Iterable[Finding]:
    """Each organization's rollup against the Public IDs its systems' tables hold."""
    for division, org, org_dir in pkg.orgs:
        rollup = org_dir / "results" / "results.json"
        if not files.real_file(rollup):
            continue
        workload = {i for div, name, ids in r.notes(pkg) if (div, name) == (division, org) for i in ids}
        top = _ids(rollup)
        for missing in sorted(top - workload):
            yield r.invalid(rollup, f"Public ID {missing} has no workload-level results.json row")
        for missing in sorted(workload - top):
            yield r.invalid(rollup, f"Public ID {missing} of a workload-level table is not in the rollup")
