#!/usr/bin/env python3
"""Per-rank launcher for kv-cache.py under MPI (rules 6.3.3.1 and 6.3.3.3).

mpirun starts one wrapper per rank. The wrapper finds its rank, derives the seed (base seed +
rank) and the rank's private paths, and runs kv-cache.py in its own process (with its argv and
`__main__`, so the rank's exit status is kv-cache.py's):

    mpirun -n 4 python mlperf_wrapper.py --rank-output-base OUT --rank-cache-base CACHE \\
        --seed-base 42 -- --model llama3.1-8b --num-users 200 ...

    output: OUT/rank_<N>/kvcache_results_<timestamp>.json
    cache:  CACHE/rank_<N>/

Every workload argument after the wrapper's own is forwarded verbatim; the wrapper encodes
no workload parameters. With `--libraries DIR` (mlpstorage passes it), the rank records in DIR,
once kv-cache.py is done, the library versions it imported (mlpstorage_py/results/libraries.py
of the source tree this file belongs to). `--probe-shared FILE --probe-token TEXT` instead checks that FILE is
visible with that content on this rank's host (the shared results directory check, 6.3.3.4) and
prints one `MLPS-KVCACHE-PROBE {json}` line (rank, hostname, path, visible, detail), then exits 0.
Before kv-cache.py runs, each rank asks the kernel to end it with its launcher and, once the
simulator is imported, prints one `MLPS-RANK-STARTED {json}` line (rank, host, pid): what
mlpstorage's start-up allowance waits for (mlpstorage_py/launch/heartbeat.py).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import runpy
import signal
import socket
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The launcher that started this rank, read before anything can outlive it (die_with_parent).
PARENT = os.getppid()
# The line a rank prints once started, which mlpstorage's launcher watches for (the same as
# mlpstorage_py/launch/heartbeat.py's; this file runs without mlpstorage installed).
STARTED_TAG = "MLPS-RANK-STARTED"
WORK_MARK_ENV = "MLPSTORAGE_WORK_MARK"  # getpgid() of the run's mark starts its work for mlpstorage's I/O tracer (heartbeat.py)
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID")
RESERVED = ("--seed", "--output", "--cache-dir")


def detect_rank(env: dict[str, str] | None = None) -> int:
    """This process's MPI rank from the launcher's environment (Open MPI, PMIx, MPICH/PMI,
    MVAPICH, Slurm), else 0."""
    env = os.environ if env is None else env
    for name in RANK_VARIABLES:
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return 0


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="mlperf_wrapper.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rank-output-base", help="directory receiving rank_<N>/kvcache_results_<ts>.json")
    parser.add_argument("--rank-cache-base", help="directory receiving each rank's cache dir rank_<N>/")
    parser.add_argument("--seed-base", type=int, default=42, help="base seed; rank N uses base + N (default 42)")
    parser.add_argument("--timestamp", help="timestamp in the output file name (default: now)")
    parser.add_argument("--kv-cache", default=str(HERE / "kv-cache.py"), help="kv-cache.py to run")
    parser.add_argument("--probe-shared", help="only check that this file exists here with --probe-token as content")
    parser.add_argument("--probe-token", default="")
    parser.add_argument("--libraries", help="record the library versions this rank imported in this directory")
    if "--" in argv:
        cut = argv.index("--")
        args = parser.parse_args(argv[:cut])
        forwarded = argv[cut + 1:]
    else:
        args, forwarded = parser.parse_known_args(argv)
    return args, forwarded


PROBE_TAG = "MLPS-KVCACHE-PROBE "


def probe(path: str, token: str, rank: int) -> int:
    """Report on stdout, as one tagged JSON line, whether this host sees the marker; 0 when it
    does, 1 when it does not."""
    host = socket.gethostname()
    record = {"rank": rank, "hostname": host, "path": path, "visible": False}
    try:
        content = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        record["detail"] = f"not visible ({exc.strerror})"
    else:
        if content == token:
            record.update(visible=True, detail="visible")
        else:
            record["detail"] = "holds different content (another file system at the same path)"
    print(PROBE_TAG + json.dumps(record), flush=True)
    return 0 if record["visible"] else 1


def kv_cache_argv(args: argparse.Namespace, forwarded: list[str], rank: int) -> list[str]:
    for token in forwarded:
        if token.split("=")[0] in RESERVED:
            raise SystemExit(f"mlperf_wrapper.py: error: {token.split('=')[0]} is set by the wrapper per rank; "
                             "pass --seed-base / --rank-output-base / --rank-cache-base instead")
    if not args.rank_output_base or not args.rank_cache_base:
        raise SystemExit("mlperf_wrapper.py: error: --rank-output-base and --rank-cache-base are required")
    stamp = args.timestamp or time.strftime("%Y%m%d_%H%M%S")
    out_dir = Path(args.rank_output_base) / f"rank_{rank}"
    out_dir.mkdir(parents=True, exist_ok=True)
    cache_dir = Path(args.rank_cache_base) / f"rank_{rank}"
    return [sys.executable, args.kv_cache, *forwarded, "--seed", str(args.seed_base + rank),
            "--output", str(out_dir / f"kvcache_results_{stamp}.json"), "--cache-dir", str(cache_dir)]


def die_with_parent() -> None:
    """SIGTERM this rank (the process that then runs kv-cache.py) the moment its launcher exits,
    even a launcher that dies without passing a signal on: no rank runs on with parent 1. One
    that died before the request took effect shows as a parent other than the first."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != PARENT or PARENT == 1:
            os.kill(os.getpid(), signal.SIGTERM)


