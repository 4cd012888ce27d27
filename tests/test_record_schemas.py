"""Record schemas shared by writer and reader (results/schema.py): a writer's record is checked
when built and written with its version; a reader reads every version it knows, the published
v3.0 records (no version) included, and names one it does not know instead of guessing."""

from __future__ import annotations

import json

import pytest

from conftest import REALDATA
from mlpstorage_py.results import fs_probe, io_trace
from mlpstorage_py.results.fs_probe import FsSeparation
from mlpstorage_py.results.kv import KvSummary, partial_failure
from mlpstorage_py.results.metadata import Metadata
from mlpstorage_py.results.provenance import Provenance
from mlpstorage_py.results.schema import UNVERSIONED, Unread, of_record
from mlpstorage_py.results.summary import DlioSummary
from mlpstorage_py.results.tree.layout import record_kinds
from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.results.vdb import VdbSummary
from synthetic import fresh, leaves_of, metadata_file, workload  # noqa: F401 - fresh is a fixture


def test_a_writer_writes_its_version_first_and_the_fields_as_built():
    fields = {"benchmark_type": "training", "model": "unet3d", "num_processes": 8, "args": {"x": 1}}
    written = Metadata(fields).to_json()
    assert list(written) == ["schema_version", *fields] and written["schema_version"] == Metadata.VERSION == 1
    assert isinstance(Metadata.from_json(written), Metadata)


def test_a_record_that_carries_its_version_is_written_byte_for_byte():
    """The KV aggregate (the reference's "1.0") and fs_separation.json ("version": 1) carried a
    version before the schemas: their bytes are what they were."""
    aggregate = {"schema_version": "1.0", "run_datetime": "20260101_000000", "total_ranks": 2, "options": {}}
    assert json.dumps(KvSummary(aggregate).to_json()) == json.dumps(aggregate)
    assert list(FsSeparation({"method": "link_exdev", "same_filesystem": False}).to_json()) == \
        ["version", "method", "same_filesystem"]


def test_the_probe_writes_fs_separation_as_its_schema(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "results").mkdir()
    record = fs_probe.probe(tmp_path / "data", tmp_path / "results")
    assert list(record)[:2] == ["version", "method"] and record["same_filesystem"] is True
    assert isinstance(FsSeparation.from_json(record), FsSeparation)


def test_a_writer_that_builds_a_field_of_the_wrong_type_is_stopped():
    with pytest.raises(ValueError, match="num_processes='8'"):
        Metadata({"num_processes": "8"})
    with pytest.raises(ValueError, match="same_filesystem=1"):
        FsSeparation({"same_filesystem": 1})  # a number is no flag


def test_versions_read_and_versions_named():
    assert isinstance(Metadata.from_json({"model": "m"}), Metadata)  # unversioned: v3.0 and ours before
    assert isinstance(VdbSummary.from_json({"schema_version": 1}), VdbSummary)
    assert isinstance(DlioSummary.from_json({"schema_version": "anything", "metric": {}}), DlioSummary)  # DLIO's own format
    newer = Metadata.from_json({"schema_version": 2})
    assert isinstance(newer, Unread)
    assert newer.text() == "metadata records schema version 2, which this tool does not read (it reads 1, none)"
    assert isinstance(Provenance.from_json({"rules_edition": "3.0"}), Unread)  # we always stamped a schema
    assert Provenance.reads() == ("mlps-run-provenance/1",) and UNVERSIONED in Metadata.reads()


def test_io_trace_reads_only_the_versions_it_knows(tmp_path):
    (tmp_path / io_trace.FILE).write_text(json.dumps({"schema": 1, "level": "block"}))
    assert io_trace.read(tmp_path) == {"schema": 1, "level": "block"}
    (tmp_path / io_trace.FILE).write_text(json.dumps({"schema": 2, "level": "block"}))
    assert io_trace.read(tmp_path) is None


def test_the_kv_aggregate_is_read_whatever_it_calls_its_version():
    """partial_failure judges what an aggregate records (status, reportgen, 6.3.4.1)."""
    lost = partial_failure({"schema_version": "9", "options": {"1": {"missing_files": ["option_1/trial_0/rank_1/x.json"],
                                                                     "rank_count": 2, "trial_count": 1}}})
    assert lost is not None and lost.missing == {"1": (1, 2)}


def test_a_leaf_record_of_an_unknown_version_is_named_never_a_crash(fresh):
    """A newer tool's metadata in a package: the tree reader names its version as the record's
    problem, every rule reads it as unreadable, and nothing crashes."""
    from mlpstorage_py import checker

    root = fresh()
    leaf = leaves_of(workload(root, "training") / "run")[-1]
    meta = metadata_file(leaf)
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "schema_version": 7}))
    pkg = Package.load(root)
    [read] = [lf for lf in pkg.leaves if lf.path == leaf]
    assert read.metadata is None
    assert read.problem("metadata") == "metadata records schema version 7, which this tool does not read (it reads 1, none)"
    assert read.typed("metadata") is None and read.typed("summary") is not None
    _, findings = checker.validate(root)
    assert not [f for f in findings if "checker error" in f.message]
    assert any("schema version 7" in f.message for f in findings)


@pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
def test_every_published_record_is_read_as_its_schema():
    """The v3.0 corpus (records without a version, the KV aggregate's "1.0"): every record that
    parses is read as its family's schema; none is named unreadable for its version."""
    pkg = Package.load(REALDATA)
    read = 0
    for leaf in pkg.leaves:
        for kind in record_kinds():
            record = leaf.record(kind)
            assert "schema version" not in (record.problem or ""), (leaf.path, kind)
            if record.value is not None:
                typed = leaf.typed(kind)
                assert isinstance(typed, of_record(kind, leaf.benchmark)), (leaf.path, kind)
                read += 1
    assert read > 50
    kv = [leaf.typed("summary") for leaf in pkg.leaves if leaf.benchmark == "kv_cache"]
    assert kv and all(isinstance(s, KvSummary) and s.version == "1.0" for s in kv)


def test_the_schemas_of_a_leaf_follow_the_layout_table():
    """Each record kind of rules/layout.yaml has a schema, for every benchmark."""
    from mlpstorage_py.results.tree.layout import benchmarks

    for kind in record_kinds():
        for benchmark in benchmarks():
            assert of_record(kind, benchmark) is not None, (kind, benchmark)
