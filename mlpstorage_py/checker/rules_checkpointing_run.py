"""Section 4, the run itself: paths and filesystems (4.4), CLOSED process layout and parameters (4.6)
and the test's conduct (4.7). The shared readers of a checkpoint leaf live in rules_checkpointing.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Generator, Iterable
from pathlib import Path
from typing import Any

from mlpstorage_py.checker import calibrations
from mlpstorage_py.checker.judging import judged, package_of
from mlpstorage_py.checker.registry import INVALID, LEAF, RESULT, SYSTEM, Finding, Rule, rule
from mlpstorage_py.checker.rules_checkpointing import (
    COUNTED_ELSEWHERE,
    _cannot,
    _configuration,
    _interval,
    _met_path,
    _model,
    _processes,
    _read_start,
    _reference,
    _two_invocations,
    _write_end,
    counts,
    invocations,
    is_read,
    is_write,
)
from mlpstorage_py.results.summary import metric as _metric
from mlpstorage_py.results.tree.files import read_text
from mlpstorage_py.results.tree.package import Leaf, Result, System
from mlpstorage_py.results.tree.values import as_int, as_number, dig
from mlpstorage_py.rules import predicates, tables
from mlpstorage_py.rules.core_config import canonical, flatten

HOST_FLAG = re.compile(r"(?:^|\s)(?:--host|-host|-H)[\s=]+(\S+)")
NP_FLAG = re.compile(r"(?:^|\s)(?:-n|-np|--np|-c)\s+(\d+)")
# A num_hosts beyond this is a corrupt record: the per-host split is not built for it.
MAX_HOSTS = 1 << 16


def _norm(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return posixpath.normpath(value.strip())


@rule("4.4.1", "checkpointPathArgs").check(LEAF, benchmark="checkpointing")
def path_args(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """args.checkpoint_folder and the results directory are both recorded and differ."""
    if not judged(leaf):
        return
    meta, separation = leaf.metadata, leaf.record("fs_separation").value
    recorded_apart = (leaf.record("metadata").missing and isinstance(separation, dict)
                      and _norm(separation.get("data_or_chkpt_path")) and _norm(separation.get("results_path")))
    if meta is None and not recorded_apart:
        yield _cannot(r, INVALID, leaf, "the checkpoint and results directories", leaf.problem("metadata"))
        return
    if meta is None:
        # fs_separation.json, which the tool writes from the same two arguments, records them
        folder, results = _norm(dig(separation, "data_or_chkpt_path")), _norm(dig(separation, "results_path"))
        if folder == results:
            yield r.invalid(leaf.path / "fs_separation.json", f"checkpoints and results share the directory {folder}")
        return
    folder = _norm(leaf.args.get("checkpoint_folder"))
    results = _norm(leaf.args.get("results_dir")) or _norm(meta.get("result_dir"))
    if folder is None or results is None:
        missing = " and ".join(n for n, v in (("args.checkpoint_folder", folder), ("args.results_dir", results)) if v is None)
        yield r.invalid(leaf.path_of("metadata"), f"the metadata records no {missing}")
    elif folder == results:
        yield r.invalid(leaf.path_of("metadata"), f"checkpoints and results share the directory {folder}")


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


@rule("4.4.2", "checkpointFilesystemCheck").check(LEAF, benchmark="checkpointing")
def filesystem_check(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """fs_separation.json (or a df listing) shows checkpoints and results on different filesystems."""
    if not judged(leaf):
        return
    sut, _, _ = package_of(leaf).system_description(leaf.division, leaf.org, leaf.system)
    if dig(sut, "solution", "architecture", "benchmark_API") == "object":
        return
    separation = leaf.record("fs_separation")
    if separation.value is not None:
        same = separation.value.get("same_filesystem")
        if same is True:
            yield r.invalid(leaf.path / "fs_separation.json",
                            "fs_separation.json shows the checkpoint folder and the results on one filesystem")
        elif same is not False:
            yield r.invalid(leaf.path / "fs_separation.json", f"fs_separation.json records same_filesystem {same!r}, not a boolean")
        return
    if not separation.missing:
        yield r.invalid(leaf.path / "fs_separation.json", separation.problem or "fs_separation.json cannot be read")
        return
    text, _ = read_text(leaf.path / "checkpointing_run.stdout.log")
    mounts = _df_mounts(text or "") if text and "Mounted on" in text else []
    if not mounts:
        yield r.invalid(leaf.path, "no fs_separation.json and no df listing in checkpointing_run.stdout.log")
        return
    folder = _norm(leaf.args.get("checkpoint_folder"))
    results = _norm(leaf.args.get("results_dir")) or _norm(dig(leaf.metadata, "result_dir"))
    if folder and results:
        where = _mount_of(folder, mounts), _mount_of(results, mounts)
        if None in where:
            yield r.invalid(leaf.path, "the df listing does not cover both the checkpoint folder and the results directory")
        elif where[0] == where[1]:
            yield r.invalid(leaf.path, f"the df listing puts checkpoints and results on one mount, {where[0]}")
    elif len(set(mounts)) < 2:
        yield r.invalid(leaf.path, "the df listing shows a single filesystem")


# --- 4.6 CLOSED and OPEN -----------------------------------------------------------------

@rule("4.6.1", "checkpointClosedMpiProcesses").check(LEAF, benchmark="checkpointing")
def closed_processes(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A CLOSED run uses the Table 2 process count of its model (8, 64, 512, 1024)."""
    block = judged(leaf)
    if not block or leaf.division != "closed":
        return
    model = _model(leaf, block)
    required = block["closed_mpi_processes"].get(model)
    if required is None:
        return  # not a Table 2 model: 4.3.3 and 2.1.21 report it
    recorded = _processes(leaf)
    if not recorded:
        yield _cannot(r, INVALID, leaf, "the MPI process count",
                      leaf.problem("metadata") or leaf.problem("summary") or "no record of it")
        return
    wrong = {k: v for k, v in recorded.items() if v != required}
    if wrong:
        shown = ", ".join(f"{k} {v}" for k, v in wrong.items())
        yield r.invalid(_met_path(leaf), f"CLOSED {model} runs {required} MPI processes; recorded: {shown}")


