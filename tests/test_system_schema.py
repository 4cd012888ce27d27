"""Rules 2.1.7, a description's shape (checker/system_schema.py) and the results table's
system-under-test cells (report/sut_cells.py): every published v3.0 description passes and
derives to the published vocabulary; a description missing each required block, or breaking
each rule across fields, draws its finding."""

from __future__ import annotations

import copy
import glob
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from conftest import REALDATA
from synthetic import edit_yaml, fresh, system_description  # noqa: F401 (fixture)

from mlpstorage_py import checker
from mlpstorage_py.checker.registry import INVALID, WARNING
from mlpstorage_py.checker.system_schema import check
from mlpstorage_py.report import sut_cells, table

PUBLISHED = sorted(glob.glob(str(REALDATA / "closed" / "*" / "systems" / "*.yaml")))
needs_realdata = pytest.mark.skipif(not PUBLISHED, reason="../shared/realdata is not present")

# What the published tables' vocabulary derives to for each published description: Type and
# Access Protocol from architecture/capabilities; RU's the declared total; Provisioned Power the
# product nodes' PSUs (blank for a cloud system and for storage inside the clients).
PUBLISHED_CELLS = {
    "Alluxio": ("Shared remote file", "POSIX", "available", None, 25.5, None),  # cloud
    "NewFW": ("Failover local block", "POSIX", "available", 2, 55.9, None),  # local: the client's own PSUs
    "SAMSUNG": ("Shared local file", "POSIX", "available", None, 16, None),  # total_rack_units 0
    "TTA": ("Shared remote file", "POSIX", "preview", 6, 168, 3 * 2 * 1400),
    "UBIX": ("Shared remote file", "POSIX", "available", 6, 447.03, 3 * 2 * 1300),
    "XSKY": ("Shared remote file", "POSIX", "available", 6, 223.52, 3 * 2 * 1600),
}
CELLS = ("Type", "Access Protocol", "Availability", "RU's", "Usable Capacity (TiB)", "Provisioned Power (W)")


def base() -> dict[str, Any]:
    """A valid onprem, remote-storage description (the synthetic package's)."""
    return system_description("sys1")


def problems(change: Callable[[dict[str, Any]], Any]) -> list[str]:
    doc = base()
    change(doc["system_under_test"])
    return check(doc).problems


@needs_realdata
@pytest.mark.parametrize("path", PUBLISHED, ids=lambda p: Path(p).parts[-3])
def test_every_published_description_has_the_shape(path):
    shape = check(yaml.safe_load(Path(path).read_text(encoding="utf-8")))
    assert shape.problems == [] and shape.unfilled == []


@needs_realdata
def test_published_descriptions_derive_to_the_published_vocabulary():
    """Through the function reportgen calls, on the files as published."""
    assert {Path(p).parts[-3] for p in PUBLISHED} == set(PUBLISHED_CELLS)
    for path in map(Path, PUBLISHED):
        cells = table.system_columns(path.parent.parent, path.stem)
        assert tuple(cells[c] for c in CELLS) == PUBLISHED_CELLS[path.parts[-3]], path
        assert cells["Name"] == path.stem


def test_the_base_description_is_valid():
    assert check(base()).problems == [] and check(base()).unfilled == []


def _drop(*keys: str) -> Callable[[dict], None]:
    """Remove system_under_test[keys[0]]...[keys[-1]]."""
    def change(sut: dict) -> None:
        target = sut
        for key in keys[:-1]:
            target = target[key] if not isinstance(target, list) else target[int(key)]
        target.pop(keys[-1])
    return change


def _set(value: Any, *keys: str) -> Callable[[dict], None]:
    def change(sut: dict) -> None:
        target = sut
        for key in keys[:-1]:
            target = target[int(key)] if isinstance(target, list) else target[key]
        target[keys[-1]] = value
    return change


