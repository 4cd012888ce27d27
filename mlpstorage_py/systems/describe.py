"""`mlpstorage systems describe <system>`: systems/<system>.yaml in the published description
schema (rules/system_description.yaml: the fields, nesting and values of the v3.0 descriptions)
from the host records the runs of that system collected, with a marked placeholder (FILL IN)
for what only the submitter knows: the storage solution, its architecture and capabilities
(Rules 4.7.3, 4.7.4), its nodes and power. Beside it, <system>.hosts.md holds each host's
devices and queue settings, which the schema has no field for (host_sidecar). Never
overwrites without --force."""

from __future__ import annotations

import itertools
import json
import os
import re
from pathlib import Path
from typing import Any

import yaml

from mlpstorage_py.checker.system_schema import unfilled_fields
from mlpstorage_py.errors import ConfigurationError, NotFoundError
from mlpstorage_py.results import host_sidecar
from mlpstorage_py.results.host_profile import (
    KERNEL_SYSCTL,
    PLACEHOLDER,
    client_profile,
    host_records,
    is_boot_drive,
    knows_boot_drive,
)
from mlpstorage_py.results.io import atomic_write_text
from mlpstorage_py.results.links import make_dirs
from mlpstorage_py.results.tree import fast_yaml
from mlpstorage_py.results.tree.package import Leaf, Package
from mlpstorage_py.rules.tables import system_description
from mlpstorage_py.systems import hardware

ONPREM_ONLY = "onprem only: delete it for a cloud deployment"
HEADER = """\
# systems/{system}.yaml: written by `mlpstorage systems describe` from the host records of {runs} run(s),
# in the published description schema. Replace every {mark} value; the client facts must stay what the
# runs recorded (Rules 2.1.9). Delete what does not apply: every rack_units, power and total_rack_units
# for a cloud deployment; product_nodes for storage inside the client nodes; a client's boot drives
# (left out already where the runs recorded which device boots).
# {sidecar} beside it lists each host's devices and queue settings (validate compares them too).
"""


class Blank:
    """A value only the submitter knows that must stay typed (a number or a boolean): written
    as null with a FILL IN comment, so reportgen and the checker read it as absent, not text."""

    def __init__(self, hint: str) -> None:
        self.hint = hint


class Note:
    """A value written with a YAML comment after it: what the host reported that the value
    cannot state (a raw PCI vendor ID beside the FILL IN that replaces it)."""

    def __init__(self, value: Any, comment: str) -> None:
        self.value, self.comment = value, comment


class Key(str):
    """A mapping key written with a comment line above it (the key itself is the plain string)."""

    comment: str

    def __new__(cls, key: str, comment: str) -> Key:
        made = super().__new__(cls, key)
        made.comment = comment
        return made


def _plain(value: Any) -> Any:
    """What a Blank or Note stands for when identical drive groups and clients are compared."""
    return value.hint if isinstance(value, Blank) else [value.value, value.comment]


def fill(hint: str) -> str:
    return f"{PLACEHOLDER}: {hint}"


def choices(block: str, field: str) -> str:
    """The values the schema allows for a field (or a list's entries), as a hint offers them."""
    spec = system_description()["blocks"][block]["fields"][field]
    return " | ".join(map(str, (spec["of"] if spec["type"] == "list" else spec)["values"]))


def _solution(system: str, api: str) -> dict[str, Any]:
    solution: dict[str, Any] = {
        "submission_name": system,
        "friendly_description": fill("the storage solution: product, version, how the clients reach it"),
        "architecture": {"storage_location": fill(choices("architecture", "storage_location")),
                         "benchmark_API": api,
                         "product_API": fill(f"{choices('architecture', 'product_API')}: the storage product's native API"),
                         "client_footprint": fill(choices("architecture", "client_footprint")),
                         "client_installation": fill(choices("architecture", "client_installation"))},
        "capabilities": {"multi_host": Blank("true | false: false for storage local to one client host (Rules 4.7.4)"),
                         "simultaneous_write": Blank("true | false: several hosts write at once (Rules 4.7.4)"),
                         "simultaneous_read": Blank("true | false: several hosts read at once (Rules 4.7.4)"),
                         "remap_time_in_seconds": Blank("seconds from a checkpoint written to readable by another "
                                                        "host; 0 when both simultaneous_* are true (Rules 4.7.3)")},
        "usable_capacity_tib": Blank("usable capacity in TiB, at least 1 (a fraction as measured)"),
        "availability": fill(choices("solution", "availability")),
    }
    if api == "object":
        solution["storage_backend"] = fill("the object store the runs used (Rules 5.5.1)")
    return solution


