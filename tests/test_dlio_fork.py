"""The working group's DLIO (dlio_benchmark 3.0.x, not on PyPI) as an engine beside PyPI's 2.0.0.

The first tests need no fork: engine detection in this environment and through --dlio-bin-path,
the 3.0.x table's translation, the workload names, the merge of the fork's checkpoint phases.
The rest run only where a fork is installed in another environment, named by
MLPSTORAGE_DLIO_BIN_PATH (its bin directory); they skip otherwise, with the reason."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import all_leaves, assert_no_secret
from mlpstorage_py.benchmarks import dlio, dlio_checkpointing, dlio_engine
from mlpstorage_py.rules import configs as workloads
from mlpstorage_py.errors import NotAvailable, UsageError

FORK_BIN = os.environ.get("MLPSTORAGE_DLIO_BIN_PATH")  # read before the fixtures clear it
needs_fork = pytest.mark.skipif(not FORK_BIN, reason="no DLIO 3.0.x fork named by MLPSTORAGE_DLIO_BIN_PATH "
                                                     "(install mlcommons/DLIO_local_changes in another venv)")
SMALL = ["dataset.record_length_bytes=262144", "dataset.record_length_bytes_stdev=0",
         "dataset.record_length_bytes_resize=0", "train.epochs=2", "train.computation_time=0.01",
         "reader.batch_size=2", "reader.read_threads=1"]
TINY_LLAMA = ["model.num_layers=2", "model.hidden_size=512", "model.ffn_hidden_size=1024", "model.vocab_size=8192",
              "model.num_attention_heads=8", "model.num_kv_heads=2", "checkpoint.time_between_checkpoints=0"]


def test_our_package_provides_no_module_the_fork_would_take_for_the_reference_writer():
    # The fork imports mlpstorage_py.checkpointing.StreamingCheckpointing first; ours must be absent
    # (ImportError -> the fork's own writer), never a half-matching module of that name.
    assert importlib.util.find_spec("mlpstorage_py.checkpointing") is None


def test_this_environment_is_detected_with_its_version_and_no_commit():
    pytest.importorskip("dlio_benchmark")
    engine = dlio_engine.detect()
    assert engine.version == "2.0.0" and engine.table["version"] == "2.0.0"
    assert engine.stamp == {"version": "2.0.0", "source": "pypi", "commit": "unknown"}
    assert engine.stamp_tag == "package-metadata"
    assert engine.rank_program() == [sys.executable, "-P", "-m", "mlpstorage_py.benchmarks.dlio_rank"]
    assert not engine.native_object_storage


def test_another_environment_is_read_in_a_child(tmp_path):
    pytest.importorskip("dlio_benchmark")
    engine = dlio_engine.detect(str(Path(sys.executable).parent))  # our own venv, named as another's
    assert engine.version == "2.0.0" and engine.bin_dir == str(Path(sys.executable).parent)
    program = engine.rank_program()
    assert program[1] == "-c" and "mlpstorage_py.benchmarks.dlio_rank" in program[2]
    with pytest.raises(UsageError, match="neither a directory nor a dlio_benchmark script"):
        dlio_engine.detect(str(tmp_path / "absent"))
    with pytest.raises(UsageError, match="neither a directory nor a dlio_benchmark script"):
        dlio_engine.detect(sys.executable)  # a file, but not the dlio_benchmark script
    with pytest.raises(UsageError, match="no python"):
        dlio_engine.detect(str(tmp_path))
    scripts = tmp_path / "scripts"  # only a dlio_benchmark entry point: its #! names the python
    scripts.mkdir()
    (scripts / "dlio_benchmark").write_text(f"#!{sys.executable}\nimport sys\n")
    assert dlio_engine.detect(str(scripts)).python == sys.executable
    named = dlio_engine.detect(str(scripts / "dlio_benchmark"), origin="MLPSTORAGE_DLIO_BIN_PATH")  # the script itself
    assert named.bin_dir == str(scripts) and named.python == sys.executable
    assert named.identity() == {"name": "dlio_benchmark", "version": "2.0.0", "origin": f"from MLPSTORAGE_DLIO_BIN_PATH {scripts}",
                                "path": str(Path(importlib.util.find_spec("dlio_benchmark").origin).parent)}
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "python").symlink_to("/usr/bin/python3")  # Debian's Python: no dlio-benchmark
    with pytest.raises(NotAvailable, match="has no dlio-benchmark"):
        dlio_engine.detect(str(bare))


def test_whatif_names_the_engine_its_path_and_where_it_came_from(cli, tmp_path, monkeypatch):
    pytest.importorskip("dlio_benchmark")
    bin_dir = Path(sys.executable).parent
    package = Path(importlib.util.find_spec("dlio_benchmark").origin).parent
    base = ("whatif", "training", "unet3d", "datagen", "-np", "2", "-dd", tmp_path)
    default = cli(*base)
    assert default.rc == 0, default.err
    assert f"engine: dlio_benchmark 2.0.0 at {package} (PyPI default" in default.out
    script = cli(*base, "--dlio-bin-path", bin_dir / "dlio_benchmark")  # the script names its environment
    assert script.rc == 0, script.err
    assert f"engine: dlio_benchmark 2.0.0 at {package} (from --dlio-bin-path {bin_dir})" in script.out
    monkeypatch.setenv("MLPSTORAGE_DLIO_BIN_PATH", str(bin_dir))
    env = cli(*base)
    assert env.rc == 0 and f"(from MLPSTORAGE_DLIO_BIN_PATH {bin_dir})" in env.out
    refused = cli(*base, "--dlio-bin-path", sys.executable)
    assert refused.rc == 2 and "neither a directory nor a dlio_benchmark script" in refused.err


def test_tables_are_found_by_version_then_series():
    assert dlio_engine.table_for("2.0.0")["version"] == "2.0.0"
    assert dlio_engine.table_for("3.0.2")["version"] == "3.0.x"
    assert dlio_engine.table_for("3.0.9")["checkpoint_workflow"] is True
    with pytest.raises(NotAvailable, match="2.0.0, 3.0.x"):
        dlio_engine.table_for("2.1.0")


def test_3x_table_keeps_the_edition_spelling_and_maps_model_keys_one_by_one():
    table = dlio_engine.table_for("3.0.2")
    run = workloads.training("unet3d", "b200")
    del run["reader"]["multiprocessing_context"]
    engine, dropped = dlio.translate(run, table)
    assert engine["dataset"]["record_length_bytes"] == 146600628 and "record_length" not in engine["dataset"]
    assert engine["reader"]["multiprocessing_context"] == "fork"  # the fork's default is spawn
    assert dropped == ["model.model_size"]  # 2.0.0's spelling; the fork reads model_size_bytes
    llama = workloads.checkpointing("llama3-8b")
    llama["storage"] = {"storage_type": "s3", "storage_options": {"endpoint_url": "http://127.0.0.1:1"}}
    engine, dropped = dlio.translate(llama, table)
    assert dropped == []
    assert engine["model"]["parallelism"] == {"pipeline": 1, "tensor": 1, "zero_stage": 3}
    assert engine["model"]["transformer"]["num_kv_heads"] == 8
    assert engine["checkpoint"]["num_checkpoints_read"] == 10 and engine["checkpoint"]["fsync"] is True
    assert engine["storage"]["storage_options"] == {"endpoint_url": "http://127.0.0.1:1"}
    assert "reader" not in engine  # defaults only fill sections the workload has
    assert dlio.translate(llama, dlio_engine.table_for("2.0.0"))[1] == [
        "checkpoint.time_between_checkpoints", "checkpoint.num_checkpoints_write", "checkpoint.num_checkpoints_read",
        "checkpoint.fsync", "storage.storage_options.endpoint_url"]


def test_generated_workload_names_are_none_a_dlio_ships():
    pytest.importorskip("dlio_benchmark")
    shipped = dlio_engine.packaged_workloads(dlio_engine.detect())
    assert "unet3d_a100" in shipped
    ours = {dlio.workload_name(m, c) for m in ("unet3d", "retinanet", "llama3-8b", "llama3-70b")
            for c in ("datagen", "run", "checkpoint_write", "checkpoint_read")}
    assert all(n.startswith("mlps_") for n in ours) and not ours & shipped


def test_engine_dlio_needs_a_3x_engine_and_is_open_only(cli, results, tmp_path):
    pytest.importorskip("dlio_benchmark")
    base = ["checkpointing", "llama3-8b", "run", "-np", "2", "-at", "b200", "-cm", "1", "-cf", tmp_path, "-sn", "s",
            "-rd", results, "--engine", "dlio"]
    closed = cli("closed", *base)
    assert closed.rc == 2 and "--engine" in closed.err
    refused = cli("whatif", *base)
    assert refused.rc != 0 and "no checkpoint-only workflow" in refused.err
    assert all_leaves(results) == []


def _phase(folder: Path, metric: dict, key: str, start: str, end: str) -> None:
    """One fork checkpoint invocation's outputs, in the layout the fork writes (2 ranks)."""
    (folder / "dlio_config").mkdir(parents=True)
    for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
        (folder / "dlio_config" / name).write_text("{}")
    for name in ("dlio.log", "checkpointing_run.stdout.log", "checkpointing_run.stderr.log"):
        (folder / name).write_text(f"{key} {name}\n")
    (folder / "summary.json").write_text(json.dumps({"start": start, "end": end, "num_accelerators": 2, "metric": metric}))
    for rank in range(2):
        (folder / f"{rank}_per_epoch_stats.json").write_text(json.dumps(
            {"1": {"start": start, f"{key}1": {"duration": 0.5 + rank}, "end": end}}))
        (folder / f"{rank}_output.json").write_text(json.dumps({"hostname": "h", "rank": rank}))


