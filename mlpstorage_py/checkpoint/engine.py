"""The checkpoint engine: an LLM training job's checkpoint writes and restores, one MPI process per
simulated accelerator.

DLIO 2.0.0 (the installed engine) has no checkpoint-only write/read workflow, so this program
emulates one and writes results in the shape the MLPerf Storage v3.0 reference tool publishes
(``<rank>_per_epoch_stats.json``, ``summary.json`` with ``save_/load_checkpoint_*`` metrics,
``dlio.log``), so the checker and the report generator read ours and real packages alike.

    mpirun -np 8 python -m mlpstorage_py.checkpoint.engine --workload W.json \\
        --checkpoint-folder DIR --output-dir OUT --num-write 10 --num-read 10

Every rank writes its layout files (see shards.py) of checkpoint k into DIR/ckpt_<k>/; all ranks
start each checkpoint together and each reports the whole checkpoint's GiB over its own
duration, as the reference does. Reads take the most recent checkpoints in DIR, after the page
cache was dropped (or the files evicted), so they measure storage rather than memory.
DIR may be an s3://bucket/prefix URI: the same files are then objects written and read through
s3dlio (storage/s3.py), with the same metrics.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import re
import socket
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from mlpstorage_py import __version__
from mlpstorage_py.checkpoint.shards import Layout, ShardFile, build_layout
from mlpstorage_py.results import libraries
from mlpstorage_py.results.host import meminfo_bytes
from mlpstorage_py.storage import Store, drop_page_cache
from mlpstorage_py.storage.posix import DROP_BEHIND, PosixStore
from mlpstorage_py.storage.s3 import S3Store, is_object_uri, library
from mlpstorage_py.telemetry import rank_progress

# The launcher that started this rank, read before anything can outlive it (rank_guard).
_PARENT = os.getppid()

ENGINE_NAME = "mlpstorage-checkpoint-engine"
# Bytes per write/read request. Files: 1 MiB, which a core's cache holds while the kernel copies
# it into the page cache (16 MiB requests measured 40 % slower on buffered writes here, see
# bench/checkpoint_vs_fio.py); objects: 16 MiB multipart parts (S3 needs parts of >= 5 MiB).
FILE_BLOCK_SIZE = 1 << 20
OBJECT_BLOCK_SIZE = 16 << 20
CKPT_DIR = re.compile(r"^ckpt_(\d+)$")
LOG_HEADER = ("mlpstorage checkpoint engine log: DLIO 2.0.0 has no checkpoint-only workflow, so "
              "mlpstorage_py.checkpoint.engine ran this benchmark and wrote this file")

T = TypeVar("T")


class EngineError(Exception):
    """A failure every rank has agreed on; its message is the one line the user sees."""


def utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def iso(moment: datetime) -> str:
    """UTC ISO time without zone suffix, always with microseconds, as DLIO writes it."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")