def _per_host(leaf: Leaf) -> tuple[list[int] | None, str]:
    """Processes placed on each host: the launch's host:slots list, else the summary's hosts."""
    commands = [dig(leaf.metadata, "executed_command")]
    argv = dig(leaf.metadata, "executed_argv")
    if isinstance(argv, list):
        commands += [" ".join(map(str, a)) for a in argv if isinstance(a, list)]
    for text in commands:
        if not isinstance(text, str):
            continue
        hosts, total = HOST_FLAG.search(text), NP_FLAG.search(text)
        if not hosts:
            continue
        listed = [as_int(count) if count else 1 for count in (item.partition(":")[2] for item in hosts.group(1).split(","))]
        slots = [slot for slot in listed if slot is not None]
        if len(slots) < len(listed):
            continue
        wanted = int(total.group(1)) if total else sum(slots)
        if wanted > sum(slots):  # oversubscribed: ranks go round-robin over the hosts
            base, extra = divmod(wanted, len(slots))
            return [base + (1 if i < extra else 0) for i in range(len(slots))], "the launch's host list"
        placed: list[int] = []
        for slot in slots:  # by slot: each host is filled before the next
            placed.append(min(slot, wanted - sum(placed)))
        return [p for p in placed if p > 0], "the launch's host slots"
    count, host_count = as_int(dig(leaf.summary, "num_accelerators")), as_int(dig(leaf.summary, "num_hosts"))
    if count is not None and host_count and 0 < host_count <= MAX_HOSTS:
        base, extra = divmod(count, host_count)
        return [base + (1 if i < extra else 0) for i in range(host_count)], "summary.json num_accelerators / num_hosts"
    return None, "nowhere"


