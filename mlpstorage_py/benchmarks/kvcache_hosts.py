"""KV cache across client hosts: the shared results directory check (Rules 6.3.3.4) and the
per-host record of a run.

The check launches one wrapper rank per `--host` entry; each rank prints one tagged JSON line
saying whether it sees a marker file under the results directory. A launch that could not
start every rank (a name that does not resolve, ssh refused, a launcher error) is a launch
failure (BenchmarkFailed, exit 6, the launcher's first meaningful error line); only ranks that
ran and did not see the marker are a 6.3.3.4 failure (GateRefused, exit 9, naming those hosts).

Hosts are identified by the `--host` entry MPI placed the ranks on (by-slot order: rank r runs
on entry r // npernode) together with the hostname each rank reported.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

from mlpstorage_py.errors import BenchmarkFailed, GateRefused
from mlpstorage_py.launch.job import Launcher, LaunchSpec
from mlpstorage_py.launch.mpi import MpiOptions, mpi_command
from mlpstorage_py.launch.options import LaunchOptions
from mlpstorage_py.launch.process import error_line
from mlpstorage_py.results.links import make_dirs, private_path
from mlpstorage_py.results.logs import log

PROBE_TAG = "MLPS-KVCACHE-PROBE "  # the wrapper's line prefix (kv_cache_benchmark/mlperf_wrapper.py)
HOSTS_FILE = "kvcache_hosts.json"
DROPPED = "dropped before every storage read"
# Launcher and remote-shell lines that explain why ranks never started.
LAUNCH_CAUSE = re.compile(r"ssh: |could not resolve|name or service not known|permission denied|host key verification"
                          r"|connection (refused|timed out|closed|reset)|no route to host|command not found"
                          r"|no such file or directory|unrecognized|unknown option|invalid option|not found", re.I)
MPI_TAG = re.compile(r"^\[[^\]]*\][^:]*:\s*")
# A launcher's or remote shell's own warning, never why ranks did not start: PRRTE's ssh launcher
# prints `[host:pid] plm:ssh: Warning: setpgid(...) failed in parent with errno=Permission
# denied(13)` when its child ran first (a busy head node), ahead of ssh's real message; ssh its
# `Warning: Permanently added ...`.
LAUNCH_WARNING = re.compile(r"^(?:[\w-]+:\s*)*warning\b", re.I)


# -- the shared results directory check -------------------------------------------------------
def run_probe(results_dir: Path, hosts: list[str], launch: LaunchOptions, wrapper: Path, log_dir: Path,
              check_path: Path | None = None) -> tuple[list[dict[str, Any]], int]:
    """Launch one probe rank per host entry under a short deadline; returns one record per host
    (rank, host entry, reported hostname, path, visible, detail) and mpirun's exit code.
    Logs and working directory: `log_dir`. TimeoutExpired (exit 7) propagates once the
    launcher's tree is down (launch/job.py, like every job: its shared memory swept too).
    `check_path` replaces the marker the ranks look for (tests: a path no host has)."""
    probe_dir = make_dirs(results_dir, private_path(results_dir))  # never a linked .mlps
    token = uuid.uuid4().hex
    marker = probe_dir / f"kvcache-shared-probe-{token}"
    marker.write_text(token, encoding="utf-8")
    mpi = MpiOptions.of(launch)
    mpi.hosts = [f"{h}:1" for h in hosts]
    argv = mpi_command(mpi, len(hosts), [sys.executable, str(wrapper), "--probe-shared", str(check_path or marker),
                                         "--probe-token", token])
    out, err = log_dir / "kvcache_shared_probe.stdout.log", log_dir / "kvcache_shared_probe.stderr.log"
    log.info(f"checking that {results_dir} is shared by {', '.join(hosts)}")
    try:
        code = Launcher(launch, log_dir, log_dir).launch(LaunchSpec(
            argv, "kvcache shared results check", out, err, ranks=len(hosts), reports=False,
            check=False)).code
    finally:
        marker.unlink(missing_ok=True)
    return probe_records(hosts, out), code


def probe_records(hosts: list[str], stdout_path: Path) -> list[dict[str, Any]]:
    """The ranks' tagged lines joined to the host entries (rank i ran on entry i)."""
    reported: dict[int, dict[str, Any]] = {}
    try:
        lines = stdout_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    for line in lines:
        line = MPI_TAG.sub("", line.strip())
        if line.startswith(PROBE_TAG):
            try:
                record = json.loads(line[len(PROBE_TAG):])
                reported[int(record["rank"])] = record
            except (ValueError, KeyError, TypeError):
                continue
    records = []
    for rank, host in enumerate(hosts):
        got = reported.get(rank)
        if got is None:
            records.append({"host": host, "rank": rank, "hostname": None, "path": None, "visible": None,
                            "detail": "no report (the rank did not run)"})
        else:
            records.append({"host": host, "rank": rank, "hostname": got.get("hostname"), "path": got.get("path"),
                            "visible": bool(got.get("visible")), "detail": got.get("detail", "")})
    return records


