"""Section 4, the run itself: paths and filesystems (4.4), CLOSED process layout and parameters (4.6)
and the test's conduct (4.7). The shared readers of a checkpoint leaf live in rules_checkpointing.
"""

from __future__ import annotations

import posixpath
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from mlpstorage_py.results.tree.files import read_text
from mlpstorage_py.results.tree.package import Package
from mlpstorage_py.checker.registry import INFO, INVALID, WARNING, Finding, finding, rule
from mlpstorage_py.checker.rules_checkpointing import (
    COUNTED_ELSEWHERE, counts, is_read, is_write, _by_workload, _cannot, _configuration, _interval,
    _metric, _model, _processes, _read_start, _runs, _two_invocations, _reference, _write_end)
from mlpstorage_py.checker.structure_helpers import (
    LeafRecord, Workload, as_int, as_number, checkpointing_leaves, dig, system_description)
from mlpstorage_py.rules import tables
from mlpstorage_py.rules.core_config import canonical, flatten

HOST_FLAG = re.compile(r"(?:^|\s)(?:--host|-host|-H)[\s=]+(\S+)")
NP_FLAG = re.compile(r"(?:^|\s)(?:-n|-np|--np|-c)\s+(\d+)")
# A num_hosts beyond this is a corrupt record: the per-host split is not built for it.
MAX_HOSTS = 1 << 16