def _power() -> dict[str, Any]:
    return {"min_psus_active": Blank(f"PSUs the chassis needs running ({ONPREM_ONLY})"),
            "psus_configured": [{"unit_count": Blank("PSUs like this"), "inlet_voltage": Blank("AC input volts"),
                                 "nameplate_power_watts": Blank("nameplate input watts of one PSU"),
                                 "efficiency": fill(choices("power_supply", "efficiency"))}]}


def _port(nic: dict[str, Any]) -> dict[str, Any]:
    """One networking[] entry; a port that is up states its speed and traffic (the schema's rule)."""
    port = {"unit_count": nic["unit_count"], "type": nic["type"] or fill(choices("network_port", "type")),
            "state": nic["state"] or fill(choices("network_port", "state"))}
    if nic["state"] != "down":
        port["speed"] = nic["speed"] if nic["speed"] is not None else Blank("whole Gb/s")
        port["traffic"] = [fill(choices("network_port", "traffic"))]
    return port


def _template_port() -> dict[str, Any]:
    return _port({"unit_count": Blank("ports like this"), "type": None, "state": "up", "speed": None})


def _media(device: dict[str, Any]) -> str:
    """HDD for a rotational drive; a virtual disk's rotational flag is the hypervisor's choice,
    not its media, so that, like a flash drive's cell type, is the submitter's to say."""
    virtual = hardware.virtual_kind(device)
    if virtual:
        return fill(f"{choices('drive', 'media_type')}: a virtual disk ({virtual}), whose rotational flag "
                    "says nothing of the media behind it")
    by_flag: dict[Any, str] = {True: "HDD", False: fill("TLC | QLC | other: the NAND cell type")}
    return by_flag.get(device.get("rotational")) or fill(choices("drive", "media_type"))


def _vendor(device: dict[str, Any]) -> str | Note:
    """The drive's vendor name; a raw PCI ID is named from pci.ids, else left to fill in beside it."""
    name, why = hardware.vendor_name(device.get("vendor"))
    if name:
        return name
    return Note(fill("the drive's vendor"), why) if why else fill("the drive's vendor")


