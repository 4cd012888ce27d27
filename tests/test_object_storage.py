"""Object storage through s3dlio against a real S3 endpoint (moto's server on 127.0.0.1): URIs,
the store, training datagen and run through DLIO's s3dlio plug-ins, checkpoints, Rules 1.2's
environment record, reachability errors and credential redaction."""

from __future__ import annotations

import io
import json
import logging
import socket
import sys

import numpy as np
import pytest

from conftest import DATASIZE, S3_SECRET, all_leaves, assert_no_secret, leaf_metadata
from mlpstorage_py.errors import UsageError
from mlpstorage_py.storage import s3

SMALL_MODEL = ["model.num_layers=2", "model.hidden_size=256", "model.ffn_hidden_size=512", "model.vocab_size=4096",
               "model.num_attention_heads=8", "model.num_kv_heads=2", "checkpoint.time_between_checkpoints=0"]
RECORD = 262144
SMALL_DATA = [f"dataset.record_length_bytes={RECORD}", "dataset.record_length_bytes_stdev=0",
              "dataset.record_length_bytes_resize=0", "train.epochs=1", "train.computation_time=0.01",
              "reader.batch_size=2", "reader.read_threads=1"]


# --- URIs and the environment record ------------------------------------------------------

def test_uri_parsing_normalises_and_refuses_bad_names():
    uri = s3.parse_uri("s3://my-bucket//a/b/", "--data-dir")
    assert (uri.bucket, uri.prefix, str(uri.child("unet3d"))) == ("my-bucket", "a/b", "s3://my-bucket/a/b/unet3d")
    assert str(s3.parse_uri("s3://bk1", "--data-dir").child("x")) == "s3://bk1/x"
    for bad, why in (("/data", "must be an s3://"), ("s3://Bad_Bucket/x", "not a valid S3 bucket"),
                     ("s3://ok-bucket/a/../b", "not allowed"), ("s3://ok-bucket/a b", "not allowed")):
        with pytest.raises(UsageError, match=why):
            s3.parse_uri(bad, "--data-dir")


def test_environment_record_names_connection_variables_without_values():
    env = {"AWS_SECRET_ACCESS_KEY": S3_SECRET, "AWS_ENDPOINT_URL": "http://x:1", "S3DLIO_RANGE_CONCURRENCY": "8",
           "S3DLIO_NOT_A_KNOB": "1", "HOME": "/root"}
    record = s3.environment_record(env)
    assert record == {"connection_variables": ["AWS_ENDPOINT_URL", "AWS_SECRET_ACCESS_KEY"],
                      "storage_backend_env": {"S3DLIO_RANGE_CONCURRENCY": "8"},
                      "undeclared_storage_env": ["S3DLIO_NOT_A_KNOB"]}
    assert S3_SECRET not in json.dumps(record)


def test_undeclared_backend_variable_is_refused_in_closed_and_recorded_in_open(cli, results, monkeypatch):
    monkeypatch.setenv("S3DLIO_RANGE_CONCURRENCY", "8")
    res = cli(*DATASIZE, "-sn", "sys1")
    assert res.rc == 0, res.err
    meta = leaf_metadata(all_leaves(results)[0])
    assert meta["storage_backend_env"] == {"S3DLIO_RANGE_CONCURRENCY": "8"} and meta["undeclared_storage_env"] == []

    monkeypatch.setenv("S3DLIO_NOT_A_KNOB", "1")
    refused = cli(*DATASIZE, "-sn", "sys1")
    assert refused.rc == 9 and "S3DLIO_NOT_A_KNOB" in refused.err and "Rules 1.2" in refused.err
    assert len(all_leaves(results)) == 1, "a refused run writes no leaf"
    opened = cli("open", *DATASIZE[1:], "-sn", "sys1")
    assert opened.rc == 0, opened.err
    (open_leaf,) = [p for p in all_leaves(results) if "/open/" in str(p)]
    assert leaf_metadata(open_leaf)["undeclared_storage_env"] == ["S3DLIO_NOT_A_KNOB"]


# --- redaction ----------------------------------------------------------------------------

