"""md5-tree-v2 tree hash and the content-addressed code-image pool (Rules 2.1.6)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from mlpstorage_py import __version__
from mlpstorage_py.results import code_image
from mlpstorage_py.rules.configs import source_root
from mlpstorage_py.results.code_image import CodeImageError, capture, parse_pointer, pointer_text, tree_files, tree_hash

# Files the hash must cover. Full-path UTF-8 byte order puts "a.txt" (0x2E) < "a/x.py" (0x2F)
# < "a0.txt" (0x30), which differs from a per-directory walk order, and "Z" < "a" < "é".
INCLUDED = {
    "b.txt": b"B",
    "a/x.py": b"X",
    "a.txt": b"A",
    "a0.txt": b"zero",
    "Z.txt": b"upper",
    "\u00e9.txt": "caf\u00e9".encode("utf-8"),
    "sub/deeper/data.bin": bytes(range(256)),
    "sub/empty.txt": b"",
}
EXCLUDED = {
    ".git/HEAD": b"ref: refs/heads/main\n",
    "__pycache__/x.cpython-312.pyc": b"\x00",
    "tests/test_x.py": b"assert 0",
    "sub/tests/inner.py": b"nested tests dir",
    "build/lib/x.py": b"built",
    "foo.egg-info/PKG-INFO": b"Name: foo",
    ".code-hash.json": b"{}",
    "x.pyc": b"\x01",
    "a/y.pyo": b"\x02",
}


def make_tree(root: Path) -> Path:
    for rel, content in {**INCLUDED, **EXCLUDED}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    outside = root.parent / f"{root.name}-outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "dir" / "f.txt").write_bytes(b"outside")
    (outside / "file.txt").write_bytes(b"outside file")
    os.symlink(outside / "file.txt", root / "link-to-file.txt")
    os.symlink(outside / "dir", root / "link-to-dir")
    os.symlink(root / "b.txt", root / "a" / "link-inside.txt")
    return root


def expected_files() -> list[str]:
    return sorted(INCLUDED, key=lambda p: p.encode("utf-8"))


def expected_digest(files: dict[str, bytes]) -> str:
    md5 = hashlib.md5()
    for rel in sorted(files, key=lambda p: p.encode("utf-8")):
        md5.update(rel.encode("utf-8") + files[rel])
    return md5.hexdigest()


@pytest.fixture
def tree(tmp_path) -> Path:
    return make_tree(tmp_path / "src")


def test_tree_files_lists_only_included_files_in_utf8_byte_order(tree):
    files = tree_files(tree)
    assert files == expected_files()
    assert files[:4] == ["Z.txt", "a.txt", "a/x.py", "a0.txt"]
    assert files[-1] == "\u00e9.txt"


def test_tree_hash_matches_independent_md5(tree):
    assert tree_hash(tree) == expected_digest(INCLUDED)


@pytest.mark.parametrize("rel", sorted(EXCLUDED))
def test_changing_an_excluded_file_keeps_the_hash(tree, rel):
    before = tree_hash(tree)
    (tree / rel).write_bytes(b"changed content")
    assert tree_hash(tree) == before


def test_changing_a_symlink_target_keeps_the_hash(tree):
    before = tree_hash(tree)
    (tree.parent / "src-outside" / "file.txt").write_bytes(b"different")
    (tree.parent / "src-outside" / "dir" / "new.py").write_bytes(b"new")
    assert tree_hash(tree) == before


@pytest.mark.parametrize("rel", ["b.txt", "a/x.py", "\u00e9.txt", "sub/empty.txt"])
def test_changing_an_included_file_changes_the_hash(tree, rel):
    before = tree_hash(tree)
    (tree / rel).write_bytes(b"changed content")
    assert tree_hash(tree) != before
    assert tree_hash(tree) == expected_digest({**INCLUDED, rel: b"changed content"})


def test_renaming_an_included_file_changes_the_hash(tree):
    before = tree_hash(tree)
    (tree / "b.txt").rename(tree / "c.txt")
    assert tree_hash(tree) != before


def test_adding_a_file_changes_the_hash(tree):
    before = tree_hash(tree)
    (tree / "new.py").write_bytes(b"")
    assert tree_hash(tree) != before


def test_pointer_round_trip_and_malformed_pointers():
    digest = "0123456789abcdef0123456789abcdef"
    assert pointer_text(digest) == f"md5-tree-v2:{digest}"
    assert parse_pointer(pointer_text(digest) + "\n") == digest
    assert parse_pointer(f"md5-tree-v1:{digest}") is None
    assert parse_pointer("md5-tree-v2:" + digest[:31]) is None
    assert parse_pointer("md5-tree-v2:" + digest.upper()) is None


def test_first_capture_creates_a_stamped_image(tree, tmp_path):
    results = tmp_path / "results"
    digest, image, created = capture(results, root=tree)
    assert created is True
    assert digest == expected_digest(INCLUDED)
    assert image == results / "code-images" / f"code-{digest[:8]}"
    assert (results / "code-images" / ".mlps-image-pool").is_file()
    stamp = json.loads((image / ".code-hash.json").read_text(encoding="utf-8"))
    assert stamp["hash"] == digest
    assert stamp["algorithm"] == "md5-tree-v2"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp["captured_at"])
    assert stamp["mlpstorage_version"] == __version__
    assert "git_sha" in stamp and stamp["git_sha"] is None  # not a git checkout
    # The image holds exactly the covered files, byte for byte, and hashes to the record.
    assert tree_files(image) == expected_files()
    for rel, content in INCLUDED.items():
        assert (image / rel).read_bytes() == content
    assert not (image / "link-to-file.txt").exists() and not (image / "tests").exists()
    assert tree_hash(image) == stamp["hash"]
    # No staging directory is left in the pool.
    assert sorted(p.name for p in (results / "code-images").iterdir()) == [".mlps-image-pool", image.name]


def test_second_capture_of_the_same_tree_reuses_the_image(tree, tmp_path):
    results = tmp_path / "results"
    digest, image, _ = capture(results, root=tree)
    stamp_before = (image / ".code-hash.json").read_bytes()
    digest2, image2, created2 = capture(results, root=tree)
    assert (digest2, image2, created2) == (digest, image, False)
    assert (image / ".code-hash.json").read_bytes() == stamp_before


def test_changed_tree_gets_a_new_image(tree, tmp_path):
    results = tmp_path / "results"
    digest, image, _ = capture(results, root=tree)
    (tree / "b.txt").write_bytes(b"B2")
    digest2, image2, created2 = capture(results, root=tree)
    assert created2 is True
    assert digest2 != digest and image2 != image
    assert image.is_dir() and image2.is_dir()
    assert (image / "b.txt").read_bytes() == b"B" and (image2 / "b.txt").read_bytes() == b"B2"
    assert tree_hash(image2) == digest2


def test_capture_refuses_an_image_recording_another_hash(tree, tmp_path):
    results = tmp_path / "results"
    digest = tree_hash(tree)
    image = results / "code-images" / f"code-{digest[:8]}"
    image.mkdir(parents=True)
    (image / ".code-hash.json").write_text(json.dumps({"hash": digest[:8] + "0" * 24}), encoding="utf-8")
    with pytest.raises(CodeImageError):
        capture(results, root=tree)


def test_source_root_is_the_checkout_with_configs():
    root = source_root()
    assert (root / "pyproject.toml").is_file()
    assert (root / "configs" / "dlio" / "workload" / "unet3d_b200.yaml") .is_file()
    files = tree_files(root)
    assert "mlpstorage_py/main.py" in files
    assert not any(f.startswith(("tests/", ".venv/")) or "/__pycache__/" in f for f in files)


def test_a_file_this_user_cannot_read_is_one_line_naming_it():
    """The tool's tree holds a file only root can read (pytest's .hypothesis/ once did): a user
    other than root gets a one-line PermissionDenied naming it (exit 4), never an internal error;
    test caches are left out of the image altogether."""
    import shutil
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root to make a file another user cannot read")
    top = Path(tempfile.mkdtemp(prefix="mlps-image-"))  # /tmp: another user can reach it, unlike tmp_path
    try:
        _unreadable_file_case(make_tree(top / "src"))
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _unreadable_file_case(tree: Path) -> None:
    import subprocess
    import sys

    for folder in (tree.parent, *(p for p in tree.rglob("*") if p.is_dir()), tree):
        folder.chmod(0o755)
    secret = tree / "a" / "root-only.txt"
    secret.write_text("x")
    secret.chmod(0o600)
    program = ("import sys\nfrom pathlib import Path\nfrom mlpstorage_py.results.code_image import tree_hash\n"
               "from mlpstorage_py.errors import MlpsError\n"
               "try:\n    tree_hash(Path(sys.argv[1]))\nexcept MlpsError as exc:\n"
               "    print(exc.exit_code, exc)\n")
    done = subprocess.run([sys.executable, "-c", program, str(tree)], capture_output=True, text=True, timeout=60,
                          cwd="/", preexec_fn=lambda: (os.setgid(65534), os.setuid(65534)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"4 cannot read {secret}, in mlpstorage's own source tree"), done.stdout
    (tree / ".hypothesis").mkdir()
    (tree / ".hypothesis" / "db").write_text("cache")
    assert ".hypothesis/db" not in tree_files(tree)
