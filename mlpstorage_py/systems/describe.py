"""`mlpstorage systems describe <system>`: systems/<system>.yaml from the host records the runs
of that system collected, with every field the rules and reportgen read, and a marked
placeholder (FILL IN) for what only the submitter knows: the storage solution, its
architecture and its capabilities (Rules 4.7.3, 4.7.4). Never overwrites without --force."""

from __future__ import annotations

import itertools
import json
import os
import re
from pathlib import Path
from typing import Any

import yaml

from mlpstorage_py.checker.package import Leaf, Package
from mlpstorage_py.errors import ConfigurationError, NotFoundError
from mlpstorage_py.results.io import atomic_write_text
from mlpstorage_py.results.leaf import check_name
from mlpstorage_py.results.sentinel import resolve_results_dir
from mlpstorage_py.systems.profile import PLACEHOLDER, client_profile, host_records


class Blank:
    """A value only the submitter knows that must stay typed (a number or a boolean): written
    as null with a FILL IN comment, so reportgen and the checker read it as absent, not text."""

    def __init__(self, hint: str) -> None:
        self.hint = hint


def fill(hint: str) -> str:
    return f"{PLACEHOLDER}: {hint}"


def _solution(system: str, api: str) -> dict[str, Any]:
    solution: dict[str, Any] = {
        "submission_name": system,
        "friendly_description": fill("the storage solution: product, version, how the clients reach it"),
        "architecture": {"storage_location": fill("local | remote | hyperconverged"),
                         "benchmark_API": api,
                         "product_API": fill("file | object | block: the storage product's native API"),
                         "client_footprint": fill("closed_source | open_source | in_box"),
                         "client_installation": fill("installable | in_box")},
        "capabilities": {"multi_host": Blank("true | false: false for storage local to one client host (Rules 4.7.4)"),
                         "simultaneous_write": Blank("true | false: several hosts write at once (Rules 4.7.4)"),
                         "simultaneous_read": Blank("true | false: several hosts read at once (Rules 4.7.4)"),
                         "remap_time_in_seconds": Blank("seconds from a checkpoint written to readable by another "
                                                        "host; 0 when both simultaneous_* are true (Rules 4.7.3)")},
        "usable_capacity_tib": Blank("usable capacity in TiB"),
        "availability": fill("available | preview | rdi"),
    }
    if api == "object":
        solution["storage_backend"] = fill("the object store the runs used (Rules 5.5.1)")
    return solution


def _client(profile: dict[str, Any], record: dict[str, Any], quantity: int) -> dict[str, Any]:
    nics = [{**{k: v for k, v in n.items() if k != "driver" or v}, "traffic": [fill("data | management")]}
            for n in profile["networking"]]
    return {"friendly_description": f"benchmark client host ({profile['cpu_model'] or 'unknown CPU'}, "
                                    f"{profile['memory_capacity'] or '?'} GiB)",
            "quantity": quantity,
            "chassis": {"model_name": fill("the client's server model"), "cpu_model": profile["cpu_model"],
                        "cpu_qty": profile["cpu_qty"], "cpu_cores": profile["cpu_cores"],
                        "memory_capacity": profile["memory_capacity"]},
            "networking": nics or [{"type": fill("ethernet | infiniband"), "unit_count": Blank("NICs"),
                                    "speed": Blank("Gb/s"), "state": "up", "traffic": [fill("data")]}],
            "operating_system": {"name": profile["os_name"] or record.get("os"), "version": profile["os_version"],
                                 "kernel": profile["kernel"]},
            **_configuration(profile)}


def _configuration(profile: dict[str, Any]) -> dict[str, Any]:
    """The tunables, environment and drives the hosts recorded (runs of older versions recorded none)."""
    found: dict[str, Any] = {}
    for field in ("sysctl", "environment"):
        if profile[field] is not None:
            found[field] = [{"name": k, "value": v} for k, v in profile[field].items()]
    if profile["drives"] is not None:
        found["drives"] = profile["drives"]
    return found


def gather(pkg: Package, system: str, division: str | None) -> dict[tuple[str, str], list[Leaf]]:
    """{(division, org): leaves of the system holding host records}, oldest first."""
    found: dict[tuple[str, str], list[Leaf]] = {}
    for leaf in sorted(pkg.leaves, key=lambda lf: (lf.path.name, str(lf.path))):
        if leaf.system == system and (division is None or leaf.division == division) and host_records(leaf.metadata):
            found.setdefault((leaf.division, leaf.org), []).append(leaf)
    return found


