"""EDN-05: a stamped object run whose storage library version is not in its edition's accepted
list (editions.yaml storage_libraries) draws a warning, as EDN-03 does for DLIO; the pinned
s3dlio is an accepted one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlpstorage_py import checker
from mlpstorage_py.checker.registry import RULES, WARNING
from mlpstorage_py.rules import tables
from synthetic import edit_json, fresh, leaves_of, workload  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]


def _stamp_object(leaf: Path, version: str | None) -> None:
    library = {"name": "s3dlio"} if version is None else {"name": "s3dlio", "version": version}

    def change(data):
        data["storage_library"] = library
        data["provenance"]["storage_library"] = "runtime"

    edit_json(leaf / "provenance.json", change)


def _edn05(root: Path):
    _, findings = checker.validate(root)
    return [f for f in findings if f.rule == "EDN-05"]


@pytest.mark.parametrize("family,where", [("training", "run"), ("checkpointing", None)])
def test_an_unaccepted_storage_library_version_is_a_warning(fresh, family, where):
    root = fresh()
    parent = workload(root, family) / where if where else workload(root, family)
    bad, good, *_ = leaves_of(parent)
    _stamp_object(bad, "0.10.0")
    _stamp_object(good, "0.9.112")
    (found,) = _edn05(root)
    assert found.severity == WARNING and Path(found.path) == bad / "provenance.json"
    assert "s3dlio 0.10.0 is not an accepted 3.0 version" in found.message and "0.9.112" in found.message


def test_accepted_versions_file_runs_and_datagen_draw_nothing(fresh):
    root = fresh()
    runs = leaves_of(workload(root, "training") / "run")
    for leaf, version in zip(runs, tables.edition("3.0")["storage_libraries"]["s3dlio"]):
        _stamp_object(leaf, version)
    _stamp_object(leaves_of(workload(root, "training") / "datagen")[0], "0.10.0")  # EDN-05 judges runs only
    assert _edn05(root) == []


def test_an_unrecorded_version_is_a_warning(fresh):
    root = fresh()
    leaf = leaves_of(workload(root, "training") / "run")[0]
    _stamp_object(leaf, None)
    (found,) = _edn05(root)
    assert "s3dlio unknown" in found.message


def test_the_rule_is_registered_and_indexed():
    assert RULES["EDN-05"].name == "storageLibraryVersion"
    assert {"number": "EDN-05", "name": "storageLibraryVersion", "section": "Core rules for all submissions"} in tables.rule_index()


def test_the_pinned_s3dlio_is_installed_and_accepted_by_the_current_edition():
    from importlib import metadata

    accepted = tables.edition()["storage_libraries"]["s3dlio"]
    requirements = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    (pinned,) = re.findall(r"^s3dlio==(\S+)$", requirements, flags=re.M)
    assert f'"s3dlio=={pinned}"' in pyproject
    assert pinned in accepted
    assert metadata.version("s3dlio") == pinned
