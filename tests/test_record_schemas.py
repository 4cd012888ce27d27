"""Record schemas shared by writer and reader (results/schema.py): a writer's record is checked
when built and written with its version; a reader reads every version it knows, the published
v3.0 records (no version) included, and names one it does not know instead of guessing."""

from __future__ import annotations

import json

import pytest

from conftest import REALDATA
from mlpstorage_py.results import bottleneck, fs_probe, io_trace
from mlpstorage_py.results.bottleneck import Bottleneck, TelemetrySample
from mlpstorage_py.results.fs_probe import FsSeparation
from mlpstorage_py.results.kv import KvSummary, partial_failure
from mlpstorage_py.results.metadata import Metadata
from mlpstorage_py.results.provenance import Provenance
from mlpstorage_py.results.schema import UNVERSIONED, Unread, of_record
from mlpstorage_py.results.summary import DlioSummary
from mlpstorage_py.results.tree.layout import record_kinds
from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.results.vdb import VdbRank, VdbSummary
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


# --- the records written outside the leaf's layout: vectordb ranks, telemetry, KV ranks ----------

RANK = {"rank": 0, "world_size": 1, "hostname": "h1", "seconds": 2.0, "queries": 3, "batches": 2,
        "latencies": [[2, 1.5], [1, 0.5]], "hits": {"0": [4, 5]}}


def test_a_vectordb_rank_record_round_trips_and_a_newer_one_is_named(tmp_path):
    """vectordb_rank_<r>.json: the rank writes VdbRank.to_json, the parent reads it back through
    from_json; a rank file from before the version reads, one of a version unknown here is the
    rank's problem in the one-line failure."""
    from mlpstorage_py.errors import BenchmarkFailed
    from mlpstorage_py.vectordb.clients import read_ranks
    from mlpstorage_py.vectordb.rank import rank_path, write_atomic

    written = VdbRank(RANK).to_json()
    assert list(written) == ["schema_version", *RANK] and written["schema_version"] == VdbRank.VERSION == 1
    write_atomic(rank_path(tmp_path, 0), written)
    assert read_ranks(tmp_path, 1) == [written]
    rank_path(tmp_path, 0).write_text(json.dumps(RANK))  # unversioned: before the schema
    assert read_ranks(tmp_path, 1) == [RANK]
    rank_path(tmp_path, 0).write_text(json.dumps({**RANK, "schema_version": 2}))
    with pytest.raises(BenchmarkFailed, match=r"rank 0: vectordb_rank_\*.json records schema version 2, which this tool"):
        read_ranks(tmp_path, 1)
    with pytest.raises(ValueError, match="queries='3'"):
        VdbRank({**RANK, "queries": "3"})


def _sample(t: float, idle: float = 2.0) -> dict:
    return {"host": "client-1", "t": t, "dt": 1.0, "cpu": {"user": 100 - idle, "iowait": 0.0, "idle": idle},
            "mem": {"total_mib": 1000, "used_mib": 100}, "net": {}, "disks": {}}


def test_watch_writes_versioned_samples_and_bottleneck_records_that_read_back(tmp_path):
    """launch/watch.py builds each sample and bottleneck record as its schema: both carry their
    version, a sample of the wrong shape is not written, and the readers read them back."""
    from mlpstorage_py.launch.watch import Watch, record_bottleneck
    from mlpstorage_py.telemetry.rank_progress import TELEMETRY_TAG

    folder = tmp_path / "telemetry"
    watch = Watch(1, 60.0, telemetry_dir=folder)
    for i in range(4):
        assert watch.take(f"{TELEMETRY_TAG} " + json.dumps(_sample(1000.0 + i)))
    watch.take(f"{TELEMETRY_TAG} " + json.dumps({**_sample(1004.0), "cpu": [1, 2]}))  # a sampler's bug
    watch.close()
    lines = [json.loads(line) for line in (folder / "client-1.jsonl").read_text().splitlines()]
    assert [line["t"] for line in lines] == [1000.0, 1001.0, 1002.0, 1003.0]
    assert all(list(line)[0] == "schema_version" and line["schema_version"] == TelemetrySample.VERSION for line in lines)
    (tmp_path / "summary.json").write_text("{}")
    (record,) = record_bottleneck(watch, tmp_path, "DLIO", 1000.0, 1003.0)
    assert record["schema_version"] == Bottleneck.VERSION == 1 and record["job"] == "DLIO"
    assert record["clients_limited"] is True
    on_disk = json.loads((folder / bottleneck.FILE).read_text())
    assert on_disk == [record] == json.loads((tmp_path / "summary.json").read_text())["bottleneck"]
    read, unread = bottleneck.read_records(on_disk)
    assert [r.data for r in read] == [record] and unread == []
    assert [len(rows) for rows in bottleneck.read_samples(folder).values()] == [4]


def test_telemetry_of_an_older_or_unknown_version(tmp_path):
    """Samples and records written before the version (every leaf so far) read as they did; one of
    a version unknown here is named, never read as if it were known."""
    old = _sample(1000.0)
    assert isinstance(TelemetrySample.from_json(old), TelemetrySample)
    assert isinstance(Bottleneck.from_json({"phase": "p", "saturated": []}), Bottleneck)
    (tmp_path / "client-1.jsonl").write_text(json.dumps(old) + "\n" + json.dumps({**_sample(1001.0), "schema_version": 9}) + "\n")
    unread: list[Unread] = []
    assert [r["t"] for r in bottleneck.read_samples(tmp_path, unread)["client-1"]] == [1000.0]
    assert [u.text() for u in unread] == ["telemetry sample records schema version 9, which this tool does not read "
                                          "(it reads 1, none)"]
    read, named = bottleneck.read_records([{"phase": "p"}, {"phase": "q", "schema_version": 9}, "x"])
    assert [r.text("phase") for r in read] == ["p"] and [u.version for u in named] == [9]


def test_a_bottleneck_record_of_an_unknown_version_is_named_by_tel01(fresh):
    from test_checker_structure import findings_of

    from mlpstorage_py.checker.registry import WARNING

    root = fresh()
    folder = leaves_of(workload(root, "training") / "run")[0] / "telemetry"
    folder.mkdir()
    (folder / bottleneck.FILE).write_text(json.dumps([{"schema_version": 9, "phase": "DLIO", "saturated": []}]))
    (found,) = findings_of(root, "TEL-01")
    assert found.severity == WARNING
    assert found.message == "not judged: bottleneck records schema version 9, which this tool does not read (it reads 1, none)"


def test_kv_cache_py_writes_the_rank_version_mlpstorage_reads():
    """kvcache_sim does not import mlpstorage (kv_cache_benchmark/README.md: it runs as its own
    program, with numpy and PyYAML only), so the one string is written twice: here they are
    held equal. Read from the source, not imported: the simulator's imports need its sys.path."""
    import ast
    from pathlib import Path

    from mlpstorage_py.results.kv import KvRank

    tree = ast.parse((Path(__file__).resolve().parents[1] / "kv_cache_benchmark" / "kvcache_sim" / "report.py").read_text(encoding="utf-8"))
    (schema,) = [node.value.value for node in tree.body if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                 and [getattr(t, "id", None) for t in node.targets] == ["SCHEMA"]]
    assert schema == KvRank.VERSION
