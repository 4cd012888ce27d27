"""`mlpstorage systems describe`: the description from the runs' host records, its placeholders,
and Rules 2.1.9 comparing what a run recorded with what its description states."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import DATASIZE, workload_leaves
from synthetic import edit_json, fresh, system_description  # noqa: F401 (fixture)

from mlpstorage_py import checker
from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.launch import hostinfo
from mlpstorage_py.results.host import meminfo_bytes
from mlpstorage_py.checker.system_schema import check
from mlpstorage_py.rules.tables import system_description as schema_table
from mlpstorage_py.results import host_sidecar
from mlpstorage_py.systems.describe import unfilled
from mlpstorage_py.results.host_profile import KERNEL_SYSCTL, networking

FILLED = {"friendly_description": "Acme shared filesystem 2.0",
          "architecture": {"storage_location": "remote", "product_API": "file", "client_footprint": "open_source",
                           "client_installation": "in_box"},
          "capabilities": {"multi_host": True, "simultaneous_write": True, "simultaneous_read": True,
                           "remap_time_in_seconds": 0},
          "usable_capacity_tib": 100, "availability": "available"}
# What a submitter gives where the hosts could not say (a drive's interface, media, ...).
DRIVE_FILL = {"vendor_name": "Example", "model_name": "Example disk", "interface": "other", "media_type": "other"}


def _filled(value: Any, default: Any) -> Any:
    return default if value is None or (isinstance(value, str) and "FILL IN" in value) else value


def fill_in(path: Path) -> None:
    """What a submitter does: replace every placeholder with the real value (onprem, remote storage)."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    sut = doc["system_under_test"]
    for key, value in FILLED.items():
        if isinstance(value, dict):
            sut["solution"][key].update(value)
        else:
            sut["solution"][key] = value
    sut["deployment"] = "onprem"
    reference = system_description("sys1")["system_under_test"]
    sut["product_nodes"], sut["total_rack_units"] = reference["product_nodes"], reference["total_rack_units"]
    power = reference["clients"][0]["chassis"]["power"]
    for client in sut["clients"]:
        client["chassis"].update(model_name="generic", rack_units=1, power=power)
        for nic in client["networking"]:
            nic.update(unit_count=_filled(nic["unit_count"], 1), type=_filled(nic["type"], "other"),
                       state=_filled(nic["state"], "up"))
            if nic["state"] == "up":
                nic.update(speed=_filled(nic.get("speed"), 10), traffic=["data"])
        for drive in client.get("drives", []):
            drive.update({k: _filled(drive[k], v) for k, v in DRIVE_FILL.items()},
                         capacity_in_GB=_filled(drive["capacity_in_GB"], 1))
        for key in ("name", "version"):
            client["operating_system"][key] = _filled(client["operating_system"][key], "Linux")
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
    assert client["chassis"]["cpu_model"] == record["cpu_model"]
    # the schema's names and nesting: the kernel as a sysctl, no driver/interfaces on a NIC, schema drive groups
    assert {"name": KERNEL_SYSCTL, "value": record["kernel"]} in client["sysctl"]
    assert set(client["operating_system"]) == {"name", "version"}
    assert all(set(nic) <= {"unit_count", "type", "state", "speed", "traffic"} for nic in client["networking"])
    if record["drives"]:
        assert sum(d["unit_count"] for d in client["drives"]) == len(record["drives"])
        assert all(set(d) == {"unit_count", "vendor_name", "model_name", "interface", "media_type", "capacity_in_GB"}
                   for d in client["drives"])
    (node,) = yaml.safe_load(text)["system_under_test"]["product_nodes"]
    assert {"cpu_model", "cpu_qty", "cpu_cores", "memory_capacity", "rack_units", "power"} <= set(node["chassis"])
    assert set(node["operating_system"]) == {"name", "version"}
    # the devices and queue settings the schema has no field for are in the sidecar, as recorded
    sidecar = host_sidecar.parse(host_sidecar.path_for(path).read_text(encoding="utf-8"))
    assert sidecar == {record["hostname"]: {"drives": record["drives"]}}
    assert f"wrote {host_sidecar.path_for(path).name}" in res.out
    # what only the submitter knows is marked, typed values as null with a comment
    assert re.search(r"simultaneous_write: null  # FILL IN", text)
    assert len(unfilled(text)) >= 10 and f"{len(unfilled(text))} FILL IN" in res.out
    # no hint offers a value the schema rejects (hyperconverged, in_box as a footprint)
    blocks = schema_table()["blocks"]
    for field, block in (("storage_location", "architecture"), ("client_footprint", "architecture"),
                         ("client_installation", "architecture"), ("availability", "solution"), ("deployment", "system_under_test")):
        (hint,) = re.findall(rf"^\s*{field}: 'FILL IN: (.*)'$", text, re.MULTILINE)
        assert hint.split(" | ") == blocks[block]["fields"][field]["values"], field
    # unfilled, it is one 2.1.7 finding naming the fields to fill, never a shape error of describe's own
    shape = check(yaml.safe_load(text))
    assert shape.problems == [] and len(shape.unfilled) >= 10
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
    sidecar_path = host_sidecar.path_for(path)
    sidecar_text = sidecar_path.read_text(encoding="utf-8")
    assert host_sidecar.parse(sidecar_text)[record["hostname"]]["drives"] == record["drives"]
    _, findings = checker.validate(root)
    assert findings == []  # the sidecar is Markdown, which 2.1.7 permits

    for entry in client["sysctl"]:
        if entry["name"] == "vm.dirty_ratio":
            entry["value"] = str(int(entry["value"]) + 1)
        if entry["name"] == KERNEL_SYSCTL:
            entry["value"] = "1.0.0-other"
    client["environment"] = [{"name": "OMP_NUM_THREADS", "value": "8"}, {"name": "UCX_TLS", "value": "rc"}]
    client["drives"] = [{"unit_count": 2, "vendor_name": "V", "model_name": "Other SSD 9000", "interface": "nvme",
                         "media_type": "TLC", "capacity_in_GB": 960}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    devices = [{**d, "scheduler": "kyber"} for d in record["drives"]] + [{"name": "nvme9n1", "model": "X"}]
    edit_sidecar(sidecar_path, record["hostname"], devices)
    _, findings = checker.validate(root)
    assert findings and {(f.rule, f.severity) for f in findings} == {("2.1.9", "WARNING")}
    message = findings[0].message
    assert f"systems/sys1.yaml and {sidecar_path.name}" in message
    assert "sysctl vm.dirty_ratio" in message and "kernel" in message and "(described '1.0.0-other')" in message
    assert "environment OMP_NUM_THREADS '3' (described '8')" in message
    assert "environment UCX_TLS 'unset' (described 'rc')" in message
    assert "drive nvme9n1 described but not recorded" in message
    if sum(1 for d in record["drives"] if not d.get("model")) < 2:  # fewer unreported models than described drives
        assert "drives of model 'Other SSD 9000': 0 recorded (described 2)" in message
    if record["drives"]:
        assert f"drive {record['drives'][0]['name']} scheduler" in message
    # a description written before the survey read these (no sysctl/environment/drives, no sidecar) compares none
    for key in ("sysctl", "environment", "drives"):
        client.pop(key)
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    sidecar_path.unlink()
    _, findings = checker.validate(root)
    assert findings == []


def edit_sidecar(path: Path, hostname: str, devices: list[dict]) -> None:
    """Rewrite a sidecar's one host entry, as someone correcting it by hand would."""
    text = path.read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(.*?)```", text, re.DOTALL)
    data = yaml.safe_load(block.group(1))
    data["hosts"][hostname]["drives"] = devices
    path.write_text(text[:block.start(1)] + yaml.safe_dump(data, sort_keys=False) + text[block.end(1):], encoding="utf-8")


def test_drive_groups_and_sidecar_devices_drift():
    """A described drive group is on the host unit_count times (boot drives may be left out);
    the sidecar's devices are the host's whole set, matched by hostname, else the closest entry."""
    from mlpstorage_py.results.host_profile import differences

    disk = {"name": "nvme0n1", "model": "Acme NVMe 3.84TB", "vendor": None, "size_gib": 3576.3, "rotational": False,
            "scheduler": "none", "read_ahead_kb": 128, "nr_requests": 1023}
    boot = {**disk, "name": "sda", "model": "Boot SSD", "scheduler": "mq-deadline"}
    record = {"hostname": "h1", "drives": [disk, {**disk, "name": "nvme1n1"}, boot]}
    group = {"unit_count": 2, "vendor_name": "Acme", "model_name": "acme  nvme 3.84TB", "interface": "nvme",
             "media_type": "TLC", "capacity_in_GB": 3840}
    assert differences(record, {"drives": [group]}) == []  # the boot drive left out; model matched ignoring case/blanks
    assert differences(record, {"drives": [{**group, "unit_count": "3"}]}) == [
        "drives of model 'acme  nvme 3.84TB': 2 recorded (described 3)"]
    unreported = {"hostname": "h1", "drives": [disk, {**disk, "name": "nvme1n1", "model": None}]}
    assert differences(unreported, {"drives": [group]}) == []  # the unreported model may be the second
    sidecar = {"drives": [disk, {**disk, "name": "nvme1n1"}, {**boot, "scheduler": "kyber"}]}
    assert differences(record, {}, sidecar) == ["drive sda scheduler 'mq-deadline' (described 'kyber')"]
    assert differences(record, {}, {"drives": [disk]}) == ["drive nvme1n1 not described", "drive sda not described"]


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