S = "system_under_test"
MISSING = {
    # each required block and field, absent
    "solution": (_drop("solution"), f"{S}.solution is required"),
    "deployment": (_drop("deployment"), f"{S}.deployment is required"),
    "clients": (_drop("clients"), f"{S}.clients is required"),
    "clients empty": (_set([], "clients"), f"{S}.clients needs at least 1 entry"),
    "usable_capacity_tib": (_drop("solution", "usable_capacity_tib"), f"{S}.solution.usable_capacity_tib is required"),
    "availability": (_drop("solution", "availability"), f"{S}.solution.availability is required"),
    "architecture": (_drop("solution", "architecture"), f"{S}.solution.architecture is required"),
    "capabilities": (_drop("solution", "capabilities"), f"{S}.solution.capabilities is required"),
    "product_nodes (onprem, remote storage)": (
        _drop("product_nodes"), f"{S}.product_nodes is required for an onprem deployment when storage_location is "
                                "'remote': the storage hardware and its power supplies must be itemized"),
    "a client's operating_system": (_drop("clients", "0", "operating_system"), f"{S}.clients[0].operating_system is required"),
    "a node's chassis.cpu_model": (_drop("product_nodes", "0", "chassis", "cpu_model"),
                                   f"{S}.product_nodes[0].chassis.cpu_model is required"),
    "a node's power (onprem)": (_drop("product_nodes", "0", "chassis", "power"),
                                f"{S}.product_nodes[0].chassis.power is required for an onprem deployment"),
    "a client's rack_units (onprem)": (_drop("clients", "0", "chassis", "rack_units"),
                                       f"{S}.clients[0].chassis.rack_units is required for an onprem deployment"),
    "total_rack_units (onprem)": (_drop("total_rack_units"), f"{S}.total_rack_units is required for an onprem deployment"),
    "a client's networking (remote storage)": (_drop("clients", "0", "networking"),
                                               f"{S}.clients[0].networking is required when storage_location is 'remote'"),
    "an up port's speed": (_drop("clients", "0", "networking", "0", "speed"),
                           f"{S}.clients[0].networking[0].speed is required when state is 'up'"),
    # values outside the schema
    "usable_capacity_tib below 1": (_set(0.5, "solution", "usable_capacity_tib"), "usable_capacity_tib is 0.5, less than 1"),
    "availability not in the list": (_set("soon", "solution", "availability"),
                                     "availability is 'soon', not one of available, preview, RDI"),
    "hyperconverged": (_set("hyperconverged", "solution", "architecture", "storage_location"),
                       "storage_location is 'hyperconverged', not one of remote, local, remote_and_local"),
    "in_box as a footprint": (_set("in_box", "solution", "architecture", "client_footprint"),
                              "client_footprint is 'in_box', not one of open_source, closed_source, n/a"),
    "n/a on one side only": (_set("n/a", "solution", "architecture", "client_installation"),
                             "client_footprint and client_installation must both be 'n/a' or neither"),
    "drive interface": (_set([{"unit_count": 1, "vendor_name": "V", "model_name": "M", "interface": "SCSI",
                               "media_type": "TLC", "capacity_in_GB": 960}], "clients", "0", "drives"),
                        "drives[0].interface is 'SCSI', not one of nvme, SAS, SATA, other"),
    "old drive fields": (_set([{"name": "nvme0n1", "model": "M", "size_gib": 3576}], "clients", "0", "drives"),
                         f"{S}.clients[0].drives[0].unit_count is required"),
    "a field the schema lacks": (_set("6.8.0", "clients", "0", "operating_system", "kernel"),
                                 "operating_system.kernel is not a field of operating_system"),
    "rack units that do not add up": (_set(5, "total_rack_units"), f"{S}.total_rack_units is 5, but the itemized rack "
                                                                    "units sum to 2 (product_nodes 2 + product_switches 0"),
    "more PSUs active than installed": (_set(3, "product_nodes", "0", "chassis", "power", "min_psus_active"),
                                        "min_psus_active is 3, more than the 2 PSU(s) configured"),
    "a count that is not a number": (_set("two", "product_nodes", "0", "quantity"), "quantity is 'two', not a whole number"),
    "a remap time the simultaneous flags contradict": (_set(30, "solution", "capabilities", "remap_time_in_seconds"),
                                                       "remap_time_in_seconds is 30: it is 0 exactly when"),
    "an unquoted version": (_set(24.04, "clients", "0", "operating_system", "version"), "is 24.04, not a string (quote it)"),
}