def _norm(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return posixpath.normpath(value.strip())


@rule("4.4.1", "checkpointPathArgs", parts=True)
def path_args(pkg: Package) -> Iterable[Finding]:
    """args.checkpoint_folder and the results directory are both recorded and differ."""
    for wl, rec in _runs(pkg):
        separation, _ = rec.fs_separation
        recorded_apart = (rec.meta_problem == "no *_metadata.json" and isinstance(separation, dict)
                          and _norm(separation.get("data_or_chkpt_path")) and _norm(separation.get("results_path")))
        if rec.meta is None and not recorded_apart:
            yield _cannot("4.4.1", INVALID, rec, "the checkpoint and results directories", rec.meta_problem)
            continue
        if rec.meta is None:
            # fs_separation.json, which the tool writes from the same two arguments, records them
            folder, results = _norm(separation.get("data_or_chkpt_path")), _norm(separation.get("results_path"))
            if folder == results:
                yield finding("4.4.1", INVALID, rec.path / "fs_separation.json", f"checkpoints and results share the directory {folder}")
            continue
        folder = _norm(rec.args.get("checkpoint_folder"))
        results = _norm(rec.args.get("results_dir")) or _norm(rec.meta.get("result_dir"))
        if folder is None or results is None:
            missing = " and ".join(n for n, v in (("args.checkpoint_folder", folder), ("args.results_dir", results)) if v is None)
            yield finding("4.4.1", INVALID, rec.meta_path, f"the metadata records no {missing}")
        elif folder == results:
            yield finding("4.4.1", INVALID, rec.meta_path, f"checkpoints and results share the directory {folder}")


def _df_mounts(text: str) -> list[str]:
    """Mount points of the rows of every df listing in a log."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[-2].endswith("%") and fields[-1].startswith("/"):
            mounts.append(fields[-1])
    return mounts


def _mount_of(path: str, mounts: list[str]) -> str | None:
    covering = [m for m in mounts if path == m or path.startswith(m.rstrip("/") + "/")]
    return max(covering, key=len) if covering else None


@rule("4.4.2", "checkpointFilesystemCheck", parts=True)
def filesystem_check(pkg: Package) -> Iterable[Finding]:
    """fs_separation.json (or a df listing) shows checkpoints and results on different filesystems."""
    for wl, rec in _runs(pkg):
        sut, _, _ = system_description(pkg, wl.division, wl.org, wl.system)
        if dig(sut, "solution", "architecture", "benchmark_API") == "object":
            continue
        record_, problem = rec.fs_separation
        if record_ is not None:
            same = record_.get("same_filesystem")
            if same is True:
                yield finding("4.4.2", INVALID, rec.path / "fs_separation.json",
                              "fs_separation.json shows the checkpoint folder and the results on one filesystem")
            elif same is not False:
                yield finding("4.4.2", INVALID, rec.path / "fs_separation.json", f"fs_separation.json records same_filesystem {same!r}, not a boolean")
            continue
        if problem != "missing":
            yield finding("4.4.2", INVALID, rec.path / "fs_separation.json", problem)
            continue
        text, _ = read_text(rec.path / "checkpointing_run.stdout.log")
        mounts = _df_mounts(text or "") if text and "Mounted on" in text else []
        if not mounts:
            yield finding("4.4.2", INVALID, rec.path, "no fs_separation.json and no df listing in checkpointing_run.stdout.log")
            continue
        folder, results = _norm(rec.args.get("checkpoint_folder")), _norm(rec.args.get("results_dir")) or _norm(dig(rec.meta, "result_dir"))
        if folder and results:
            where = _mount_of(folder, mounts), _mount_of(results, mounts)
            if None in where:
                yield finding("4.4.2", INVALID, rec.path, "the df listing does not cover both the checkpoint folder and the results directory")
            elif where[0] == where[1]:
                yield finding("4.4.2", INVALID, rec.path, f"the df listing puts checkpoints and results on one mount, {where[0]}")
        elif len(set(mounts)) < 2:
            yield finding("4.4.2", INVALID, rec.path, "the df listing shows a single filesystem")


# --- 4.6 CLOSED and OPEN -----------------------------------------------------------------

@rule("4.6.1", "checkpointClosedMpiProcesses", parts=True)
def closed_processes(pkg: Package) -> Iterable[Finding]:
    """A CLOSED run uses the Table 2 process count of its model (8, 64, 512, 1024)."""
    for wl, rec in _runs(pkg):
        if wl.division != "closed":
            continue
        model = _model(rec, wl)
        required = wl.checker["closed_mpi_processes"].get(model)
        if required is None:
            continue  # not a Table 2 model: 4.3.3 and 2.1.21 report it
        recorded = _processes(rec)
        if not recorded:
            yield _cannot("4.6.1", INVALID, rec, "the MPI process count", rec.meta_problem or rec.summary_problem or "no record of it")
            continue
        wrong = {k: v for k, v in recorded.items() if v != required}
        if wrong:
            shown = ", ".join(f"{k} {v}" for k, v in wrong.items())
            yield finding("4.6.1", INVALID, rec.meta_path if rec.meta is not None else rec.summary_path,
                          f"CLOSED {model} runs {required} MPI processes; recorded: {shown}")


def _per_host(rec: LeafRecord) -> tuple[list[int] | None, str]:
    """Processes placed on each host: the launch's host:slots list, else the summary's hosts."""
    commands = [dig(rec.meta, "executed_command")]
    argv = dig(rec.meta, "executed_argv")
    if isinstance(argv, list):
        commands += [" ".join(map(str, a)) for a in argv if isinstance(a, list)]
    for text in commands:
        if not isinstance(text, str):
            continue
        hosts, total = HOST_FLAG.search(text), NP_FLAG.search(text)
        if not hosts:
            continue
        slots = []
        for item in hosts.group(1).split(","):
            name, _, count = item.partition(":")
            slots.append(as_int(count) if count else 1)
        if None in slots:
            continue
        wanted = int(total.group(1)) if total else sum(slots)
        if wanted > sum(slots):  # oversubscribed: ranks go round-robin over the hosts
            base, extra = divmod(wanted, len(slots))
            return [base + (1 if i < extra else 0) for i in range(len(slots))], "the launch's host list"
        placed: list[int] = []
        for slot in slots:  # by slot: each host is filled before the next
            placed.append(min(slot, wanted - sum(placed)))
        return [p for p in placed if p > 0], "the launch's host slots"
    count, hosts = as_int(dig(rec.summary, "num_accelerators")), as_int(dig(rec.summary, "num_hosts"))
    if count is not None and hosts and 0 < hosts <= MAX_HOSTS:
        base, extra = divmod(count, hosts)
        return [base + (1 if i < extra else 0) for i in range(hosts)], "summary.json num_accelerators / num_hosts"
    return None, "nowhere"


@rule("4.6.2", "checkpointClosedAcceleratorsPerHost", parts=True)
def closed_per_host(pkg: Package) -> Iterable[Finding]:
    """A CLOSED run puts more than 4 simulated accelerators on each host, Table 2's total in all."""
    for wl, rec in _runs(pkg):
        if wl.division != "closed":
            continue
        required = wl.checker["closed_mpi_processes"].get(_model(rec, wl))
        layout, where = _per_host(rec)
        if layout is None:
            yield _cannot("4.6.2", INVALID, rec, "the accelerators per host", rec.meta_problem or rec.summary_problem or "no record of the hosts")
            continue
        few = [n for n in layout if n <= wl.checker["checkpoint_min_accelerators_per_host_exclusive"]]
        if few:
            yield finding("4.6.2", INVALID, rec.meta_path if rec.meta is not None else rec.summary_path,
                          f"hosts run {layout} accelerators (from {where}); each must run more than {wl.checker['checkpoint_min_accelerators_per_host_exclusive']}")
        if required is not None and sum(layout) != required:
            yield finding("4.6.2", INVALID, rec.meta_path if rec.meta is not None else rec.summary_path,
                          f"the hosts run {sum(layout)} accelerators in all (from {where}), not the {required} of Table 2")






@rule("4.6.3", "checkpointClosedCheckpointParameters", parts=True)
def closed_parameters(pkg: Package) -> Iterable[Finding]:
    """A CLOSED run's configuration equals its model's reference but for checkpoint.checkpoint_folder."""
    allowed = tables.param_allowlist("checkpointing", "closed") | tables.tool_injected_params("checkpointing") | COUNTED_ELSEWHERE
    for wl, rec in _runs(pkg):
        if wl.division != "closed":
            continue
        model = _model(rec, wl)
        reference = _reference(model)
        if reference is None:
            yield finding("4.6.3", INFO, rec.path, f"no reference configuration for {model} to compare with")
            continue
        recorded, where = _configuration(rec)
        if recorded is None:
            yield _cannot("4.6.3", INVALID, rec, "the workload configuration", rec.meta_problem or "no parameters recorded")
            continue
        ours, theirs = flatten(recorded), flatten(reference)
        changed = sorted(k for k in ours.keys() & theirs.keys() if k not in allowed and canonical(ours[k]) != canonical(theirs[k]))
        extra = sorted(k for k in ours.keys() - theirs.keys() if k not in allowed)
        missing = sorted(k for k in theirs.keys() - ours.keys() if k not in allowed)
        path = rec.meta_path if where != "dlio_config/config.yaml" else rec.path / "dlio_config" / "config.yaml"
        for key in changed:
            yield finding("4.6.3", INVALID, path, f"{key} is {ours[key]!r} ({where}); the {model} reference has {theirs[key]!r} "
                                                  "and CLOSED may change only checkpoint.checkpoint_folder")
        if extra:
            yield finding("4.6.3", INVALID, path, f"{where} carries parameters the reference lacks: {', '.join(extra)}")
        if missing:
            yield finding("4.6.3", INVALID, path, f"{where} lacks reference parameters: {', '.join(missing)}")


@rule("4.6.4", "checkpointOpenSubmissionScaling", parts=True)
def open_scaling(pkg: Package) -> Iterable[Finding]:
    """An OPEN run's process count is a multiple of TP x PP."""
    for wl, rec in _runs(pkg):
        if wl.division != "open":
            continue
        recorded = _processes(rec)
        configuration, _ = _configuration(rec)
        parallelism = dig(configuration, "model", "parallelism") or {}
        unit = (as_int(dig(parallelism, "tensor")) or 1) * (as_int(dig(parallelism, "pipeline")) or 1)
        if not recorded:
            yield _cannot("4.6.4", INVALID, rec, "the process count", rec.meta_problem or rec.summary_problem)
            continue
        processes = next(iter(recorded.values()))
        if unit > 0 and processes % unit:
            yield finding("4.6.4", INVALID, rec.meta_path if rec.meta is not None else rec.summary_path,
                          f"{processes} processes is not a multiple of TP x PP = {unit}: OPEN scales in whole model replicas")


# --- 4.7 simultaneous read/write or remapping ----------------------------------------------

@rule("4.7.1", "checkpointCacheFlushValidation", parts=True)
def cache_flush(pkg: Package) -> Iterable[Finding]:
    """10 writes then 10 reads (one combined or two invocations); a failover gap of at most 30 s."""
    for wl, recs in _by_workload(pkg):
        table = [(rec, *counts(rec)) for rec in recs]
        if wl.division == "closed":
            unknown = [rec for rec, w, r, _ in table if w is None]
            for rec in unknown:
                yield _cannot("4.7.1", INVALID, rec, "the checkpoint counts", rec.meta_problem or "no num_checkpoints_write/read recorded")
            if not unknown:
                shape = [(w, r) for _, w, r, _ in table]
                n = wl.checker["checkpoint_closed_count"]
                if len(recs) == 1 and shape != [(n, n)]:
                    yield finding("4.7.1", INVALID, recs[0].path, f"a single CLOSED invocation writes and reads {n}; it records "
                                                                  f"{shape[0][0]} writes and {shape[0][1]} reads ({table[0][3]})")
                elif len(recs) == 2 and shape != [(n, 0), (0, n)]:
                    yield finding("4.7.1", INVALID, wl.path, f"two CLOSED invocations are a {n}-write phase then a {n}-read phase; "
                                                             f"they record (writes, reads) {shape[0]} then {shape[1]}")
                elif len(recs) == 2:
                    end, start = recs[0].summary_time("end"), recs[1].summary_time("start")
                    seconds = _interval(recs[0], end, recs[1], start)
                    if seconds is None:
                        yield finding("4.7.1", INVALID, recs[1].summary_path, "cannot show the read phase started after the write "
                                                                              "phase ended: summary.json start/end missing")
                    elif seconds < 0:
                        yield finding("4.7.1", INVALID, recs[1].summary_path, f"the read phase started {-seconds:,.1f} s before the "
                                                                              "write phase ended")
                elif len(recs) > 2:
                    yield finding("4.7.1", INVALID, wl.path, f"a CLOSED workload holds one or two invocations, not {len(recs)}")
        writes = [i for i, rec in enumerate(recs) if is_write(rec)]
        reads_only = [i for i, rec in enumerate(recs) if is_read(rec) and not is_write(rec)]
        if reads_only and (not writes or reads_only[0] < writes[0]):
            yield finding("4.7.1", INVALID, recs[reads_only[0]].path, "a read phase precedes every write phase: the checkpoints "
                                                                     "it read were not written by this result")
        pair = _two_invocations(recs)
        if pair is None:
            continue
        write, read = pair
        absent = [rec for rec in pair if rec.meta is None]
        if absent:  # summary.json's times are DLIO's benchmark span, not the invocations': no stand-in
            named = "; ".join(f"{rec.path.name}/checkpointing_{rec.path.name}_metadata.json is not in the package"
                              if rec.meta_problem == "no *_metadata.json" else f"{rec.path.name}: {rec.meta_problem}"
                              for rec in absent)
            yield finding("4.7.1", INFO, read.path, f"failover gap not checked: {named} (it records the invocation's "
                                                    "start and end; summary.json's times span DLIO's benchmark only)")
            continue
        (end, end_from), (start, start_from) = _write_end(write), _read_start(read)
        gap = _interval(write, end, read, start)
        if gap is None:
            yield finding("4.7.1", WARNING, read.path, f"cannot compute the failover gap: {end_from} of {write.path.name} and "
                                                       f"{start_from} of {read.path.name} are missing or on unrelated clocks")
        elif gap > wl.checker["checkpoint_failover_gap_s"]:
            yield finding("4.7.1", INVALID, read.path, f"failover gap {gap:,.1f} s ({start_from} of {read.path.name} - {end_from} of "
                                                       f"{write.path.name}) exceeds {wl.checker['checkpoint_failover_gap_s']:g} s")
        elif gap < 0:
            yield finding("4.7.1", WARNING, read.path, f"failover gap is negative ({gap:,.1f} s): clock skew between the two "
                                                       "invocations' hosts")


@rule("4.7.2", "checkpointTotalTestDuration", parts=True)
def total_duration(pkg: Package) -> Iterable[Finding]:
    """A two-invocation workload records its first write's start and its last read's end."""
    for wl, recs in _by_workload(pkg):
        if len(recs) < 2:
            continue
        writes, reads = [r for r in recs if is_write(r)], [r for r in recs if is_read(r)]
        if not writes or not reads:
            continue  # 4.7.1 and 2.1.23 report a workload without both phases
        first, last = writes[0], reads[-1]
        start, end = first.summary_time("start"), last.summary_time("end")
        if start is None:
            yield finding("4.7.2", INVALID, first.summary_path, f"the first write phase records no start time "
                                                                f"({first.summary_problem or 'summary.json has no start'})")
        if end is None:
            yield finding("4.7.2", INVALID, last.summary_path, f"the last read phase records no end time "
                                                               f"({last.summary_problem or 'summary.json has no end'})")
        if start is not None and end is not None:
            seconds = _interval(first, start, last, end)
            if seconds is not None and seconds <= 0:
                yield finding("4.7.2", INVALID, last.summary_path, f"the total test duration is {seconds:,.1f} s: the last "
                                                                   "read ends before the first write starts")


def _systems(pkg: Package) -> dict[tuple[str, str, str], list[Workload]]:
    """Systems with checkpointing results, and their checkpointing workloads."""
    found: dict[tuple[str, str, str], list[Workload]] = defaultdict(list)
    seen = set()
    for wl, _ in checkpointing_leaves(pkg):
        if wl.path not in seen:
            seen.add(wl.path)
            found[(wl.division, wl.org, wl.system)].append(wl)
    return found


def _capabilities(pkg: Package, division: str, org: str, system: str) -> tuple[dict | None, str | None, Path]:
    sut, problem, path = system_description(pkg, division, org, system)
    if problem:
        return None, problem, path
    caps = dig(sut, "solution", "capabilities")
    if not isinstance(caps, dict):
        return None, f"{path.name} has no system_under_test.solution.capabilities", path
    return caps, None, path


@rule("4.7.3", "checkpointRemappingTimeReporting", parts=True)
def remapping_time(pkg: Package) -> Iterable[Finding]:
    """remap_time_in_seconds is reported, agrees with the simultaneous flags, and the phases respect it."""
    by_path: dict[Path, list[LeafRecord]] | None = None  # built once, when a remapping system needs it
    for (division, org, system), wls in sorted(_systems(pkg).items()):
        caps, problem, path = _capabilities(pkg, division, org, system)
        if caps is None:
            yield finding("4.7.3", INVALID, path, f"no remap_time_in_seconds: {problem}")
            continue
        remap = as_number(caps.get("remap_time_in_seconds"))
        if remap is None or remap < 0 or isinstance(caps.get("remap_time_in_seconds"), bool):
            yield finding("4.7.3", INVALID, path, f"capabilities.remap_time_in_seconds is {caps.get('remap_time_in_seconds')!r}, "
                                                  "not a number of seconds (0 for a solution that does not remap)")
            continue
        write_ok, read_ok = caps.get("simultaneous_write"), caps.get("simultaneous_read")
        if write_ok is True and read_ok is True and remap != 0:
            yield finding("4.7.3", INVALID, path, f"simultaneous reads and writes are declared, so remap_time_in_seconds must be 0, not {remap:g}")
        elif (write_ok is False or read_ok is False) and not remap > 0:
            yield finding("4.7.3", INVALID, path, "simultaneous_write or simultaneous_read is false, so the solution remaps and "
                                                  "must report a remap_time_in_seconds greater than 0")
        if not remap > 0:
            continue
        if by_path is None:
            by_path = {w.path: recs for w, recs in _by_workload(pkg)}
        for wl in wls:
            pair = _two_invocations(by_path.get(wl.path, []))
            if pair is None:
                continue
            write, read = pair
            seconds = _interval(write, write.summary_time("end"), read, read.summary_time("start"))
            if seconds is None:
                yield finding("4.7.3", INVALID, read.summary_path, "cannot measure the remapping interval: summary.json end/start missing")
            elif seconds < remap / 2:
                yield finding("4.7.3", INVALID, read.summary_path, f"the read phase started {seconds:,.1f} s after the write phase "
                                                                   f"ended, less than half the reported {remap:g} s remap time")


@rule("4.7.4", "checkpointSimultaneousRwSupport", parts=True)
def simultaneous_rw(pkg: Package) -> Iterable[Finding]:
    """The system description declares multi_host, simultaneous_write and simultaneous_read."""
    by_path = {w.path: recs for w, recs in _by_workload(pkg)}
    for (division, org, system), wls in sorted(_systems(pkg).items()):
        caps, problem, path = _capabilities(pkg, division, org, system)
        if caps is None:
            yield finding("4.7.4", INVALID, path, f"cannot read the solution's capabilities: {problem}")
            continue
        missing = [k for k in ("multi_host", "simultaneous_write", "simultaneous_read") if not isinstance(caps.get(k), bool)]
        if missing:
            yield finding("4.7.4", INVALID, path, f"capabilities lack the boolean field(s) {', '.join(missing)}")
        false = [k for k in ("simultaneous_write", "simultaneous_read") if caps.get(k) is False]
        completed = any(_metric(rec) for wl in wls for rec in by_path.get(wl.path, []))
        if false and completed:
            yield finding("4.7.4", WARNING, path, f"{' and '.join(false)} false: checkpoints must be remapped between the phases "
                                                  "(4.7.3)")
