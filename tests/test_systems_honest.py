"""Issue 41: `systems describe` states only facts. A raw PCI vendor ID is named from the PCI ID
database (pci.ids) or left to fill in beside the ID; a virtual disk's rotational flag is no
media type; a client's boot drive is left out; describe and validate count the same unfilled
fields; and a description shape the v3.0 review rejected is INVALID under 2.1.7."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from synthetic import edit_json, edit_yaml, fresh  # noqa: F401 (fixture)

from mlpstorage_py import checker
from mlpstorage_py.checker.registry import INVALID, WARNING
from mlpstorage_py.checker.system_schema import check, unfilled_fields
from mlpstorage_py.results import host_sidecar
from mlpstorage_py.results.host_profile import differences
from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.systems import describe, hardware

VIRTIO = {"name": "vdb", "model": None, "vendor": "0x1af4", "size_gib": 512.0, "rotational": True,
          "scheduler": "mq-deadline", "read_ahead_kb": 128, "nr_requests": 256}
BOOT = {"name": "vda", "model": None, "vendor": "0x1af4", "size_gib": 64.0, "rotational": True, "boot": True,
        "scheduler": "mq-deadline", "read_ahead_kb": 128, "nr_requests": 256}
NVME = {"name": "nvme0n1", "model": "Acme NVMe 3.84TB", "vendor": None, "size_gib": 3576.3, "rotational": False,
        "scheduler": "none", "read_ahead_kb": 128, "nr_requests": 1023}
INSTALLED = hardware.pci_ids_file()
S = "system_under_test"


def record(drives: list[dict[str, Any]]) -> dict[str, Any]:
    """A host record as the survey writes one (launch/hostinfo.py), with these devices."""
    return {"host": "10.0.0.1", "hostname": "client1", "cpu_model": "Example CPU", "cpu_sockets": 2, "cpu_cores": 64,
            "memory_total_bytes": 256 * 2 ** 30, "os_name": "Debian GNU/Linux", "os_version": "12",
            "kernel": "6.1.0-18-amd64", "nics": [{"name": "eth0", "type": "ethernet", "state": "up",
                                                  "speed_mbps": 100000}],
            "sysctl": {"vm.dirty_ratio": "20"}, "environment": {}, "drives": drives, "ranks": [0],
            "collection_method": "local"}


class Leaf:
    metadata = {"storage": "file"}


def client_drives(drives: list[dict[str, Any]]) -> tuple[list[dict[str, Any]] | None, str]:
    """describe's drive groups for one host with these devices, and the text written."""
    text = describe.render(describe.document("sys1", [Leaf()], [record(drives)]), "")
    return yaml.safe_load(text)[S]["clients"][0].get("drives"), text


def write_pci_ids(path: Path) -> Path:
    path.write_text("# a PCI ID database in pci.ids' format\n1af4  Red Hat, Inc.\n\t1001  Virtio block device\n"
                    "8086  Intel Corporation\nC 01  Mass storage controller\n", encoding="utf-8")
    return path


@pytest.mark.skipif(INSTALLED is None, reason="no pci.ids installed (Debian package pci.ids; `make test` installs it)")
def test_a_virtio_disk_is_named_from_the_installed_pci_ids():
    (drive,), _ = client_drives([VIRTIO])
    assert drive["vendor_name"] == "Red Hat, Inc."


def test_a_virtio_disk_vendor_and_media(tmp_path, monkeypatch):
    """Named where a database lists the ID; FILL IN with the raw ID in a comment where none is
    installed or it lacks the ID; the rotational flag of a virtual disk never becomes HDD."""
    monkeypatch.setattr(hardware, "PCI_IDS", (tmp_path / "absent", write_pci_ids(tmp_path / "pci.ids")))
    (drive,), text = client_drives([VIRTIO])
    assert drive["vendor_name"] == "Red Hat, Inc." and drive["capacity_in_GB"] == 550
    assert drive["media_type"].startswith("FILL IN: HDD | TLC | QLC | other: a virtual disk (virtio, PCI vendor 0x1af4)")
    assert "rotational flag" in drive["media_type"] and "HDD" not in text.replace("HDD | TLC", "")

    monkeypatch.setattr(hardware, "PCI_IDS", (tmp_path / "absent",))
    (drive,), text = client_drives([VIRTIO])
    assert drive["vendor_name"] == "FILL IN: the drive's vendor"
    (line,) = [ln for ln in text.splitlines() if "vendor_name" in ln and "0x1af4" in ln]
    assert re.fullmatch(r"\s*vendor_name: 'FILL IN: the drive''s vendor'  # the host reported PCI vendor ID 0x1af4; "
                        r"no pci\.ids here .*", line), line

    write_pci_ids(tmp_path / "other.ids").write_text("8086  Intel Corporation\n", encoding="utf-8")
    monkeypatch.setattr(hardware, "PCI_IDS", (tmp_path / "other.ids",))
    (drive,), text = client_drives([VIRTIO])
    assert drive["vendor_name"].startswith("FILL IN") and "PCI vendor ID 0x1af4, which" in text