@pytest.mark.parametrize("name", list(MISSING))
def test_each_missing_block_or_bad_value_is_its_finding(name):
    change, message = MISSING[name]
    found = problems(change)
    assert any(message in p for p in found), found


def _cloud(sut: dict) -> None:
    sut["deployment"] = "cloud"
    sut.pop("total_rack_units")
    for group in ("clients", "product_nodes"):
        for node in sut[group]:
            del node["chassis"]["rack_units"], node["chassis"]["power"]


def _local(sut: dict) -> None:
    sut["solution"]["architecture"].update(storage_location="local", product_API="block")
    sut.pop("product_nodes")
    sut["total_rack_units"] = 0


@pytest.mark.parametrize("change", [_cloud, _local, _set("2", "product_nodes", "0", "quantity"),
                                    _set([{"unit_count": "1", "vendor_name": "V", "model_name": "M", "interface": "sas",
                                           "media_type": "TLC", "capacity_in_GB": "480"}], "clients", "0", "drives")],
                         ids=["cloud", "local storage without product_nodes", "a quoted count",
                              "quoted numbers and a lower-case enum (as UBIX and SAMSUNG publish)"])
def test_what_the_schema_allows_draws_nothing(change):
    assert problems(change) == []


def test_cloud_rules():
    doc = base()
    _cloud(doc[S])
    doc[S]["clients"][0]["chassis"]["rack_units"] = 1
    doc[S]["product_switches"] = [{"unit_count": 1, "vendor_name": "V", "model_name": "M", "rack_units": 1,
                                   "ports": [{"unit_count": 4, "type": "ethernet", "state": "down"}]}]
    found = check(doc).problems
    assert f"{S}.clients[0].chassis.rack_units must be absent for a cloud deployment" in found
    assert f"{S}.product_switches must be absent for a cloud deployment" in found


def test_validate_reports_the_shape_under_2_1_7(fresh):
    """On a package: each problem a finding on the description, INVALID where the v3.0 review
    rejected that shape (a required field absent, storage not itemized, a null where a number
    belongs); the unfilled fields one; the capabilities of a system with checkpointing results
    stay 4.7.3's and 4.7.4's."""
    root = fresh()
    path = root / "closed" / "Acme" / "systems" / "sys1.yaml"
    _, findings = checker.validate(root)
    assert findings == []

    def change(doc: dict) -> None:
        sut = doc[S]
        sut.pop("product_nodes")
        sut["solution"].pop("availability")
        sut["solution"]["friendly_description"] = "FILL IN: the storage solution"
        sut["clients"][0]["chassis"]["memory_capacity"] = None
        sut["solution"]["capabilities"].pop("multi_host")
    edit_yaml(path, change)
    _, findings = checker.validate(root)
    shape = [f for f in findings if f.rule == "2.1.7"]
    assert {(f.severity, f.path) for f in shape} == {(INVALID, str(path))}
    messages = [f.message for f in shape]
    assert any("product_nodes is required for an onprem deployment" in m for m in messages)
    assert any("solution.availability is required" in m for m in messages)
    assert any(m.endswith("2 field(s) not filled in (FILL IN or null): system_under_test.solution.friendly_description, "
                          "system_under_test.clients[0].chassis.memory_capacity; 1 of them where the schema requires "
                          "a value of its type: system_under_test.clients[0].chassis.memory_capacity") for m in messages)
    assert not any("multi_host" in m for m in messages)  # 4.7.4's on a checkpointing system
    assert ("4.7.4", INVALID) in {(f.rule, f.severity) for f in findings}
    assert len(shape) == 3


def test_capabilities_of_a_training_only_system_are_checked_here(fresh):
    root = fresh(families=("training",))
    edit_yaml(root / "closed" / "Acme" / "systems" / "sys1.yaml", lambda d: d[S]["solution"]["capabilities"].pop("multi_host"))
    _, findings = checker.validate(root)
    assert [f.message for f in findings if f.rule == "2.1.7"] == [
        f"system description: {S}.solution.capabilities.multi_host is required"]


