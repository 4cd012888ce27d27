"""`mlpstorage systems describe`: the description from the runs' host records, its placeholders,
and Rules 2.1.9 comparing what a run recorded with what its description states."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from conftest import DATASIZE, workload_leaves
from synthetic import edit_json, fresh  # noqa: F401 (fixture)

from mlpstorage_py import checker
from mlpstorage_py.checker.package import Package
from mlpstorage_py.launch import hostinfo
from mlpstorage_py.results.host import meminfo_bytes
from mlpstorage_py.systems.describe import unfilled
from mlpstorage_py.systems.profile import networking

FILLED = {"friendly_description": "Acme shared filesystem 2.0",
          "architecture": {"storage_location": "remote", "product_API": "file", "client_footprint": "open_source",
                           "client_installation": "in_box"},
          "capabilities": {"multi_host": True, "simultaneous_write": True, "simultaneous_read": True,
                           "remap_time_in_seconds": 0},
          "usable_capacity_tib": 100, "availability": "available"}


def fill_in(path: Path) -> None:
    """What a submitter does: replace every placeholder with the real value."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    sut = doc["system_under_test"]
    for key, value in FILLED.items():
        if isinstance(value, dict):
            sut["solution"][key].update(value)
        else:
            sut["solution"][key] = value
    sut["deployment"] = "onprem"
    sut["product_nodes"] = [{"friendly_description": "storage node", "quantity": 2,
                             "chassis": {"model_name": "generic", "rack_units": 1}}]
    for client in sut["clients"]:
        client["chassis"]["model_name"] = "generic"
        for nic in client["networking"]:
            nic["traffic"] = ["data"]
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    assert unfilled(path.read_text(encoding="utf-8")) == []


def test_describe_from_a_real_run_never_overwrites(cli, results):
    assert cli(*DATASIZE, "-sn", "sys1", "-rd", results).rc == 0
    res = cli("systems", "describe", "sys1", "-rd", results)
    assert res.rc == 0, res.err
    path = results / "closed" / "Org" / "systems" / "sys1.yaml"
    text = path.read_text(encoding="utf-8")
    (client,) = yaml.safe_load(text)["system_under_test"]["clients"]
    (record,) = json.loads(next(workload_leaves(results)[0].glob("*_metadata.json")).read_text())["client_hosts"]
    assert client["quantity"] == 1
    assert client["chassis"]["memory_capacity"] == round(meminfo_bytes() / 2 ** 30)
    assert client["chassis"]["cpu_model"] == record["cpu_model"] and client["operating_system"]["kernel"] == record["kernel"]
    # what only the submitter knows is marked, typed values as null with a comment
    assert re.search(r"simultaneous_write: null  # FILL IN", text)
    assert len(unfilled(text)) >= 10 and f"{len(unfilled(text))} FILL IN" in res.out
    again = cli("systems", "describe", "sys1", "-rd", results)
    assert again.rc == 5 and "--force" in again.err and path.read_text(encoding="utf-8") == text
    assert cli("systems", "describe", "sys1", "-rd", results, "--force").rc == 0
    missing = cli("systems", "describe", "nosuch", "-rd", results)
    assert missing.rc == 3 and len(missing.err_lines) == 1


def _with_host_records(root: Path) -> dict:
    """Give every leaf the host survey a real run records (this machine's facts)."""
    record = {"host": "127.0.0.1", **hostinfo.local_facts(), "ranks": [0], "collection_method": "local"}
    for leaf in Package.load(root).leaves:
        for path in leaf.metadata_files:
            edit_json(path, lambda m: m.update(client_hosts=[record], num_client_hosts=1))
    return record


