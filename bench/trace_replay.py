"""What `--trace-io` costs a checkpoint run, and how close the replay.fio of a traced run comes
to the run, checkpoint, KV cache and training (issues 27, 42). Needs root and bpftrace (else it
says so and measures nothing).

    .venv/bin/python bench/trace_replay.py [--quick] [--rounds N] [--dir DIR] [--only checkpoint kvcache training portable]

Rounds (--rounds, default and at least 5 for a verdict) are interleaved: each round runs every
part once, in the order checkpoint, kvcache, training, so a slow minute of this shared machine
lands on every part alike; each ratio is computed per round and printed as the median of the
rounds with its spread (min-max and the interquartile range, IQR), goal and verdict.

checkpoint: per round the same OPEN llama3-8b checkpoint (2 ranks, a scaled-down model of
--layers layers, one write then one read, the folder on the own disk, the results tree apart
from it) untraced and traced, their order turning each round, then `mlpstorage replay` of that
round's traced leaf. Ratios: traced / untraced save and load GiB/s (the engine's own, rank 0's as
published; goal >= 0.95, at most 5 % overhead), and the replay's write and read / the traced
run's save and load (goal 0.85-1.15; the replay is traced too, below, so both sides carry the
tracer).

kvcache: per round a traced OPEN kvcache Option 1 run (Max Storage Stress: storage only, 2 ranks,
--kv-users users each for --kv-duration s, its cache on the own disk), replayed: the replay's
read and write MiB/s / the traced run's as `mlpstorage replay` prints them (the traced work's
bytes over the time it issued them; goal 0.85-1.15), and / the ranks' own storage bandwidth
(their summed tier_storage_*_bandwidth_gbps: the KV bytes over the nominal duration; reported).
A KV run paces its I/O, so its replay offers the run's rate (fio rate=): the ratio says whether
the disk kept up with that load.

training: a small unet3d dataset generated once (--train-files of 1 MiB), then per round the page
cache dropped, a traced OPEN unet3d run (2 accelerators, 2 epochs) and its replay: the replay's
read MiB/s / the traced run's (as `mlpstorage replay` prints them; goal 0.85-1.15), and / DLIO's
train_io_mean_MB_per_second (reported, no goal: printed with what each side measures and the
median round's seconds; DLIO's figure is the mean of its epochs' rates, each epoch's samples x
record size over that epoch's training steps, the time between epochs left out, so a short epoch
weighs as much as a long one; the trace's and the replay's are all the bytes over the first to
last read, that time included).

portable: replay.fio carried away from mlpstorage (issue 42). One traced checkpoint leaf made
once (as the checkpoint part's), then per round `mlpstorage replay` of it and the commands that
`mlpstorage replay LEAF --directory DIR --print-command` prints, run by a shell as an engineer
pastes them (the memory cgroup they make included), on the same directory, their order turning
each round, neither traced: the printed commands' write and read MiB/s / mlpstorage replay's
(goal 0.9-1.1, within 10 %).

Latency, per part and direction, side by side and never as a ratio (they are taken at different
points): the run's device latency (its io_trace.json), the replay's fio clat (submission to
completion, the page cache included when buffered) and the replay's device latency, from a trace
of the replay taken here with the project's tracer (mlpstorage_py.trace.session.TraceSession on
the replay's directory, started before `mlpstorage replay` and stopped after it). Percentiles are
log2 bucket upper bounds (as the trace records them), medians over the rounds. The device columns
count every request on the own disk: the replay's includes fio's untimed lay-out of files that
read jobs read (a KV or training replay's writes), the run's its writeback and journal.

Load: the verdict (PASS/FAIL) needs the 1-minute load average before the bench and the load that
others put on the machine while it ran (the mean, over 1 s samples, of runnable or
uninterruptible tasks outside this bench's process tree, kernel threads left out: what the load
average counts, less the bench's own) both at most LOAD_PER_CORE x the cores (1.5 on 2 cores),
and --rounds at least MIN_ROUNDS. Otherwise every figure is still printed, marked
"no verdict: load X" (or the rounds). The load is printed per round and with the figures.

--quick (what `make bench` runs): 5 rounds of a smaller run (4 layers, 3 KV users for 5 s, 32
training files). Measured wall time here (2 cores, shared): 19.3 min with others' load 6.8 (the
1-minute load average 7.8-9.0), 22 min at 8.1; 3.5-4 min a round, nearly all of it fixed costs
(each run's start-up, the tracer attaching for every traced run and replay, the 5 s settles),
not bytes. Not measured on a quiet machine.

Every part runs on a disk of its own: an ext4 on a loop device over a sparse --disk-gib image
under DIR (direct I/O to the image, so the page cache holds the data once), because on a machine
with one disk the ranks' interpreters and libraries, read after the page cache is dropped, land
on the data's device and would be its I/O too. The page cache is dropped before each run reads.

The last line is `BENCH {json}` for bench/run_all.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MLPSTORAGE = str(Path(sys.executable).parent / "mlpstorage")
GIB_TO_MIB = 1024.0
MIB = 2 ** 20
SETTLE_S = 5.0  # seconds after a removal before the next run or replay starts
MIN_ROUNDS = 5  # fewer rounds print figures but no verdict
LOAD_PER_CORE = 0.75  # verdict only while the load (before, and others' during) <= this x the cores
LOAD_LIMIT = LOAD_PER_CORE * (os.cpu_count() or 1)
SAMPLE_S = 1.0  # the others' load sampler's interval
OVERHEAD_GOAL = 0.95  # traced / untraced, at least
REPLAY_GOAL = (0.85, 1.15)  # replay / run, within 15 %
PORTABLE_GOAL = (0.9, 1.1)  # the printed commands / mlpstorage replay, within 10 %
QUANTILES = ("p50", "p95", "p99")
QUICK = {"layers": 4, "kv_users": 3, "kv_duration": 5, "train_files": 32}
FULL = {"layers": 8, "kv_users": 5, "kv_duration": 10, "train_files": 64}
TRAINING_WHY = ("DLIO's train_io_mean_MB_per_second is the mean of its epochs' rates (each epoch's samples x record "
                "size over that epoch's training steps, compute included, the time between epochs left out), so a "
                "short epoch weighs as much as a long one; the traced run's and the replay's MiB/s are all the bytes "
                "the storage moved over the first to last read (that time included), which the replay offers at "
                "that rate (rate=): not the same average, so no goal")


# ---------------------------------------------------------------------------------------------
# the machine: load, own disk, cache


class OthersLoad(threading.Thread):
    """Every SAMPLE_S, the tasks (threads) outside this process's tree that are runnable (R) or in
    uninterruptible sleep (D), kernel threads left out: the load others put on the machine while
    the bench runs, which the load average (ours included) cannot tell apart."""

    PF_KTHREAD = 0x00200000

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, int]] = []
        self._halt = threading.Event()

    @staticmethod
    def _stat(path: str) -> list[str] | None:
        try:
            with open(path, "rb") as fh:
                text = fh.read().decode(errors="replace")
        except OSError:
            return None
        return text[text.rfind(")") + 2:].split()  # state, ppid, pgrp, session, tty, tpgid, flags, ...

    def count(self) -> int:
        procs: dict[int, list[str]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                fields = self._stat(f"/proc/{name}/stat")
                if fields and len(fields) > 17:
                    procs[int(name)] = fields
        children: dict[int, list[int]] = {}
        for pid, fields in procs.items():
            children.setdefault(int(fields[1]), []).append(pid)
        ours, todo = set(), [os.getpid()]
        while todo:
            pid = todo.pop()
            ours.add(pid)
            todo += children.get(pid, [])
        busy = 0
        for pid, fields in procs.items():
            if pid in ours or int(fields[6]) & self.PF_KTHREAD:
                continue
            if int(fields[17]) <= 1:  # num_threads
                busy += fields[0] in ("R", "D")
                continue
            with contextlib.suppress(OSError):
                for task in os.listdir(f"/proc/{pid}/task"):
                    t = self._stat(f"/proc/{pid}/task/{task}/stat")
                    busy += bool(t) and t[0] in ("R", "D")
        return busy

    def run(self) -> None:
        while not self._halt.is_set():
            self.samples.append((time.monotonic(), self.count()))
            self._halt.wait(SAMPLE_S)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)

    def mean(self, since: float = 0.0) -> float:
        values = [n for t, n in self.samples if t >= since]
        return statistics.fmean(values) if values else 0.0

    def peak(self) -> int:
        return max((n for _, n in self.samples), default=0)


@contextlib.contextmanager
def own_disk(base: Path, gib: int) -> Iterator[Path]:
    """An ext4 on a loop device (direct I/O to a sparse image under base), mounted for the block."""
    image, mount = base / "disk.img", base / "disk"
    with open(image, "wb") as fh:
        fh.truncate(gib << 30)
    subprocess.run(["mkfs.ext4", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(image)], check=True,
                   capture_output=True)
    device = subprocess.run(["losetup", "--find", "--show", "--direct-io=on", str(image)], check=True,
                            capture_output=True, text=True).stdout.strip()
    mount.mkdir()
    try:
        subprocess.run(["mount", device, str(mount)], check=True, capture_output=True)
        try:
            yield mount
        finally:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
    finally:
        subprocess.run(["losetup", "-d", device], capture_output=True)
        image.unlink(missing_ok=True)


def remove(path: Path, settle: bool = True) -> None:
    """Delete a run's or a replay's files and settle the disk before anything is measured: the
    journal committed and the freed blocks trimmed out of the image (fstrim), so the image never
    grows past what is on the disk at once and no discard runs under the next measurement."""
    shutil.rmtree(path, ignore_errors=True)
    if not settle:  # the next run's or replay's own removal settles the disk
        return
    os.sync()
    mount = next((p for p in path.parents if p.name == "disk"), None)
    if mount is not None and shutil.which("fstrim"):
        subprocess.run(["fstrim", str(mount)], capture_output=True)
    # This VM's balloon reports freed memory to its host about 2 s after it is freed, and a page
    # touched after that is a host fault (ManPage, Performance): every run and replay starts
    # from that settled state, so the tracer's few seconds of start-up are no handicap.
    time.sleep(SETTLE_S)


def drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


# ---------------------------------------------------------------------------------------------
# figures: spread, verdict, latency


def spread(values: list[float]) -> dict[str, Any]:
    """The median of the rounds' values with min, max and the quartiles (inclusive method)."""
    values = [v for v in values if v is not None]
    if not values:
        return {"median": None, "min": None, "max": None, "q1": None, "q3": None, "n": 0, "values": []}
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else (values[0],) * 3
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "q1": q1, "q3": q3,
            "n": len(values), "values": [round(v, 4) for v in values]}


