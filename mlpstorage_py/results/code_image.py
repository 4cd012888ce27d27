"""Code images (Rules 2.1.6): the md5-tree-v2 hash of a source tree and a content-addressed pool."""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from mlpstorage_py import __version__
from mlpstorage_py.errors import ConfigurationError, PermissionDenied
from mlpstorage_py.results.io import utc_now
from mlpstorage_py.results.links import make_dirs, no_links
from mlpstorage_py.rules.configs import source_root

ALGORITHM = "md5-tree-v2"
POINTER_FILE = ".mlps-code-image"
HASH_FILE = ".code-hash.json"
POOL_DIR = "code-images"
POOL_MARKER = ".mlps-image-pool"
EXCLUDED_DIRS = frozenset({
    ".git", ".idea", ".vscode", ".claude", ".agent", ".agents", ".roo", ".planning",
    ".gsd-tmp", "__pycache__", ".pytest_cache", ".venv", "node_modules", "build", "dist",
    ".tox", "test", "tests", ".hypothesis", ".mypy_cache", ".ruff_cache",  # test and checker caches
})
EXCLUDED_FILES = frozenset({HASH_FILE, ".DS_Store", "Thumbs.db", ".coverage"})
EXCLUDED_FILE_GLOBS = ("*.pyc", "*.pyo")


class CodeImageError(ConfigurationError):
    """The pool holds an image that contradicts its own name or hash."""


def _dir_excluded(name: str) -> bool:
    return name in EXCLUDED_DIRS or name.endswith(".egg-info")


def _file_excluded(name: str) -> bool:
    return name in EXCLUDED_FILES or any(fnmatch.fnmatchcase(name, g) for g in EXCLUDED_FILE_GLOBS)


def tree_files(root: Path) -> list[str]:
    """POSIX relative paths of the files the tree hash covers, in UTF-8 byte order."""
    found: list[str] = []

    def walk(directory: Path, rel: str) -> Iterator[str]:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_symlink():
                    continue
                child = f"{rel}{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    if not _dir_excluded(entry.name):
                        yield from walk(Path(entry.path), child + "/")
                elif entry.is_file(follow_symlinks=False) and not _file_excluded(entry.name):
                    yield child

    try:
        found.extend(walk(root, ""))
    except PermissionError as exc:
        raise _unreadable(exc) from exc
    return sorted(found, key=lambda p: p.encode("utf-8", "surrogateescape"))


def _unreadable(exc: OSError) -> PermissionDenied:
    """The one-line error for a file or folder of the tool's tree this user cannot read."""
    return PermissionDenied(f"cannot read {exc.filename}, in mlpstorage's own source tree: the code image hashes "
                            "every file there; make it readable or remove it (it is not part of the tool)")


def tree_hash(root: Path) -> str:
    """MD5 over (relative path, content) of every covered file, in sorted order."""
    digest = hashlib.md5()
    for rel in tree_files(root):
        digest.update(rel.encode("utf-8", "surrogateescape"))  # a name that is not UTF-8: its own bytes
        try:
            with open(root / rel, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
        except PermissionError as exc:
            raise _unreadable(exc) from exc
    return digest.hexdigest()


def git_sha(root: Path) -> str | None:
    """HEAD of the source checkout, or None when it is not a git checkout."""
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and len(sha) == 40 else None


@functools.cache
def own_tree_hash() -> str:
    """The running tool's tree hash, computed once per process."""
    return tree_hash(source_root())


def pointer_text(digest: str) -> str:
    return f"{ALGORITHM}:{digest}"


def parse_pointer(text: str) -> str | None:
    """The hash a .mlps-code-image line names, or None when malformed."""
    line = text.strip()
    prefix = ALGORITHM + ":"
    if not line.startswith(prefix):
        return None
    digest = line[len(prefix):]
    return digest if len(digest) == 32 and not digest.strip("0123456789abcdef") else None  # every leaf is asked


def capture(results_dir: Path, root: Path | None = None) -> tuple[str, Path, bool]:
    """Make sure the pool holds an image of the source tree; returns (hash, image dir, created).

    The copy is built in a temporary directory inside the pool and renamed into place, so
    concurrent captures of the same tree never leave a half-written image.
    """
    root = root or source_root()
    digest = own_tree_hash() if root == source_root() else tree_hash(root)
    pool = make_dirs(results_dir, results_dir / POOL_DIR)  # a linked pool: the copy would leave the tree
    no_links(results_dir, pool / POOL_MARKER).touch(exist_ok=True)
    image = pool / f"code-{digest[:8]}"
    if (image / HASH_FILE).is_file():
        recorded = json.loads((image / HASH_FILE).read_text(encoding="utf-8")).get("hash")
        if recorded != digest:
            raise CodeImageError(f"code image {image} records hash {recorded}, not {digest} (8-digit prefix collision or tampering)")
        return digest, image, False
    staging = Path(tempfile.mkdtemp(prefix=".capture-", dir=pool))
    try:
        for rel in tree_files(root):
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, target)
        copied = tree_hash(staging)
        if copied != digest:
            raise CodeImageError(f"captured copy hashes to {copied}, expected {digest}: the source tree changed during capture")
        stamp = {
            "hash": digest,
            "algorithm": ALGORITHM,
            "captured_at": utc_now(),
            "mlpstorage_version": __version__,
            "git_sha": git_sha(root),
        }
        (staging / HASH_FILE).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
        try:
            os.rename(staging, image)
        except OSError:
            if not (image / HASH_FILE).is_file():
                raise
            return digest, image, False
        return digest, image, True
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
