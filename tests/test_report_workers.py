"""reportgen and status read a large package system by system in forked workers: the tables they
write are those of one process reading it all, and submission.yaml is PyYAML's own text."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import REALDATA
from mlpstorage_py.results.tree import shares
from mlpstorage_py.report import manifest, reportgen
from mlpstorage_py.submission import status

needs_realdata = pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
STAMP = re.compile(rb"generated_at: .*")


def _written(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): STAMP.sub(b"", p.read_bytes()) for p in reportgen.generate(root)}


@needs_realdata
def test_reportgen_in_workers_writes_what_one_process_writes(tmp_path, monkeypatch):
    here, forks = tmp_path / "here", tmp_path / "forks"
    shutil.copytree(REALDATA, here, symlinks=True)
    shutil.copytree(REALDATA, forks, symlinks=True)
    alone = _written(here)
    monkeypatch.setattr(shares, "POOL_MIN_LEAVES", 0)
    monkeypatch.setattr(shares, "workers_here", lambda: 2)
    monkeypatch.setattr(shares, "MIN_SHARE_LEAVES", 1)  # several shares, even of a small package
    assert _written(forks) == alone


@needs_realdata
def test_status_in_workers_gives_the_rows_of_one_process(monkeypatch):
    monkeypatch.setattr(shares, "POOL_MIN_LEAVES", 10**9)
    alone = status.table(REALDATA)
    monkeypatch.setattr(shares, "POOL_MIN_LEAVES", 0)
    monkeypatch.setattr(shares, "workers_here", lambda: 2)
    monkeypatch.setattr(shares, "MIN_SHARE_LEAVES", 1)
    assert status.table(REALDATA) == alone and alone


ODD = ["yes", "1.0", "null", "a: b", "- x", "#x", "", " lead", "x" * 120, "many words " * 12, "0x1F", "~",
       "2026-01-01", "'q'", '"dq"', "ü", "tab\there", "line\nbreak"]


@pytest.mark.parametrize("fast", [True, False])
def test_submission_yaml_from_parts_is_the_whole_dump(tmp_path, monkeypatch, fast):
    """A part's entries are dumped alone (libyaml's emitter for printable ASCII): the joined text
    is yaml.safe_dump's of the whole mapping, whatever the strings."""
    if not fast:
        monkeypatch.setattr(manifest, "FAST_DUMPER", yaml.SafeDumper)
    entries = [{"path": f"closed/Org/results/s/{value}", "accelerator": value, "system": "s"} for value in ODD]
    parts = [manifest.Part(manifest._dump(entries[i:i + 5]), {f"sha256:{i:064x}"}, {"2.0"}, {"abc"})
             for i in range(0, len(entries), 5)]
    monkeypatch.setattr(manifest, "utc_now", lambda: "2026-12-01T00:00:00Z")
    text = manifest.text("closed", "Org", tmp_path, parts)
    whole = yaml.safe_dump(yaml.safe_load(text), sort_keys=False)
    assert text == whole and yaml.safe_load(text)["leaves"] == entries