def sync_directory(path: str) -> None:
    """fsync a directory, so the entries of the files created in it survive a crash as well."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def mem_total_gib() -> float:
    """MemTotal of this host in GiB (0.0 where /proc/meminfo is unreadable)."""
    return (meminfo_bytes() or 0) / (1 << 30)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mlpstorage_py.checkpoint.engine",
                                     description="Write and read LLM checkpoints under MPI (one rank per accelerator).")
    parser.add_argument("--workload", required=True, type=Path,
                        help="JSON of the resolved workload dict: model{...} and checkpoint{time_between_checkpoints, fsync}")
    parser.add_argument("--checkpoint-folder", required=True, help="checkpoints go to DIR/ckpt_<k>/ (a path or s3://bucket/prefix)")
    parser.add_argument("--output-dir", required=True, type=Path, help="results leaf for the per-rank and summary files")
    parser.add_argument("--num-write", required=True, type=int, help="checkpoints to write (0: read-only run)")
    parser.add_argument("--num-read", required=True, type=int, help="checkpoints to read (0: write-only run)")
    parser.add_argument("--cache-policy", choices=("auto", "drop", "fadvise"), default="auto",
                        help="before reading: drop the page cache (root), evict each file, or drop if permitted else evict")
    parser.add_argument("--block-size", type=int,
                        help=f"bytes per write/read request, a multiple of 4096 (default {FILE_BLOCK_SIZE} for files, "
                             f"{OBJECT_BLOCK_SIZE} for s3:// objects)")
    parser.add_argument("--o-direct", action="store_true",
                        help="O_DIRECT writes and reads (bypass the page cache; files only; an OPEN option)")
    parser.add_argument("--libraries", help="directory where each rank records the libraries it imported, when done")
    parser.add_argument("--s3-endpoints", help="several S3 endpoints of the object store, comma-separated (storage/endpoints.py)")
    parser.add_argument("--s3-strategy", default="per_rank", help="how requests spread over --s3-endpoints")
    opts = parser.parse_args(argv)
    if opts.num_write < 0 or opts.num_read < 0 or opts.num_write + opts.num_read == 0:
        parser.error("--num-write and --num-read must be >= 0 and not both 0")
    if opts.num_write and opts.num_read > opts.num_write:
        parser.error(f"--num-read {opts.num_read} exceeds --num-write {opts.num_write}; read older checkpoints "
                     "in a separate read-only invocation (--num-write 0)")
    if opts.block_size is None:
        opts.block_size = OBJECT_BLOCK_SIZE if is_object_uri(opts.checkpoint_folder) else FILE_BLOCK_SIZE
    if opts.block_size < 4096 or opts.block_size % 4096:
        parser.error("--block-size must be a positive multiple of 4096")
    if opts.o_direct and is_object_uri(opts.checkpoint_folder):
        parser.error("--o-direct applies to files, not to an s3:// checkpoint folder")
    if not is_object_uri(opts.checkpoint_folder):
        if opts.s3_endpoints:
            parser.error("--s3-endpoints applies to an s3:// checkpoint folder")
        opts.checkpoint_folder = str(Path(opts.checkpoint_folder).resolve())
    opts.output_dir = opts.output_dir.resolve()
    return opts


@dataclass
class RankRecord:
    """What this rank did, for its own output files."""

    stats: dict[str, dict[str, Any]] = field(default_factory=dict)
    bytes_written: int = 0
    bytes_read: int = 0
    fsync_calls: int = 0
    written: list[str] = field(default_factory=list)
    read: list[str] = field(default_factory=list)


class Engine:
    """One rank's run; every public step is collective and raises EngineError on all ranks alike."""

    def __init__(self, comm: Any, opts: argparse.Namespace, store: Store) -> None:
        self.comm = comm
        self.rank = comm.Get_rank()
        self.world = comm.Get_size()
        self.opts = opts
        self.store = store
        self.record = RankRecord()
        self.started = utc_now()
        self.log_fh: Any = None
        self.cache_applied = "none"
        # Per host (its first rank), what was done so reads come from storage.
        self.cache_hosts: list[dict[str, Any]] = []

    # -- collective helpers -------------------------------------------------------------------

    def agree(self, action: Callable[[], T]) -> T:
        """Run ``action`` on this rank; if it failed on any rank, fail everywhere with the lowest
        failing rank's message (a lone failure must not leave the other ranks in a barrier)."""
        error = None
        result: Any = None
        try:
            result = action()
        except EngineError as exc:
            error = str(exc)
        except (OSError, ValueError) as exc:
            error = f"rank {self.rank}: {exc}"
        self.idle_barrier()
        errors = self.comm.allgather(error)
        failed = [e for e in errors if e]
        if failed:
            raise EngineError(failed[0])
        return result

    def idle_barrier(self) -> None:
        """Wait for every rank without spinning: MPI's own waits busy-poll a core, and a rank that
        finished its share first would take CPU from the ranks (and the kernel's writeback) still
        working inside the timed span. Sleeping 0.5 ms between tests costs at most that much."""
        request = self.comm.Ibarrier()
        while not request.Test():
            time.sleep(0.0005)

    def log(self, line: str) -> None:
        if self.log_fh:
            self.log_fh.write(f"[{iso(utc_now())}] {line}\n")
            self.log_fh.flush()

    def say(self, line: str) -> None:
        """A progress line on rank 0's stdout and in the engine log."""
        if self.rank == 0:
            print(line, flush=True)
            self.log(line)

    # -- set-up -------------------------------------------------------------------------------

    def load(self) -> None:
        def read_workload() -> dict[str, Any]:
            if self.rank != 0:
                return {}
            try:
                data = json.loads(self.opts.workload.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise EngineError(f"workload {self.opts.workload} is not valid JSON: {exc}") from None
            if not isinstance(data, dict):
                raise EngineError(f"workload {self.opts.workload} is not a JSON object")
            return data

        self.workload: dict[str, Any] = self.comm.bcast(self.agree(read_workload), root=0)
        ckpt = self.workload.get("checkpoint") or {}
        self.fsync = bool(ckpt.get("fsync", True))
        pause = ckpt.get("time_between_checkpoints", 0)
        if isinstance(pause, bool) or not isinstance(pause, (int, float)) or pause < 0:
            raise EngineError(f"checkpoint.time_between_checkpoints must be a number >= 0, got {pause!r}")
        self.pause = float(pause)
        if self.store.cached_locally and self.opts.cache_policy == "drop" and self.opts.num_read and not all(self.comm.allgather(os.geteuid() == 0)):
            raise EngineError("--cache-policy drop needs root on every host to drop the page cache; "
                              "use --cache-policy fadvise or auto")
        try:
            self.layout: Layout = build_layout(self.workload, self.world)
        except ValueError as exc:
            raise EngineError(f"checkpoint layout: {exc}") from None
        self.my_files: tuple[ShardFile, ...] = self.layout.files(self.rank)
        self.hosts = self.comm.allgather((socket.gethostname(), mem_total_gib(), os.cpu_count() or 0))

        def open_outputs() -> None:
            os.makedirs(self.opts.output_dir, exist_ok=True)
            self.store.make_dirs(self.opts.checkpoint_folder)
            if self.rank == 0:
                self.log_fh = open(self.opts.output_dir / "dlio.log", "w", encoding="utf-8")
                self.log_fh.write(LOG_HEADER + "\n")

        self.agree(open_outputs)
        lay = self.layout
        self.log(f"engine {ENGINE_NAME} {__version__}; world size {self.world} on {len(self.unique_hosts())} host(s); "
                 f"block size {self.opts.block_size}; O_DIRECT {self.opts.o_direct}; fsync {self.fsync}; time between checkpoints {self.pause} s")
        self.log(f"layout: TP {lay.tensor} PP {lay.pipeline} DP {lay.data} ZeRO {lay.zero_stage}; "
                 f"{sum(len(lay.files(r)) for r in range(self.world))} files per checkpoint; model {lay.model_bytes} B, "
                 f"optimizer {lay.optimizer_bytes} B, total {lay.total_bytes} B = {lay.total_gib} GiB")

    def _first_rank_per_host(self) -> list[tuple[int, tuple[str, float, int]]]:
        seen: dict[str, tuple[int, tuple[str, float, int]]] = {}
        for rank, host in enumerate(self.hosts):
            seen.setdefault(host[0], (rank, host))
        return list(seen.values())

    def unique_hosts(self) -> list[tuple[str, float, int]]:
        seen: dict[str, tuple[str, float, int]] = {}
        for host in self.hosts:
            seen.setdefault(host[0], host)
        return list(seen.values())

    def through(self) -> str:
        """Where a failed request went, for its error line: this rank's endpoint (per_rank)."""
        url = getattr(getattr(self.store, "io", None), "url", None)
        return f" through endpoint {url}" if url else ""

    def ckpt_path(self, number: int, name: str = "") -> str:
        return self.store.join(self.opts.checkpoint_folder, f"ckpt_{number}", name)

    # -- phases -------------------------------------------------------------------------------

    def timed(self, key: str, work: Callable[[], None]) -> None:
        """Start together, run this rank's share, record it as the reference does."""
        self.comm.Barrier()
        start = utc_now()
        self.agree(work)  # also the end barrier: nobody starts the next step early
        end = utc_now()
        duration = max((end - start).total_seconds(), 1e-6)
        entry = {"start": iso(start), "end": iso(end), "duration": duration,
                 "throughput": self.layout.total_gib / duration}
        self.record.stats[key] = entry
        slowest = max(self.comm.allgather(duration))
        self.say(f"{key}: {self.layout.total_gib:.4f} GiB, rank 0 {duration:.3f} s = {entry['throughput']:.3f} GiB/s, "
                 f"slowest rank {slowest:.3f} s")

    def pause_between(self) -> None:
        """The workload's time between checkpoints, said as a pause (the watchdog's, not a stall)."""
        reporter = rank_progress.current()
        with reporter.pausing() if reporter is not None else contextlib.nullcontext():
            time.sleep(self.pause)

    def write_phase(self) -> None:
        block = self.opts.block_size
        rank_progress.count(0, "files")
        reporter = rank_progress.current()
        if reporter is not None:
            reporter.set_phase("write")
        for number in range(1, self.opts.num_write + 1):
            if number > 1:
                self.pause_between()
            self.agree(functools.partial(self.store.make_dirs, self.ckpt_path(number)))

            def write_mine(number: int) -> None:
                for f in self.my_files:
                    path = self.ckpt_path(number, f.name)
                    try:
                        result = self.store.write(path, f.nbytes, block_size=block, fsync=self.fsync)
                        stored = self.store.size(path)
                    except OSError as exc:
                        raise EngineError(f"rank {self.rank}: writing {path}{self.through()} failed: {exc.strerror or exc}") from None
                    if stored != f.nbytes:
                        raise EngineError(f"rank {self.rank}: {path} holds {stored} bytes after the write, "
                                          f"the layout says {f.nbytes}")
                    self.record.bytes_written += result.bytes
                    self.record.fsync_calls += result.fsync_calls
                    rank_progress.count(1, "files", written=0 if self.store.cached_locally else result.bytes)
                if self.fsync and self.store.cached_locally:
                    sync_directory(self.ckpt_path(number))  # the new names are durable too

            self.timed(f"save_ckpt{number}", functools.partial(write_mine, number))
            self.record.written.append(f"ckpt_{number}")

    def existing_reads(self) -> list[int]:
        """For a read-only run: the most recent --num-read checkpoints in the folder, every file
        of each checked for presence and size before anything is timed."""
        wanted = self.opts.num_read

        def present() -> list[int]:
            if self.rank != 0:
                return []
            found = sorted(int(m.group(1)) for name in self.store.subfolders(self.opts.checkpoint_folder)
                           if (m := CKPT_DIR.match(name)))
            if len(found) < wanted:
                raise EngineError(f"{self.opts.checkpoint_folder} holds {len(found)} checkpoint(s) (ckpt_<k>/), "
                                  f"--num-read asks for {wanted}")
            return found[-wanted:]

        numbers = self.comm.bcast(self.agree(present), root=0)

        def verify() -> None:
            for number in numbers:
                for f in self.my_files:
                    path = self.ckpt_path(number, f.name)
                    if not self.store.exists(path):
                        raise EngineError(f"checkpoint file missing: {path} (expected {f.nbytes} bytes)")
                    if (size := self.store.size(path)) != f.nbytes:
                        raise EngineError(f"checkpoint file {path} holds {size} bytes, the layout expects {f.nbytes}")

        self.agree(verify)
        return numbers

    def prepare_cache(self, numbers: list[int]) -> None:
        """Make the reads come from storage: drop each host's page cache once (one rank per
        host) or, where that is not permitted, evict every file to be read."""
        policy = self.opts.cache_policy
        self.comm.Barrier()
        if not self.store.cached_locally:
            self.cache_applied = "not applicable (object storage)"
            self.say("object storage: reads go over the network, no host page cache to drop")
            return
        if policy in ("auto", "drop"):
            from mpi4py import MPI

            node = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
            mine = None
            if node.Get_rank() == 0:
                mine = {"rank": self.rank, "hostname": socket.gethostname(),
                        "page_cache": "dropped" if drop_page_cache() else "not dropped: not permitted (needs root)"}
            node.Free()
            self.cache_hosts = [r for r in self.comm.allgather(mine) if r is not None]
            if all(r["page_cache"] == "dropped" for r in self.cache_hosts):
                self.cache_applied = "drop_caches"
                self.say(f"page cache dropped on {len(self.cache_hosts)} host(s) before reading")
                return
            if policy == "drop":
                raise EngineError("--cache-policy drop: cannot drop the page cache (needs root and a writable "
                                  "/proc/sys/vm/drop_caches); use --cache-policy fadvise")

        def evict_mine() -> None:
            for number in numbers:
                for f in self.my_files:
                    self.store.evict(self.ckpt_path(number, f.name))

        self.agree(evict_mine)
        self.cache_hosts = [{"rank": r, "hostname": h[0], "page_cache": "not dropped: each file evicted with "
                             "posix_fadvise(DONTNEED)"} for r, h in self._first_rank_per_host()]
        self.cache_applied = "fadvise_dontneed"
        self.say("page cache: each file fsync'd and evicted with posix_fadvise(DONTNEED) before reading")

    def read_phase(self, numbers: list[int]) -> None:
        block = self.opts.block_size
        reporter = rank_progress.current()
        if reporter is not None:
            reporter.set_phase("read")
        for index, number in enumerate(numbers, start=1):
            if index > 1 or self.opts.num_write:
                self.pause_between()

            def read_mine(number: int) -> None:
                for f in self.my_files:
                    path = self.ckpt_path(number, f.name)
                    try:
                        got = self.store.read(path, block_size=block)
                    except OSError as exc:
                        raise EngineError(f"rank {self.rank}: reading {path}{self.through()} failed: {exc.strerror or exc}") from None
                    if got != f.nbytes:
                        raise EngineError(f"rank {self.rank}: read {got} bytes of {path}, the layout says {f.nbytes}")
                    self.record.bytes_read += got
                    rank_progress.count(1, "files", read=0 if self.store.cached_locally else got)

            self.timed(f"load_ckpt{index}", functools.partial(read_mine, number))
            self.record.read.append(f"ckpt_{number}")

    # -- results ------------------------------------------------------------------------------

    def engine_info(self) -> dict[str, Any]:
        return {"name": ENGINE_NAME, "version": __version__, "cache_policy_requested": self.opts.cache_policy,
                "cache_policy_applied": self.cache_applied, "block_size": self.opts.block_size,
                "storage": "file" if self.store.cached_locally else "object",
                "direct_io": self.opts.o_direct,
                "page_cache_behind": self.page_cache_behind(),
                "storage_library": {"name": "none"} if self.store.cached_locally else library(),
                "durability": self.durability()}

    def page_cache_behind(self) -> str:
        """What the store leaves in this host's page cache behind each read and write (storage/posix.py)."""
        if not self.store.cached_locally or self.opts.o_direct:
            return "not applicable"
        return (f"dropped: buffered reads evict each {DROP_BEHIND >> 20} MiB they consumed, durable writes each "
                f"{DROP_BEHIND >> 20} MiB written back, and each file once done")

    def durability(self) -> str:
        """What makes a checkpoint's bytes durable before its clock stops (recorded in the leaf)."""
        if not self.store.cached_locally:
            return "each object's PUT completed"
        if not self.fsync:
            return "none: fsync disabled by checkpoint.fsync=false"
        io = "O_DIRECT writes (an unaligned tail buffered)" if self.opts.o_direct else \
            (f"buffered writes, writeback started per block (sync_file_range) and each {DROP_BEHIND >> 20} MiB "
             "evicted once written back (posix_fadvise DONTNEED)")
        return f"{io}; fsync per file, then of its directory, before the rank reports done"

    def metric(self) -> dict[str, float]:
        """Means and population stdevs over rank 0's per-checkpoint values, as the reference reports."""
        metric: dict[str, float] = {}
        for phase, prefix in (("save", "save_ckpt"), ("load", "load_ckpt")):
            entries = [v for k, v in self.record.stats.items() if k.startswith(prefix)]
            if not entries:
                continue
            rates = [e["throughput"] for e in entries]
            durations = [e["duration"] for e in entries]
            metric[f"{phase}_checkpoint_io_mean_GB_per_second"] = statistics.mean(rates)
            metric[f"{phase}_checkpoint_io_stdev_GB_per_second"] = statistics.pstdev(rates)
            metric[f"{phase}_checkpoint_duration_mean_seconds"] = statistics.mean(durations)
            metric[f"{phase}_checkpoint_duration_stdev_seconds"] = statistics.pstdev(durations)
        metric["checkpoint_size_GB"] = self.layout.total_gib
        return metric

    def write_results(self) -> None:
        out = self.opts.output_dir
        ended = utc_now()
        epoch = {"start": iso(self.started), **self.record.stats, "end": iso(ended)}
        rec = self.record
        output = {"rank": self.rank, "hostname": socket.gethostname(), "world_size": self.world,
                  "files": [{"name": f.name, "kind": f.kind, "bytes": f.nbytes} for f in self.my_files],
                  "checkpoints_written": rec.written, "checkpoints_read": rec.read,
                  "bytes_written": rec.bytes_written, "bytes_read": rec.bytes_read,
                  "fsync": self.fsync, "fsync_calls": rec.fsync_calls, **self.engine_info()}

        def dump() -> None:
            (out / f"{self.rank}_per_epoch_stats.json").write_text(json.dumps({"1": epoch}, indent=4), encoding="utf-8")
            (out / f"{self.rank}_output.json").write_text(json.dumps(output, indent=4), encoding="utf-8")
            if self.rank == 0:
                hosts = self.unique_hosts()
                lay = self.layout
                summary = {
                    "start": iso(self.started),
                    "end": iso(ended),
                    "num_accelerators": self.world,
                    "num_hosts": len(hosts),
                    "hostname": socket.gethostname(),
                    "host_processor_name": platform.machine(),
                    "host_memory_GB": [h[1] for h in hosts],
                    "host_cpu_count": [h[2] for h in hosts],
                    "metric": self.metric(),
                    "num_checkpoints_write": self.opts.num_write,
                    "num_checkpoints_read": self.opts.num_read,
                    "checkpoint_folder": str(self.opts.checkpoint_folder),
                    "checkpoint_layout": {"tensor": lay.tensor, "pipeline": lay.pipeline, "data": lay.data,
                                          "zero_stage": lay.zero_stage, "model_bytes": lay.model_bytes,
                                          "optimizer_bytes": lay.optimizer_bytes, "total_bytes": lay.total_bytes,
                                          "files": sum(len(lay.files(r)) for r in range(self.world))},
                    "fsync": self.fsync,
                    "checkpoint_engine": self.engine_info(),
                    "rank_hostnames": [h[0] for h in self.hosts],
                    "page_cache_hosts": self.cache_hosts,
                }
                (out / "summary.json").write_text(json.dumps(summary, indent=4), encoding="utf-8")

        self.agree(dump)
        self.log(f"done: rank 0 wrote {rec.bytes_written} B, read {rec.bytes_read} B, {rec.fsync_calls} fsync calls")

    def run(self) -> None:
        self.load()
        reads = self.existing_reads() if not self.opts.num_write else []
        self.write_phase()
        if self.opts.num_write:
            reads = list(range(self.opts.num_write - self.opts.num_read + 1, self.opts.num_write + 1))
        if reads:
            self.prepare_cache(reads)
            self.read_phase(reads)
        self.write_results()

    def close(self) -> None:
        if self.log_fh:
            self.log_fh.close()


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    try:
        from mpi4py import MPI
    except ImportError as exc:
        print(f"checkpoint engine: error: mpi4py is not available ({exc})", file=sys.stderr)
        return 1
    from mlpstorage_py.launch.rank_guard import report_started

    report_started(MPI.COMM_WORLD.Get_rank())
    store: Store = PosixStore(direct=opts.o_direct)
    if is_object_uri(opts.checkpoint_folder):
        from mlpstorage_py.storage.endpoints import from_rank_args
        from mlpstorage_py.storage.multi import ObjectIO

        endpoints = from_rank_args(opts.s3_endpoints, opts.s3_strategy) if opts.s3_endpoints else None
        store = S3Store(ObjectIO(endpoints, MPI.COMM_WORLD.Get_rank()))
    engine = Engine(MPI.COMM_WORLD, opts, store)
    try:
        engine.run()
    except EngineError as exc:
        engine.log(f"error: {exc}")
        if engine.rank == 0:
            print(f"checkpoint engine: error: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        engine.close()
        if opts.libraries:
            libraries.report(opts.libraries, engine.rank)
    return 0


if __name__ == "__main__":
    from mlpstorage_py.launch.rank_guard import die_with_parent

    die_with_parent(_PARENT)
    sys.exit(main())