def test_what_marks_a_virtual_disk_and_a_real_one():
    assert hardware.virtual_kind({"name": "sda", "vendor": "QEMU", "model": "QEMU HARDDISK"}) == "vendor 'QEMU'"
    assert hardware.virtual_kind({"name": "xvda"}) == "device name xvda"
    assert hardware.virtual_kind({"name": "sda", "vendor": "SEAGATE", "model": "ST4000NM0035"}) is None
    (drive,), _ = client_drives([{**VIRTIO, "name": "sda", "vendor": "SEAGATE", "model": "ST4000NM0035"}])
    assert (drive["vendor_name"], drive["media_type"]) == ("SEAGATE", "HDD")  # a real spinning disk stays one
    (drive,), text = client_drives([{**VIRTIO, "name": "sdb", "vendor": "ATA", "model": "Example SSD", "rotational": False}])
    assert drive["vendor_name"].startswith("FILL IN") and "'ATA', the SATA layer's name" in text


def test_a_boot_drive_is_left_out(tmp_path, monkeypatch):
    """The survey's boot flag (or the root file system among a device's mounts) leaves the
    device out of the description; the sidecar still lists it, and 2.1.9 accepts the omission."""
    monkeypatch.setattr(hardware, "PCI_IDS", (write_pci_ids(tmp_path / "pci.ids"),))
    drives, text = client_drives([BOOT, NVME, {**NVME, "name": "nvme1n1"}])
    assert [(d["model_name"], d["unit_count"]) for d in drives] == [("Acme NVMe 3.84TB", 2)]
    assert "boots the host" not in text  # the survey said which one boots: no note to delete it
    mounted = {**NVME, "name": "nvme2n1", "mounts": ["/boot/efi", "/"]}
    drives, _ = client_drives([mounted, NVME])
    assert [d["unit_count"] for d in drives] == [1]
    assert client_drives([BOOT])[0] is None  # only a boot drive: no drives list at all
    # a record from before the survey said which device boots: every device, under a note to delete the boot drive
    _, text = client_drives([{k: v for k, v in BOOT.items() if k != "boot"}, NVME])
    assert re.search(r"# the drives the runs recorded: they did not record which one boots the host.*\n\s+drives:", text)
    # 2.1.9: the described group may leave a boot drive of the same model out, but not a data drive
    host = record([{**NVME, "boot": True}, NVME, {**NVME, "name": "nvme1n1"}])
    group = {"unit_count": 2, "vendor_name": "Acme", "model_name": NVME["model"], "interface": "nvme",
             "media_type": "TLC", "capacity_in_GB": 3840}
    assert differences(host, {"drives": [group]}) == []
    assert differences(host, {"drives": [{**group, "unit_count": 3}]}) == []
    assert differences(host, {"drives": [{**group, "unit_count": 1}]}) == [
        f"drives of model {NVME['model']!r}: 3 recorded (described 1)"]


def _with_records(root: Path, drives: list[dict[str, Any]]) -> None:
    for leaf in Package.load(root).leaves:
        for path in leaf.metadata_files:
            edit_json(path, lambda m: m.update(client_hosts=[record(drives)], num_client_hosts=1))