def test_child_output_and_log_records_are_redacted(tmp_path, monkeypatch):
    from mlpstorage_py.launch.process import run_logged
    from mlpstorage_py.results.logs import attach_leaf, detach, log, setup_console

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", S3_SECRET)
    setup_console()
    handlers = attach_leaf(tmp_path)
    try:
        log.warning("endpoint said: bad key %s", S3_SECRET)
        code = run_logged([sys.executable, "-c", f"import sys; print('out {S3_SECRET}'); print('err {S3_SECRET}', file=sys.stderr)"],
                          stdout_path=tmp_path / "o.log", stderr_path=tmp_path / "e.log", cwd=tmp_path)
    finally:
        detach(handlers)
        logging.getLogger("mlpstorage").handlers.clear()
    assert code == 0
    assert "out ***REDACTED***" in (tmp_path / "o.log").read_text()
    assert "err ***REDACTED***" in (tmp_path / "e.log").read_text()
    assert "bad key ***REDACTED***" in (tmp_path / "mlpstorage.log").read_text()
    assert_no_secret(tmp_path)


# --- the store against a real endpoint ----------------------------------------------------

# s3dlio 0.9.112 holds the GIL through list() and stat(), so moto's server thread in this process
# cannot answer them: the store runs in a child here, and the tests list and stat through one.
STORE_SCRIPT = """
import json, sys
import s3dlio
from mlpstorage_py.storage.s3 import S3Store
store, folder, block = S3Store(), sys.argv[1], 1 << 20
path = store.join(folder, "ckpt_1", "model.pt")
out = {"write": list(store.write(path, 3 * block + 4096, block_size=block, fsync=True))}
out["size"], out["exists"], out["read"] = store.size(path), store.exists(path), store.read(path, block_size=block)
store.write(store.join(folder, "ckpt_2", "empty.pt"), 0, block_size=block, fsync=True)
out["empty"] = store.size(store.join(folder, "ckpt_2", "empty.pt"))
out["subfolders"] = sorted(store.subfolders(folder))
out["distinct"] = len({bytes(s3dlio.get_range(path, i * block, 4096).memoryview()) for i in (0, 1, 3)})
store.remove(path)
out["after_remove"] = store.exists(path)
try:
    store.size(path)
except FileNotFoundError:
    out["missing"] = "FileNotFoundError"
print(json.dumps(out))
"""