def test_filled_description_validates_and_drift_warns(cli, fresh):
    root = fresh()
    record = _with_host_records(root)
    path = root / "closed" / "Acme" / "systems" / "sys1.yaml"
    assert cli("systems", "describe", "sys1", "-rd", root).rc == 5  # the package already has one
    assert cli("systems", "describe", "sys1", "-rd", root, "--force").rc == 0
    # unfilled: the typed placeholders read as absent, so 4.7.4 refuses the capabilities
    _, findings = checker.validate(root)
    assert {f.rule for f in findings if f.path == str(path)} >= {"4.7.3", "4.7.4"}
    fill_in(path)
    _, findings = checker.validate(root)
    assert [f for f in findings] == []
    # the description now says another CPU and memory than the runs recorded
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["system_under_test"]["clients"][0]["chassis"].update(memory_capacity=2048, cpu_model="Other CPU 9000")
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    _, findings = checker.validate(root)
    assert findings and {(f.rule, f.severity) for f in findings} == {("2.1.9", "WARNING")}
    assert len(findings) == len(Package.load(root).leaves)
    assert f"client host {record['hostname']}" in findings[0].message and "memory GiB" in findings[0].message
    assert "Other CPU 9000" in findings[0].message


def test_nics_from_sysfs(tmp_path):
    """Only interfaces with a device behind them; type, state, speed and driver as sysfs gives them."""
    drivers = tmp_path / "drivers" / "mlx5_core"
    drivers.mkdir(parents=True)
    net = tmp_path / "net"
    for name, speed, kind in (("ens1", "100000", "1"), ("ens2", "100000", "1"), ("ib0", "200000", "32")):
        (net / name / "device").mkdir(parents=True)
        (net / name / "device" / "driver").symlink_to(drivers)
        for file, text in (("speed", speed), ("type", kind), ("operstate", "up")):
            (net / name / file).write_text(text + "\n")
    (net / "lo").mkdir()
    (net / "lo" / "type").write_text("772\n")
    found = hostinfo.nics(net)
    assert [n["name"] for n in found] == ["ens1", "ens2", "ib0"]
    assert found[0] == {"name": "ens1", "type": "ethernet", "state": "up", "driver": "mlx5_core", "speed_mbps": 100000}
    groups = networking(found)
    assert [(g["type"], g["speed"], g["unit_count"]) for g in groups] == [("ethernet", 100, 2), ("infiniband", 200, 1)]
    assert isinstance(hostinfo.nics(), list)  # this machine's, whatever it has


def test_published_leaves_have_no_host_survey(cli, tmp_path):
    """Published v3.0 leaves (another tool's) record no client_hosts: describe refuses, writing nothing."""
    from conftest import REALDATA

    if not REALDATA.is_dir():
        pytest.skip("no ../shared/realdata")
    before = sorted(p.name for p in (REALDATA / "closed" / "XSKY" / "systems").iterdir())
    res = cli("systems", "describe", "XSKY_AIMesh_3StorageNode_1Client", "-rd", REALDATA)
    assert res.rc == 3 and "recorded its client hosts" in res.err
    assert sorted(p.name for p in (REALDATA / "closed" / "XSKY" / "systems").iterdir()) == before