def judge_probe(results_dir: Path, records: list[dict[str, Any]], code: int, stderr_path: Path) -> None:
    """Launch failure (exit 6) when any rank did not report or mpirun failed; a 6.3.3.4 refusal
    (exit 9) only when every rank ran and some host did not see the marker."""
    silent = [r["host"] for r in records if r["visible"] is None]
    if silent or code != 0:
        where = ", ".join(silent) if silent else "the client hosts"
        raise BenchmarkFailed(f"could not start the shared results directory check on {where} (mpirun exit {code}): "
                              f"{launch_error(stderr_path) or 'no launcher output'}")
    blind = [r for r in records if not r["visible"]]
    if blind:
        raise GateRefused(f"--results-dir {results_dir} is not visible at the same path on {len(blind)} of {len(records)} "
                          "host(s) (Rules 6.3.3.4): " + "; ".join(f"{r['host']} (hostname {r['hostname']}): "
                                                                  f"{r['path']} {r['detail']}" for r in blind))


def launch_error(stderr_path: Path) -> str:
    """The launcher's first line that says why ranks did not start (ssh, name resolution, a bad
    option), wherever it is among the launcher's warnings, else the first rank exception, else
    its first line that is neither a banner nor a warning."""
    try:
        text = stderr_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    lines = [MPI_TAG.sub("", l.strip()) for l in text.splitlines()]
    meaningful = [l for l in lines if l and not set(l) <= set("-=*") and not LAUNCH_WARNING.match(l)]
    for line in meaningful:
        if LAUNCH_CAUSE.search(line):
            return line[:300]
    return error_line(stderr_path) or (meaningful[0][:300] if meaningful else "")


def local_records(hosts: list[str]) -> list[dict[str, Any]]:
    """A single local host: nothing to share, nothing launched to check it."""
    return [{"host": h, "rank": i, "hostname": socket.gethostname(), "path": None, "visible": None,
             "detail": "not checked: one local host"} for i, h in enumerate(hosts)]


# -- per-host records of a run ----------------------------------------------------------------
def host_records(hosts: list[str], npernode: int, probe: list[dict[str, Any]],
                 trials: dict[str, list[dict[int, dict[str, Any] | None]]],
                 client_hosts: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """One record per host entry: the ranks placed there, the hostname(s) they reported (probe
    and rank files), the results directory check, the page-cache handling its ranks reported,
    and the lifecycle's host facts (CPU, memory, OS) when it collected them."""
    facts = {f.get("host"): f for f in client_hosts or []}
    by_probe = {r["host"]: r for r in probe}
    records = []
    for index, host in enumerate(hosts):
        ranks = list(range(index * npernode, (index + 1) * npernode))
        reported: set[str] = set()
        cache: list[dict[str, Any]] = []
        for option, per_trial in trials.items():
            for trial, results in enumerate(per_trial):
                for rank in ranks:
                    block = ((results.get(rank) or {}).get("host")) or {}
                    if block.get("hostname"):
                        reported.add(block["hostname"])
                    if block.get("page_cache"):
                        cache.append({"option": option, "trial": trial, "rank": rank, **block["page_cache"]})
        seen = by_probe.get(host, {})
        names = sorted(reported | ({seen["hostname"]} if seen.get("hostname") else set()))
        record: dict[str, Any] = {
            "host": host, "hostname": seen.get("hostname") or (names[0] if names else None), "ranks": ranks,
            "rank_hostnames": sorted(reported), "placement_consistent": len(names) <= 1,
            "results_dir_check": {k: seen.get(k) for k in ("path", "visible", "detail")},
            "page_cache": page_cache_summary(cache)}
        fact = facts.get(host) or facts.get(host.split(":")[0])
        if fact:
            record.update({k: fact[k] for k in ("cpu_model", "cpu_count", "memory_total_bytes", "os", "kernel",
                                                "machine") if k in fact})
        records.append(record)
    return records


def page_cache_summary(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """What one host's ranks did before storage reads; 'dropped' only when every report with
    reads says it dropped, never inferred for a host that did not report."""
    if not reports:
        return {"status": "not dropped: no rank on this host reported (no result file)", "method": None, "reports": 0}
    with_reads = [r for r in reports if r.get("storage_reads")]
    reasons = sorted({r["status"] for r in with_reads if r.get("status") != DROPPED})
    if not with_reads:
        status = "no storage reads"
    elif reasons:
        status = "; ".join(reasons)
    else:
        status = DROPPED
    return {"status": status, "method": reports[0].get("method"),
            "filesystems": sorted({r.get("filesystem", "unknown") for r in reports}),
            "storage_reads": sum(int(r.get("storage_reads", 0)) for r in reports),
            "fadvise_done": sum(int(r.get("fadvise_done", 0)) for r in reports),
            "fadvise_failed": sum(int(r.get("fadvise_failed", 0)) for r in reports), "reports": len(reports)}
