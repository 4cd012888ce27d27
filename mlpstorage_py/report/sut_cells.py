"""The results table's system-under-test cells from a system description, in the vocabulary of
the published v3.0 tables (rules/system_description.yaml, table_cells): Type and Access
Protocol derived from the architecture and capabilities blocks, RU's the declared total, and
Provisioned Power (W) the nameplate power of the storage system's own PSUs."""

from __future__ import annotations

import datetime
import math
from typing import Any

from mlpstorage_py.results.tree.values import as_int, as_number
from mlpstorage_py.rules.tables import system_description


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _items(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _scalar(value: Any) -> str | int | float | None:
    """A description's value as a cell: a string or number as it is, a date as its text, nothing
    for a mapping or sequence (a {href, text} mapping is no link, and a nest no description)."""
    if isinstance(value, (str, int, float)):
        return value
    return str(value) if isinstance(value, datetime.date) else None


def _word(value: Any) -> str | None:
    return value.strip().casefold() if isinstance(value, str) else None


def storage_type(solution: dict[str, Any]) -> str | None:
    """"Shared remote file", "Failover local block", ...: Shared when several hosts may both write
    and read at once, else Failover; blank when the description leaves a part undecided."""
    vocab = system_description()["table_cells"]
    arch, caps = _mapping(solution.get("architecture")), _mapping(solution.get("capabilities"))
    location, api = vocab["location"].get(_word(arch.get("storage_location"))), _word(arch.get("product_API"))
    write, read = caps.get("simultaneous_write"), caps.get("simultaneous_read")
    if location is None or api not in ("file", "object", "block") or not isinstance(write, bool) or not isinstance(read, bool):
        return None
    return f"{vocab['sharing']['shared' if write and read else 'failover']} {location} {api}"


def access_protocol(solution: dict[str, Any]) -> str | None:
    """POSIX for the file API the benchmark used, S3 for the object API."""
    return system_description()["table_cells"]["protocol"].get(_word(_mapping(solution.get("architecture")).get("benchmark_API")))


def _psu_watts(power: Any) -> int:
    return sum((as_int(p.get("unit_count")) or 0) * (as_int(p.get("nameplate_power_watts")) or 0)
               for p in _items(_mapping(power).get("psus_configured")))


def provisioned_power(sut: dict[str, Any]) -> int | None:
    """Nameplate watts x unit_count over every PSU of the product nodes (x quantity) and product
    switches (x unit_count); clients and rack_power_supplies excluded, redundancy not netted out.
    Blank for a cloud system and for storage inside the client nodes, and when nothing is itemized."""
    vocab = system_description()["table_cells"]
    location = _word(_mapping(_mapping(sut.get("solution")).get("architecture")).get("storage_location"))
    if _word(sut.get("deployment")) in vocab["unpowered_deployments"] or location in vocab["unpowered_locations"]:
        return None
    nodes = sum((as_int(n.get("quantity")) or 0) * _psu_watts(_mapping(n.get("chassis")).get("power"))
                for n in _items(sut.get("product_nodes")))
    switches = sum((as_int(s.get("unit_count")) or 0) * _psu_watts(s.get("power")) for s in _items(sut.get("product_switches")))
    return nodes + switches or None


def rack_units(sut: dict[str, Any]) -> int | None:
    """The declared total_rack_units (the published RU's); without one, the itemized sum of the
    product nodes and switches; blank for a cloud system and for nothing to count."""
    if _word(sut.get("deployment")) in system_description()["table_cells"]["unpowered_deployments"]:
        return None
    declared = as_int(sut.get("total_rack_units"))
    if declared is not None:
        return declared or None
    nodes = sum((as_int(n.get("quantity")) or 0) * (as_int(_mapping(n.get("chassis")).get("rack_units")) or 0)
                for n in _items(sut.get("product_nodes")))
    switches = sum((as_int(s.get("unit_count")) or 0) * (as_int(s.get("rack_units")) or 0)
                   for s in _items(sut.get("product_switches")))
    return nodes + switches or None


def _tib(value: Any) -> float | int | None:
    number = as_number(value)
    return None if number is None or not math.isfinite(number) else int(number) if number.is_integer() else number


def cells(doc: Any, system: str) -> dict[str, Any]:
    """The SUT cells of one parsed systems/<system>.yaml (blank where it says nothing); only
    scalars are taken, so the cells are plain data whatever the description holds."""
    sut = _mapping(_mapping(doc).get("system_under_test"))
    solution = _mapping(sut.get("solution"))
    return {"Name": _scalar(solution.get("submission_name")) or system,
            "Description": " ".join(str(_scalar(solution.get("friendly_description")) or "").split()),
            "Type": storage_type(solution), "Access Protocol": access_protocol(solution),
            "Availability": _scalar(solution.get("availability")), "RU's": rack_units(sut),
            "Integrated Client Storage (TiB)": _tib(solution.get("int_client_store_tib")),
            "Usable Capacity (TiB)": _tib(solution.get("usable_capacity_tib")),
            "Provisioned Power (W)": provisioned_power(sut)}
