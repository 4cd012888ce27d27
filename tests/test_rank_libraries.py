"""Library versions as the ranks imported them (results/libraries.py): the record each rank
writes, the per-host grouping the leaf keeps, and validate judging those (EDN-03, EDN-05,
EDN-06) instead of the launcher's environment; leaves written before keep their old verdicts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from mlpstorage_py import checker
from mlpstorage_py.checker.registry import RULES, WARNING
from mlpstorage_py.results import libraries
from mlpstorage_py.rules import tables
from synthetic import edit_json, fresh, leaves_of, workload  # noqa: F401

ACCEPTED_DLIO = "edaf4bb3d6343ef2fb6b9f6dbafa6102032ae8bf"
FORK_COMMIT = "f6796ed281e39ccc83a450e2b1f21b9c909d8fd0"


def _report_in_child(directory: Path, imports: str, rank: str, env: dict[str, str] | None = None) -> None:
    code = f"import {imports}; from mlpstorage_py.results import libraries; libraries.report({str(directory)!r})"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120,
                   env={**os.environ, "OMPI_COMM_WORLD_RANK": rank, **(env or {})})


def test_a_rank_records_what_it_imported_and_collect_groups_by_host(tmp_path):
    folder = tmp_path / libraries.DIR_NAME
    _report_in_child(folder, "numpy", "0")
    _report_in_child(folder, "numpy", "1")
    _report_in_child(folder, "numpy, mpi4py", "2")  # a rank of the same host that imported more
    hosts = libraries.collect(folder)
    assert not folder.exists()
    assert [h["ranks"] for h in hosts] == [[0, 1], [2]]
    first = hosts[0]["libraries"]
    import numpy

    assert first["numpy"] == {"version": metadata.version("numpy"), "file": numpy.__file__}
    assert first["mpi4py"] == first["torch"] == first["dlio_benchmark"] == libraries.NOT_IMPORTED
    assert hosts[1]["libraries"]["mpi4py"]["version"] == metadata.version("mpi4py")
    (module, by_version), = libraries.disagreements(hosts)
    assert module == "mpi4py" and by_version == {libraries.NOT_IMPORTED: [hosts[0]["hostname"]],
                                                 metadata.version("mpi4py"): [hosts[1]["hostname"]]}


def test_the_version_comes_from_the_distribution_beside_the_loaded_module(tmp_path):
    """A stray dist-info earlier on sys.path names another version: the distribution beside the
    module this process loaded is the one recorded, with the commit pip recorded for it."""
    for name, version, module in (("stray", "9.9.1", False), ("site", "9.9.2", True)):
        site = tmp_path / name
        info = site / f"dlio_benchmark-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: dlio_benchmark\nVersion: {version}\n")
        (info / "direct_url.json").write_text(json.dumps({"url": "file:///x", "vcs_info": {"vcs": "git", "commit_id": FORK_COMMIT}}))
        if module:
            (site / "dlio_benchmark").mkdir()
            (site / "dlio_benchmark" / "__init__.py").write_text("")
    code = ("import sys, json; sys.path[:0] = sys.argv[1:]; import dlio_benchmark, importlib.metadata as m;"
            "from mlpstorage_py.results import libraries;"
            "print(json.dumps([m.version('dlio-benchmark'), libraries.imported()['dlio_benchmark']]))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "stray"), str(tmp_path / "site")],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    searched, record = json.loads(out)
    assert searched == "9.9.1"  # what a plain metadata look-up would have said
    assert record == {"version": "9.9.2", "commit": FORK_COMMIT,
                      "file": str(tmp_path / "site" / "dlio_benchmark" / "__init__.py")}


def test_an_unwritable_directory_never_fails_the_rank(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    libraries.report(blocker / "sub", rank=3)
    err = capsys.readouterr().err
    assert "rank 3" in err and "could not record its library versions" in err


# -- validate ---------------------------------------------------------------------------------
def _entry(host: str, rank: int, **versions: str | None) -> dict:
    return {"hostname": host, "ranks": [rank], "python": "/venv/bin/python",
            "libraries": {m: ({"version": v, "file": f"/venv/{m}/__init__.py"} if v else libraries.NOT_IMPORTED)
                          for m, v in versions.items()}}


def _record(leaf: Path, *entries: dict, s3dlio: str | None = None) -> None:
    def change(data):
        data["libraries"] = {"hosts": list(entries)}
        if s3dlio is not None:
            data["storage_library"] = {"name": "s3dlio", "version": s3dlio}
            data["provenance"]["storage_library"] = "runtime"

    edit_json(leaf / "provenance.json", change)


def _findings(root: Path, number: str):
    _, found = checker.validate(root)
    return [f for f in found if f.rule == number]


def test_edn05_judges_the_ranks_version_not_the_launchers(fresh):
    root = fresh()
    bad, good, *_ = leaves_of(workload(root, "training") / "run")
    # the launcher's environment had an accepted s3dlio, the ranks imported 0.10.0 on both hosts
    _record(bad, _entry("h1", 0, s3dlio="0.10.0"), _entry("h2", 1, s3dlio="0.10.0"), s3dlio="0.9.112")
    # and the reverse: an unaccepted launcher version never judged when the ranks' is accepted
    _record(good, _entry("h1", 0, s3dlio="0.9.110"), s3dlio="0.10.0")
    (found,) = _findings(root, "EDN-05")
    assert found.severity == WARNING and Path(found.path) == bad / "provenance.json"
    assert "s3dlio 0.10.0, imported by the ranks on h1, h2, is not an accepted 3.0 version" in found.message


def test_edn05_says_when_a_hosts_ranks_imported_no_storage_library(fresh):
    root = fresh()
    leaf = leaves_of(workload(root, "checkpointing"))[0]
    _record(leaf, _entry("h1", 0, s3dlio="0.9.112"), _entry("h2", 1, s3dlio=None), s3dlio="0.9.112")
    (found,) = _findings(root, "EDN-05")
    assert "the ranks on h2 did not import s3dlio" in found.message


def test_edn03_judges_each_hosts_dlio_commit(fresh):
    root = fresh()
    leaf = leaves_of(workload(root, "training") / "run")[0]  # its stamp names the accepted commit
    fork = _entry("h2", 1, dlio_benchmark="3.0.2")
    fork["libraries"]["dlio_benchmark"]["commit"] = FORK_COMMIT
    accepted = _entry("h1", 0, dlio_benchmark="3.0.2")
    accepted["libraries"]["dlio_benchmark"]["commit"] = ACCEPTED_DLIO
    _record(leaf, accepted, fork)
    (found,) = _findings(root, "EDN-03")
    assert f"DLIO commit {FORK_COMMIT}, imported by the ranks on h2, is not an accepted 3.0 revision" in found.message
    # our checkpoint engine's ranks import no DLIO: nothing to judge, as with the n/a stamp
    ckpt = leaves_of(workload(root, "checkpointing"))[0]
    _record(ckpt, _entry("h1", 0, dlio_benchmark=None))
    assert [f.path for f in _findings(root, "EDN-03")] == [str(leaf)]


def test_edn06_names_the_hosts_that_disagree(fresh):
    root = fresh()
    leaf = leaves_of(workload(root, "training") / "run")[0]
    _record(leaf, _entry("h1", 0, numpy="2.2.6", torch="2.13.0"), _entry("h2", 1, numpy="2.2.6", torch="2.13.0"),
            _entry("h3", 2, numpy="1.26.4", torch="2.13.0"))
    (found,) = _findings(root, "EDN-06")
    assert found.severity == WARNING and Path(found.path) == leaf / "provenance.json"
    assert found.message == "numpy differs between hosts: 2.2.6 on h1, h2; 1.26.4 on h3"
    assert RULES["EDN-06"].name == "libraryVersionsAcrossHosts"
    assert {"number": "EDN-06", "name": "libraryVersionsAcrossHosts",
            "section": "Core rules for all submissions"} in tables.rule_index()


@pytest.mark.parametrize("value", [None, [], "x", {"hosts": "x"}, {"hosts": [1, {"hostname": 2}, {"hostname": "h"}]},
                                   {"hosts": [{"hostname": "h", "libraries": {"s3dlio": 5, "numpy": [1]}}]}])
def test_malformed_records_are_never_a_crash(fresh, value):
    root = fresh()
    leaf = leaves_of(workload(root, "training") / "run")[0]

    def change(data):
        data["libraries"] = value
        data["storage_library"] = {"name": "s3dlio", "version": "0.9.112"}

    edit_json(leaf / "provenance.json", change)
    for number in ("EDN-03", "EDN-05", "EDN-06"):
        _findings(root, number)  # judged, or skipped; never an exception