def document(system: str, leaves: list[Leaf]) -> tuple[dict[str, Any], list[str]]:
    """The description of the hosts these runs recorded (the newest record of each host), and
    notes on hosts whose facts changed between runs (Rules 2.1.9 puts those under a new name)."""
    newest: dict[tuple[str, str], tuple[Leaf, dict[str, Any]]] = {}
    notes = []
    for leaf in leaves:
        for record in host_records(leaf.metadata):
            key = (str(record.get("host")), record["hostname"])
            if key in newest and client_profile(newest[key][1]) != client_profile(record):
                notes.append(f"host {key[1]} changed between {newest[key][0].path.name} and {leaf.path.name}; "
                             "the description states the newer facts")
            newest[key] = (leaf, record)
    records = [record for _, record in newest.values()]
    groups = itertools.groupby(sorted(records, key=lambda r: json.dumps(client_profile(r), sort_keys=True)),
                               key=lambda r: json.dumps(client_profile(r), sort_keys=True))
    clients = []
    for _, same in groups:
        same = list(same)
        clients.append(_client(client_profile(same[0]), same[0], len(same)))
    apis = {str((leaf.metadata or {}).get("storage") or "file") for leaf in leaves}
    api = apis.pop() if len(apis) == 1 else fill("file | object (the runs used both)")
    sut = {"solution": _solution(system, api),
           "deployment": fill("onprem | cloud"),
           "product_nodes": [{"friendly_description": fill("a storage node of the solution"),
                              "quantity": Blank("how many such nodes"),
                              "chassis": {"model_name": fill("the node's model"), "rack_units": Blank("rack units each")}}],
           "clients": clients}
    return {"system_under_test": sut}, notes


def render(doc: dict[str, Any], header: str) -> str:
    """YAML text; each Blank becomes `null  # FILL IN: hint`."""
    hints: list[str] = []

    class Dumper(yaml.SafeDumper):
        pass

    def blank(dumper: yaml.SafeDumper, value: Blank) -> yaml.Node:
        hints.append(value.hint)
        return dumper.represent_scalar("tag:yaml.org,2002:str", f"BLANK{len(hints) - 1}X")

    Dumper.add_representer(Blank, blank)
    text = yaml.dump(doc, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=120)
    text = re.sub(r"BLANK(\d+)X", lambda m: f"null  # {PLACEHOLDER}: {hints[int(m.group(1))]}", text)
    return header + text


def unfilled(text: str) -> list[str]:
    """The lines of a description that still hold a placeholder."""
    return [line.strip() for line in text.splitlines() if PLACEHOLDER in line and not line.lstrip().startswith("#")]


def write(path: Path, text: str, force: bool) -> None:
    """Create the description; an existing one is replaced only with force (atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if force:
        atomic_write_text(path, text)
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise ConfigurationError(f"{path} exists; pass --force to replace it (your filled-in values would be lost)") from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def command(args: dict[str, Any], argv: list[str]) -> int:
    """The `systems describe` handler: one description per division the system has runs in."""
    system = check_name("system name", args["system"])
    root, _ = resolve_results_dir(args.get("results_dir"))
    if not root.is_dir():
        raise ConfigurationError(f"results directory {root} does not exist")
    found = gather(Package.load(root), system, args.get("division"))
    if not found:
        raise NotFoundError(f"no run of system {system} under {root} recorded its client hosts; run a benchmark "
                            f"with --systemname {system} first")
    for (division, org), leaves in sorted(found.items()):
        doc, notes = document(system, leaves)
        header = (f"# systems/{system}.yaml: written by `mlpstorage systems describe` from the host records of "
                  f"{len(leaves)} run(s).\n# Replace every {PLACEHOLDER} value; the client facts must stay what the "
                  "runs recorded (Rules 2.1.9).\n")
        text = render(doc, header)
        path = root / division / org / "systems" / f"{system}.yaml"
        write(path, text, bool(args.get("force")))
        hosts = sum(c["quantity"] for c in doc["system_under_test"]["clients"])
        print(f"wrote {path}: {hosts} client host(s) from {len(leaves)} run(s); {len(unfilled(text))} {PLACEHOLDER} "
              f"value(s) to replace; add {path.with_suffix('.pdf').name} beside it (Rules 2.1.7)")
        for note in notes:
            print(f"  note: {note}")
    return 0
