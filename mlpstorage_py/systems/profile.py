"""A client host as a system description states it, from one host record of a run
(mlpstorage_py/launch/hostinfo.py), and how a recorded host differs from a described client.

describe writes these fields; the checker (Rules 2.1.9) compares them, so both read one mapping.
"""

from __future__ import annotations

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


def networking(nics: Any) -> list[dict[str, Any]]:
    """Physical NICs grouped as the description lists them: type, state, speed (Gb/s), count."""
    groups: dict[tuple, dict[str, Any]] = {}
    for nic in nics if isinstance(nics, list) else []:
        if not isinstance(nic, dict):
            continue
        mbps = nic.get("speed_mbps")
        speed = (mbps / 1000 if mbps % 1000 else mbps // 1000) if isinstance(mbps, int) else None
        key = (nic.get("type"), nic.get("state"), speed, nic.get("driver"))
        entry = groups.setdefault(key, {"type": key[0], "state": key[1], "speed": speed, "driver": key[3],
                                        "unit_count": 0, "interfaces": []})
        entry["unit_count"] += 1
        entry["interfaces"].append(nic.get("name"))
    return [groups[k] for k in sorted(groups, key=repr)]


def _mapping(value: Any) -> dict[str, str] | None:
    """A recorded {name: value}; None for a record taken before the survey read it."""
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else None


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


def described_profile(client: Any) -> dict[str, Any]:
    """The same fields as one clients[] entry of a description states them."""
    client = client if isinstance(client, dict) else {}
    chassis = client.get("chassis") if isinstance(client.get("chassis"), dict) else {}
    system = client.get("operating_system") if isinstance(client.get("operating_system"), dict) else {}
    return {"cpu_model": chassis.get("cpu_model"), "cpu_qty": chassis.get("cpu_qty"), "cpu_cores": chassis.get("cpu_cores"),
            "memory_capacity": chassis.get("memory_capacity"), "os_name": system.get("name"),
            "os_version": system.get("version"), "kernel": system.get("kernel"),
            "sysctl": client.get("sysctl"), "environment": client.get("environment"), "drives": client.get("drives")}


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


# What of a drive is compared: what it is, and the block-layer settings that shape its I/O.
DRIVE_FIELDS = ("model", "size_gib", "rotational", "scheduler", "read_ahead_kb", "nr_requests")


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
    if isinstance(described["drives"], list) and recorded["drives"] is not None:
        stated_drives, have_drives = _by_name(described["drives"]), _by_name(recorded["drives"])
        for name in sorted(set(stated_drives) | set(have_drives)):
            have, want = have_drives.get(name), stated_drives.get(name)
            if have is None or want is None:
                found.append(f"drive {name} {'not described' if want is None else 'described but not recorded'}")
                continue
            found += [f"drive {name} {field} {have.get(field)!r} (described {want.get(field)!r})" for field in DRIVE_FIELDS
                      if _known(have.get(field)) and _known(want.get(field)) and str(have[field]) != str(want[field])]
    return found


def differences(record: dict[str, Any], client: Any) -> list[str]:
    """What a recorded host states otherwise than a described client, field by field; a field
    either side leaves unknown (or a placeholder) is not compared."""
    recorded, described = client_profile(record), described_profile(client)
    return [f"{LABELS[f]} {recorded[f]!r} (described {described[f]!r})" for f in LABELS
            if _known(recorded[f]) and _known(described[f]) and not _same(f, recorded[f], described[f])] + \
        _configuration(recorded, described)
