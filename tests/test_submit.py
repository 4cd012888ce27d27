"""`mlpstorage submit`: only a valid package is written; the tarball, its .sha256 and its manifest agree."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import tarfile
from datetime import timedelta

import pytest

from conftest import REALDATA
from mlpstorage_py import checker
from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.checker.registry import INVALID
from mlpstorage_py.submission import submit
from synthetic import duplicate_leaf, edit_json, fresh, leaves_of, metadata_file, workload  # noqa: F401


def packages(out):
    return sorted(out.glob("*.tar.gz"))


def test_a_valid_package_is_written_with_a_manifest_that_checks_out(cli, fresh, tmp_path):
    root = fresh()
    (root / "mlperf-results.yaml").write_text("orgname: Acme\n", encoding="utf-8")  # a live tree's own files
    (root / ".mlps" / "scratch").mkdir(parents=True)
    (root / ".mlps" / "scratch" / "queries.npy").write_bytes(b"scratch")
    result = cli("submit", root)
    assert result.rc == 0, result.err
    out = root / ".mlps" / "submissions"
    [tarball] = packages(out)
    assert tarball.name.startswith("Acme-3.0-") and str(tarball) in result.out
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    assert (out / f"{tarball.name}.sha256").read_text() == f"{digest}  {tarball.name}\n"
    manifest = json.loads((out / tarball.name.replace(".tar.gz", ".manifest.json")).read_text())
    assert manifest["sha256"] == digest and manifest["organization"] == "Acme"
    top = tarball.name[:-len(".tar.gz")]
    with tarfile.open(tarball) as tar:
        members = tar.getmembers()
        files = {m.name: hashlib.sha256(tar.extractfile(m).read()).hexdigest() for m in members if m.isfile()}
        sizes = {m.name: m.size for m in members if m.isfile()}
        assert {(m.mtime, m.uid, m.gid, m.uname) for m in members} == {(submit.MTIME, 0, 0, "")}
        assert all(m.isfile() or m.isdir() for m in members)
        if hasattr(tarfile, "data_filter"):  # the filter a careful reviewer unpacks with (Python 3.11.4+)
            tar.extractall(tmp_path / "x", filter="data")
        else:  # an older Python (Debian 12's 3.11.2): what that filter refuses, refused here
            assert all(not m.name.startswith("/") and ".." not in m.name.split("/") and not m.mode & 0o7000
                       for m in members)
            tar.extractall(tmp_path / "x")
    assert [f["path"] for f in manifest["files"]] == sorted(files) == [f["path"] for f in sorted(manifest["files"], key=lambda f: f["path"])]
    assert {f["path"]: f["sha256"] for f in manifest["files"]} == files
    assert {f["path"]: f["size"] for f in manifest["files"]} == sizes
    names = set(files)
    assert f"{top}/closed/Acme/systems/sys1.pdf" in names and any(n.startswith(f"{top}/code-images/code-") for n in names)
    assert not [n for n in names if "/.mlps/" in n or n.endswith("mlperf-results.yaml")]
    # the tarball is the tree's package, byte for byte, and it validates where it is unpacked
    for path, sha in files.items():
        on_disk = root / path.split("/", 1)[1]
        assert hashlib.sha256(on_disk.read_bytes()).hexdigest() == sha
    _, findings = checker.validate(tmp_path / "x" / top)
    assert [f for f in findings if f.severity == INVALID] == []
    [entry] = [json.loads(line) for line in (root / ".mlps" / "submissions.jsonl").read_text().splitlines()]
    assert entry["package"] == str(tarball) and entry["sha256"] == digest and entry["files"] == len(files)


def test_an_earlier_package_is_never_overwritten(cli, fresh):
    root = fresh()
    out = root.parent / "out"
    assert cli("submit", root, "--output", out).rc == 0
    [first] = packages(out)
    before = first.read_bytes()
    assert cli("submit", root, "--output", out).rc == 0
    assert len(packages(out)) == 2 and first.read_bytes() == before
    assert len((root / ".mlps" / "submissions.jsonl").read_text().splitlines()) == 2


def test_the_same_tree_gives_the_same_bytes(fresh, tmp_path):
    root = fresh()
    files, dirs, _ = submit.select(Package.load(root), "Acme")
    submit.write_tarball(tmp_path / "a.tar.gz", "Acme-3.0-x", files, dirs)
    submit.write_tarball(tmp_path / "b.tar.gz", "Acme-3.0-x", files, dirs)
    assert (tmp_path / "a.tar.gz").read_bytes() == (tmp_path / "b.tar.gz").read_bytes()
    with pytest.raises(FileExistsError):
        submit.write_tarball(tmp_path / "a.tar.gz", "Acme-3.0-x", files, dirs)


def test_links_sockets_and_private_files_are_left_out(fresh, monkeypatch, tmp_path):
    root = fresh()
    [image] = [p for p in (root / "code-images").iterdir() if p.is_dir()]
    shutil.move(image, tmp_path / image.name)
    image.symlink_to(tmp_path / image.name)  # a pool entry leading out of the package is never entered
    leaf = leaves_of(workload(root, "training") / "run")[0]
    (leaf / "elsewhere").symlink_to("/etc/passwd")
    os.mkfifo(leaf / "fifo")
    monkeypatch.chdir(leaf)  # a socket's path must be short
    sock = socket.socket(socket.AF_UNIX)
    sock.bind("s.sock")
    (root / "closed/Acme/.mlps").mkdir()
    try:
        files, _, skipped = submit.select(Package.load(root), "Acme")
    finally:
        sock.close()
    names = {rel for rel, _, _ in files}
    assert not [n for n in names if n.endswith(("elsewhere", "s.sock", "fifo")) or "/.mlps/" in n or "/code-" in n]
    assert len(skipped) == 5 and f"code-images/{image.name}" in dict(skipped)
    assert {why for _, why in skipped} == {"symbolic link", "special file (socket, FIFO or device)", "the tool's private directory"}


def test_an_invalid_package_is_refused_one_line_per_finding(cli, fresh):
    root = fresh()
    leaf = leaves_of(workload(root, "training") / "run")[2]
    (leaf / "summary.json").unlink()
    result = cli("submit", root)
    assert result.rc == 1
    _, findings = checker.validate(root, {"Acme"})
    invalid = [f for f in findings if f.severity == INVALID]
    lines = [line for line in result.err_lines if line.startswith("INVALID ")]
    assert invalid and len(lines) == len(invalid)
    assert result.err_lines[-1].startswith(f"mlpstorage: error: submit refused: {len(invalid)} INVALID finding(s), 0 failed")
    assert not (root / ".mlps" / "submissions").exists() and not (root / ".mlps" / "submissions.jsonl").exists()


def test_dry_run_lists_and_writes_nothing(cli, fresh):
    root = fresh()
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    result = cli("submit", root, "--dry-run")
    assert result.rc == 0 and "closed/Acme/systems/sys1.yaml" in result.out and "nothing written" in result.out
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


def test_bad_choices_are_refused(cli, fresh):
    root = fresh()
    shutil.copytree(root / "closed/Acme", root / "closed/Other")
    assert "pass --org" in cli("submit", root, "--dry-run").err
    assert cli("submit", root, "--org", "Nobody", "--dry-run").rc == 2
    shutil.rmtree(root / "closed/Other")
    for inside in (root / "closed/Acme/pkg", root / "packages", root):
        result = cli("submit", root, "--output", inside)
        assert result.rc == 2 and "is inside the package" in result.err
    assert not (root / "packages").exists() and not (root / ".mlps/submissions").exists()


def test_a_failed_leaf_is_never_shipped_even_where_the_counts_allow_it(cli, fresh):
    """One combined checkpointing leaf is a whole result (2.1.23 allows one or two): a failed
    second invocation beside it breaks no count, yet submit refuses to ship it."""
    root = fresh(checkpoint_invocations=1)
    [combined] = leaves_of(workload(root, "checkpointing"))
    failed = duplicate_leaf(combined, timedelta(minutes=2))
    edit_json(metadata_file(failed), lambda m: m.update(exit_status=8, failure="interrupted"))
    for name in ("summary.json", "0_per_epoch_stats.json", "0_output.json"):
        (failed / name).unlink()
    result = cli("submit", root)
    assert result.rc == 1
    assert f"FAILED leaf {failed.relative_to(root).as_posix()}: exit 8: interrupted (`mlpstorage runs rm --status failed`)" \
        in result.err_lines
    assert not (root / ".mlps" / "submissions").exists()


@pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
def test_a_published_package_is_refused_with_its_findings(cli, realdata_copy):
    """The corpus lacks most files (its README), so NewFW's package is INVALID: submit says why, line by line."""
    result = cli("submit", realdata_copy, "--org", "NewFW")
    assert result.rc == 1
    _, findings = checker.validate(realdata_copy, {"NewFW"})
    invalid = [f for f in findings if f.severity == INVALID]
    assert len([line for line in result.err_lines if line.startswith("INVALID ")]) == len(invalid) > 0
    assert any(" 2.1.7 " in line and "Solidigm_D5-P5336_61TB_Gen4_NVMe_QLC.pdf" in line for line in result.err_lines)
    assert not (realdata_copy / ".mlps" / "submissions").exists()