def shown(s: dict[str, Any]) -> str:
    if not s["n"]:
        return "no value"
    return (f"median {s['median']:.3f} (min-max {s['min']:.3f}-{s['max']:.3f}, IQR {s['q1']:.3f}-{s['q3']:.3f}, "
            f"{s['n']} round{'s' if s['n'] != 1 else ''})")


class Judge:
    """PASS/FAIL for a figure against its goal, or why no verdict is given (the load, the rounds)."""

    def __init__(self) -> None:
        self.withheld: str | None = None

    def __call__(self, s: dict[str, Any], goal: float | tuple[float, float]) -> str:
        if s["median"] is None:
            return "no value"
        if self.withheld:
            return f"no verdict: {self.withheld}"
        ok = s["median"] >= goal if isinstance(goal, float) else goal[0] <= s["median"] <= goal[1]
        return "PASS" if ok else "FAIL"


def goal_text(goal: float | tuple[float, float]) -> str:
    return f"goal >= {goal:g}" if isinstance(goal, float) else f"goal {goal[0]:g}-{goal[1]:g}"


def percentile(hist: dict[str, int], q: float) -> float | None:
    from mlpstorage_py.results import io_trace
    return io_trace.percentile(hist, q)


def device_latency(trace: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Per direction, p50/p95/p99 (µs) of every traced host's requests on its block devices (the
    own disk: the only data path traced), merged; the same reading for a run's and a replay's trace."""
    out = {}
    for d in ("read", "write"):
        hist: dict[str, int] = {}
        for host in (trace.get("hosts") or {}).values():
            for device in (host.get("devices") or {}).values():
                if device.get("level") == "block":
                    for key, count in ((device.get(d) or {}).get("latency_us_hist") or {}).items():
                        hist[key] = hist.get(key, 0) + int(count)
        out[d] = {q: percentile(hist, int(q[1:]) / 100) if hist else None for q in QUANTILES}
    return out


def latency_columns(rounds: list[dict[str, Any]], directions: tuple[str, ...]) -> dict[str, Any]:
    """Per direction and column, the median over the rounds of each percentile."""
    out: dict[str, Any] = {}
    for d in directions:
        out[d] = {}
        for column in ("run_device", "replay_clat", "replay_device"):
            out[d][column] = {}
            for q in QUANTILES:
                values = [r["latency"][column][d][q] for r in rounds if r["latency"][column][d][q] is not None]
                out[d][column][q] = statistics.median(values) if values else None
    return out


def print_latency(name: str, columns: dict[str, Any]) -> None:
    print(f"{name} latency, us (log2 bucket upper bounds, p50/p95/p99, medians of the rounds; side by side, no "
          "ratio: the device's time is not fio's submission-to-completion time)")
    print(f"  {'':6}{'run, device':>22}{'replay, fio clat':>22}{'replay, device':>22}")
    for d, cols in columns.items():
        cells = ["/".join("-" if cols[c][q] is None else f"{cols[c][q]:g}" for q in QUANTILES)
                 for c in ("run_device", "replay_clat", "replay_device")]
        print(f"  {d:6}{cells[0]:>22}{cells[1]:>22}{cells[2]:>22}")


# ---------------------------------------------------------------------------------------------
# runs and replays


def newest_leaf(results: Path, marker: str, kind: str) -> Path:
    return max((p.parent for p in results.rglob(marker) if f"/{kind}/" in str(p)), key=lambda p: p.name)


def model(layers: int) -> list[str]:
    return [f"model.num_layers={layers}", "model.hidden_size=1024", "model.ffn_hidden_size=4096",
            "model.vocab_size=32768", "model.num_attention_heads=8", "model.num_kv_heads=2",
            "checkpoint.time_between_checkpoints=0"]


def checkpoint_run(results: Path, folder: Path, layers: int, traced: bool) -> tuple[float, float, Path]:
    """One checkpoint run: (save GiB/s, load GiB/s, its leaf)."""
    remove(folder)
    folder.mkdir(parents=True)
    argv = [MLPSTORAGE, "open", "checkpointing", "llama3-8b", "run", "-np", "2", "-at", "b200", "-cm", "8",
            "-cf", str(folder), "-sn", "bench", "-rd", str(results), "-ncw", "1", "-ncr", "1",
            "--skip-fs-separation-gate", *(["--trace-io"] if traced else []), "--params", *model(layers)]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"trace_replay: the checkpoint run failed (exit {done.returncode}): {done.stderr[-600:]}")
    leaf = newest_leaf(results, "summary.json", "checkpointing")
    metric = json.loads((leaf / "summary.json").read_text())["metric"]
    return metric["save_checkpoint_io_mean_GB_per_second"], metric["load_checkpoint_io_mean_GB_per_second"], leaf


def kvcache_run(results: Path, cache: Path, users: int, duration: int) -> tuple[float, float, Path]:
    """One traced Option 1 run: (the ranks' summed storage read, write MiB/s, its leaf)."""
    remove(cache)
    cache.mkdir(parents=True)
    argv = [MLPSTORAGE, "open", "kvcache", "run", "-np", "2", "--cache-dir", str(cache), "-rd", str(results), "-sn", "bench",
            "--option", "1", "--num-users", str(users), "--duration", str(duration), "--trials", "1",
            "--inter-option-delay", "0", "--trace-io"]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"trace_replay: the kvcache run failed (exit {done.returncode}): {done.stderr[-600:]}")
    leaf = newest_leaf(results, "io_trace.json", "kv_cache")
    read = write = 0.0
    for result in leaf.rglob("kvcache_results_*.json"):
        stats = json.loads(result.read_text())["summary"]["cache_stats"]
        read += stats["tier_storage_read_bandwidth_gbps"] * GIB_TO_MIB
        write += stats["tier_storage_write_bandwidth_gbps"] * GIB_TO_MIB
    return read, write, leaf


