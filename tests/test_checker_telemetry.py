"""TEL-01: a CLOSED result whose own telemetry shows a saturated client CPU, memory or link gets a
warning naming the phase and the figures (issue 40); a saturated device (the storage's), an OPEN
result and a leaf without telemetry get none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlpstorage_py.checker.registry import WARNING
from mlpstorage_py.results import bottleneck
from synthetic import fresh, leaves_of, workload  # noqa: F401
from test_checker_structure import findings_of


def samples(cpu_idle: float, util: float, t0: float = 1000.0) -> list[dict]:
    """Four 1-second samples of one host: CPU idle and a device's utilisation as given."""
    return [{"host": "client-1", "t": t0 + i, "dt": 1.0, "cpus": 2,
             "cpu": {"user": 100 - cpu_idle, "system": 0.0, "iowait": 0.0, "steal": 0.0, "idle": cpu_idle},
             "mem": {"total_mib": 1000, "used_mib": 100, "cache_mib": 0, "dirty_mib": 0, "writeback_mib": 0},
             "net": {}, "disks": {"nvme0n1": {"read_bytes": 2 ** 20, "write_bytes": 0, "reads": 1, "writes": 0,
                                               "util_pct": util, "queue_depth": 4.0}}} for i in range(4)]


def with_telemetry(root: Path, division: str, cpu_idle: float, util: float) -> Path:
    """The first training run leaf of the package with telemetry whose bottleneck record is
    what results/bottleneck.analyse makes of those samples."""
    leaf = leaves_of(workload(root, "training", division=division) / "run")[0]
    folder = leaf / "telemetry"
    folder.mkdir()
    rows = samples(cpu_idle, util)
    (folder / "client-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    record = bottleneck.analyse({"client-1": rows}, "DLIO", 1000.0, 1003.0)
    (folder / bottleneck.FILE).write_text(json.dumps([{"job": "DLIO", **record}]))
    return leaf


def test_a_closed_result_limited_by_its_clients_gets_a_warning(fresh):
    root = fresh()
    leaf = with_telemetry(root, "closed", cpu_idle=2.0, util=40.0)
    (found,) = findings_of(root, "TEL-01")
    assert found.severity == WARNING and str(leaf) in str(found.path)
    assert "the clients, not the storage, limited DLIO: client CPU busy 98 % on client-1" in found.message


@pytest.mark.parametrize("division, cpu_idle, util", [("closed", 50.0, 99.0), ("open", 2.0, 40.0)],
                         ids=["saturated device", "open"])
def test_the_storage_at_its_limit_or_an_open_result_gets_none(fresh, division, cpu_idle, util):
    root = fresh(division=division)
    with_telemetry(root, division, cpu_idle, util)
    assert findings_of(root, "TEL-01") == []


def test_a_leaf_without_telemetry_gets_none(fresh):
    assert findings_of(fresh(), "TEL-01") == []


def test_analyse_by_the_thresholds():
    """Hand-computed: 98 % busy crosses 90 %; 89 % does not; a device at 99 % is named but is not the clients'."""
    busy = bottleneck.analyse({"h": samples(2.0, 10.0)}, "p", 1000.0, 1003.0)
    assert busy["clients_limited"] and busy["saturated"][0]["figure"] == 98.0
    calm = bottleneck.analyse({"h": samples(11.0, 10.0)}, "p", 1000.0, 1003.0)
    assert not calm["saturated"] and calm["summary"].startswith("nothing saturated")
    disk = bottleneck.analyse({"h": samples(50.0, 99.0)}, "p", 1000.0, 1003.0)
    assert [s["what"] for s in disk["saturated"]] == ["device"] and not disk["clients_limited"]
    assert disk["hosts"]["h"]["device"]["read_mib_s"] == 1.0
    short = bottleneck.analyse({"h": samples(2.0, 10.0)[:1]}, "p", 1000.0, 1003.0)
    assert short["summary"].startswith("not judged")
