"""Telemetry across simulated client hosts (issue 40's "done when"): a traced, telemetered
training run and checkpoint run on three hosts leave telemetry for every host, a bottleneck
record per job in the leaf (telemetry/bottleneck.json and summary.json), and the trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import all_leaves
from test_cluster_training import SMALL, datagen, leaves_of
from test_cluster_storage import ckpt
from test_trace_hosts import _tracefs_on_hosts, traced_hosts  # noqa: F401 - fixtures

pytestmark = pytest.mark.heavy


def assert_telemetry(leaf: Path, hosts: list[str]) -> list[dict]:
    """Every host sampled at least twice, and the bottleneck records in both places."""
    folder = leaf / "telemetry"
    for host in hosts:
        rows = [json.loads(line) for line in (folder / f"{host}.jsonl").read_text().splitlines()]
        assert len(rows) >= 2 and all(r["host"] == host and r["dt"] > 0 for r in rows[1:]), host
        assert {"cpu", "mem", "net", "disks"} <= set(rows[-1])
    records = json.loads((folder / "bottleneck.json").read_text())
    assert records and all(r["summary"] for r in records)
    summary = json.loads((leaf / "summary.json").read_text())
    assert summary["bottleneck"] == records
    assert (leaf / "io_trace.json").is_file()
    return records


def test_traced_telemetered_training_and_checkpointing_on_three_hosts(cli, results, other_fs_dir, traced_hosts):
    hosts = traced_hosts.names[:3]
    assert len(hosts) == 3
    assert datagen(cli, results, other_fs_dir, hosts).rc == 0
    run = cli("open", "training", "unet3d", "run", "-at", "b200", "-na", "3", "-cm", "1", "-dd", other_fs_dir,
              "-sn", "sys1", "-rd", results, "--hosts", *hosts, "-aip", "--trace-io", "--telemetry-interval", "0.5",
              "--params", *SMALL)
    assert run.rc == 0, run.err
    (leaf,) = leaves_of(results, "run")
    records = assert_telemetry(leaf, hosts)
    assert any(r["job"] == "DLIO" for r in records)
    folder = other_fs_dir / "ckpt"
    folder.mkdir()
    res = ckpt(cli, results, folder, hosts, 2, 2, "--trace-io", "--telemetry-interval", "0.5")
    assert res.rc == 0, res.err
    (leaf,) = [p for p in all_leaves(results) if p.parent.name == "llama3-8b"]
    records = assert_telemetry(leaf, hosts)
    assert any(r["job"] == "checkpoint engine" for r in records)
