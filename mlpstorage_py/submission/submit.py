"""`mlpstorage submit`: regenerate the rollups, validate, and only then write the package.

The package is <org>-<edition>-<UTC timestamp>.tar.gz holding one top directory of that name
with the organization's <division>/<org>/ trees and the code images its leaves point to (with
the pool markers and any file at a pool's top, such as reference-digests.yaml). Never in it:
the tool's private .mlps/ (history, scratch, trash, earlier submissions), the results sentinel,
symbolic links, sockets or other special files. Entries are sorted, with fixed mtimes, modes
and owners, and the gzip header carries no name or time, so the same tree gives the same bytes.

Beside the tarball: <name>.tar.gz.sha256 (sha256sum format) and <name>.manifest.json (every
file: path, size, sha256). Every file is created exclusively: an earlier package is never
overwritten (a taken name moves to the next second). Each submission is appended to
<results-dir>/.mlps/submissions.jsonl. The default output directory is
<results-dir>/.mlps/submissions (inside the tree, outside the package); --output DIR elsewhere.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import stat
import sys
import tarfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, BinaryIO

from mlpstorage_py import RULES_EDITION, __version__, checker
from mlpstorage_py.checker.registry import INVALID
from mlpstorage_py.errors import ConfigurationError, MlpsError, UsageError
from mlpstorage_py.results.io import utc_now
from mlpstorage_py.results.links import private_path
from mlpstorage_py.results.sentinel import resolve_orgs, tree_orgs
from mlpstorage_py.results.tree.package import PRIVATE_DIR, Package
from mlpstorage_py.results.tree.run_state import FAILED, INCOMPLETE, standings
from mlpstorage_py.results.tree.untrusted import shown
from mlpstorage_py.submission.leaves import human, image_of, leaf_id, placeholders

MTIME = 315532800  # 1980-01-01T00:00:00Z for every entry: the bytes depend on the contents only
MANIFEST_SCHEMA = "mlps-submission-files/1"
LOG = "submissions.jsonl"  # below .mlps/
DEFAULT_OUTPUT = "submissions"  # below .mlps/
STAMP = "%Y%m%dT%H%M%SZ"
MAX_BUMPS = 3600


class SubmitRefused(MlpsError):
    """The checker finds the package INVALID (exit 1, as validate)."""

    exit_code = 1


FileEntry = tuple[str, Path, int]  # (path inside the package, file, size)


def _walk(directory: Path, rel: str, files: list[FileEntry], skipped: list[tuple[str, str]], dirs: list[str]) -> None:
    """Regular files below directory by lstat, never through a link; what is left out is said."""
    dirs.append(rel)
    with os.scandir(directory) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            child = f"{rel}/{entry.name}"
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISLNK(mode):
                skipped.append((child, "symbolic link"))
            elif stat.S_ISDIR(mode):
                if entry.name == PRIVATE_DIR:
                    skipped.append((child, "the tool's private directory"))
                else:
                    _walk(Path(entry.path), child, files, skipped, dirs)
            elif stat.S_ISREG(mode):
                files.append((child, Path(entry.path), entry.stat(follow_symlinks=False).st_size))
            else:
                skipped.append((child, "special file (socket, FIFO or device)"))


def select(pkg: Package, org: str) -> tuple[list[FileEntry], list[str], list[tuple[str, str]]]:
    """(files, directories, skipped) of the organization's package, each sorted by path."""
    files: list[FileEntry] = []
    dirs: list[str] = []
    skipped: list[tuple[str, str]] = []
    for division, name, org_dir in pkg.orgs:
        if name == org:
            dirs.append(division)
            _walk(org_dir, f"{division}/{name}", files, skipped, dirs)
    images = {path for leaf in pkg.leaves if leaf.org == org for path in [image_of(pkg, leaf)[1]] if path is not None}
    for pool in sorted({image.parent for image in images}):
        rel = pool.relative_to(pkg.root).as_posix()
        if pool.is_symlink():
            skipped.append((rel, "symbolic link"))
            continue
        dirs.append(rel)
        for entry in sorted(pool.iterdir()):
            if entry.is_file() and not entry.is_symlink():
                files.append((f"{rel}/{entry.name}", entry, entry.lstat().st_size))
        for image in sorted(i for i in images if i.parent == pool):
            if image.is_symlink():
                skipped.append((f"{rel}/{image.name}", "symbolic link"))
            else:
                _walk(image, f"{rel}/{image.name}", files, skipped, dirs)
    return sorted(files), sorted(set(dirs)), sorted(skipped)


