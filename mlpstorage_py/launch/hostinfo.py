"""One record per client host, gathered once per invocation through the same MPI launch layout
the benchmark uses (one rank on every host it places ranks on), and the page-cache drop that
must happen on every one of those hosts, not only on the host that launched the job.

Hosts are identified by the `--host` entry MPI placed ranks on (`host`) together with the
hostname the rank reported (`hostname`), so two clients with the same name, or an alias, are
not merged. Local-only layouts (127.0.0.1, this hostname) are measured in-process.

Run as: <mpirun> -n H --host h1:1,... python -m mlpstorage_py.launch.hostinfo OUT.json [--drop-cache]
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlpstorage_py.errors import BenchmarkFailed
from mlpstorage_py.launch.host_config import host_config
from mlpstorage_py.launch.hostnames import is_local
from mlpstorage_py.results.host import meminfo_bytes

if TYPE_CHECKING:
    from mlpstorage_py.launch.mpi import MpiOptions


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "cpu model", "hardware")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _os_release() -> dict[str, str]:
    try:
        lines = Path("/etc/os-release").read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    return {k: v.strip().strip('"') for k, _, v in (line.partition("=") for line in lines) if v}


def _cpu_topology() -> tuple[int | None, int | None]:
    """(sockets, physical cores) from /proc/cpuinfo: what a system description calls cpu_qty
    and cpu_cores (os.cpu_count() counts hardware threads)."""
    cores, package = set(), None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "physical id":
                    package = value.strip()
                elif key.strip() == "core id":
                    cores.add((package, value.strip()))
    except OSError:
        pass
    return (len({p for p, _ in cores}), len(cores)) if cores else (None, None)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None


NET_TYPES = {"1": "ethernet", "32": "infiniband"}


def nics(root: Path = Path("/sys/class/net")) -> list[dict[str, Any]]:
    """Physical network interfaces (those with a device behind them) as sysfs shows them:
    name, type, state, speed in Mb/s (None where the driver does not say) and driver."""
    found = []
    for path in sorted(root.iterdir()) if root.is_dir() else []:
        if not (path / "device").exists():
            continue  # loopback, bridges, veth, ifb: not hardware the system description lists
        speed = _read(path / "speed")
        driver = path / "device" / "driver"
        found.append({"name": path.name, "type": NET_TYPES.get(_read(path / "type") or "", "other"),
                      "state": _read(path / "operstate"), "driver": driver.resolve().name if driver.exists() else None,
                      "speed_mbps": int(speed) if speed and speed.isdigit() and int(speed) > 0 else None})
    return found


def drop_here() -> str:
    """Drop this host's page cache; 'dropped' only when the kernel took the request."""
    from mlpstorage_py.storage import drop_page_cache

    if os.geteuid() != 0:
        return "not dropped: not root"
    return "dropped" if drop_page_cache() else "not dropped: /proc/sys/vm/drop_caches not writable"


def local_facts(drop_cache: bool = False) -> dict[str, Any]:
    release, (sockets, cores) = _os_release(), _cpu_topology()
    facts = {"hostname": socket.gethostname(), "cpu_model": _cpu_model(), "cpu_count": os.cpu_count(),
             "cpu_sockets": sockets, "cpu_cores": cores, "memory_total_bytes": meminfo_bytes(),
             "os": release.get("PRETTY_NAME") or platform.system(), "os_name": release.get("NAME"),
             "os_version": release.get("VERSION_ID"), "kernel": platform.release(), "machine": platform.machine(),
             "nics": nics(), **host_config()}
    if drop_cache:
        facts["page_cache"] = drop_here()
    return facts


def _records(layout: list[tuple[str, int]], facts: list[dict[str, Any]], method: str) -> list[dict[str, Any]]:
    """Join what each host reported with the ranks the layout places there (by slot order)."""
    records, first = [], 0
    for (host, slots), fact in zip(layout, facts, strict=True):
        records.append({"host": host, **fact, "ranks": list(range(first, first + slots)), "collection_method": method})
        first += slots
    return records