def test_phases_merge_into_the_leaf_files_every_checkpointing_leaf_has(tmp_path):
    save = {"save_checkpoint_io_mean_GB_per_second": 1.5, "checkpoint_size_GB": 0.25}
    load = {"load_checkpoint_io_mean_GB_per_second": 0.75, "checkpoint_size_GB": 0.25}
    _phase(tmp_path / "dlio_write", save, "save_ckpt", "2026-01-01T00:00:00", "2026-01-01T00:00:10")
    _phase(tmp_path / "dlio_read", load, "load_ckpt", "2026-01-01T00:00:20", "2026-01-01T00:00:30")
    (tmp_path / "dlio_write" / dlio_checkpointing.WRITER_FILE).write_text(json.dumps(
        {"writers_loaded": [{"module": "m", "writer": "SimpleStreamingCheckpointing"}]}))
    drops = [{"rank": 0, "hostname": "h", "page_cache": "dropped"}]
    dlio_checkpointing.merge(tmp_path, ["write", "read"], 2, drops, "dlio_benchmark 3.0.2")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["metric"] == {**save, **load}
    assert (summary["start"], summary["end"]) == ("2026-01-01T00:00:00", "2026-01-01T00:00:30")
    assert summary["checkpoint_engine"]["writer"] == "SimpleStreamingCheckpointing"
    assert summary["page_cache_hosts"] == drops
    stats = json.loads((tmp_path / "1_per_epoch_stats.json").read_text())["1"]
    assert list(stats) == ["start", "save_ckpt1", "load_ckpt1", "end"] and stats["load_ckpt1"]["duration"] == 1.5
    assert json.loads((tmp_path / "0_output.json").read_text())["read"]["rank"] == 0
    log = (tmp_path / "dlio.log").read_text()
    assert log.index("save_ckpt dlio.log") < log.index("load_ckpt dlio.log")
    dlio_checkpointing.check_size(summary, 0.25)
    with pytest.raises(Exception, match="differs"):
        dlio_checkpointing.check_size(summary, 0.5)


