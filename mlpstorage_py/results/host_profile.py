"""A client host as a system description states it, from one host record of a run
(mlpstorage_py/launch/hostinfo.py), and how a recorded host differs from a described client.

describe writes these fields; the checker (Rules 2.1.9) compares them, so both read one mapping.
The description holds what its published schema has a field for (the kernel as the sysctl
kernel.osrelease, the drives as groups of one model); each host's devices and their queue
settings are in the sidecar systems/<system>.hosts.md (host_sidecar).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

# The marker every value only the submitter can give carries (a string, or a YAML comment).
PLACEHOLDER = "FILL IN"
# Described memory is whole GiB; a kernel reserves a little of MemTotal, so allow 1 GiB or 1 %.
MEMORY_SLACK_GIB, MEMORY_SLACK = 1.0, 0.01


def host_records(metadata: Any) -> list[dict[str, Any]]:
    """The per-host records mlpstorage's survey stored in a leaf's metadata (client_hosts);
    a published leaf of another tool has none (or null) and yields nothing."""
    hosts = metadata.get("client_hosts") if isinstance(metadata, dict) else None
    return [h for h in hosts if isinstance(h, dict) and isinstance(h.get("hostname"), str)] if isinstance(hosts, list) else []


def _gib(value: Any) -> int | None:
    return round(value / 2 ** 30) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


# The description's NIC states (the schema has up and down); another operstate is the submitter's to say.
STATES = {"up": "up", "down": "down", "lowerlayerdown": "down", "notpresent": "down"}
# The sysctl that names the running kernel (/proc/sys/kernel/osrelease, what uname -r prints).
KERNEL_SYSCTL = "kernel.osrelease"


def networking(nics: Any) -> list[dict[str, Any]]:
    """Physical NICs grouped as the description lists them: unit_count, type, state (up, down, or
    None), speed in whole Gb/s (None where the driver does not say, or under 1 Gb/s)."""
    groups: dict[tuple[Any, str | None, int | None], dict[str, Any]] = {}
    for nic in nics if isinstance(nics, list) else []:
        if not isinstance(nic, dict):
            continue
        mbps = nic.get("speed_mbps")
        speed = mbps // 1000 if isinstance(mbps, int) and mbps >= 1000 and mbps % 1000 == 0 else None
        key = (nic.get("type"), STATES.get(str(nic.get("state")).lower()), speed)
        entry = groups.setdefault(key, {"unit_count": 0, "type": key[0], "state": key[1], "speed": speed})
        entry["unit_count"] += 1
    return [groups[k] for k in sorted(groups, key=repr)]


def _mapping(value: Any) -> dict[str, str] | None:
    """A recorded {name: value}, an empty value left out (the schema's values are non-empty, so
    an empty variable reads as unset); None for a record taken before the survey read it."""
    return {str(k): str(v) for k, v in value.items() if str(v) != ""} if isinstance(value, dict) else None


def _by_name(entries: Any) -> dict[str, dict[str, Any]]:
    """A list of `{name: ..., ...}` entries by name (a malformed entry is skipped)."""
    return {str(e["name"]): e for e in entries if isinstance(e, dict) and "name" in e} if isinstance(entries, list) else {}


def _named(entries: Any) -> dict[str, Any]:
    """A description's `- {name: ..., value: ...}` list as {name: value}."""
    return {name: entry.get("value") for name, entry in _by_name(entries).items()}


def client_profile(record: dict[str, Any]) -> dict[str, Any]:
    """The description's client fields one host record determines (None where it is silent)."""
    return {"cpu_model": record.get("cpu_model"), "cpu_qty": record.get("cpu_sockets"),
            "cpu_cores": record.get("cpu_cores"), "memory_capacity": _gib(record.get("memory_total_bytes")),
            "os_name": record.get("os_name"), "os_version": record.get("os_version"),
            "kernel": record.get("kernel"), "networking": networking(record.get("nics")),
            "sysctl": _mapping(record.get("sysctl")), "environment": _mapping(record.get("environment")),
            "drives": [d for d in record["drives"] if isinstance(d, dict)] if isinstance(record.get("drives"), list) else None}


def described_profile(client: Any, host: Any = None) -> dict[str, Any]:
    """The same fields as one clients[] entry of a description states them, and the devices its
    sidecar entry for the host lists (host_sidecar; None without one)."""
    client = client if isinstance(client, dict) else {}
    chassis = client.get("chassis") if isinstance(client.get("chassis"), dict) else {}
    system = client.get("operating_system") if isinstance(client.get("operating_system"), dict) else {}
    return {"cpu_model": chassis.get("cpu_model"), "cpu_qty": chassis.get("cpu_qty"), "cpu_cores": chassis.get("cpu_cores"),
            "memory_capacity": chassis.get("memory_capacity"), "os_name": system.get("name"),
            "os_version": system.get("version"), "kernel": _named(client.get("sysctl")).get(KERNEL_SYSCTL),
            "sysctl": client.get("sysctl"), "environment": client.get("environment"), "drives": client.get("drives"),
            "devices": host.get("drives") if isinstance(host, dict) else None}


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, str) and (not value.strip() or PLACEHOLDER in value))


def _same(field: str, recorded: Any, described: Any) -> bool:
    if field == "memory_capacity":
        try:
            a, b = float(recorded), float(described)
        except (TypeError, ValueError):
            return False
        return abs(a - b) <= max(MEMORY_SLACK_GIB, MEMORY_SLACK * max(a, b))
    if field in ("cpu_qty", "cpu_cores"):
        return str(recorded).strip() == str(described).strip()
    return " ".join(str(recorded).split()).casefold() == " ".join(str(described).split()).casefold()