@rule("4.6.2", "checkpointClosedAcceleratorsPerHost").check(LEAF, benchmark="checkpointing")
def closed_per_host(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A CLOSED run puts more than 4 simulated accelerators on each host, Table 2's total in all."""
    block = judged(leaf)
    if not block or leaf.division != "closed":
        return
    required = block["closed_mpi_processes"].get(_model(leaf, block))
    layout, where = _per_host(leaf)
    if layout is None:
        yield _cannot(r, INVALID, leaf, "the accelerators per host",
                      leaf.problem("metadata") or leaf.problem("summary") or "no record of the hosts")
        return
    least = block["checkpoint_min_accelerators_per_host_exclusive"]
    if [n for n in layout if n < least]:
        yield r.invalid(_met_path(leaf), f"hosts run {layout} accelerators (from {where}); each must run more than {least}")
    elif least in layout:  # exactly the bound: the v3.0 review published such results (rules/calibrations.yaml)
        yield calibrations.finding(r, leaf, "4.6.2/exactly-4", _met_path(leaf),
                                   f"hosts run {layout} accelerators (from {where}): {layout.count(least)} of "
                                   f"{len(layout)} host(s) run exactly {least}")
    if required is not None and sum(layout) != required:
        yield r.invalid(_met_path(leaf), f"the hosts run {sum(layout)} accelerators in all (from {where}), not the {required} of Table 2")


@functools.cache  # one reference a model: worked out once, not for each of its leaves
def _flat_reference(model: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A model's reference configuration flattened, and each of its values as canonical() spells it
    (asked only for a model that has one)."""
    flat = flatten(_reference(model) or {})
    return flat, {key: canonical(value) for key, value in flat.items()}


@rule("4.6.3", "checkpointClosedCheckpointParameters").check(LEAF, benchmark="checkpointing")
def closed_parameters(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """A CLOSED run's configuration equals its model's reference but for checkpoint.checkpoint_folder."""
    block = judged(leaf)
    if not block or leaf.division != "closed":
        return
    allowed = tables.param_allowlist("checkpointing", "closed") | tables.tool_injected_params("checkpointing") | COUNTED_ELSEWHERE
    model = _model(leaf, block)
    reference = _reference(model)
    if reference is None:
        yield r.info(leaf.path, f"no reference configuration for {model} to compare with")
        return
    recorded, where = _configuration(leaf)
    if recorded is None:
        yield _cannot(r, INVALID, leaf, "the workload configuration", leaf.problem("metadata") or "no parameters recorded")
        return
    ours, (theirs, spelled) = flatten(recorded), _flat_reference(model)
    changed = sorted(k for k in ours.keys() & theirs.keys() if k not in allowed and canonical(ours[k]) != spelled[k])
    extra = sorted(k for k in ours.keys() - theirs.keys() if k not in allowed)
    missing = sorted(k for k in theirs.keys() - ours.keys() if k not in allowed)
    path = leaf.path_of("metadata") if where != "dlio_config/config.yaml" else leaf.path / "dlio_config" / "config.yaml"
    for key in changed:
        yield r.invalid(path, f"{key} is {ours[key]!r} ({where}); the {model} reference has {theirs[key]!r} "
                              "and CLOSED may change only checkpoint.checkpoint_folder")
    if extra:
        yield r.invalid(path, f"{where} carries parameters the reference lacks: {', '.join(extra)}")
    if missing:
        yield r.invalid(path, f"{where} lacks reference parameters: {', '.join(missing)}")


@rule("4.6.4", "checkpointOpenSubmissionScaling").check(LEAF, benchmark="checkpointing")
def open_scaling(r: Rule, leaf: Leaf) -> Iterable[Finding]:
    """An OPEN run's process count is a multiple of TP x PP."""
    if leaf.division != "open" or not judged(leaf):
        return
    recorded = _processes(leaf)
    configuration, _ = _configuration(leaf)
    parallelism = dig(configuration, "model", "parallelism") or {}
    unit = (as_int(dig(parallelism, "tensor")) or 1) * (as_int(dig(parallelism, "pipeline")) or 1)
    if not recorded:
        yield _cannot(r, INVALID, leaf, "the process count", leaf.problem("metadata") or leaf.problem("summary"))
        return
    processes = next(iter(recorded.values()))
    if unit > 0 and processes % unit:
        yield r.invalid(_met_path(leaf), f"{processes} processes is not a multiple of TP x PP = {unit}: "
                                         "OPEN scales in whole model replicas")


# --- 4.7 simultaneous read/write or remapping ----------------------------------------------

def _closed_counts(r: Rule, result: Result, leaves: list[Leaf], block: dict[str, Any]) -> Iterable[Finding]:
    """4.7.1 in CLOSED: one invocation writes and reads n, two are n writes then n reads, in that order."""
    table = [(leaf, *counts(leaf)) for leaf in leaves]
    unknown = [leaf for leaf, w, _, _ in table if w is None]
    for leaf in unknown:
        yield _cannot(r, INVALID, leaf, "the checkpoint counts", leaf.problem("metadata") or "no num_checkpoints_write/read recorded")
    if unknown:
        return
    shape = [(w, rd) for _, w, rd, _ in table]
    combined, phases = predicates.checkpoint_combined(block), predicates.checkpoint_phases(block)
    n = combined[0]
    if len(leaves) == 1 and shape != [combined]:
        yield r.invalid(leaves[0].path, f"a single CLOSED invocation writes and reads {n}; it records "
                                        f"{shape[0][0]} writes and {shape[0][1]} reads ({table[0][3]})")
    elif len(leaves) == 2 and shape != list(phases):
        yield r.invalid(result.path, f"two CLOSED invocations are a {n}-write phase then a {n}-read phase; "
                                     f"they record (writes, reads) {shape[0]} then {shape[1]}")
    elif len(leaves) == 2:
        first, second = leaves
        seconds = _interval(first, first.summary_time("end"), second, second.summary_time("start"))
        if seconds is None:
            yield r.invalid(second.path_of("summary"), "cannot show the read phase started after the write "
                                                       "phase ended: summary.json start/end missing")
        elif seconds < 0:
            yield r.invalid(second.path_of("summary"), f"the read phase started {-seconds:,.1f} s before the write phase ended")
    elif len(leaves) > 2:
        yield r.invalid(result.path, f"a CLOSED workload holds one or two invocations, not {len(leaves)}")


@rule("4.7.1", "checkpointCacheFlushValidation").check(RESULT, benchmark="checkpointing")
def cache_flush(r: Rule, result: Result) -> Iterable[Finding]:
    """10 writes then 10 reads (one combined or two invocations); a failover gap of at most 30 s."""
    leaves = invocations(result)
    if not leaves:
        return
    block = judged(result)
    if result.division == "closed":
        yield from _closed_counts(r, result, leaves, block)
    writes = [i for i, leaf in enumerate(leaves) if is_write(leaf)]
    reads_only = [i for i, leaf in enumerate(leaves) if is_read(leaf) and not is_write(leaf)]
    if reads_only and (not writes or reads_only[0] < writes[0]):
        yield r.invalid(leaves[reads_only[0]].path, "a read phase precedes every write phase: the checkpoints "
                                                    "it read were not written by this result")
    pair = _two_invocations(leaves)
    if pair is None:
        return
    write, read = pair
    absent = [leaf for leaf in pair if leaf.metadata is None]
    if absent:  # summary.json's times are DLIO's benchmark span, not the invocations': no stand-in
        named = "; ".join(f"{leaf.path.name}/checkpointing_{leaf.path.name}_metadata.json is not in the package"
                          if leaf.record("metadata").missing else f"{leaf.path.name}: {leaf.problem('metadata')}"
                          for leaf in absent)
        yield r.info(read.path, f"failover gap not checked: {named} (it records the invocation's "
                                "start and end; summary.json's times span DLIO's benchmark only)")
        return
    (end, end_from), (start, start_from) = _write_end(write), _read_start(read)
    gap, most = _interval(write, end, read, start), block["checkpoint_failover_gap_s"]
    if gap is None:
        yield r.warning(read.path, f"cannot compute the failover gap: {end_from} of {write.path.name} and "
                                   f"{start_from} of {read.path.name} are missing or on unrelated clocks")
    elif gap > most:
        yield r.invalid(read.path, f"failover gap {gap:,.1f} s ({start_from} of {read.path.name} - {end_from} of "
                                   f"{write.path.name}) exceeds {most:g} s")
    elif gap < 0:
        yield r.warning(read.path, f"failover gap is negative ({gap:,.1f} s): clock skew between the two invocations' hosts")


@rule("4.7.2", "checkpointTotalTestDuration").check(RESULT, benchmark="checkpointing")
def total_duration(r: Rule, result: Result) -> Iterable[Finding]:
    """A two-invocation workload records its first write's start and its last read's end."""
    leaves = invocations(result)
    if len(leaves) < 2:
        return
    writes, reads = [leaf for leaf in leaves if is_write(leaf)], [leaf for leaf in leaves if is_read(leaf)]
    if not writes or not reads:
        return  # 4.7.1 and 2.1.23 report a workload without both phases
    first, last = writes[0], reads[-1]
    start, end = first.summary_time("start"), last.summary_time("end")
    if start is None:
        yield r.invalid(first.path_of("summary"), f"the first write phase records no start time "
                                                  f"({first.problem('summary') or 'summary.json has no start'})")
    if end is None:
        yield r.invalid(last.path_of("summary"), f"the last read phase records no end time "
                                                 f"({last.problem('summary') or 'summary.json has no end'})")
    if start is not None and end is not None:
        seconds = _interval(first, start, last, end)
        if seconds is not None and seconds <= 0:
            yield r.invalid(last.path_of("summary"), f"the total test duration is {seconds:,.1f} s: the last "
                                                     "read ends before the first write starts")


def _capabilities(r: Rule, system: System, unread: str) -> Generator[Finding, None, tuple[list[list[Leaf]], dict[str, Any], Path] | None]:
    """What 4.7.3 and 4.7.4 judge a system by: the leaves, in order, of each of its judged
    checkpointing results that has any, and the capabilities its description declares. None when
    it has no such result, or, after an INVALID that begins with `unread`, when the description
    declares no capabilities."""
    found = (invocations(result) for result in system.results if result.benchmark == "checkpointing")
    results = [leaves for leaves in found if leaves]
    if not results:
        return None
    sut, problem, path = system.package.system_description(system.division, system.org, system.name)
    if not problem:
        caps = dig(sut, "solution", "capabilities")
        if isinstance(caps, dict):
            return results, caps, path
        problem = f"{path.name} has no system_under_test.solution.capabilities"
    yield r.invalid(path, f"{unread}: {problem}")
    return None


@rule("4.7.3", "checkpointRemappingTimeReporting").check(SYSTEM)
def remapping_time(r: Rule, system: System) -> Iterable[Finding]:
    """remap_time_in_seconds is reported, agrees with the simultaneous flags, and the phases respect it."""
    found = yield from _capabilities(r, system, "no remap_time_in_seconds")
    if found is None:
        return
    results, caps, path = found
    remap = as_number(caps.get("remap_time_in_seconds"))
    if remap is None or remap < 0 or isinstance(caps.get("remap_time_in_seconds"), bool):
        yield r.invalid(path, f"capabilities.remap_time_in_seconds is {caps.get('remap_time_in_seconds')!r}, "
                              "not a number of seconds (0 for a solution that does not remap)")
        return
    write_ok, read_ok = caps.get("simultaneous_write"), caps.get("simultaneous_read")
    if write_ok is True and read_ok is True and remap != 0:
        yield r.invalid(path, f"simultaneous reads and writes are declared, so remap_time_in_seconds must be 0, not {remap:g}")
    elif (write_ok is False or read_ok is False) and not remap > 0:
        yield r.invalid(path, "simultaneous_write or simultaneous_read is false, so the solution remaps and "
                              "must report a remap_time_in_seconds greater than 0")
    if not remap > 0:
        return
    for leaves in results:
        pair = _two_invocations(leaves)
        if pair is None:
            continue
        write, read = pair
        seconds = _interval(write, write.summary_time("end"), read, read.summary_time("start"))
        if seconds is None:
            yield r.invalid(read.path_of("summary"), "cannot measure the remapping interval: summary.json end/start missing")
        elif seconds < remap / 2:
            yield r.invalid(read.path_of("summary"), f"the read phase started {seconds:,.1f} s after the write phase "
                                                     f"ended, less than half the reported {remap:g} s remap time")


@rule("4.7.4", "checkpointSimultaneousRwSupport").check(SYSTEM)
def simultaneous_rw(r: Rule, system: System) -> Iterable[Finding]:
    """The system description declares multi_host, simultaneous_write and simultaneous_read."""
    found = yield from _capabilities(r, system, "cannot read the solution's capabilities")
    if found is None:
        return
    results, caps, path = found
    missing = [k for k in ("multi_host", "simultaneous_write", "simultaneous_read") if not isinstance(caps.get(k), bool)]
    if missing:
        yield r.invalid(path, f"capabilities lack the boolean field(s) {', '.join(missing)}")
    false = [k for k in ("simultaneous_write", "simultaneous_read") if caps.get(k) is False]
    if false and any(_metric(leaf) for leaves in results for leaf in leaves):
        yield r.warning(path, f"{' and '.join(false)} false: checkpoints must be remapped between the phases (4.7.3)")