# -- with a fork installed ---------------------------------------------------------------------
@needs_fork
def test_fork_is_detected_with_its_commit_and_its_table_matches_its_source():
    engine = dlio_engine.detect(FORK_BIN)
    assert engine.version.startswith("3.0.") and engine.native_object_storage
    assert engine.stamp_tag in ("direct-url", "package-metadata")
    if engine.stamp_tag == "direct-url" and engine.stamp["source"] != "pypi":
        assert re.fullmatch(r"[0-9a-f]{40}|unknown", engine.stamp["commit"])
    where = subprocess.run([engine.python, "-I", "-c", "import importlib.util; print(importlib.util.find_spec("
                            "'dlio_benchmark').submodule_search_locations[0])"], capture_output=True, text=True,
                           timeout=60, check=True).stdout.strip()
    body = (Path(where) / "utils" / "config.py").read_text(encoding="utf-8")
    body = body[body.index("def LoadConfig"):]
    read = {tuple(re.findall(r"'([a-z_0-9]+)'", m.group(2))) + (m.group(1),)
            for m in re.finditer(r"'([a-z_0-9]+)' in config((?:\['[a-z_0-9]+'\])+)", body)}
    read |= {("reader", k) for k in re.findall(r"'([a-z_0-9]+)' in reader\b", body)}
    read |= {("dataset", "parquet", k) for k in re.findall(r"'([a-z_0-9]+)' in pq_cfg", body)}
    leaves = {k for k in read if not any(o[:len(k)] == k and o != k for o in read)} - {("data_reader",), ("framework",)}
    listed = {(s, *n.split(".")) for s, names in engine.table["known"].items() for n in names if s != "framework"}
    assert leaves - listed == set(), f"the fork reads keys the table does not list: {sorted(leaves - listed)}"
    assert listed - leaves == set(), f"the table lists keys the fork does not read: {sorted(listed - leaves)}"
    assert dlio.workload_name("unet3d", "run") not in dlio_engine.packaged_workloads(engine)