LABELS = {"cpu_model": "CPU model", "cpu_qty": "CPU sockets", "cpu_cores": "CPU cores", "memory_capacity": "memory GiB",
          "os_name": "OS", "os_version": "OS version", "kernel": "kernel"}


# What of a sidecar device is compared: what it is, and the block-layer settings that shape its I/O.
DRIVE_FIELDS = ("model", "size_gib", "rotational", "scheduler", "read_ahead_kb", "nr_requests")


def _count(value: Any) -> int | None:
    """A unit_count: a whole number, or a string of digits (published descriptions quote theirs)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return int(value) if isinstance(value, str) and value.strip().isdigit() else None


def _norm(text: Any) -> str:
    return " ".join(str(text).split()).casefold()


# The mount points that make a device the host's boot drive.
BOOT_MOUNTS = frozenset({"/", "/boot", "/boot/efi"})


def is_boot_drive(device: dict[str, Any]) -> bool:
    """The record says this device boots the host: a `boot` flag, or a `mounts` list holding the
    root or boot file system. The published descriptions leave a client's boot drive out."""
    boot = device.get("boot")
    if isinstance(boot, bool):
        return boot
    mounts = device.get("mounts")
    return isinstance(mounts, list) and any(str(m) in BOOT_MOUNTS for m in mounts)


def knows_boot_drive(devices: list[dict[str, Any]]) -> bool:
    """Whether the survey said of these devices which one boots (a record from before it did says nothing)."""
    return any("boot" in d or "mounts" in d for d in devices)


def _drive_groups(recorded: list[dict[str, Any]], described: list[Any]) -> list[str]:
    """Each described drive model is on the host as many times as its unit_count says, give or
    take its boot drives (the description may leave them out, as describe does); a drive the
    description leaves out is not, and a device whose model the host did not report may be any
    described one."""
    have = Counter(_norm(d.get("model")) for d in recorded if _known(d.get("model")))
    data = Counter(_norm(d.get("model")) for d in recorded if _known(d.get("model")) and not is_boot_drive(d))
    unknown = sum(1 for d in recorded if not _known(d.get("model")))
    want: Counter[str] = Counter()
    named: dict[str, str] = {}
    for group in described:
        units = _count(group.get("unit_count")) if isinstance(group, dict) else None
        if isinstance(group, dict) and _known(group.get("model_name")) and units is not None:
            want[_norm(group["model_name"])] += units
            named.setdefault(_norm(group["model_name"]), str(group["model_name"]))
    return [f"drives of model {named[model]!r}: {have[model]} recorded (described {count})"
            for model, count in sorted(want.items()) if data[model] > count or have[model] + unknown < count]


def _devices(recorded: list[dict[str, Any]], described: list[Any]) -> list[str]:
    """The sidecar's devices are the host's whole set: each one's model, size and queue settings."""
    found = []
    stated, have_drives = _by_name(described), _by_name(recorded)
    for name in sorted(set(stated) | set(have_drives)):
        have, want = have_drives.get(name), stated.get(name)
        if have is None or want is None:
            found.append(f"drive {name} {'not described' if want is None else 'described but not recorded'}")
            continue
        found += [f"drive {name} {field} {have.get(field)!r} (described {want.get(field)!r})" for field in DRIVE_FIELDS
                  if _known(have.get(field)) and _known(want.get(field)) and str(have[field]) != str(want[field])]
    return found


def _configuration(recorded: dict[str, Any], described: dict[str, Any]) -> list[str]:
    """Tunables, environment and drives. A list the description leaves out is not compared; one
    it gives is the host's whole configuration, so a variable set on only one side differs. A
    record taken before the survey read one of them is not compared on it."""
    found = []
    if isinstance(described["sysctl"], list) and recorded["sysctl"] is not None:
        stated = _named(described["sysctl"])
        found += [f"sysctl {name} {value!r} (described {stated[name]!r})" for name, value in recorded["sysctl"].items()
                  if name in stated and _known(stated[name]) and str(stated[name]).strip() != value]
    if isinstance(described["environment"], list) and recorded["environment"] is not None:
        stated = {k: str(v) for k, v in _named(described["environment"]).items()}
        for name in sorted(set(stated) | set(recorded["environment"])):
            have, want = recorded["environment"].get(name), stated.get(name)
            if have != want and (want is None or _known(want)):
                found.append(f"environment {name} {have if have is not None else 'unset'!r} "
                             f"(described {want if want is not None else 'unset'!r})")
    if recorded["drives"] is not None:
        if isinstance(described["drives"], list):
            found += _drive_groups(recorded["drives"], described["drives"])
        if isinstance(described["devices"], list):
            found += _devices(recorded["drives"], described["devices"])
    return found


def differences(record: dict[str, Any], client: Any, host: Any = None) -> list[str]:
    """What a recorded host states otherwise than a described client (and the sidecar's entry
    for it), field by field; a field either side leaves unknown (or a placeholder) is not compared."""
    recorded, described = client_profile(record), described_profile(client, host)
    return [f"{LABELS[f]} {recorded[f]!r} (described {described[f]!r})" for f in LABELS
            if _known(recorded[f]) and _known(described[f]) and not _same(f, recorded[f], described[f])] + \
        _configuration(recorded, described)
