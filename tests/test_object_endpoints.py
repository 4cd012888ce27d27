"""Several S3 endpoints in front of one object store (issue 44): one moto server behind three
byte-counting TCP proxies (tests/tcp_proxy.py), each its own process on its own loopback port,
so every endpoint's bytes are counted from outside the tool. Training datagen and run, and a
checkpoint write and read, spread their bytes over the three under per_rank and round_robin; the
leaf's per-endpoint figures (what the ranks counted) agree with the proxies'; a gateway killed
mid-run is named in the one-line error (exit 15); whatif lists the endpoints; no secret is
written anywhere."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import MLPSTORAGE, S3_SECRET, all_leaves, assert_no_secret, subprocess_env
from synthetic import fresh, leaves_of, workload  # noqa: F401
from tcp_proxy import Gateways
from test_checker_structure import findings_of

from mlpstorage_py.checker.registry import WARNING
from mlpstorage_py.errors import UsageError
from mlpstorage_py.storage import endpoints as eps

SMALL_MODEL = ["model.num_layers=2", "model.hidden_size=256", "model.ffn_hidden_size=512", "model.vocab_size=4096",
               "model.num_attention_heads=8", "model.num_kv_heads=2"]
RECORD = 262144
SMALL_DATA = [f"dataset.record_length_bytes={RECORD}", "dataset.record_length_bytes_stdev=0",
              "dataset.record_length_bytes_resize=0", "train.epochs=1", "train.computation_time=0.01",
              "reader.batch_size=1", "reader.read_threads=1"]
TOLERANCE = 0.10  # each of three endpoints: 33 % +- 10 % of the bytes


# --- the list, its sources and its checks ----------------------------------------------------

def test_the_list_comes_from_the_flags_a_file_or_the_environment(tmp_path):
    listed = tmp_path / "endpoints.txt"
    listed.write_text("# gateways\nhttp://gw1:9000\n\nhttps://gw2  # the second\n")
    env = {eps.ENV_LIST: "http://e1:1,http://e2:2", eps.ENV_STRATEGY: "round_robin"}
    flags = eps.resolve(["http://a:1,http://b:2", "http://c:3/"], None, "least_connections", env)
    assert flags.urls == ("http://a:1", "http://b:2", "http://c:3") and flags.strategy == "least_connections"
    from_file = eps.resolve(None, str(listed), None, env)
    assert from_file.urls == ("http://gw1:9000", "https://gw2") and from_file.strategy == "round_robin"
    from_env = eps.resolve(None, None, None, {eps.ENV_LIST: "http://e1:1, http://e2:2"})
    assert (from_env.urls, from_env.strategy, from_env.source) == (("http://e1:1", "http://e2:2"), "per_rank", eps.ENV_LIST)
    assert eps.resolve(None, None, None, {}) is None
    assert [from_env.for_rank(r) for r in range(5)] == ["http://e1:1", "http://e2:2"] * 2 + ["http://e1:1"]


@pytest.mark.parametrize("urls, why", [
    (["http://key:secret@gw:9000"], "must not carry credentials"),
    (["ftp://gw"], "not an http(s)://host"),
    (["http://gw:9000/bucket"], "has a path or query"),
    (["http://gw:1", "http://gw:1"], "more than once"),
    ([f"http://gw{i}:1" for i in range(33)], "at most 32"),
], ids=["credentials", "scheme", "path", "repeated", "too many"])
def test_a_bad_list_is_refused_in_one_line(urls, why):
    with pytest.raises(UsageError, match=re.escape(why)) as caught:
        eps.resolve(urls, None, None, {})
    assert "secret" not in str(caught.value), "a refused URL's credential is not echoed"


def test_a_strategy_needs_a_list_and_must_be_known():
    with pytest.raises(UsageError, match="needs an endpoint list"):
        eps.resolve(None, None, "round_robin", {})
    with pytest.raises(UsageError, match="is not one of"):
        eps.resolve(["http://a:1"], None, None, {eps.ENV_STRATEGY: "random"})


def test_the_probe_tells_refused_from_silent():
    with socket.socket() as silent:  # accepts TCP (the backlog) but never answers: a frozen gateway
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        port = silent.getsockname()[1]
        assert eps.answers(f"http://127.0.0.1:{port}", timeout=1.0) == "did not answer within 1 s"
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    assert eps.answers(f"http://127.0.0.1:{port}") == "refused the connection"


def test_file_runs_refuse_the_flags_and_whatif_lists_the_endpoints(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # a plan sets it where unset: keep it this test's
    gateways = ["http://127.0.0.1:9101", "http://127.0.0.1:9102", "http://127.0.0.1:9103"]
    plan = cli("whatif", "checkpointing", "llama3-8b", "run", "object", "-np", "3", "-at", "b200", "-cm", "8",
               "-cf", "s3://bk1/c", "--s3-endpoints", *gateways, "--params", *SMALL_MODEL)
    assert plan.rc == 0, plan.err
    for rank, url in enumerate(gateways):
        assert f"  {url}  ranks {rank}" in plan.out
    assert "strategy per_rank, from the default" in plan.out
    assert "--s3-endpoints " + ",".join(gateways) in plan.out
    training = cli("whatif", "training", "unet3d", "datagen", "object", "-np", "2", "-dd", "s3://bk1/d",
                   "--s3-endpoints", ",".join(gateways), "--s3-endpoint-strategy", "round_robin")
    assert training.rc == 0, training.err
    assert "strategy round_robin, from --s3-endpoint-strategy" in training.out and all(u in training.out for u in gateways)
    as_file = cli("whatif", "checkpointing", "llama3-8b", "run", "-np", "1", "-at", "b200", "-cm", "8",
                  "-cf", str(tmp_path), "--s3-endpoints", gateways[0])
    assert as_file.rc == 2 and "apply to `object` runs" in as_file.err


def test_the_fork_is_refused_a_strategy_it_cannot_apply(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    from mlpstorage_py.benchmarks import object_endpoints
    from mlpstorage_py.benchmarks.base import Plan, Request

    from mlpstorage_py.benchmarks.options import TrainingOptions

    req = Request("open", "training", "unet3d", "run", TrainingOptions(), storage="object",
                  s3_endpoints=("http://a:1", "http://b:2"), s3_endpoint_strategy="round_robin")
    with pytest.raises(UsageError, match="assigns endpoints per rank only"):
        object_endpoints.plan(req, Plan(parameters={}), native_fork=True)


# --- real runs across three gateways ----------------------------------------------------------

@pytest.fixture
def gateways(s3_endpoint, tmp_path):
    with Gateways(s3_endpoint.url, 3, tmp_path) as gw:
        yield gw


def _shares(counts: list[dict[str, int] | None]) -> list[float]:
    moved = [c["up"] + c["down"] for c in counts if c is not None]
    return [m / sum(moved) for m in moved]


def _balanced(shares: list[float]) -> bool:
    return all(abs(s - 1 / 3) <= TOLERANCE for s in shares)


def _leaf_endpoints(leaf: Path) -> dict:
    meta = json.loads(next(leaf.glob("*_metadata.json")).read_text())
    return meta["engine_parameters"]["object_endpoints"]


def _checkpoint(cli, results, folder, gateways, strategy, processes, writes, reads, *extra):
    return cli("open", "checkpointing", "llama3-8b", "run", "object", "-np", str(processes), "-at", "b200", "-cm", "8",
               "-cf", folder, "-sn", "sys1", "-rd", results, "-ncw", str(writes), "-ncr", str(reads),
               "--s3-endpoints", *gateways.urls, "--s3-endpoint-strategy", strategy,
               "--params", *SMALL_MODEL, "checkpoint.time_between_checkpoints=0", *extra)


@pytest.mark.heavy
@pytest.mark.parametrize("strategy, processes", [("per_rank", 3), ("round_robin", 3)])
def test_a_checkpoint_write_and_read_spreads_over_three_gateways(cli, results, s3_endpoint, gateways, strategy, processes):
    bucket = s3_endpoint.bucket()
    # Round robin spreads requests, not bytes: each rank's store rotates its own requests, here a 2 MiB
    # and a 13 MiB file a checkpoint (each one PUT and, under 16 MiB, one GET), even over 3 checkpoints.
    count = 1 if strategy == "per_rank" else 3
    res = _checkpoint(cli, results, f"s3://{bucket}/ck", gateways, strategy, processes, count, count)
    assert res.rc == 0, res.err
    counts = gateways.stop()
    shares = _shares(counts)
    assert _balanced(shares), f"bytes per gateway {counts}"
    (leaf,) = all_leaves(results)
    record = _leaf_endpoints(leaf)
    assert record["endpoints"] == gateways.urls and record["strategy"] == strategy
    rows = record["per_endpoint"]
    summary = json.loads((leaf / "summary.json").read_text())
    total = summary["checkpoint_layout"]["total_bytes"]
    assert sum(r["written_bytes"] for r in rows) == total * count == sum(r["read_bytes"] for r in rows)
    for row, count in zip(rows, counts, strict=True):  # the ranks' own count agrees with the gateway's, headers aside
        assert row["written_bytes"] <= count["up"] <= row["written_bytes"] * 1.05 + 256 * 1024
        assert row["read_bytes"] <= count["down"] <= row["read_bytes"] * 1.05 + 256 * 1024
        assert row["failed_requests"] == 0 and row["requests"] > 0
    if strategy == "per_rank":
        assert [r["ranks"] for r in rows] == [[0], [1], [2]]
    assert_no_secret(results)


@pytest.mark.heavy
@pytest.mark.parametrize("strategy, processes", [("per_rank", 3), ("round_robin", 1)])
def test_training_datagen_and_run_spread_over_three_gateways(cli, results, s3_endpoint, gateways, strategy, processes):
    bucket = s3_endpoint.bucket()
    common = ["-sn", "sys1", "-rd", results, "-aip", "--s3-endpoints", *gateways.urls,
              "--s3-endpoint-strategy", strategy, "--params"]
    gen = cli("open", "training", "unet3d", "datagen", "object", "-np", str(processes), "-dd", f"s3://{bucket}/data",
              *common, "dataset.num_files_train=9", *SMALL_DATA)
    assert gen.rc == 0, gen.err
    run = cli("open", "training", "unet3d", "run", "object", "-at", "b200", "-na", "3", "-cm", "1",
              "-dd", f"s3://{bucket}/data", *common, *SMALL_DATA)
    assert run.rc == 0, run.err
    counts = gateways.stop()
    assert _balanced(_shares(counts)), f"bytes per gateway {counts}"
    for leaf in all_leaves(results):
        rows = _leaf_endpoints(leaf)["per_endpoint"]
        moved = [r["read_bytes"] + r["written_bytes"] for r in rows]
        assert all(moved) and _balanced([m / sum(moved) for m in moved]), (leaf.parent.name, rows)
    assert_no_secret(results)


@pytest.mark.heavy
@pytest.mark.parametrize("fault, said", [("kill", "refused the connection"), ("freeze", "did not answer within 5 s")])
def test_a_gateway_killed_or_frozen_mid_run_is_named(cli, results, s3_endpoint, gateways, tmp_path, fault, said):
    bucket = s3_endpoint.bucket()
    # A frozen gateway's requests fail at s3dlio's operation timeout (a declared backend variable):
    # 5 s here, where the default (60 s) would only make the test slower.
    env = {**subprocess_env(tmp_path), **s3_endpoint.env, "S3DLIO_OPERATION_TIMEOUT_SECS": "5"}
    argv = [str(MLPSTORAGE), "open", "checkpointing", "llama3-8b", "run", "object", "-np", "3", "-at", "b200",
            "-cm", "8", "-cf", f"s3://{bucket}/ck", "-sn", "sys1", "-rd", str(results), "-ncw", "2", "-ncr", "0",
            "--s3-endpoints", *gateways.urls, "--params", *SMALL_MODEL, "checkpoint.time_between_checkpoints=30"]
    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The first checkpoint done (rank 0's line): the 30 s pause before the second has begun.
        while not any("save_ckpt1:" in p.read_text() for p in results.rglob("checkpointing_run.stdout.log")):
            assert child.poll() is None, child.communicate()
            time.sleep(0.2)
        getattr(gateways, fault)(1)
        _, err = child.communicate(timeout=600)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 15, err
    line = [l for l in err.splitlines() if l.startswith("mlpstorage: error:")][-1]
    assert f"{gateways.urls[1]} {said} (1 of 3)" in line
    assert gateways.urls[0] not in line.split("):")[0] and gateways.urls[2] not in line.split("):")[0]
    (leaf,) = all_leaves(results)
    record = _leaf_endpoints(leaf)
    assert record["failed"] == {gateways.urls[1]: said}
    rows = {r["endpoint"]: r for r in record["per_endpoint"]}
    layout_bytes = json.loads(next(leaf.glob("*_metadata.json")).read_text())["engine_parameters"]["bytes_per_rank"]
    # Nothing counted that did not happen: the first checkpoint's bytes, and on the dead gateway no more.
    assert rows[gateways.urls[1]]["written_bytes"] == layout_bytes[1] and rows[gateways.urls[1]]["failed_requests"] >= 1
    assert S3_SECRET not in err
    assert_no_secret(results)


# --- validate: OBJ-01 ------------------------------------------------------------------------

def _with_endpoints(root: Path, moved: list[int], failed: dict[str, str] | None = None) -> Path:
    """The first training run leaf of the package, recorded as an object run over len(moved) endpoints."""
    leaf = leaves_of(workload(root, "training") / "run")[0]
    path = next(leaf.glob("training_*_metadata.json"))
    meta = json.loads(path.read_text())
    urls = [f"http://gw{i}:9000" for i in range(len(moved))]
    meta.setdefault("engine_parameters", {})["object_endpoints"] = {
        "endpoints": urls, "strategy": "per_rank", "source": "--s3-endpoints", "strategy_source": "the default",
        "per_endpoint": [{"endpoint": u, "read_bytes": m, "written_bytes": 0, "requests": 1 if m else 0,
                          "failed_requests": 0, "ranks": [i] if m else []} for i, (u, m) in enumerate(zip(urls, moved, strict=True))],
        **({"failed": failed} if failed else {})}
    path.write_text(json.dumps(meta))
    return leaf


def test_obj01_warns_when_every_byte_went_to_one_of_several_endpoints(fresh):
    root = fresh()
    leaf = _with_endpoints(root, [1 << 20, 0, 0])
    (found,) = findings_of(root, "OBJ-01")
    assert found.severity == WARNING and str(leaf) in found.path
    assert "all the bytes went to http://gw0:9000, one of the 3 endpoints listed (strategy per_rank)" in found.message


@pytest.mark.parametrize("moved", [[1 << 20, 1 << 20, 1], [1 << 20]], ids=["spread", "one endpoint listed"])
def test_obj01_is_silent_when_the_bytes_spread_or_one_endpoint_was_listed(fresh, moved):
    root = fresh()
    _with_endpoints(root, moved)
    assert findings_of(root, "OBJ-01") == []
    assert findings_of(fresh(), "OBJ-01") == []


def test_obj01_names_a_failed_endpoint(fresh):
    root = fresh()
    _with_endpoints(root, [1, 1, 1], failed={"http://gw1:9000": "refused the connection"})
    (found,) = findings_of(root, "OBJ-01")
    assert "http://gw1:9000 refused the connection" in found.message