@pytest.mark.heavy
@needs_fork
def test_training_and_an_engine_dlio_checkpoint_run_through_the_fork(cli, results, other_fs_dir):
    fork = ["--dlio-bin-path", FORK_BIN]
    gen = cli("open", "training", "unet3d", "datagen", "-np", "2", "-dd", other_fs_dir, "-sn", "s", "-rd", results,
              "-aip", "--params", "dataset.num_files_train=8", *SMALL, *fork)
    assert gen.rc == 0, gen.err
    run = cli("open", "training", "unet3d", "run", "-at", "b200", "-na", "2", "-cm", "1", "-dd", other_fs_dir,
              "-sn", "s", "-rd", results, "-aip", "--params", *SMALL, *fork)
    assert run.rc == 0, run.err
    (run_leaf,) = [p for p in all_leaves(results) if p.parent.name == "run"]
    assert sorted(p.name for p in run_leaf.glob("*per_epoch_stats.json")) == ["0_per_epoch_stats.json",
                                                                            "1_per_epoch_stats.json"]
    meta = json.loads(next(run_leaf.glob("training_*_metadata.json")).read_text())
    assert meta["engine_parameters"]["workload"]["dataset"]["record_length_bytes"] == 262144
    assert meta["page_cache"]["between_epochs"][0]["summary"] == "dropped"
    stamp = json.loads((run_leaf / "provenance.json").read_text())["dlio"]
    assert stamp["version"].startswith("3.0.")

    (other_fs_dir / "ckpt").mkdir()
    ckpt = cli("open", "checkpointing", "llama3-8b", "run", "-np", "2", "-at", "b200", "-cm", "1",
               "-cf", other_fs_dir / "ckpt", "-ncw", "2", "-ncr", "2", "-sn", "s", "-rd", results,
               "--params", *TINY_LLAMA, "--engine", "dlio", *fork)
    assert ckpt.rc == 0, ckpt.err
    (leaf,) = [p for p in all_leaves(results) if "checkpointing" in p.parts]
    summary = json.loads((leaf / "summary.json").read_text())
    assert {"save_checkpoint_io_mean_GB_per_second", "load_checkpoint_io_mean_GB_per_second"} <= set(summary["metric"])
    assert summary["page_cache_hosts"][0]["page_cache"] == "dropped"
    assert summary["checkpoint_engine"]["writer"] != "not recorded"
    assert sorted(p.name for p in (other_fs_dir / "ckpt" / "llama3-8b").iterdir()) == [
        "global_epoch1_step1", "global_epoch1_step2"]
    assert json.loads((leaf / "provenance.json").read_text())["dlio"]["version"].startswith("3.0.")

    checked = cli("validate", "-rd", results)
    text = checked.out + checked.err
    assert "EDN-03" in text and stamp["commit"] in text  # the fork's commit is judged, not n/a
    assert not re.search(rf"2\.1\.(25|26).*{leaf.name}", text) and not re.search(rf"2\.1\.(14|15).*{run_leaf.name}", text)


@pytest.mark.heavy
@needs_fork
def test_retinanet_datagen_through_the_fork_records_the_forks_libraries(cli, results, other_fs_dir):
    """JPEG generation imports Pillow (the install line in ManPage must have it); each rank
    records the versions it imported from the fork's environment, not ours."""
    gen = cli("open", "training", "retinanet", "datagen", "-np", "2", "-dd", other_fs_dir, "-sn", "s", "-rd", results,
              "-aip", "--params", "dataset.num_files_train=4", "dataset.record_length_bytes=65536",
              "dataset.record_length_bytes_stdev=0", "--dlio-bin-path", FORK_BIN)
    assert gen.rc == 0, gen.err
    assert len(list((other_fs_dir / "retinanet" / "train").rglob("*.jpeg"))) == 4
    engine = dlio_engine.detect(FORK_BIN)
    assert f"engine: dlio_benchmark {engine.version} at {engine.location} (from --dlio-bin-path" in gen.err
    (leaf,) = all_leaves(results)
    prov = json.loads((leaf / "provenance.json").read_text())
    (host,) = prov["libraries"]["hosts"]
    assert host["ranks"] == [0, 1] and host["python"] == engine.python
    dlio_record = host["libraries"]["dlio_benchmark"]
    assert dlio_record["version"] == engine.version and dlio_record["file"].startswith(engine.location)
    assert dlio_record.get("commit", "unknown") == engine.stamp["commit"]
    fork_env = str(Path(FORK_BIN).absolute().parent)
    for module in ("numpy", "torch", "mpi4py"):  # the fork's environment, not ours
        assert host["libraries"][module]["file"].startswith(fork_env), (module, host["libraries"][module])
    assert prov["engine"] == engine.identity()