def test_a_pdf_without_its_yaml_and_a_legacy_code_tree(fresh):
    """The reviewers' unpaired-PDF check is 2.1.7's pairing; their CHECK-04 (a closed/<org>/code
    tree beside the pool) is 2.1.5.a's: 'Code images are not stored at the submitter level'."""
    root = fresh()
    systems = root / "closed" / "Acme" / "systems"
    (systems / "AIStore_Disclosure.pdf").write_bytes(b"%PDF-1.7\n")
    (root / "closed" / "Acme" / "code").mkdir()
    _, findings = checker.validate(root)
    assert {(f.rule, f.severity, f.message) for f in findings} == {
        ("2.1.7", INVALID, "system AIStore_Disclosure has no AIStore_Disclosure.yaml"),
        ("2.1.5.a", INVALID, "unexpected directory 'code': a closed submitter directory holds exactly results/ and systems/")}


# --- the results table's cells --------------------------------------------------------------

def cells(change: Callable[[dict], Any] = lambda sut: None) -> dict[str, Any]:
    doc = copy.deepcopy(base())
    change(doc[S])
    return sut_cells.cells(doc, "sys1")


def test_type_and_access_protocol_in_the_published_vocabulary():
    assert (cells()["Type"], cells()["Access Protocol"]) == ("Shared remote file", "POSIX")
    nvmeof = cells(lambda s: (s["solution"]["architecture"].update(product_API="block"),
                              s["solution"]["capabilities"].update(simultaneous_write=False, remap_time_in_seconds=20)))
    assert (nvmeof["Type"], nvmeof["Access Protocol"]) == ("Failover remote block", "POSIX")
    both = cells(lambda s: s["solution"]["architecture"].update(storage_location="remote_and_local", benchmark_API="object",
                                                                product_API="object"))
    assert (both["Type"], both["Access Protocol"]) == ("Shared remote and local object", "S3")
    undecided = cells(lambda s: s["solution"]["capabilities"].update(simultaneous_read=None))
    assert undecided["Type"] is None and undecided["Access Protocol"] == "POSIX"


def test_provisioned_power_is_the_storage_systems_psus():
    """2 nodes x 2 x 800 W; a switch adds its own; clients and rack_power_supplies never count."""
    assert cells()["Provisioned Power (W)"] == 3200

    def switch(sut: dict) -> None:
        sut["product_switches"] = [{"unit_count": 2, "vendor_name": "V", "model_name": "M", "rack_units": 1, "ports": [],
                                    "power": {"min_psus_active": 1, "psus_configured": [
                                        {"unit_count": 2, "inlet_voltage": 230, "nameplate_power_watts": 500,
                                         "efficiency": "Gold"}]}}]
        sut["rack_power_supplies"] = copy.deepcopy(sut["product_switches"][0]["power"])
        sut["clients"][0]["quantity"] = 50
    assert cells(switch)["Provisioned Power (W)"] == 3200 + 2 * 2 * 500
    assert cells(switch)["RU's"] == 2  # the declared total (the published RU's), not the itemized 4
    assert cells(_cloud)["Provisioned Power (W)"] is None and cells(_cloud)["RU's"] is None
    assert cells(lambda s: s["solution"]["architecture"].update(storage_location="local"))["Provisioned Power (W)"] is None
    assert cells(lambda s: s.pop("product_nodes"))["Provisioned Power (W)"] is None
    assert cells(lambda s: s.pop("total_rack_units"))["RU's"] == 2  # itemized when undeclared


def test_capacities_and_a_description_of_the_wrong_shape():
    got = cells(lambda s: s["solution"].update(usable_capacity_tib="12.5", int_client_store_tib=3))
    assert (got["Usable Capacity (TiB)"], got["Integrated Client Storage (TiB)"]) == (12.5, 3)
    assert set(sut_cells.cells([1], "sysX").values()) <= {None, "sysX", ""}
    assert sut_cells.cells({S: {"solution": {"architecture": 3}, "product_nodes": "x"}}, "s")["Type"] is None