def report_started(rank: int, kv_cache: str) -> None:
    """Once kv-cache.py's imports are done (ours: the simulator package), say so in one line on
    stdout; with no reader left (the launcher is gone) the rank ends here."""
    if Path(kv_cache).resolve() == HERE / "kv-cache.py":
        sys.path.insert(0, str(HERE))
        import kvcache_sim.cli  # noqa: F401 - the imports kv-cache.py's first line then finds done
    mark = os.environ.get(WORK_MARK_ENV, "")
    if mark.isdigit():
        try:
            os.getpgid(int(mark))  # fails at once (ESRCH); the run's tracer counts this rank's I/O as work from here
        except (OSError, OverflowError):
            pass
    try:
        print(f"{STARTED_TAG} " + json.dumps({"rank": rank, "host": socket.gethostname(), "pid": os.getpid()}), flush=True)
    except BrokenPipeError:
        os._exit(1)
    start_progress(rank)


def start_progress(rank: int) -> None:
    """The rank's progress lines and its host's telemetry (mlpstorage's reporter, beside this
    directory, standard library only), every few seconds from here on: the bytes kv-cache.py
    reads and writes in this process are the rank's progress."""
    if str(HERE.parent) not in sys.path:
        sys.path.append(str(HERE.parent))
    from mlpstorage_py.telemetry import rank_progress

    rank_progress.start(rank)


def main(argv: list[str] | None = None) -> int:
    args, forwarded = parse(list(sys.argv[1:] if argv is None else argv))
    rank = detect_rank()
    if args.probe_shared:
        # Exit 0 once the answer is printed: a rank exiting non-zero makes mpirun kill the
        # others before they report, and its exit status must mean "could not launch" only.
        probe(args.probe_shared, args.probe_token, rank)
        return 0
    command = kv_cache_argv(args, forwarded, rank)
    die_with_parent()
    report_started(rank, command[1])
    sys.argv = command[1:]
    try:
        runpy.run_path(command[1], run_name="__main__")
        finish_progress()
    finally:
        if args.libraries:
            report_libraries(args.libraries, rank)
    return 0


def finish_progress() -> None:
    """kv-cache.py is done with this rank's share: its last progress line says so."""
    from mlpstorage_py.telemetry import rank_progress

    reporter = rank_progress.current()
    if reporter is not None:
        reporter.finish()


def report_libraries(directory: str, rank: int) -> None:
    """The rank's imported library versions, by mlpstorage's recorder (beside this directory)."""
    if str(HERE.parent) not in sys.path:
        sys.path.append(str(HERE.parent))
    from mlpstorage_py.results import libraries

    libraries.report(directory, rank)


if __name__ == "__main__":
    sys.exit(main())
