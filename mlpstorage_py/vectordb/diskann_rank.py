"""One DiskANN query client as an MPI rank (`vectordb run --vdb-engine diskann`), on this host or
one of --hosts. It takes everything from a spec file in the (shared) leaf, as vectordb.rank does,
and writes the same rank file (vectordb_rank_<r>.json, read by clients.read_ranks) plus what
only an SSD index has: the device reads of the index's block device, the O_DIRECT check and the
rank's resident memory.

Run as: <mpirun> -n P ... python -P -m mlpstorage_py.vectordb.diskann_rank LEAF/query_clients.json

Per host, the ranks sharing it elect its lowest rank (MPI's shared-memory split) as the host's
leader. With an index copy directory the leader copies the index there first (untimed) and every
rank of the host searches the copy; without one every rank searches the one index under
--storage-root. Each rank opens the index (PQ codes and node cache into memory), checks its
fingerprint against datagen's, runs one untimed query; the leader then drops the page cache
(root only; DiskANN reads index sectors with O_DIRECT anyway, which the rank checks). All ranks
meet at a barrier; the leader reads its device's counters; the ranks time their queries; all meet
again and the leader reads the counters once more: the host's device reads over the window.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

# before diskannpy loads OpenMP and MKL: one search thread per rank, no spinning helpers
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

from mlpstorage_py.vectordb import devstats, diskann_engine

diskann_engine.activate()  # diskannpy's numpy, before anything below imports one

from mlpstorage_py.results import libraries
from mlpstorage_py.results.vdb import VdbRank
from mlpstorage_py.telemetry import rank_progress

_PARENT = os.getppid()


def _same_index(directory: Path, wanted: str) -> bool:
    """Whether a whole copy of the wanted index is at directory (a copy being put in place is not)."""
    try:
        return directory.is_dir() and diskann_engine.fingerprint(directory) == wanted
    except OSError:
        return False


def copy_index(source: Path, target: Path) -> dict[str, Any]:
    """The index files (not the vectors) into target, unless a whole identical copy is there: each
    file fsynced in a staging directory beside it, which is then renamed into place, so no rank
    ever opens half a copy, even where several hosts share the target (hosts simulated on one
    machine); a different index there is replaced."""
    started = time.perf_counter()
    wanted = diskann_engine.fingerprint(source)
    if _same_index(target, wanted):
        return {"copied": False, "reason": "an identical copy was there", "seconds": time.perf_counter() - started}
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.{socket.gethostname()}.{os.getpid()}"
    staging.mkdir()
    copied = 0
    for path in sorted(source.iterdir()):
        if path.is_file() and path.name.startswith(diskann_engine.PREFIX):
            with open(path, "rb") as src, open(staging / path.name, "wb") as dst:
                shutil.copyfileobj(src, dst, 2**22)
                dst.flush()
                os.fsync(dst.fileno())
            copied += path.stat().st_size
    if target.exists() and not _same_index(target, wanted):
        shutil.rmtree(target)  # another index, or what a killed copy left
    try:
        os.rename(staging, target)
    except OSError:  # another host's copy got there first
        shutil.rmtree(staging, ignore_errors=True)
        if not _same_index(target, wanted):
            raise
        return {"copied": False, "reason": "another host put an identical copy there first",
                "seconds": time.perf_counter() - started}
    return {"copied": True, "bytes": copied, "seconds": time.perf_counter() - started}


def drop_page_cache() -> str:
    """Drop clean pages (root), so nothing the index loaded is served from memory."""
    if os.geteuid() != 0:
        return "not dropped: not root (index sectors are read with O_DIRECT regardless)"
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n", encoding="ascii")
    except OSError as exc:
        return f"not dropped: {exc.strerror}"
    return "dropped (sync; echo 3 > /proc/sys/vm/drop_caches)"


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def run_rank(spec: dict[str, Any], comm: Any, local: Any, processor: str) -> VdbRank:
    """The body of one rank: comm is the world, local the ranks on this host."""
    import diskannpy  # type: ignore[import-not-found]  # the engine's prefix, not this environment

    from mlpstorage_py.vectordb import generate
    from mlpstorage_py.vectordb.query import batches_for

    rank, size = comm.Get_rank(), comm.Get_size()
    leader = local.Get_rank() == 0
    if size != spec["world_size"]:
        raise RuntimeError(f"MPI world has {size} ranks, the spec planned {spec['world_size']}")
    queries = generate.queries(spec["seed"], spec["distribution"], spec["dimension"], spec["num_query_vectors"])
    if hashlib.sha256(queries.tobytes()).hexdigest() != spec["query_set_sha256"]:
        raise RuntimeError(f"rank {rank} rebuilt a different query set: a different numpy on this host?")
    source = Path(spec["index_dir"])
    where, copy = source, None
    if spec.get("copy_dir"):
        where = Path(spec["copy_dir"])
        if leader:
            copy = copy_index(source, where)
        local.Barrier()
    found = diskann_engine.fingerprint(where)
    if found != spec["fingerprint"]:
        raise RuntimeError(f"the index at {where} is not the one datagen built (fingerprint {found[:12]}, "
                           f"datagen's {spec['fingerprint'][:12]})")
    open_start = time.perf_counter()
    index = diskannpy.StaticDiskIndex(index_directory=str(where), num_threads=diskann_engine.SEARCH_CONTEXTS,
                                      num_nodes_to_cache=int(spec["cache_nodes"]), cache_mechanism=1,
                                      index_prefix=diskann_engine.PREFIX)
    open_s = time.perf_counter() - open_start
    direct = diskann_engine.opened_direct(where / diskann_engine.DISK_INDEX)
    k, search_list, beam, batch = spec["limit"], spec["search_list"], spec["beam_width"], spec["batch_size"]
    nq = len(queries)

    def search(first: int, count: int) -> tuple[Any, list[int]]:
        rows = [(first + i) % nq for i in range(count)]
        if count == 1:
            return [index.search(queries[rows[0]], k, search_list, beam).identifiers], rows
        return index.batch_search(queries[rows], k, search_list, 1, beam).identifiers, rows

    search(0, 1)  # untimed warm-up: the first call's allocations
    cache = drop_page_cache() if leader else None
    device: dict[str, Any] = devstats.device_of(where) if leader else {}
    resident = rss_bytes()
    comm.Barrier()
    before = devstats.read_counters(device["stat"]) if device.get("device") else None
    t0 = time.perf_counter()
    started_wall = time.time()
    deadline = t0 + spec["runtime"] if spec["runtime"] else None
    latencies: list[list[float]] = []
    hits: dict[str, list[int]] = {}
    done, next_report = 0, spec["report_count"]
    for g, count in batches_for(rank, size, batch, spec["total_queries"]):
        if deadline is not None and time.perf_counter() >= deadline:
            break
        began = time.perf_counter()
        result, rows = search(g * batch, count)
        latencies.append([count, (time.perf_counter() - began) * 1000.0])
        for q, ids in zip(rows, result, strict=True):
            hits.setdefault(str(q), [int(i) for i in ids])
        done += count
        rank_progress.count(count, "queries")
        if done >= next_report:
            print(f"rank {rank}: {done:,} queries", flush=True)
            next_report = (done // spec["report_count"] + 1) * spec["report_count"]
    seconds = time.perf_counter() - t0
    ended_wall = time.time()
    comm.Barrier()  # every rank of every host is done: the leader's counters cover them all
    host_io: dict[str, Any] | None = None
    if leader:
        host_io = {**device, "boot_id": devstats.boot_id(), "page_cache": cache}
        if before is not None:
            host_io["counters"] = devstats.difference(before, devstats.read_counters(device["stat"]))
    return VdbRank({"rank": rank, "world_size": size, "hostname": socket.gethostname(), "mpi_processor_name": processor,
                    "pid": os.getpid(), "start": started_wall, "end": ended_wall, "seconds": seconds,
                    "batches": len(latencies), "queries": done, "qps": done / seconds if seconds > 0 else 0.0,
                    "latencies": latencies, "hits": hits, "connect_and_warmup_seconds": open_s,
                    "index_dir": str(where), "index_copy": copy, "o_direct": direct, "rss_bytes": resident,
                    "host_leader": leader, "host_io": host_io})


def main(spec_path: str) -> int:  # pragma: no cover - runs under mpirun
    import json

    from mpi4py import MPI

    from mlpstorage_py.launch.rank_guard import abort_job, report_started
    from mlpstorage_py.vectordb.rank import rank_path, write_atomic

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    report_started(rank)
    try:
        spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
        local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
        record = run_rank(spec, comm, local, MPI.Get_processor_name())
        write_atomic(rank_path(Path(spec["leaf"]), rank), record.to_json())
        libraries.report(Path(spec["leaf"]) / libraries.DIR_NAME, rank)
    except BaseException as exc:  # one line for the parent, then stop the whole job
        abort_job(comm, rank, exc)
    return 0


if __name__ == "__main__":
    from mlpstorage_py.launch.rank_guard import die_with_parent

    die_with_parent(_PARENT)
    sys.exit(main(sys.argv[1]))