def _drives(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The host's block devices as the schema's drive groups: one per vendor, model, interface,
    media and base-10 capacity, with its unit_count. An NVMe name says its interface, a rotational
    device that is not virtual is an HDD; the rest is the submitter's to say. A boot drive is
    left out (the published descriptions omit them; the sidecar still lists it)."""
    groups: dict[str, dict[str, Any]] = {}
    for device in devices:
        if is_boot_drive(device):
            continue
        size = device.get("size_gib")
        drive = {"unit_count": 0, "vendor_name": _vendor(device),
                 "model_name": device.get("model") or fill("the drive's model"),
                 "interface": "nvme" if str(device.get("name")).startswith("nvme") else fill("SAS | SATA | other"),
                 "media_type": _media(device),
                 "capacity_in_GB": round(size * 2 ** 30 / 1e9) if isinstance(size, (int, float)) and size > 0
                 else Blank("base-10 GB of one drive")}
        key = json.dumps({k: v for k, v in drive.items() if k != "unit_count"}, sort_keys=True, default=_plain)
        groups.setdefault(key, drive)["unit_count"] += 1
    return list(groups.values())


UNKNOWN_BOOT = ("the drives the runs recorded: they did not record which one boots the host, so delete the boot "
                "drive's group (the published descriptions leave boot drives out)")


def _client(profile: dict[str, Any]) -> dict[str, Any]:
    """One clients[] entry (quantity 1) in the schema's order, from one host's profile."""
    sysctl = {**(profile["sysctl"] or {}), **({KERNEL_SYSCTL: profile["kernel"]} if profile["kernel"] else {})}
    client: dict[str, Any] = {
        "friendly_description": f"benchmark client host ({profile['cpu_model'] or 'unknown CPU'}, "
                                f"{profile['memory_capacity'] or '?'} GiB)",
        "quantity": 1,
        "chassis": {"model_name": fill("the client's server model (or cloud instance type)"),
                    "rack_units": Blank(f"rack units of one client ({ONPREM_ONLY})"),
                    "cpu_model": profile["cpu_model"] or fill("the CPU model"),
                    "cpu_qty": profile["cpu_qty"] or Blank("CPU sockets"),
                    "cpu_cores": profile["cpu_cores"] or Blank("physical cores across all sockets"),
                    "memory_capacity": profile["memory_capacity"] or Blank("memory in GiB"),
                    "power": _power()},
        "networking": [_port(n) for n in profile["networking"]] or [_template_port()]}
    drives = _drives(profile["drives"] or [])
    if drives:
        client[Key("drives", UNKNOWN_BOOT) if not knows_boot_drive(profile["drives"]) else "drives"] = drives
    client["operating_system"] = {"name": profile["os_name"] or fill("the OS name"),
                                  "version": profile["os_version"] or fill("the OS version")}
    for field, values in (("environment", profile["environment"]), ("sysctl", sysctl)):
        if values:
            client[field] = [{"name": k, "value": v} for k, v in values.items()]
    return client


def _product_node() -> dict[str, Any]:
    """The storage nodes' placeholder: only the submitter knows the solution's hardware."""
    return {"friendly_description": fill("a group of identical storage nodes of the solution"),
            "quantity": Blank("nodes like this"),
            "chassis": {"model_name": fill("the node's model (or cloud instance type)"),
                        "rack_units": Blank(f"rack units of one node ({ONPREM_ONLY})"),
                        "cpu_model": fill("the node's CPU model"), "cpu_qty": Blank("CPU sockets"),
                        "cpu_cores": Blank("physical cores across all sockets"), "memory_capacity": Blank("memory in GiB"),
                        "power": _power()},
            "networking": [_template_port()],
            "drives": [{"unit_count": Blank("drives like this"), "vendor_name": fill("the drive's vendor"),
                        "model_name": fill("the drive's model"), "interface": fill(choices("drive", "interface")),
                        "media_type": fill(choices("drive", "media_type")),
                        "capacity_in_GB": Blank("base-10 GB of one drive")}],
            "operating_system": {"name": fill("the OS or firmware the node runs"), "version": fill("its version")}}


def _key(client: dict[str, Any]) -> str:
    return json.dumps(client, sort_keys=True, default=_plain)


def gather(pkg: Package, system: str, division: str | None) -> dict[tuple[str, str], list[Leaf]]:
    """{(division, org): leaves of the system holding host records}, oldest first."""
    found: dict[tuple[str, str], list[Leaf]] = {}
    for leaf in sorted(pkg.leaves, key=lambda lf: (lf.path.name, str(lf.path))):
        if leaf.system == system and (division is None or leaf.division == division) and host_records(leaf.metadata):
            found.setdefault((leaf.division, leaf.org), []).append(leaf)
    return found


def newest_records(leaves: list[Leaf]) -> tuple[list[dict[str, Any]], list[str]]:
    """The newest record of each host these runs recorded, and notes on hosts whose facts changed
    between runs (Rules 2.1.9 puts those under a new name)."""
    newest: dict[tuple[str, str], tuple[Leaf, dict[str, Any]]] = {}
    notes = []
    for leaf in leaves:
        for record in host_records(leaf.metadata):
            key = (str(record.get("host")), record["hostname"])
            if key in newest and client_profile(newest[key][1]) != client_profile(record):
                notes.append(f"host {key[1]} changed between {newest[key][0].path.name} and {leaf.path.name}; "
                             "the description states the newer facts")
            newest[key] = (leaf, record)
    return [record for _, record in newest.values()], notes


def document(system: str, leaves: list[Leaf], records: list[dict[str, Any]]) -> dict[str, Any]:
    """The description of these hosts: identical clients as one entry with their quantity."""
    clients = []
    for _, group in itertools.groupby(sorted((_client(client_profile(r)) for r in records), key=_key), key=_key):
        same = list(group)
        clients.append({**same[0], "quantity": len(same)})
    apis = {str((leaf.metadata or {}).get("storage") or "file") for leaf in leaves}
    api = apis.pop() if len(apis) == 1 else fill("file | object (the runs used both)")
    return {"system_under_test": {
        "solution": _solution(system, api),
        "deployment": fill(choices("system_under_test", "deployment")),
        "product_nodes": [_product_node()],
        "total_rack_units": Blank(f"rack units of product_nodes and product_switches, clients excluded ({ONPREM_ONLY})"),
        "clients": clients}}


def _scalar(value: Any) -> str:
    """One scalar as YAML writes it on a line of its own (quoted where it must be)."""
    return yaml.safe_dump(value, allow_unicode=True, width=1 << 20).removesuffix("\n").removesuffix("\n...")


def render(doc: dict[str, Any], header: str) -> str:
    """YAML text; each Blank becomes `null  # FILL IN: hint`, each Note its value and `# comment`,
    each Key its key under a `# comment` line."""
    marks: list[Any] = []

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True  # every template block written out in full

    def marked(dumper: yaml.SafeDumper, value: Any) -> yaml.Node:
        marks.append(value)
        return dumper.represent_scalar("tag:yaml.org,2002:str", f"MARK{len(marks) - 1}X")

    def written(found: re.Match) -> str:
        value = marks[int(found.group(2))]
        if isinstance(value, Key):  # the comment on a line of its own, indented as the key
            return f"{' ' * len(found.group(1))}# {value.comment}\n{found.group(1)}{str(value)}"
        if isinstance(value, Note):
            return f"{found.group(1)}{_scalar(value.value)}  # {value.comment}"
        return f"{found.group(1)}null  # {PLACEHOLDER}: {value.hint}"

    for kind in (Blank, Note, Key):
        Dumper.add_representer(kind, marked)
    text = yaml.dump(doc, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=120)
    text = re.sub(r"^( *(?:- )?(?:[^\s#][^\n]*?: )?)MARK(\d+)X", written, text, flags=re.MULTILINE)
    return header + text


def unfilled(text: str) -> list[str]:
    """The fields of a description not filled in, `<field>: <value>` each, by the definition
    validate's 2.1.7 counts with (system_schema.unfilled_fields); none for text that does not parse."""
    try:
        doc = fast_yaml.load(text, aliases=False)
    except (yaml.YAMLError, RecursionError):
        return []
    return [f"{path.rpartition('.')[2]}: {'null' if value is None else _scalar(value)}"
            for path, value in unfilled_fields(doc)]


def write(path: Path, text: str, force: bool) -> None:
    """Create the description; an existing one is replaced only with force (atomically)."""
    if force:
        atomic_write_text(path, text)
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise ConfigurationError(f"{path} exists; pass --force to replace it (your filled-in values would be lost)") from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def describe(root: Path, system: str, division: str | None, force: bool) -> None:
    """One description (and its sidecar) per division the system has runs in, each named as it is written."""
    found = gather(Package.load(root), system, division)
    if not found:
        raise NotFoundError(f"no run of system {system} under {root} recorded its client hosts; run a benchmark "
                            f"with --systemname {system} first")
    for (division, org), leaves in sorted(found.items()):
        records, notes = newest_records(leaves)
        doc = document(system, leaves, records)
        path = root / division / org / "systems" / f"{system}.yaml"
        make_dirs(root, path.parent)  # a linked systems/ (or org) would take both files out of the tree
        sidecar = host_sidecar.path_for(path)
        text = render(doc, HEADER.format(system=system, runs=len(leaves), mark=PLACEHOLDER, sidecar=sidecar.name))
        write(path, text, force)
        atomic_write_text(sidecar, host_sidecar.render(system, records, len(leaves)))
        hosts = sum(c["quantity"] for c in doc["system_under_test"]["clients"])
        print(f"wrote {path}: {hosts} client host(s) from {len(leaves)} run(s); {len(unfilled(text))} {PLACEHOLDER} "
              f"value(s) to replace; add {path.with_suffix('.pdf').name} beside it (Rules 2.1.7); wrote {sidecar.name}")
        for note in notes:
            print(f"  note: {note}")