def survey(opts: MpiOptions, processes: int, results_dir: Path, *, drop_cache: bool = False,
           label: str = "host facts") -> list[dict[str, Any]]:
    """A record per host of the layout `processes` ranks get on opts.hosts; with drop_cache,
    each host also drops its page cache and says whether it did."""
    from mlpstorage_py.launch.mpi import MpiOptions, host_slots, uses_remote_shell  # the launching side's only

    layout = host_slots(opts.hosts, processes)
    slurm_places = not uses_remote_shell(opts)
    if all(is_local(h) for h, _ in layout) and not slurm_places:
        fact = local_facts(drop_cache)
        return _records(layout, [fact] * len(layout), "local")
    if slurm_places:
        # srun decides where ranks go: start every rank and group the reports by hostname.
        facts = _launch(opts, processes, results_dir, drop_cache, label)
        by_host: dict[str, dict[str, Any]] = {}
        for rank, fact in enumerate(facts):
            entry = by_host.setdefault(fact["hostname"], {"host": fact["hostname"], **fact, "ranks": [],
                                                          "collection_method": "srun"})
            entry["ranks"].append(rank)
        return list(by_host.values())
    one_each = MpiOptions(hosts=[f"{h}:1" for h, _ in layout], mpi_bin=opts.mpi_bin, oversubscribe=opts.oversubscribe,
                          allow_run_as_root=opts.allow_run_as_root, extra=opts.extra)
    facts = _launch(one_each, len(layout), results_dir, drop_cache, label)
    return _records(layout, facts, "mpi")


def _launch(opts: MpiOptions, ranks: int, results_dir: Path, drop_cache: bool, label: str) -> list[dict[str, Any]]:
    """Run this module as `ranks` MPI ranks, a short job (launch/job.py); every rank's facts, in rank order."""
    # Imported here, not by the module: every host's rank runs this module and needs none of them
    # (launch.job alone costs a rank 0.18 s of imports; 64 hosts on 2 cores, 6 s).
    from mlpstorage_py.launch.job import LaunchSpec, launching
    from mlpstorage_py.launch.mpi import SAFE_PATH, mpi_command
    from mlpstorage_py.launch.options import LaunchOptions

    with launching(LaunchOptions(), results_dir, "hostinfo") as launcher:
        tmp = launcher.scratch
        out = tmp / "hosts.json"
        program = [sys.executable, *SAFE_PATH, "-m", "mlpstorage_py.launch.hostinfo", str(out)] + \
            (["--drop-cache"] if drop_cache else [])
        argv = mpi_command(opts, ranks, program)
        code = launcher.launch(LaunchSpec(argv, label, tmp / "out.log", tmp / "err.log", ranks=ranks, reports=False,
                                          check=False)).code
        if code != 0 or not out.is_file():
            from mlpstorage_py.launch.process import error_line

            raise BenchmarkFailed(f"{label} over MPI on {', '.join(opts.hosts)} failed (exit {code}): "
                                  f"{error_line(tmp / 'err.log') or 'no output'}")
        facts: list[dict[str, Any]] = json.loads(out.read_text(encoding="utf-8"))
    if len(facts) != ranks:
        raise BenchmarkFailed(f"{label}: {len(facts)} of {ranks} ranks reported")
    return facts


def cache_summary(records: list[dict[str, Any]]) -> str:
    """'dropped' only when every host dropped; otherwise which hosts did not, and why."""
    bad = [f"{r['host']}: {r['page_cache']}" for r in records if r.get("page_cache") != "dropped"]
    return "dropped" if not bad else "not dropped on " + "; ".join(bad)


def main(argv: list[str]) -> None:
    from mpi4py import MPI

    facts = MPI.COMM_WORLD.gather(local_facts("--drop-cache" in argv), root=0)
    if MPI.COMM_WORLD.Get_rank() == 0:
        Path(argv[0]).write_text(json.dumps(facts), encoding="utf-8")


if __name__ == "__main__":
    from mlpstorage_py.launch.rank_guard import die_with_parent

    die_with_parent()
    main(sys.argv[1:])
