"""What the rank reporter with host telemetry costs: CPU seconds per second of a process running a
real telemetry/rank_progress.py Reporter (progress every `deadline.progress_s`, telemetry/sample.py's
Sampler every `deadline.telemetry_s`, the defaults of configs/tool.yaml, as on each host's first
rank), against the same process idle without it, interleaved. Goal: at most 1 % of one core.

    .venv/bin/python bench/telemetry_cost.py [--rounds 5] [--window 4] [--threads 4] [--children 4]

One worker process is measured, shaped like a DLIO rank: a few idle threads (a torch rank has
about four) and a few child processes (DLIO's reader workers), whose tree the reporter walks for
/proc/<pid>/io every progress interval. Its stdout is a pipe this script drains, as a launcher
drains a rank's. Each round has two windows of the same length, their order turning each round:
- reporter: a fresh Reporter started (Sampler made), then, half an interval later, a window of a
  whole number of both intervals (so each window holds the same number of progress lines and
  telemetry samples), its CPU time (time.process_time: every thread of the process) over its wall
  time; the Reporter finished after the window;
- idle (the reference): the same process, the same threads and children, no reporter.
The cost per round is the difference, in percent of one core; printed: the median and the
spread over the rounds, the lines each window carried, the load average, and PASS or FAIL.
What it leaves out: the Sampler's one-off set-up and the last sample at the rank's end, and any
GIL contention with a busy engine (the reporter holds the GIL about a millisecond per tick).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOAL_PCT = 1.0
MARK = "MLPS-BENCH-WINDOW"
RESULT = "MLPS-BENCH-RESULT"


def window_seconds(requested: float, progress_s: float, telemetry_s: float) -> float:
    """The shortest whole multiple of both intervals (to the millisecond) that is >= `requested`."""
    p, t = round(progress_s * 1000), round(telemetry_s * 1000)
    both = p * t // math.gcd(p, t)
    return both * max(1, math.ceil(requested * 1000 / both)) / 1000


def worker(rounds: int, window: float, offset: float, threads: int, children: int, progress_s: float,
           telemetry_s: float) -> None:
    """The measured process: rounds of (reporter window, idle window), order turning; writes a
    mark line before and after each window and a result line at the end, on stdout."""
    from mlpstorage_py.telemetry.rank_progress import Reporter

    stop = threading.Event()
    idle = [threading.Thread(target=stop.wait, daemon=True) for _ in range(threads)]
    for t in idle:
        t.start()
    kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(86400)"], stdout=subprocess.DEVNULL)
            for _ in range(children)]
    out = []

    def mark(text: str) -> None:
        os.write(1, f"{MARK} {text}\n".encode())

    def measure(kind: str, round_no: int) -> None:
        mark(f"start {kind} {round_no}")
        wall0, cpu0 = time.monotonic(), time.process_time()
        time.sleep(window)
        cpu1, wall1 = time.process_time(), time.monotonic()
        mark(f"end {kind} {round_no}")
        out.append({"round": round_no, "kind": kind, "cpu_s": cpu1 - cpu0, "wall_s": wall1 - wall0})

    try:
        time.sleep(1.0)  # the children's start-up is over before any window
        for round_no in range(rounds):
            order = ("reporter", "idle") if round_no % 2 == 0 else ("idle", "reporter")
            for kind in order:
                if kind == "idle":
                    measure(kind, round_no)
                    continue
                reporter = Reporter(0, progress_s, telemetry_s)  # made here: the Sampler's set-up is outside
                if reporter._sampler is None:
                    raise SystemExit("the reporter made no Sampler (telemetry off, or not local rank 0)")
                reporter.start()
                time.sleep(offset)  # windows sit between the reporter's ticks
                measure(kind, round_no)
                reporter.finish()
    finally:
        stop.set()
        for kid in kids:
            kid.kill()
            kid.wait()
    os.write(1, f"{RESULT} {json.dumps(out)}\n".encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window", type=float, default=4.0,
                        help="seconds per window, rounded up to a whole multiple of both intervals")
    parser.add_argument("--threads", type=int, default=4, help="idle threads in the measured process")
    parser.add_argument("--children", type=int, default=4, help="idle child processes of the measured process")
    parser.add_argument("--worker", nargs=4, type=float, metavar=("WINDOW", "OFFSET", "PROGRESS_S", "TELEMETRY_S"),
                        help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.worker:
        window, offset, progress_s, telemetry_s = opts.worker
        worker(opts.rounds, window, offset, opts.threads, opts.children, progress_s, telemetry_s)
        return

    sys.path.insert(0, str(REPO))
    from mlpstorage_py.launch.deadline import settings
    from mlpstorage_py.telemetry.rank_progress import LOCAL_RANK_VARIABLES, PROGRESS_TAG, TELEMETRY_TAG

    progress_s, telemetry_s = settings()["progress_s"], settings()["telemetry_s"]
    if telemetry_s <= 0 or progress_s <= 0:
        raise SystemExit(f"configs/tool.yaml: progress_s {progress_s:g}, telemetry_s {telemetry_s:g}: nothing to measure")
    window = window_seconds(opts.window, progress_s, telemetry_s)
    offset = min(progress_s, telemetry_s) / 2
    load_before = os.getloadavg()
    print(f"reporter: progress every {progress_s:g} s, telemetry every {telemetry_s:g} s (configs/tool.yaml); "
          f"measured process: {opts.threads} idle threads, {opts.children} child processes; "
          f"{opts.rounds} rounds of two {window:g} s windows, order turning; reference: the same process idle")
    env = {k: v for k, v in os.environ.items() if k not in LOCAL_RANK_VARIABLES}  # local rank 0: it samples
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.Popen([sys.executable, __file__, "--rounds", str(opts.rounds), "--threads", str(opts.threads),
                             "--children", str(opts.children), "--worker", str(window), str(offset), str(progress_s),
                             str(telemetry_s)], stdout=subprocess.PIPE, env=env, text=True)
    lines: dict[tuple[str, int], dict[str, int]] = {}
    current: tuple[str, int] | None = None
    windows: list[dict] = []
    assert proc.stdout is not None
    for line in proc.stdout:  # drained as it comes, as a launcher drains a rank's output
        tag, _, rest = line.rstrip("\n").partition(" ")
        if tag == MARK:
            edge, kind, round_no = rest.split()
            current = (kind, int(round_no)) if edge == "start" else None
            if current:
                lines[current] = {"progress": 0, "telemetry": 0}
        elif tag in (PROGRESS_TAG, TELEMETRY_TAG) and current:
            lines[current]["progress" if tag == PROGRESS_TAG else "telemetry"] += 1
        elif tag == RESULT:
            windows = json.loads(rest)
    if proc.wait() != 0 or not windows:
        raise SystemExit(f"the measured process exited {proc.returncode} without its figures")

    def pct(w: dict) -> float:
        return 100 * w["cpu_s"] / w["wall_s"]

    costs, reps, idles, per_tick = [], [], [], []
    for round_no in range(opts.rounds):
        rep, idle = ([w for w in windows if w["round"] == round_no and w["kind"] == k][0] for k in ("reporter", "idle"))
        seen = lines.get(("reporter", round_no), {"progress": 0, "telemetry": 0})
        reps.append(pct(rep))
        idles.append(pct(idle))
        costs.append(reps[-1] - idles[-1])
        ticks = max(1, seen["progress"])
        per_tick.append(1000 * (rep["cpu_s"] - idle["cpu_s"] * rep["wall_s"] / idle["wall_s"]) / ticks)
        print(f"round {round_no + 1}: reporter {reps[-1]:.3f} % of one core, idle {idles[-1]:.3f} %, "
              f"cost {costs[-1]:.3f} % ({seen['progress']} progress lines, {seen['telemetry']} telemetry samples in "
              f"{rep['wall_s']:.2f} s; {per_tick[-1]:.2f} ms CPU per progress tick)")
        if seen["telemetry"] < round(window / telemetry_s) - 1:
            raise SystemExit(f"round {round_no + 1}: the reporter window held {seen['telemetry']} telemetry samples, "
                             f"expected {window / telemetry_s:g}")
    med = statistics.median(costs)
    load = os.getloadavg()
    print(f"load average before {', '.join(f'{x:.2f}' for x in load_before)}, after {', '.join(f'{x:.2f}' for x in load)}")
    print(f"telemetry cost: median {med:.3f} % of one core (min {min(costs):.3f}, max {max(costs):.3f}; "
          f"{opts.rounds} rounds), reporter {statistics.median(reps):.3f} %, reference idle "
          f"{statistics.median(idles):.3f} %; {statistics.median(per_tick):.2f} ms CPU per tick")
    print(f"{'PASS' if med <= GOAL_PCT else 'FAIL'}: goal <= {GOAL_PCT:g} % of one core")
    print("BENCH " + json.dumps({"cost_pct": med, "min_pct": min(costs), "max_pct": max(costs),
                                 "reporter_pct": statistics.median(reps), "idle_pct": statistics.median(idles),
                                 "ms_per_tick": statistics.median(per_tick), "rounds": opts.rounds,
                                 "window_s": window, "progress_s": progress_s, "telemetry_s": telemetry_s,
                                 "load_average": list(load), "goal_pct": GOAL_PCT}))


if __name__ == "__main__":
    main()