class _Hashing:
    """A file object that hashes what tarfile reads from it."""

    def __init__(self, fh: BinaryIO):
        self.fh, self.digest, self.read_bytes = fh, hashlib.sha256(), 0

    def read(self, size: int = -1) -> bytes:
        data = self.fh.read(size)
        self.digest.update(data)
        self.read_bytes += len(data)
        return data


def _info(name: str, kind: bytes, size: int = 0, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.mode, info.mtime = kind, size, mode, MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_tarball(target: Path, top: str, files: list[FileEntry], dirs: list[str]) -> list[dict[str, Any]]:
    """Write the tarball (exclusively) and return the manifest's file list. A file that is not
    regular when opened (swapped for a link meanwhile) or changes size is refused."""
    manifest = []
    with open(target, "xb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_info(top, tarfile.DIRTYPE, mode=0o755))
        for rel in dirs:
            tar.addfile(_info(f"{top}/{rel}", tarfile.DIRTYPE, mode=0o755))
        for rel, path, size in files:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())
                if not stat.S_ISREG(st.st_mode) or st.st_size != size:
                    raise ConfigurationError(f"{path} changed while the package was written; run submit again")
                hashing = _Hashing(fh)
                tar.addfile(_info(f"{top}/{rel}", tarfile.REGTYPE, size, 0o755 if st.st_mode & 0o111 else 0o644), hashing)
                if hashing.read_bytes != size:
                    raise ConfigurationError(f"{path} changed while the package was written; run submit again")
            manifest.append({"path": f"{top}/{rel}", "size": size, "sha256": hashing.digest.hexdigest()})
    return manifest


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _org(root: Path, given: str | None) -> str:
    orgs = tree_orgs(root) if given else resolve_orgs(root)
    if given:
        if given not in orgs:
            raise UsageError(f"organization {given!r} has no <division>/{given}/ in {root} (found: {', '.join(orgs) or 'none'})")
        return given
    if len(orgs) != 1:
        raise UsageError(f"{root} holds several organizations ({', '.join(orgs)}); pass --org")
    return orgs[0]


def _output_dir(root: Path, given: str | None) -> Path:
    out = Path(given).expanduser().resolve() if given else private_path(root, DEFAULT_OUTPUT)
    private = root / PRIVATE_DIR
    if (out == root or root in out.parents) and not (out == private or private in out.parents):
        raise UsageError(f"--output {out} is inside the package (it would become part of it); "
                         f"choose a directory outside {root}, or below {private}")
    return out


def _claim(out: Path, org: str) -> tuple[str, Path]:
    """A package name not taken in out: <org>-<edition>-<timestamp>, the next second if taken."""
    now = datetime.now(timezone.utc)
    for bump in range(MAX_BUMPS):
        name = f"{org}-{RULES_EDITION}-{(now + timedelta(seconds=bump)).strftime(STAMP)}"
        target = out / f"{name}.tar.gz"
        if not any(p.exists() or p.is_symlink() for p in (target, out / f"{name}.tar.gz.sha256", out / f"{name}.manifest.json")):
            return name, target
    raise UsageError(f"no free package name in {out} within {MAX_BUMPS} s")


def _write_new(path: Path, text: str) -> None:
    with open(path, "x", encoding="utf-8") as fh:
        fh.write(text)


def _record(root: Path, entry: dict[str, Any]) -> None:
    """Append one line to the tree's submissions log (O_APPEND: concurrent submits do not interleave)."""
    path = private_path(root, LOG)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, sort_keys=True) + "\n")