def test_host_configuration_from_proc_sys_sysfs_and_the_environment(tmp_path):
    """Tunables as /proc/sys gives them, the environment's allowlisted variables (secret-looking
    values masked, what the launcher sets left out) and the drives with hardware behind them."""
    from mlpstorage_py.launch import host_config
    from mlpstorage_py.results.redact import MASK

    proc = tmp_path / "sys"
    for name, text in (("vm/dirty_ratio", "40\n"), ("net/ipv4/tcp_rmem", "4096\t131072\t6291456\n")):
        (proc / name).parent.mkdir(parents=True, exist_ok=True)
        (proc / name).write_text(text)
    assert host_config.sysctls(proc) == {"vm.dirty_ratio": "40", "net.ipv4.tcp_rmem": "4096 131072 6291456"}
    env = {"OMP_NUM_THREADS": "4", "UCX_TLS": "rc,sm", "OMPI_MCA_num_procs": "2", "FI_PSM3_PASSWORD": "hunter22",
           "HOME": "/root", "S3DLIO_RANGE_CONCURRENCY": "8", "AWS_SECRET_ACCESS_KEY": "k3y-v4lue",
           "UCX_EXTRA": "auth=k3y-v4lue"}
    assert host_config.environment(env) == {"FI_PSM3_PASSWORD": MASK, "OMP_NUM_THREADS": "4",
                                            "S3DLIO_RANGE_CONCURRENCY": "8", "UCX_EXTRA": f"auth={MASK}",
                                            "UCX_TLS": "rc,sm"}
    block = tmp_path / "block"
    for name, device in (("nvme0n1", True), ("loop0", False), ("dm-0", False)):
        queue = block / name / "queue"
        queue.mkdir(parents=True)
        if device:
            (block / name / "device").mkdir()
            (block / name / "device" / "model").write_text("Example NVMe 3.84TB  \n")
        (block / name / "size").write_text(str(3_840_000_000_000 // 512) + "\n")
        for file, text in (("rotational", "0"), ("scheduler", "[none] mq-deadline"), ("read_ahead_kb", "128"),
                           ("nr_requests", "1023")):
            (queue / file).write_text(text + "\n")
    assert host_config.drives(block) == [{"name": "nvme0n1", "model": "Example NVMe 3.84TB", "vendor": None,
                                          "size_gib": 3576.3, "rotational": False, "scheduler": "none",
                                          "read_ahead_kb": 128, "nr_requests": 1023}]
    mine = host_config.host_config()  # this machine's, whatever it has
    assert mine["sysctl"]["vm.dirty_ratio"].isdigit() and isinstance(mine["drives"], list)


def test_described_configuration_and_its_drift(cli, fresh, monkeypatch):
    """describe writes the hosts' tunables, environment and drives; a description that states
    another value for any of them draws 2.1.9 WARNINGs naming it."""
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    root = fresh()
    record = _with_host_records(root)
    assert record["environment"] == {"OMP_NUM_THREADS": "3"}
    path = root / "closed" / "Acme" / "systems" / "sys1.yaml"
    assert cli("systems", "describe", "sys1", "-rd", root, "--force").rc == 0
    fill_in(path)
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    (client,) = doc["system_under_test"]["clients"]
    assert {"name": "OMP_NUM_THREADS", "value": "3"} in client["environment"]
    assert {"name": "vm.dirty_ratio", "value": record["sysctl"]["vm.dirty_ratio"]} in client["sysctl"]
    assert client["drives"] == record["drives"]
    _, findings = checker.validate(root)
    assert findings == []

    for entry in client["sysctl"]:
        if entry["name"] == "vm.dirty_ratio":
            entry["value"] = str(int(entry["value"]) + 1)
    client["environment"] = [{"name": "OMP_NUM_THREADS", "value": "8"}, {"name": "UCX_TLS", "value": "rc"}]
    client["drives"] = [{**d, "scheduler": "kyber"} for d in client["drives"]] + [{"name": "nvme9n1", "model": "X"}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    _, findings = checker.validate(root)
    assert findings and {(f.rule, f.severity) for f in findings} == {("2.1.9", "WARNING")}
    message = findings[0].message
    assert "sysctl vm.dirty_ratio" in message
    assert "environment OMP_NUM_THREADS '3' (described '8')" in message
    assert "environment UCX_TLS 'unset' (described 'rc')" in message
    assert "drive nvme9n1 described but not recorded" in message
    if record["drives"]:
        assert f"drive {record['drives'][0]['name']} scheduler" in message
    # a description written before the survey read these (no sysctl/environment/drives) compares none of them
    for key in ("sysctl", "environment", "drives"):
        client.pop(key)
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    _, findings = checker.validate(root)
    assert findings == []


@pytest.mark.parametrize("solution", [True, ["a"], {"architecture": 3, "capabilities": "yes"}])
def test_a_description_of_the_wrong_shape_is_findings_not_a_crash(fresh, solution):
    """Found by the fuzzer: `solution: true` crashed 3.4.2 ('bool' object has no attribute 'get')."""
    root = fresh()
    path = root / "closed" / "Acme" / "systems" / "sys1.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["system_under_test"]["solution"] = solution
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    _, findings = checker.validate(root)
    assert findings and not [f for f in findings if "checker error" in f.message]
