"""Rules 2.1.7, the description's shape: systems/<system>.yaml against the published schema
(rules/system_description.yaml: the working group's fields, nesting and allowed values, the
fields the v3.0 reviewers added, and the rules across fields both apply).

The severity follows the v3.0 review (mlcommons/storage_results_v3.0, ApparentProblems.md), whose
tool reported these shapes as errors: a required field or block absent, a value not of its type or
allowed values (null where a value is required included), an onprem system with remote storage
that does not itemize its product_nodes, and a total_rack_units the itemized rack units do not sum
to. Those are INVALID; the rest of the schema's rules (a field it lacks, the other rules across
fields, text still holding a FILL IN) are WARNINGs. The rules that read a field (4.7.3, 4.7.4,
5.5.1) judge it by their own sentences. Numbers are read as the reference's validator reads them:
a quoted "2" is 2 (a published description quotes its own).

What counts as not filled in has one definition, unfilled_fields, which `systems describe` counts
with too, so the two report the same number for the same file.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlpstorage_py.checker.registry import Finding, Rule
from mlpstorage_py.results.host_profile import PLACEHOLDER
from mlpstorage_py.results.tree.files import load_yaml, real_dir
from mlpstorage_py.results.tree.values import as_int, as_number
from mlpstorage_py.rules.tables import system_description as table

CAPABILITIES = "system_under_test.solution.capabilities"
# How many unfilled fields one finding names before it counts the rest.
SHOWN = 5


def _kind(value: Any) -> str:
    for types, name in ((bool, "true/false"), (dict, "a mapping"), (list, "a list"), (str, "a string"),
                        ((int, float), "a number")):
        if isinstance(value, types):
            return name
    return type(value).__name__


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _spec(blocks: dict[str, Any], block: str | None, key: Any) -> dict[str, Any] | None:
    """The schema's spec of a block's field; None for a field it lacks (or an unknown block)."""
    return blocks[block]["fields"].get(key) if block in blocks else None


def _unfilled(value: Any, spec: dict[str, Any] | None, path: str, blocks: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    if value is None:
        if spec is None or spec["type"] not in ("list", "block") or not spec.get("optional"):
            yield path, value  # an optional list or block given empty (`sysctl:`) is one left out
    elif isinstance(value, str):
        if PLACEHOLDER in value:
            yield path, value
    elif isinstance(value, dict):
        block = spec["of"] if spec is not None and spec["type"] == "block" else None
        for key, item in value.items():
            yield from _unfilled(item, _spec(blocks, block, key), _join(path, key), blocks)
    elif isinstance(value, list):
        item = spec["of"] if spec is not None and spec["type"] == "list" else None
        item_spec = {"type": "block", "of": item} if isinstance(item, str) else item
        for i, entry in enumerate(value):
            yield from _unfilled(entry, item_spec, f"{path}[{i}]", blocks)


def unfilled_fields(doc: Any) -> list[tuple[str, Any]]:
    """(path, value) of every field of a description not filled in, in document order: text
    holding the FILL IN mark, or null where a value belongs (a scalar, a required block or list,
    a field the schema lacks). The one definition describe and validate both count with."""
    return list(_unfilled(doc, {"type": "block", "of": "document"}, "", table()["blocks"]))


class Shape:
    """One description's problems ("path what is wrong"), those of them the v3.0 review rejected
    (rejected), and the fields not filled in (unfilled, unfilled_fields' paths); rejected_blanks
    are the unfilled fields the schema itself refuses (null where a value is required, a FILL IN
    where a number, true/false or a listed value belongs)."""

    def __init__(self, skip: frozenset[str] = frozenset()) -> None:
        self.blocks = table()["blocks"]
        self.skip = skip
        self.problems: list[str] = []
        self.rejected: list[str] = []
        self.unfilled: list[str] = []
        self.rejected_blanks: list[str] = []

    def add(self, path: str, message: str, rejected: bool = False) -> None:
        self.problems.append(f"{path} {message}")
        if rejected:
            self.rejected.append(self.problems[-1])

    def blank(self, path: str) -> None:
        if path not in self.rejected_blanks:
            self.rejected_blanks.append(path)

    def need(self, mapping: dict[str, Any], key: str, path: str, why: str) -> None:
        """A field a rule across fields requires: absent, or a list or block given empty, is a
        problem the review did not cite (a WARNING); a null scalar is among the unfilled fields."""
        value = mapping.get(key)
        if key not in mapping or value == [] or (value is None and key in ("networking", "power", "traffic")):
            self.add(_join(path, key), f"is required {why}")

    def block(self, value: Any, name: str, path: str) -> None:
        if path in self.skip:
            return
        if not isinstance(value, dict):
            self.add(path or "the document", f"is {_kind(value)}, not a mapping", rejected=True)
            return
        spec = self.blocks[name]
        for field, field_spec in spec["fields"].items():
            self.field(value.get(field), field_spec, _join(path, field), field in value)
        if not spec.get("extra"):
            for key in value:
                if key not in spec["fields"]:
                    self.add(_join(path, key), f"is not a field of {name} (allowed: {', '.join(spec['fields'])})")
        rule = getattr(self, f"_{name}_rule", None)
        if rule is not None:
            rule(value, path)

    def field(self, value: Any, spec: dict[str, Any], path: str, present: bool = True) -> None:
        if value is None:
            if not present and not spec.get("optional"):
                self.add(path, "is required", rejected=True)
            elif not spec.get("optional"):
                self.blank(path)
            return
        if isinstance(value, str) and PLACEHOLDER in value:
            if spec["type"] != "str":
                self.blank(path)
            return
        kind = spec["type"]
        if kind == "block":
            self.block(value, spec["of"], path)
        elif kind == "list":
            self._list(value, spec, path)
        else:
            self._scalar(value, spec, path)

    def _list(self, value: Any, spec: dict[str, Any], path: str) -> None:
        if not isinstance(value, list):
            self.add(path, f"is {_kind(value)}, not a list", rejected=True)
            return
        if len(value) < spec.get("min_items", 0):
            self.add(path, f"needs at least {spec['min_items']} entr{'y' if spec['min_items'] == 1 else 'ies'}",
                     rejected=True)
        item = spec["of"]
        for i, entry in enumerate(value):
            if isinstance(item, str):
                self.block(entry, item, f"{path}[{i}]")
            else:
                self.field(entry, item, f"{path}[{i}]")

    def _scalar(self, value: Any, spec: dict[str, Any], path: str) -> None:
        """A value not of its type, or outside its allowed values or bounds: the review's tool
        rejects each ("Input should be a valid ...")."""
        kind, low = spec["type"], spec.get("min")
        wrong = None
        if kind == "str":
            if not isinstance(value, str):
                wrong = f"is {value!r}, not a string (quote it)"
            elif len(value.strip()) < (low or 0):
                wrong = "is empty"
        elif kind == "bool":
            if not isinstance(value, bool):
                wrong = f"is {value!r}, not true or false"
        elif kind == "enum":
            allowed = {str(v).casefold() for v in spec["values"]}
            if not isinstance(value, str) or value.casefold() not in allowed:
                wrong = f"is {value!r}, not one of {', '.join(map(str, spec['values']))}"
        else:
            number = as_int(value) if kind == "int" else as_number(value)
            if number is None or not math.isfinite(number):
                wrong = f"is {value!r}, not {'a whole number' if kind == 'int' else 'a number'}"
            elif low is not None and number < low:
                wrong = f"is {value!r}, less than {low}"
        if wrong:
            self.add(path, wrong, rejected=True)

    def _power_rule(self, power: dict[str, Any], path: str) -> None:
        """The reference's rule 12: no more PSUs must be active than are installed."""
        need, psus = as_int(power.get("min_psus_active")), power.get("psus_configured")
        counts = [as_int(p.get("unit_count")) if isinstance(p, dict) else None for p in psus] if isinstance(psus, list) else [None]
        known = [count for count in counts if count is not None]
        if need is not None and len(known) == len(counts) and need > sum(known):
            self.add(_join(path, "min_psus_active"), f"is {need}, more than the {sum(known)} PSU(s) configured")

    def _network_port_rule(self, port: dict[str, Any], path: str) -> None:
        """A port that is up states its speed and what traffic it carries."""
        if str(port.get("state")).casefold() == "up":
            for key in ("speed", "traffic"):
                self.need(port, key, path, "when state is 'up'")

    def _capabilities_rule(self, caps: dict[str, Any], path: str) -> None:
        """The reference's rule 13 (4.7.3's sentence), for a system 4.7.3 does not judge: the
        remap time is 0 exactly when both simultaneous flags are true."""
        write, read, remap = caps.get("simultaneous_write"), caps.get("simultaneous_read"), as_int(caps.get("remap_time_in_seconds"))
        if isinstance(write, bool) and isinstance(read, bool) and remap is not None and (remap == 0) != (write and read):
            self.add(_join(path, "remap_time_in_seconds"), f"is {remap}: it is 0 exactly when simultaneous_write and "
                                                           "simultaneous_read are both true (Rules 4.7.3)")

    def _architecture_rule(self, arch: dict[str, Any], path: str) -> None:
        """The reference's rule 14: client_footprint and client_installation are both n/a or neither."""
        footprint, installation = (str(arch.get(k)).casefold() == "n/a" for k in ("client_footprint", "client_installation"))
        if footprint != installation:
            self.add(path, "client_footprint and client_installation must both be 'n/a' or neither")

    def _system_under_test_rule(self, sut: dict[str, Any], path: str) -> None:
        """The rules across the whole system: deployment, rack units, networking, itemized storage."""
        cross = table()["cross_field"]
        arch = (sut.get("solution") or {}).get("architecture") if isinstance(sut.get("solution"), dict) else None
        location = str(arch.get("storage_location")).casefold() if isinstance(arch, dict) else None
        deployment = str(sut.get("deployment")).casefold()
        groups = {key: [n for n in sut.get(key) or [] if isinstance(n, dict)] if isinstance(sut.get(key), list) else []
                  for key in ("product_nodes", "clients", "product_switches")}
        unitemized = deployment == "onprem" and location in cross["remote_locations"] and not groups["product_nodes"]
        if deployment == "onprem":
            self._onprem(sut, groups, path, location in cross["remote_locations"], location)
        elif deployment == "cloud":
            self._cloud(sut, groups, path)
        if not unitemized:  # the missing product_nodes is the root cause, not the rack-unit arithmetic
            self._rack_units(sut, groups, path)
        if location in cross["remote_locations"]:
            for key in ("product_nodes", "clients"):
                for i, node in enumerate(groups[key]):
                    self.need(node, "networking", f"{path}.{key}[{i}]", f"when storage_location is {location!r}")
        if location in cross["local_locations"] and groups["product_switches"]:
            self.add(f"{path}.product_switches", f"must be absent when storage_location is {location!r}")

    def _onprem(self, sut: dict[str, Any], groups: dict[str, list[dict[str, Any]]], path: str, remote: bool, location: str | None) -> None:
        for key in ("product_nodes", "clients"):
            for i, node in enumerate(groups[key]):
                if isinstance(node.get("chassis"), dict):
                    for field in ("rack_units", "power"):
                        self.need(node["chassis"], field, f"{path}.{key}[{i}].chassis", "for an onprem deployment")
        for i, switch in enumerate(groups["product_switches"]):
            self.need(switch, "power", f"{path}.product_switches[{i}]", "for an onprem deployment")
        self.need(sut, "total_rack_units", path, "for an onprem deployment")
        if remote and not groups["product_nodes"]:
            self.add(f"{path}.product_nodes", f"is required for an onprem deployment when storage_location is {location!r}: "
                                              "the storage hardware and its power supplies must be itemized (the results "
                                              "table's Provisioned Power (W) is derived from them)", rejected=True)

    def _cloud(self, sut: dict[str, Any], groups: dict[str, list[dict[str, Any]]], path: str) -> None:
        for key in ("product_switches", "rack_power_supplies"):
            if sut.get(key):
                self.add(f"{path}.{key}", "must be absent for a cloud deployment")
        for key in ("product_nodes", "clients"):
            for i, node in enumerate(groups[key]):
                chassis = node.get("chassis")
                chassis = chassis if isinstance(chassis, dict) else {}
                for field in ("rack_units", "power"):
                    if chassis.get(field) is not None:
                        self.add(f"{path}.{key}[{i}].chassis.{field}", "must be absent for a cloud deployment")

    def _rack_units(self, sut: dict[str, Any], groups: dict[str, list[dict[str, Any]]], path: str) -> None:
        """The reference's rule 11: total_rack_units is the itemized sum (clients excluded)."""
        total = as_int(sut.get("total_rack_units"))
        if total is None:
            return
        nodes = [(as_int((n.get("chassis") or {}).get("rack_units") if isinstance(n.get("chassis"), dict) else None),
                  as_int(n.get("quantity"))) for n in groups["product_nodes"]]
        switches = [(as_int(s.get("rack_units")), as_int(s.get("unit_count"))) for s in groups["product_switches"]]
        if any(units is not None and count is None for units, count in nodes + switches):
            return  # a count the type checks report
        node_units = sum(u * c for u, c in nodes if u is not None and c is not None)
        switch_units = sum(u * c for u, c in switches if u is not None and c is not None)
        if total != node_units + switch_units:
            self.add(f"{path}.total_rack_units", f"is {total}, but the itemized rack units sum to {node_units + switch_units} "
                                                 f"(product_nodes {node_units} + product_switches {switch_units}; clients "
                                                 "are excluded)", rejected=True)


def check(doc: Any, skip: frozenset[str] = frozenset()) -> Shape:
    """The shape of one parsed description; skip names blocks other rules judge (their fields
    still count among the unfilled ones, which are the whole document's)."""
    shape = Shape(skip)
    shape.block(doc, "document", "")
    shape.unfilled = [path for path, _ in unfilled_fields(doc)]
    return shape


def _listed(paths: list[str]) -> str:
    more = len(paths) - SHOWN
    return f"{', '.join(paths[:SHOWN])}{f' and {more} more' if more > 0 else ''}"


def description_shape(r: Rule, path: Path) -> Iterator[Finding]:
    """2.1.7 findings for one parsed systems/<system>.yaml: a problem each, INVALID where the v3.0
    review rejected that shape, else a WARNING; and one for the fields not filled in, INVALID when
    the schema refuses any of them. The capabilities of a system with checkpointing results are
    4.7.3's and 4.7.4's."""
    doc, problem = load_yaml(path)
    if problem is not None:
        return
    checkpointing = real_dir(path.parent.parent / "results" / path.stem / "checkpointing")
    shape = check(doc, frozenset({CAPABILITIES}) if checkpointing else frozenset())
    rejected = set(shape.rejected)
    for message in shape.problems:
        yield (r.invalid if message in rejected else r.warning)(path, f"system description: {message}")
    if shape.unfilled:
        message = (f"system description: {len(shape.unfilled)} field(s) not filled in ({PLACEHOLDER} or null): "
                   f"{_listed(shape.unfilled)}")
        if shape.rejected_blanks:
            yield r.invalid(path, f"{message}; {len(shape.rejected_blanks)} of them where the schema requires a value "
                                  f"of its type: {_listed(shape.rejected_blanks)}")
        else:
            yield r.warning(path, message)