@pytest.mark.heavy
@needs_fork
def test_object_training_runs_on_the_forks_own_s3dlio_path(cli, results, s3_endpoint):
    data = f"s3://{s3_endpoint.bucket()}/data"
    fork = ["--dlio-bin-path", FORK_BIN]
    gen = cli("open", "training", "unet3d", "datagen", "object", "-np", "2", "-dd", data, "-sn", "s", "-rd", results,
              "-aip", "--params", "dataset.num_files_train=4", *SMALL, *fork)
    assert gen.rc == 0, gen.err
    run = cli("open", "training", "unet3d", "run", "object", "-at", "b200", "-na", "2", "-cm", "1", "-dd", data,
              "-sn", "s", "-rd", results, "-aip", "--params", *SMALL, *fork)
    assert run.rc == 0, run.err
    (leaf,) = [p for p in all_leaves(results) if p.parent.name == "run"]
    workload = json.loads(next(leaf.glob("training_*_metadata.json")).read_text())["engine_parameters"]["workload"]
    assert workload["storage"] == {"storage_type": "s3", "storage_root": data.split("/")[2], "storage_library": "s3dlio"}
    assert "reader_classname" not in workload["reader"]  # no plug-in of ours
    # the s3dlio that did the I/O is the fork environment's, as its ranks imported it
    prov = json.loads((leaf / "provenance.json").read_text())
    (host,) = prov["libraries"]["hosts"]
    s3dlio_record = host["libraries"]["s3dlio"]
    assert s3dlio_record["file"].startswith(str(Path(FORK_BIN).absolute().parent))
    assert prov["storage_library"] == {"name": "s3dlio", "version": s3dlio_record["version"]}
    assert prov["provenance"]["storage_library"] == "ranks"
    assert_no_secret(results)


@pytest.mark.heavy
@needs_fork
def test_fork_training_across_two_hosts(cli, results, other_fs_dir, sim_hosts):
    """The fork's ranks on two simulated client hosts: each host writes its share, reads it
    back, and drops its own page cache between epochs."""
    hosts = sim_hosts.names[:2]
    fork = ["--dlio-bin-path", FORK_BIN, "--hosts", *hosts]
    gen = cli("open", "training", "unet3d", "datagen", "-np", "2", "-dd", other_fs_dir, "-sn", "s", "-rd", results,
              "-aip", "--params", "dataset.num_files_train=8", *SMALL, *fork)
    assert gen.rc == 0, gen.err
    assert len(list((other_fs_dir / "unet3d" / "train").rglob("*.npz"))) == 8
    run = cli("open", "training", "unet3d", "run", "-at", "b200", "-na", "2", "-cm", "1", "-dd", other_fs_dir,
              "-sn", "s", "-rd", results, "-aip", "--params", *SMALL, *fork)
    assert run.rc == 0, run.err
    (leaf,) = [p for p in all_leaves(results) if p.parent.name == "run"]
    meta = json.loads(next(leaf.glob("training_*_metadata.json")).read_text())
    assert [r["hostname"] for r in meta["client_hosts"]] == hosts
    (between,) = meta["page_cache"]["between_epochs"]
    assert between["summary"] == "dropped" and sorted(h["hostname"] for h in between["hosts"]) == sorted(hosts)
    summary = json.loads((leaf / "summary.json").read_text())
    assert summary["num_accelerators"] == 2 and summary["num_hosts"] == 2
    prov = json.loads((leaf / "provenance.json").read_text())
    assert prov["dlio"]["version"].startswith("3.0.")
    # each host's rank recorded the fork it imported there
    assert [(h["hostname"], h["ranks"]) for h in prov["libraries"]["hosts"]] == sorted(zip(hosts, ([0], [1])))
    assert {h["libraries"]["dlio_benchmark"]["version"] for h in prov["libraries"]["hosts"]} == {prov["dlio"]["version"]}