@pytest.mark.parametrize("division", ["closed", "open"])
def test_describe_and_validate_count_the_same_unfilled_fields(cli, fresh, division, tmp_path, monkeypatch):
    """One definition (system_schema.unfilled_fields): the count describe prints is the count
    validate's 2.1.7 finding gives for the file written, whichever rules judge the capabilities."""
    monkeypatch.setattr(hardware, "PCI_IDS", (tmp_path / "absent",))  # a vendor left to fill in, with its comment
    root = fresh(division=division)
    _with_records(root, [BOOT, VIRTIO, NVME])
    result = cli("systems", "describe", "sys1", "-rd", root, "--force")
    assert result.rc == 0, result.err
    written = int(re.search(r"; (\d+) FILL IN value\(s\) to replace", result.out).group(1))
    path = root / division / "Acme" / "systems" / "sys1.yaml"
    text = path.read_text(encoding="utf-8")
    assert written == len(describe.unfilled(text)) == len(unfilled_fields(yaml.safe_load(text)))
    assert written == sum(1 for ln in text.splitlines() if "FILL IN" in ln and not ln.lstrip().startswith("#"))
    _, findings = checker.validate(root)
    (unfilled,) = [f for f in findings if f.rule == "2.1.7" and "not filled in" in f.message]
    assert int(re.search(r"(\d+) field\(s\) not filled in", unfilled.message).group(1)) == written
    # typed fields left null are what the schema refuses: the unfilled description is INVALID
    assert unfilled.severity == INVALID and "usable_capacity_tib" in unfilled.message
    assert cli("validate", root).rc == 1
    sidecar = host_sidecar.parse(host_sidecar.path_for(path).read_text(encoding="utf-8"))
    assert [d["name"] for d in sidecar["client1"]["drives"]] == ["vda", "vdb", "nvme0n1"]  # the boot drive too


def test_the_shapes_the_review_rejected_are_invalid(cli, fresh):
    """storage not itemized, a required field absent, a value of the wrong type, rack units that
    do not add up: INVALID and validate exits 1; a field the schema lacks stays a WARNING."""
    root = fresh()
    path = root / "closed" / "Acme" / "systems" / "sys1.yaml"
    assert cli("validate", root).rc == 0
    edit_yaml(path, lambda d: d[S]["clients"][0]["operating_system"].update(kernel="6.1"))
    _, findings = checker.validate(root)
    assert [(f.rule, f.severity) for f in findings] == [("2.1.7", WARNING)]
    assert cli("validate", root).rc == 0

    cases = {
        "product_nodes is required for an onprem deployment": lambda sut: sut.pop("product_nodes"),
        "solution.usable_capacity_tib is required": lambda sut: sut["solution"].pop("usable_capacity_tib"),
        "chassis.cpu_cores is 'many', not a whole number": lambda sut: sut["clients"][0]["chassis"].update(cpu_cores="many"),
        "total_rack_units is 9, but the itemized rack units sum to": lambda sut: sut.update(total_rack_units=9),
    }
    for message, change in cases.items():
        root = fresh()
        path = root / "closed" / "Acme" / "systems" / "sys1.yaml"
        edit_yaml(path, lambda d: change(d[S]))
        _, findings = checker.validate(root)
        found = [f for f in findings if f.rule == "2.1.7" and message in f.message]
        assert [f.severity for f in found] == [INVALID], (message, findings)
        assert cli("validate", root).rc == 1, message


def test_a_null_where_a_value_is_required_is_refused_a_fill_in_text_is_not():
    """The reference's schema refuses a null number or a FILL IN where a listed value belongs
    (INVALID); a FILL IN in free text is a string it accepts (a WARNING, still unfilled)."""
    from synthetic import system_description

    doc = system_description("sys1")
    doc[S]["solution"]["friendly_description"] = "FILL IN: the storage solution"
    shape = check(doc)
    assert shape.unfilled == [f"{S}.solution.friendly_description"] and shape.rejected_blanks == []
    doc[S]["clients"][0]["networking"][0]["traffic"] = ["FILL IN: data | metadata"]
    doc[S]["solution"]["usable_capacity_tib"] = None
    doc[S]["clients"][0]["sysctl"] = None  # an empty optional list is one left out, not a blank
    shape = check(doc)
    assert shape.rejected_blanks == [f"{S}.solution.usable_capacity_tib", f"{S}.clients[0].networking[0].traffic[0]"]
    assert len(shape.unfilled) == 3 and shape.problems == []