TRAINING = ["dataset.record_length_bytes=1048576", "dataset.record_length_bytes_stdev=0",
            "dataset.record_length_bytes_resize=0", "reader.batch_size=2", "reader.read_threads=1"]


def training_common(results: Path, data: Path) -> list[str]:
    return ["-dd", str(data), "-sn", "bench", "-rd", str(results), "-aip"]


def training_datagen(results: Path, data: Path, files: int) -> None:
    remove(data)
    data.mkdir(parents=True)
    done = subprocess.run([MLPSTORAGE, "open", "training", "unet3d", "datagen", "-np", "2",
                           *training_common(results, data), "--params", f"dataset.num_files_train={files}", *TRAINING],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"trace_replay: training datagen failed (exit {done.returncode}): {done.stderr[-600:]}")


def training_run(results: Path, data: Path, files: int) -> tuple[float, list[float], Path]:
    """One traced run on the generated files, the cache dropped first: (DLIO's
    train_io_mean_MB_per_second, each epoch's training-steps seconds as rank 0 logged them, its leaf)."""
    drop_caches()  # DLIO reads the files from the disk, not from what datagen or the last round left
    time.sleep(SETTLE_S)
    done = subprocess.run([MLPSTORAGE, "open", "training", "unet3d", "run", "-at", "b200", "-na", "2", "-cm", "1",
                           *training_common(results, data), "--trace-io", "--params", f"dataset.num_files_train={files}",
                           "train.epochs=2", "train.computation_time=0.01", *TRAINING], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"trace_replay: training run failed (exit {done.returncode}): {done.stderr[-600:]}")
    leaf = newest_leaf(results, "io_trace.json", "training")
    epochs: list[float] = []
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        stats = json.loads((leaf / "per_epoch_stats.json").read_text())
        for epoch in sorted(stats, key=int):
            epochs.append(sum(float(v["duration"]) for k, v in stats[epoch].items() if k.startswith("block")))
    return float(json.loads((leaf / "summary.json").read_text())["metric"]["train_io_mean_MB_per_second"]), epochs, leaf