@pytest.mark.heavy
def test_s3_store_writes_reads_and_lists_through_s3dlio(s3_endpoint):
    import subprocess

    bucket = s3_endpoint.bucket()
    done = subprocess.run([sys.executable, "-c", STORE_SCRIPT, f"s3://{bucket}/ck"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    size = 3 * (1 << 20) + 4096
    assert out["write"] == [size, 0], "a PUT has no fsync to count"
    assert (out["size"], out["exists"], out["read"], out["empty"]) == (size, True, size, 0)
    assert out["subfolders"] == ["ckpt_1", "ckpt_2"]
    assert out["distinct"] == 3, "every block carries fresh stamps"
    assert out["after_remove"] is False and out["missing"] == "FileNotFoundError"


# --- checkpointing ------------------------------------------------------------------------

def _checkpoint(cli, results, folder, writes, reads, storage="object"):
    return cli("open", "checkpointing", "llama3-8b", "run", storage, "-np", "2", "-at", "b200", "-cm", "8",
               "-cf", folder, "-sn", "sys1", "-rd", results, "-ncw", str(writes), "-ncr", str(reads),
               "--params", *SMALL_MODEL)


@pytest.mark.heavy
def test_checkpoint_write_and_read_through_s3dlio(cli, results, s3_endpoint):
    bucket = s3_endpoint.bucket()
    res = _checkpoint(cli, results, f"s3://{bucket}/ckpts", 2, 2)
    assert res.rc == 0, res.err
    (leaf,) = all_leaves(results)
    summary = json.loads((leaf / "summary.json").read_text())
    metric, layout = summary["metric"], summary["checkpoint_layout"]
    for phase in ("save", "load"):
        assert metric[f"{phase}_checkpoint_io_mean_GB_per_second"] > 0
    stored = {uri: s3.call_in_child("stat", uri)["size"]
              for uri in s3.call_in_child("list", f"s3://{bucket}/ckpts/llama3-8b/ckpt_1/", True)}
    assert sum(stored.values()) == layout["total_bytes"] and len(stored) == layout["files"]
    rank0 = json.loads((leaf / "0_output.json").read_text())
    assert rank0["bytes_read"] == rank0["bytes_written"] == sum(f["bytes"] for f in rank0["files"]) * 2
    assert rank0["storage"] == "object" and rank0["fsync_calls"] == 0
    assert rank0["cache_policy_applied"] == "not applicable (object storage)"
    prov = json.loads((leaf / "provenance.json").read_text())
    assert prov["storage_library"]["name"] == "s3dlio" and prov["provenance"]["storage_library"] == "ranks"
    from importlib import metadata

    (host,) = prov["libraries"]["hosts"]  # the s3dlio the engine's ranks imported, which did the I/O
    assert prov["storage_library"]["version"] == host["libraries"]["s3dlio"]["version"] == metadata.version("s3dlio")
    meta = json.loads(next(leaf.glob("checkpointing_*_metadata.json")).read_text())
    assert meta["storage"] == "object" and "AWS_SECRET_ACCESS_KEY" in meta["connection_variables"]
    assert meta["parameters"]["checkpoint"]["checkpoint_folder"] == f"s3://{bucket}/ckpts/llama3-8b"
    assert "-x AWS_SECRET_ACCESS_KEY" in meta["executed_command"]
    assert not (leaf / "fs_separation.json").exists(), "object runs are exempt from the file-system probe"

    read_only = _checkpoint(cli, results, f"s3://{bucket}/ckpts", 0, 2)
    assert read_only.rc == 0, read_only.err
    assert_no_secret(results)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.heavy
def test_unreachable_endpoint_and_missing_bucket_fail_with_a_leaf(cli, results, s3_endpoint, monkeypatch):
    missing = _checkpoint(cli, results, "s3://mlps-no-such-bucket/c", 1, 0)
    assert missing.rc == 5 and "bucket 'mlps-no-such-bucket' does not exist" in missing.err
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")
    unreachable = _checkpoint(cli, results, "s3://mlps-any/c", 1, 0)
    assert unreachable.rc == 5 and "cannot reach the S3 endpoint" in unreachable.err
    assert "RuntimeError" not in unreachable.err  # s3dlio's own message, not the child's traceback line
    leaves = all_leaves(results)
    assert len(leaves) == 2
    for leaf in leaves:
        meta = json.loads(next(leaf.glob("checkpointing_*_metadata.json")).read_text())
        assert meta["exit_status"] == 5 and meta["failure"]
        assert not (leaf / "summary.json").exists()


def test_storage_and_location_must_agree(cli, results, tmp_path):
    as_file = cli("open", "training", "unet3d", "datagen", "-np", "1", "-dd", "s3://bk1/x", "-sn", "s", "-rd", results)
    assert as_file.rc == 2 and "needs the `object` storage positional" in as_file.err
    as_object = cli("open", "training", "unet3d", "datagen", "object", "-np", "1", "-dd", tmp_path, "-sn", "s", "-rd", results)
    assert as_object.rc == 2 and "must be an s3://" in as_object.err
    assert all_leaves(results) == []


# --- training -----------------------------------------------------------------------------

def _npz_size(record: int) -> int:
    """What DLIO's npz generator writes for one square sample of `record` bytes."""
    dim = int(record ** 0.5)
    buffer = io.BytesIO()
    np.savez(buffer, x=np.zeros((dim, dim, 1), dtype=np.uint8), y=[0])
    return len(buffer.getvalue())


@pytest.mark.heavy
def test_training_datagen_and_run_through_dlio_with_s3dlio(cli, results, s3_endpoint):
    import s3dlio

    bucket = s3_endpoint.bucket()
    gen = cli("open", "training", "unet3d", "datagen", "object", "-np", "2", "-dd", f"s3://{bucket}/data", "-sn", "sys1",
              "-rd", results, "-aip", "--params", "dataset.num_files_train=8", *SMALL_DATA)
    assert gen.rc == 0, gen.err
    objects = sorted(s3.call_in_child("list", f"s3://{bucket}/data/unet3d/train/", True))
    assert [o.rsplit("/", 1)[1] for o in objects] == [f"img_{i}_of_8.npz" for i in range(8)]
    assert {s3.call_in_child("stat", o)["size"] for o in objects} == {_npz_size(RECORD)}
    sample = np.load(io.BytesIO(s3dlio.get(objects[0]).memoryview()))
    assert sample["x"].shape == (512, 512, 1) and sample["x"].dtype == np.uint8
    manifest = json.loads(s3dlio.get(f"s3://{bucket}/data/unet3d/.mlps-datagen-manifest.json").to_bytes())
    assert manifest["num_files_train"] == 8 and manifest["record_length_bytes"] == RECORD
    (gen_leaf,) = all_leaves(results)
    gen_meta = leaf_metadata(gen_leaf)
    assert gen_meta["parameters"]["storage"] == {"storage_type": "s3", "storage_root": bucket}
    assert gen_meta["engine_parameters"]["workload"]["dataset"]["data_folder"] == "data/unet3d"

    again = cli("open", "training", "unet3d", "datagen", "object", "-np", "1", "-dd", f"s3://{bucket}/data", "-sn", "sys1",
                "-rd", results, "-aip", "--params", "dataset.num_files_train=8", *SMALL_DATA)
    assert again.rc == 9 and "not empty" in again.err

    run = cli("open", "training", "unet3d", "run", "object", "-at", "b200", "-na", "2", "-cm", "1", "-dd",
              f"s3://{bucket}/data", "-sn", "sys1", "-rd", results, "-aip", "--params", *SMALL_DATA)
    assert run.rc == 0, run.err
    (run_leaf,) = [p for p in all_leaves(results) if p.parent.name == "run"]
    summary = json.loads((run_leaf / "summary.json").read_text())
    metric = summary["metric"]
    assert summary["num_files_train"] == 8 and summary["num_accelerators"] == 2
    assert metric["train_io_mean_MB_per_second"] == pytest.approx(
        metric["train_throughput_mean_samples_per_second"] * RECORD / 2 ** 20, rel=1e-9)
    meta = leaf_metadata(run_leaf)
    assert meta["engine_parameters"]["workload"]["reader"]["reader_classname"].endswith("S3dlioReader")
    assert meta["page_cache"]["before_run"].startswith("not applicable")
    assert json.loads((run_leaf / "datagen-manifest.json").read_text()) == manifest
    assert json.loads((run_leaf / "provenance.json").read_text())["storage_library"]["name"] == "s3dlio"
    assert "Discovered custom data reader S3dlioReader" in (run_leaf / "dlio.log").read_text()
    assert_no_secret(results)


def test_manpage_environment_lists_every_variable_of_the_table():
    from pathlib import Path

    from mlpstorage_py.rules.tables import storage_env

    text = (Path(__file__).resolve().parents[1] / "ManPage.md").read_text(encoding="utf-8")
    environment = text[text.index("## ENVIRONMENT"):text.index("## EXIT STATUS")]
    table = storage_env()
    for name in [*table["connection"], *table["storage_backend"]]:
        assert f"| `{name}` |" in environment, name


@pytest.mark.heavy
def test_jpeg_datagen_writes_decodable_images(cli, results, s3_endpoint):
    import s3dlio
    from PIL import Image

    bucket = s3_endpoint.bucket()
    gen = cli("open", "training", "retinanet", "datagen", "object", "-np", "2", "-dd", f"s3://{bucket}/d", "-sn", "sys1",
              "-rd", results, "-aip", "--params", "dataset.num_files_train=4", "dataset.record_length_bytes=65536")
    assert gen.rc == 0, gen.err
    objects = sorted(s3.call_in_child("list", f"s3://{bucket}/d/retinanet/train/", True))
    assert [o.rsplit("/", 1)[1] for o in objects] == [f"img_{i}_of_4.jpeg" for i in range(4)]
    image = Image.open(io.BytesIO(s3dlio.get(objects[0]).memoryview()))
    assert (image.format, image.size) == ("JPEG", (256, 256))