def _dry_run(root: Path, org: str, out: Path) -> int:
    files, _, skipped = select(Package.load(root), org)
    for rel, _, size in files:
        print(f"  {size:>12}  {shown(rel)}")
    for rel, why in skipped:
        print(f"  skipped       {shown(rel)} ({shown(why)})")
    print(f"dry run: {org}-{RULES_EDITION}-<timestamp>.tar.gz in {out} would hold {len(files)} files, "
          f"{human(sum(s for _, _, s in files))}; submit regenerates the rollups and runs the checker first; nothing written")
    return 0


def submit(root: Path, org_flag: str | None, output_flag: str | None, dry_run: bool) -> int:
    """Check the tree and write the package (or, dry, list what it would hold); refused with the reasons on stderr."""
    org = _org(root, org_flag)
    out = _output_dir(root, output_flag)
    if dry_run:
        return _dry_run(root, org, out)
    from mlpstorage_py.report import reportgen

    reportgen.generate(root)
    pkg, findings = checker.validate(root, {org})
    if not any(leaf.org == org for leaf in pkg.leaves):
        raise ConfigurationError(f"organization {org} has no run leaves in {root}: nothing to submit")
    blocking = [f for f in findings if f.severity == INVALID]
    for f in blocking:
        where = os.path.relpath(f.path, root) if f.path.startswith(str(root)) else f.path
        print(shown(f"INVALID {f.rule} {f.name}: {where}: {f.message}"), file=sys.stderr)
    # a failed or killed run is no part of a result, whatever the rules' counts say: never ship one
    unfinished = [(leaf, state, why) for result in standings(pkg) if result.org == org
                  for leaf, state, why in result.leaves if state in (FAILED, INCOMPLETE)]
    for leaf, state, why in unfinished:
        print(shown(f"{state.upper()} leaf {leaf_id(pkg, leaf)}: {why}") + f" (`mlpstorage runs rm --status {state}`)", file=sys.stderr)
    systems = sorted({(leaf.division, leaf.system) for leaf in pkg.leaves if leaf.org == org})
    unfilled = [(f"{division}/{org}/systems/{system}.yaml", line) for division, system in systems
                for line in placeholders(root, division, org, system)]
    for where, line in unfilled:
        print(shown(f"PAPERWORK {where}: placeholder left: {line}"), file=sys.stderr)
    if blocking or unfinished or unfilled:
        raise SubmitRefused(f"submit refused: {len(blocking)} INVALID finding(s), {len(unfinished)} failed or incomplete "
                            f"leaf/leaves and {len(unfilled)} placeholder(s) above; fix them (`mlpstorage status`, "
                            "`mlpstorage validate`) and submit again")
    out.mkdir(parents=True, exist_ok=True)
    files, dirs, skipped = select(pkg, org)
    name, target = _claim(out, org)
    try:
        listing = write_tarball(target, name, files, dirs)
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    digest = sha256_of(target)
    _write_new(out / f"{name}.tar.gz.sha256", f"{digest}  {target.name}\n")
    manifest = {"schema": MANIFEST_SCHEMA, "organization": org, "rules_edition": RULES_EDITION, "package": target.name,
                "sha256": digest, "generated_by": f"mlpstorage {__version__}", "generated_at": utc_now(), "files": listing}
    _write_new(out / f"{name}.manifest.json", json.dumps(manifest, indent=2) + "\n")
    _record(root, {"at": manifest["generated_at"], "organization": org, "rules_edition": RULES_EDITION,
                   "package": str(target), "sha256": digest, "files": len(listing),
                   "bytes": sum(f["size"] for f in listing), "warnings": len(findings) - len(blocking)})
    print(f"wrote {target} ({len(listing)} files, {human(target.stat().st_size)}), sha256 {digest}")
    for rel, why in skipped:
        print(f"  left out {shown(rel)} ({shown(why)})")
    return 0
