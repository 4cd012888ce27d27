"""How long the commands that read a whole package take on a large one, beside the bare floor.

The tree: a valid synthetic package (tests/synthetic.py) whose system directory is replicated
until the package holds about --leaves run leaves, built once in /dev/shm when there is one and
made consistent by one (untimed) `mlpstorage reports reportgen`. On it, each command is run as
the user runs it (the installed `mlpstorage` entry point in a subprocess: start-up, reading, the
output it prints), --repeat times, the median the figure:

    validate PKG                       goal <= 2.5 s at 10,000 leaves, <= 20 s at 100,000,
                                       peak RSS <= 1.5 GiB at 100,000 (issue 26)
    status PKG                         goal <= 3 s at 10,000 leaves
    reports reportgen --results-dir    goal <= 5 s at 10,000 leaves (rewrites the same files)

The floor, measured in the same run on the same tree: an os.walk plus one read (open, read all
bytes) of every file, the least any command that looks at each file once pays. Each command is
printed in seconds and as a ratio to the floor, with its CPU seconds (user + system, which a
busy machine inflates far less than the wall time). A fixed pure-Python loop, timed in a
fresh interpreter before the commands and after each, shows whether the machine's Python speed
held during the runs (printed, with a warning when it moved by more than a fifth). Peak RSS is
the child's ru_maxrss from os.wait4: the largest single process of the command (forked workers
included, as the kernel folds waited descendants in), not their sum.

validate checks a large package in forked workers when a second core is free
(checker.workers): the figure depends on the cores this process may use (printed). The
replicated systems hold identical files, so a cache keyed by content would flatter the
commands; they key what they read by path.

    .venv/bin/python bench/validate_speed.py [--leaves 10000] [--repeat 3] [--commands validate status reportgen]
        [--tree DIR]

--tree DIR times the package in DIR, built there (and kept) when DIR does not exist yet: a
100,000-leaf tree takes minutes and 4 GiB to build, and the figures of two code versions compare
best on one tree.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from synthetic import make_package

MLPSTORAGE = str(Path(sys.executable).parent / "mlpstorage")
COMMANDS = ("validate", "status", "reportgen")
# A fixed pure-Python loop in a fresh interpreter, timed before the commands and after each:
# on a shared VM the speed of Python itself can move by 1.9x within minutes with nothing else
# running (ManPage, Performance), and the floor, which is mostly system calls, does not show it.
PROBE = "import time\nt = time.process_time()\nx = 0\nfor i in range(5_000_000):\n    x += i\nprint(time.process_time() - t)"
PROBE_SPREAD = 1.2


def rename_system(tree: Path, name: str) -> None:
    """A copy records the system it is filed under (as a real package's runs do), so the bench
    validates a package of valid systems, not 10,000 leaves filed under the wrong name."""
    for path in tree.rglob("*"):
        if path.suffix in (".json", ".yaml") and path.is_file():
            text = path.read_text()
            if "sys1" in text:
                path.write_text(re.sub(r"\bsys1\b", name, text))


def build(root: Path, leaves: int) -> tuple[int, int]:
    """The package at root with about `leaves` leaves: (systems, leaves) it holds."""
    make_package(root)
    results = root / "closed" / "Acme" / "results"
    template = results / "sys1"
    per_system = sum(1 for p in template.rglob("*") if p.is_dir() and p.name[:8].isdigit())
    systems = max(1, leaves // per_system)
    room(root, template, systems - 1)
    for i in range(2, systems + 1):
        shutil.copytree(template, results / f"sys{i}")
        rename_system(results / f"sys{i}", f"sys{i}")
        for ext in ("yaml", "pdf"):
            shutil.copyfile(root / "closed/Acme/systems" / f"sys1.{ext}", root / "closed/Acme/systems" / f"sys{i}.{ext}")
    return systems, systems * per_system


def room(root: Path, template: Path, copies: int) -> None:
    """Stop, saying why, when the filesystem lacks the inodes or bytes for `copies` more
    systems: a 100,000-leaf tree takes 1.27 M inodes, and a tmpfs that already holds one ran
    out part-way through the copying, with a traceback."""
    entries = sum(1 for _ in template.rglob("*")) + 2  # and the system's description files
    size = sum(-(-p.stat().st_size // 4096) * 4096 for p in template.rglob("*") if p.is_file())  # whole pages
    got = os.statvfs(root)
    inodes, free = entries * copies, size * copies
    if got.f_files and got.f_favail < inodes:
        sys.exit(f"{root.parent}: {got.f_favail} free inodes, the tree needs about {inodes} (remove older trees there)")
    if got.f_bavail * got.f_frsize < free:
        sys.exit(f"{root.parent}: {got.f_bavail * got.f_frsize >> 20} MiB free, the tree needs about {free >> 20} MiB")


def floor(root: Path) -> tuple[float, float, int, int]:
    """(walk+read seconds, walk-only seconds, files, bytes): the bare floor, and the bare walk."""
    start = time.perf_counter()
    for _ in os.walk(root):
        pass
    walk = time.perf_counter() - start
    files = size = 0
    start = time.perf_counter()
    for base, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(base, name), "rb") as fh:
                size += len(fh.read())
            files += 1
    return time.perf_counter() - start, walk, files, size


@dataclass
class Run:
    seconds: float
    rc: int
    maxrss_kib: int
    cpu: float  # user + system seconds, the command's and its reaped workers'
    stderr: str


def machine() -> str:
    """The processor the kernel reports, and whether this is a nested virtual machine: the
    goals are seconds, and one machine "of the same kind" has been two processors (ManPage,
    Performance), so every figure is printed with the one it was taken on."""
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if not line.strip():
                break  # the first processor's block
            name, _, value = line.partition(":")
            info[name.strip()] = value.strip()
        nested = "nested_pvm=1" in Path("/proc/cmdline").read_text(encoding="utf-8", errors="replace").split()
    except OSError:
        return "processor unknown (no /proc)"
    return (f"processor {info.get('model name', '?')} (family {info.get('cpu family', '?')}, model {info.get('model', '?')}, "
            f"{info.get('cpu MHz', '?')} MHz){', a nested virtual machine (PVM)' if nested else ''}")


def probe() -> float:
    """CPU seconds of PROBE in a fresh interpreter, started as each command is."""
    done = subprocess.run([sys.executable, "-S", "-c", PROBE], capture_output=True, text=True, check=True)
    return float(done.stdout)


def run_once(argv: list[str]) -> Run:
    """One run of the command; its own rusage via wait4 (RUSAGE_CHILDREN would be cumulative)."""
    start = time.perf_counter()
    proc = subprocess.Popen([MLPSTORAGE, *argv], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()  # the pipe drains while the child runs; EOF when it exits
    proc.stderr.close()
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    return Run(took, proc.returncode, usage.ru_maxrss, usage.ru_utime + usage.ru_stime, err.decode(errors="replace"))


def argv_of(command: str, root: Path) -> list[str]:
    return {"validate": ["validate", str(root)], "status": ["status", str(root)],
            "reportgen": ["reports", "reportgen", "--results-dir", str(root)]}[command]


def measure(command: str, root: Path, repeat: int) -> list[Run]:
    """--repeat runs. The tree is valid, so anything but exit 0 ends the bench: a command that
    fails fast (or finds the tree invalid) would be timed doing something else."""
    runs = []
    for _ in range(repeat):
        r = run_once(argv_of(command, root))
        if r.rc != 0:
            sys.exit(f"mlpstorage {command} exited {r.rc}: {r.stderr.strip()[-800:]}")
        runs.append(r)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leaves", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command; the median is the figure (default 3)")
    parser.add_argument("--commands", nargs="+", choices=COMMANDS, default=list(COMMANDS),
                        help="the commands to time (default: all three)")
    parser.add_argument("--tree", type=Path, help="the package to time, built there first (and kept) if DIR does not exist")
    opts = parser.parse_args()
    base = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        bench(opts, opts.tree or Path(tmp) / "pkg")


def prepare(root: Path, leaves: int) -> None:
    """Build the package at root (about `leaves` leaves) and write the rollups it needs, or
    count the one already there."""
    start = time.perf_counter()
    if root.exists():
        results = root / "closed" / "Acme" / "results"
        systems = sum(1 for p in results.iterdir() if p.is_dir())
        leaves = sum(1 for _, dirs, _ in os.walk(results) for d in dirs if re.fullmatch(r"\d{8}_\d{6}", d))
        how = "found"
    else:
        try:
            systems, leaves = build(root, leaves)
            made = run_once(argv_of("reportgen", root))  # the rollups the replicated systems need
            if made.rc != 0:
                sys.exit(f"mlpstorage reports reportgen exited {made.rc}: {made.stderr.strip()[-800:]}")
        except BaseException:  # a part-built tree is not kept: the next run would time it as found
            shutil.rmtree(root, ignore_errors=True)
            raise
        how = "built"
    print(f"tree: {leaves} leaves ({systems} systems) in {root} {how} in {time.perf_counter() - start:.0f} s; "
          f"{len(os.sched_getaffinity(0))} core(s) usable, load average {os.getloadavg()[0]:.2f}; "
          f"Python {sys.version.split()[0]} ({getattr(sys, '_base_executable', sys.executable)}: the build the "
          f"figures depend on, see the Makefile's PYTHON); {machine()}", flush=True)


def bench(opts: argparse.Namespace, root: Path) -> None:
    """Every figure on the package at root."""
    prepare(root, opts.leaves)
    floors = [floor(root) for _ in range(opts.repeat)]
    bare, walk = median(f[0] for f in floors), median(f[1] for f in floors)
    files, size = floors[0][2], floors[0][3]
    print(f"bare floor (os.walk + one read of every file): {bare:.2f} s "
          f"({files} files, {size / 2**20:.0f} MiB; median of {len(floors)})")
    print(f"os.walk of the same tree: {walk:.2f} s")
    probes = [probe()]
    for command in opts.commands:
        runs = measure(command, root, opts.repeat)
        probes.append(probe())
        secs = median(r.seconds for r in runs)
        rss = max(r.maxrss_kib for r in runs) / 1024
        label = {"validate": "mlpstorage validate (the command, output included)",
                 "status": "mlpstorage status (the command, output included)",
                 "reportgen": "mlpstorage reports reportgen (the command)"}[command]
        print(f"{label}: {secs:.2f} s (median of {len(runs)}: {', '.join(f'{r.seconds:.2f}' for r in runs)}); "
              f"{secs / bare:.1f}x the floor; peak RSS {rss:.0f} MiB; "
              f"CPU {median(r.cpu for r in runs):.2f} s (user+sys)", flush=True)
    # the floor again: a figure next to a floor that moved (the machine got busier) is suspect
    after = floor(root)[0]
    print(f"bare floor after the commands: {after:.2f} s")
    spread = max(probes) / min(probes)
    print(f"Python speed probe (a fixed loop in a fresh interpreter, CPU s), before the commands and after each: "
          f"{', '.join(f'{p:.3f}' for p in probes)}; spread {spread:.2f}x")
    if spread > PROBE_SPREAD:
        print(f"the machine's Python speed moved by more than {PROBE_SPREAD:.1f}x during these runs: "
              "compare their figures only with figures taken at a like probe")


if __name__ == "__main__":
    main()