def replay(leaf: Path, directory: Path, scratch: Path, traced: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """`mlpstorage replay` of the leaf on directory, traced by the project's tracer (the same
    TraceSession `--trace-io` runs, on the replay's directory) unless `traced` is False: (its
    replay_*.json record, the replay's own trace, {} untraced). The replay's printed table is not
    shown: its latency ratio divides the run's device time by fio's clat; the figures here come
    from the record."""
    from mlpstorage_py.trace.session import TraceSession

    remove(directory)
    directory.mkdir(parents=True)
    with TraceSession(["localhost"], [str(directory)], None, scratch) if traced else contextlib.nullcontext() as session:
        done = subprocess.run([MLPSTORAGE, "replay", str(leaf), "--directory", str(directory)],
                              capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"trace_replay: the replay failed (exit {done.returncode}): {done.stderr[-600:]}")
    record = json.loads(max(leaf.glob("replay_*.json")).read_text())
    remove(directory, settle=False)
    return record, session.record() if session is not None else {}


def latencies(run_leaf: Path, record: dict[str, Any], replay_trace: dict[str, Any]) -> dict[str, Any]:
    run_trace = json.loads((run_leaf / "io_trace.json").read_text())
    clat = {d: {q: record["replay"][d].get(f"{q}_us") for q in QUANTILES} for d in ("read", "write")}
    return {"run_device": device_latency(run_trace), "replay_clat": clat, "replay_device": device_latency(replay_trace)}


# ---------------------------------------------------------------------------------------------
# the parts: one round at a time, then the summary


class Part:
    name = ""

    def __init__(self, args: argparse.Namespace, work: Path, results: Path, scratch: Path) -> None:
        self.args, self.work, self.results, self.scratch = args, work, results, scratch
        self.rounds: list[dict[str, Any]] = []

    def prepare(self) -> None:
        pass

    def round(self, index: int) -> str:
        raise NotImplementedError

    # what summary() prints: (key in each round's ratios, label, goal or None) and the latency
    # directions, in order
    RATIOS: tuple[tuple[str, str, float | tuple[float, float] | None], ...] = ()
    DIRECTIONS: tuple[str, ...] = ()

    def summary(self, judge: Judge) -> dict[str, Any]:
        """Each ratio of RATIOS as the median of the rounds with its spread, then the latency."""
        figures: dict[str, Any] = {"rounds": self.rounds, "ratios": {}}
        for key, label, goal in self.RATIOS:
            self.ratio(key, label, goal, judge, figures)
        self.explain(figures)
        if self.DIRECTIONS:  # a part that compares two replays has no run latency beside them
            figures["latency_us"] = latency_columns(self.rounds, self.DIRECTIONS)
            print_latency(self.name, figures["latency_us"])
        return figures

    def explain(self, figures: dict[str, Any]) -> None:
        """What a part adds to its figures between the ratios and the latency."""

    def ratio(self, key: str, label: str, goal: float | tuple[float, float] | None, judge: Judge,
              figures: dict[str, Any], note: str = "") -> None:
        s = spread([r["ratios"][key] for r in self.rounds])
        verdict = judge(s, goal) if goal is not None else "reported"
        figures["ratios"][key] = {**s, "goal": goal, "verdict": verdict}
        print(f"{label}: {shown(s)}  {goal_text(goal) if goal is not None else 'no goal'}  {verdict}{note}")


class Checkpoint(Part):
    name = "checkpoint"

    def round(self, index: int) -> str:
        folder = self.work / "ckpt"
        order = (False, True) if index % 2 == 0 else (True, False)
        got: dict[bool, tuple[float, float, Path]] = {}
        for traced in order:
            got[traced] = checkpoint_run(self.results, folder, self.args.layers, traced)
        remove(folder, settle=False)  # room on the disk for the replay's files (replay() settles)
        leaf = got[True][2]
        record, trace = replay(leaf, self.work / "replay", self.scratch)
        write, read = ((record["replay"][d]["mib_s"] or 0) / GIB_TO_MIB for d in ("write", "read"))
        (save, load, _), (save_t, load_t, _) = got[False], got[True]
        self.rounds.append({"order": "untraced, traced" if order[0] is False else "traced, untraced",
                            "gib_s": {"save": save, "load": load, "save_traced": save_t, "load_traced": load_t,
                                      "replay_write": write, "replay_read": read},
                            "ratios": {"traced_save": save_t / save, "traced_load": load_t / load,
                                       "replay_write": write / save_t, "replay_read": read / load_t},
                            "latency": latencies(leaf, record, trace)})
        r = self.rounds[-1]["ratios"]
        return (f"checkpoint ({self.rounds[-1]['order']}): untraced save {save:.3f} load {load:.3f}, traced save "
                f"{save_t:.3f} load {load_t:.3f}, its replay write {write:.3f} read {read:.3f} GiB/s; traced/untraced "
                f"{r['traced_save']:.3f} {r['traced_load']:.3f}, replay/run {r['replay_write']:.3f} {r['replay_read']:.3f}")

    RATIOS = (("traced_save", "checkpoint traced / untraced save", OVERHEAD_GOAL),
              ("traced_load", "checkpoint traced / untraced load", OVERHEAD_GOAL),
              ("replay_write", "checkpoint replay write / traced run save", REPLAY_GOAL),
              ("replay_read", "checkpoint replay read / traced run load", REPLAY_GOAL))
    DIRECTIONS = ("write", "read")

    def explain(self, figures: dict[str, Any]) -> None:
        figures["medians_gib_s"] = {k: statistics.median(r["gib_s"][k] for r in self.rounds)
                                    for k in self.rounds[0]["gib_s"]}


class KVCache(Part):
    name = "kvcache"

    def round(self, index: int) -> str:
        read, write, leaf = kvcache_run(self.results, self.work / "kv", self.args.kv_users, self.args.kv_duration)
        remove(self.work / "kv", settle=False)  # room on the disk for the replay's files (replay() settles)
        record, trace = replay(leaf, self.work / "replay", self.scratch)
        mib_s = {d: record["replay"][d]["mib_s"] or 0 for d in ("read", "write")}
        traced = {d: record["original"][d]["mib_s"] for d in ("read", "write")}
        self.rounds.append({"run_mib_s": traced, "ranks_mib_s": {"read": read, "write": write}, "replay_mib_s": mib_s,
                            "ratios": {"replay_read": record["ratio"].get("read_mib_s"),
                                       "replay_write": record["ratio"].get("write_mib_s"),
                                       "ranks_read": mib_s["read"] / read if read else None,
                                       "ranks_write": mib_s["write"] / write if write else None},
                            "latency": latencies(leaf, record, trace)})
        r = self.rounds[-1]["ratios"]
        return (f"kvcache: traced run read {traced['read']} write {traced['write']} MiB/s (ranks' own {read:.1f}, "
                f"{write:.1f}), replay read {mib_s['read']:.1f} write {mib_s['write']:.1f}; replay/run {r['replay_read']} "
                f"{r['replay_write']}")

    RATIOS = (("replay_read", "kvcache Option 1 replay read / traced run", REPLAY_GOAL),
              ("replay_write", "kvcache Option 1 replay write / traced run", REPLAY_GOAL),
              ("ranks_read", "kvcache Option 1 replay read / the ranks' own bandwidth", None),
              ("ranks_write", "kvcache Option 1 replay write / the ranks' own bandwidth", None))
    DIRECTIONS = ("read", "write")


class Training(Part):
    name = "training"

    def prepare(self) -> None:
        training_datagen(self.results, self.work / "data", self.args.train_files)

    def round(self, index: int) -> str:
        dlio, epochs, leaf = training_run(self.results, self.work / "data", self.args.train_files)
        epoch_mib = self.args.train_files * 1.0  # files of 1 MiB (TRAINING), one sample each, read once an epoch
        pooled = epoch_mib * len(epochs) / sum(epochs) if epochs and sum(epochs) else None
        record, trace = replay(leaf, self.work / "replay", self.scratch)
        original, replayed = record["original"]["read"], record["replay"]["read"]
        window = original["bytes"] / MIB / original["mib_s"] if original["mib_s"] else None
        self.rounds.append({"dlio_mib_s": dlio, "dlio_epoch_steps_s": epochs, "dlio_epoch_mib": epoch_mib,
                            "dlio_pooled_mib_s": pooled, "run_mib_s": original["mib_s"],
                            "run_read_mib": original["bytes"] / MIB, "run_read_window_s": window,
                            "replay_mib_s": replayed["mib_s"],
                            "ratios": {"replay_read": record["ratio"].get("read_mib_s"),
                                       "dlio": (replayed["mib_s"] or 0) / dlio if dlio else None},
                            "latency": latencies(leaf, record, trace)})
        r = self.rounds[-1]
        return (f"training: DLIO train_io_mean {dlio:.1f} MiB/s (epochs' steps {', '.join(f'{e:.2f}' for e in epochs)} s; "
                f"all its bytes over them {pooled or 0:.1f} MiB/s), "
                f"traced run {original['mib_s']} MiB/s ({r['run_read_mib']:.1f} MiB over {window or 0:.2f} s, first "
                f"to last read), replay {replayed['mib_s']}; replay/run {r['ratios']['replay_read']}, replay/DLIO "
                f"{r['ratios']['dlio'] or 0:.3f}")

    RATIOS = (("replay_read", "training unet3d replay read / traced run", REPLAY_GOAL),
              ("dlio", "training unet3d replay read / DLIO's train_io_mean", None))
    DIRECTIONS = ("read",)

    def explain(self, figures: dict[str, Any]) -> None:
        mid = sorted(self.rounds, key=lambda r: r["ratios"]["dlio"] or 0)[len(self.rounds) // 2]
        steps = mid["dlio_epoch_steps_s"]
        print(f"  why not 1: {TRAINING_WHY}. The median round: DLIO's {len(steps)} epochs read {mid['dlio_epoch_mib']:.0f} "
              f"MiB each in {', '.join(f'{e:.2f}' for e in steps)} s of steps, the mean of those rates "
              f"{mid['dlio_mib_s']:.1f} MiB/s (DLIO's figure), all the bytes over all the steps "
              f"{mid['dlio_pooled_mib_s'] or 0:.1f} MiB/s; the trace's {mid['run_read_mib']:.1f} MiB over its first to "
              f"last read, {mid['run_read_window_s'] or 0:.2f} s, {mid['run_mib_s']} MiB/s, the rate the replay offered "
              f"(it moved {mid['replay_mib_s']} MiB/s)")
        figures["why"] = TRAINING_WHY


class Portable(Part):
    """replay.fio carried away from mlpstorage: the commands `mlpstorage replay --print-command`
    prints, run by a shell as an engineer would paste them (the shell is the point of the test),
    against `mlpstorage replay` of the same leaf on the same directory, their order turning each
    round, neither traced. One traced checkpoint leaf (buffered writes with sync_file_range, then reads: where a
    page-cache bound matters most) is made once and replayed every round."""

    name = "portable"

    def prepare(self) -> None:
        self.leaf = checkpoint_run(self.results, self.work / "ckpt", self.args.layers, traced=True)[2]
        remove(self.work / "ckpt")

    def printed(self, directory: Path) -> dict[str, Any]:
        from mlpstorage_py.trace import replay_run

        remove(directory)
        directory.mkdir(parents=True)
        shown_ = subprocess.run([MLPSTORAGE, "replay", str(self.leaf), "--directory", str(directory), "--print-command"],
                                capture_output=True, text=True, check=True).stdout
        commands = [line for line in shown_.splitlines() if line.strip() and not line.startswith("#")]
        reports = []
        for i, line in enumerate(commands):
            out = self.scratch / f"printed{i}.json"
            with open(out, "w") as fh:
                done = subprocess.run(["sh", "-c", line], stdout=fh, stderr=subprocess.PIPE, text=True)
            if done.returncode != 0:
                raise SystemExit(f"trace_replay: the printed command failed (exit {done.returncode}): {done.stderr[-600:]}")
            reports.append({**replay_run.fio_report(out), "_host": "localhost"})
        for group in Path("/sys/fs/cgroup/memory/fio-replay"), Path("/sys/fs/cgroup/fio-replay"):
            with contextlib.suppress(OSError):
                group.rmdir()  # the printed commands' cgroup, once fio has left it
        remove(directory, settle=False)
        return replay_run.measured(reports)[0]

    def round(self, index: int) -> str:
        got: dict[str, dict[str, Any]] = {}
        for way in ("tool", "printed") if index % 2 == 0 else ("printed", "tool"):
            if way == "tool":
                got[way] = replay(self.leaf, self.work / "replay", self.scratch, traced=False)[0]["replay"]
            else:
                got[way] = self.printed(self.work / "replay")
        mib_s = {way: {d: got[way][d]["mib_s"] or 0 for d in ("write", "read")} for way in got}
        self.rounds.append({"mib_s": mib_s, "ratios": {f"printed_{d}": mib_s["printed"][d] / mib_s["tool"][d]
                                                       if mib_s["tool"][d] else None for d in ("write", "read")}})
        r = self.rounds[-1]["ratios"]
        return (f"portable: mlpstorage replay write {mib_s['tool']['write']:.0f} read {mib_s['tool']['read']:.0f}, "
                f"the printed commands write {mib_s['printed']['write']:.0f} read {mib_s['printed']['read']:.0f} MiB/s; "
                f"printed/tool {r['printed_write'] or 0:.3f} {r['printed_read'] or 0:.3f}")

    RATIOS = (("printed_write", "checkpoint replay.fio by the printed commands / mlpstorage replay, write", PORTABLE_GOAL),
              ("printed_read", "checkpoint replay.fio by the printed commands / mlpstorage replay, read", PORTABLE_GOAL))


PARTS: dict[str, type[Part]] = {"checkpoint": Checkpoint, "kvcache": KVCache, "training": Training,
                               "portable": Portable}


def load_text(before: float, others: OthersLoad, since: float = 0.0) -> str:
    return (f"load: 1-min average {before:.2f} before the bench, now {os.getloadavg()[0]:.2f}; others' runnable "
            f"tasks {others.mean(since):.2f} on average (max {others.peak()}) while it ran; verdict at most "
            f"{LOAD_LIMIT:.2f} ({LOAD_PER_CORE:g} x {os.cpu_count()} cores)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"a smaller run ({QUICK}), what make bench runs")
    parser.add_argument("--rounds", type=int, default=MIN_ROUNDS,
                        help=f"interleaved rounds (default {MIN_ROUNDS}; fewer give no verdict)")
    parser.add_argument("--layers", type=int, help=f"model layers (default {FULL['layers']}, quick {QUICK['layers']})")
    parser.add_argument("--kv-users", type=int, help="kvcache users per rank")
    parser.add_argument("--kv-duration", type=int, help="kvcache seconds")
    parser.add_argument("--train-files", type=int, help="training files of 1 MiB")
    parser.add_argument("--only", nargs="+", choices=sorted(PARTS), default=list(PARTS))
    parser.add_argument("--dir", type=Path, help="where the disk image goes (default: under build/)")
    parser.add_argument("--disk-gib", type=int, default=40, help="the own disk's size (sparse: it takes what is written)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    missing = [tool for tool in ("bpftrace", "mkfs.ext4", "losetup", "fio") if not shutil.which(tool)]
    if os.geteuid() != 0 or missing:
        why = "needs root" if os.geteuid() != 0 else f"needs {', '.join(missing)}"
        print(f"trace_replay: {why}; nothing measured")
        print("BENCH " + json.dumps({"skipped": why}))
        return 0
    before = os.getloadavg()[0]
    others = OthersLoad()
    others.start()
    started = time.monotonic()
    base = args.dir or REPO / "build"
    base.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="trace-bench-", dir=base))
    results = Path(tempfile.mkdtemp(prefix="trace-bench-results-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    names = [name for name in PARTS if name in args.only]
    print(f"trace_replay: {args.rounds} interleaved rounds of {', '.join(names)} ({'quick: ' if args.quick else ''}"
          f"{args.layers} layers, {args.kv_users} KV users x {args.kv_duration} s, {args.train_files} training files); "
          f"1-min load average {before:.2f}")
    try:
        subprocess.run([MLPSTORAGE, "init", "Bench", str(results)], check=True, capture_output=True,
                       env={**os.environ, "XDG_CONFIG_HOME": str(results / "xdg")})
        with own_disk(scratch, args.disk_gib) as work:
            parts = [PARTS[name](args, work, results, results) for name in names]
            for part in parts:
                part.prepare()
            for index in range(args.rounds):
                since = time.monotonic()
                lines = []
                for part in parts:
                    clock = time.monotonic()
                    lines.append(f"{part.round(index)} [{time.monotonic() - clock:.0f} s]")
                print(f"round {index + 1} (1-min load average {os.getloadavg()[0]:.2f}, others' {others.mean(since):.2f}):")
                for line in lines:
                    print(f"  {line}", flush=True)
            others.stop()
            judge = Judge()
            load = max(before, others.mean())
            if load > LOAD_LIMIT:
                judge.withheld = f"load {load:.2f} > {LOAD_LIMIT:.2f}"
            elif args.rounds < MIN_ROUNDS:
                judge.withheld = f"{args.rounds} rounds < {MIN_ROUNDS}"
            print()
            print(load_text(before, others))
            figures: dict[str, Any] = {part.name: part.summary(judge) for part in parts}
        wall = time.monotonic() - started
        verdicts = [r["verdict"] for f in figures.values() for r in f["ratios"].values() if r["goal"] is not None]
        if judge.withheld:
            print(f"trace_replay: no verdict: {judge.withheld} (the figures above stand, unjudged); {wall:.0f} s wall")
        else:
            print(f"trace_replay: {'PASS' if all(v == 'PASS' for v in verdicts) else 'FAIL'} "
                  f"({sum(v == 'PASS' for v in verdicts)} of {len(verdicts)} goals met); {wall:.0f} s wall")
        figures["load"] = {"before": before, "others_mean": others.mean(), "others_max": others.peak(),
                           "after": os.getloadavg()[0], "limit": LOAD_LIMIT, "per_core": LOAD_PER_CORE,
                           "cores": os.cpu_count(), "verdict": judge.withheld is None, "withheld": judge.withheld}
        figures["rounds"], figures["wall_s"], figures["quick"] = args.rounds, round(wall, 1), args.quick
        print("BENCH " + json.dumps(figures))
    finally:
        others.stop()
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(results, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
