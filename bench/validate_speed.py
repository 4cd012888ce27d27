"""How long `validate` takes on a large package: a valid synthetic package (tests/synthetic.py)
whose system directory is replicated until the package holds about --leaves run leaves, then
validated twice: in-process (checker.validate) and as the user runs it (`mlpstorage validate
PKG` in a subprocess: start-up, rules and the grouped report it prints). Prints leaves, seconds
and leaves/second, and the time to walk the tree with os.walk as the reference measured in the
same run (the floor any checker pays). The goal (<= 3 s per 10,000 leaves) is the command's.

validate reads each file once, and from checker.POOL_MIN_LEAVES leaves on, with a second
core free, checks the package in forked workers, part by part (checker.workers): the figure
depends on the cores the machine gives. The replicated systems hold identical files, so a
cache keyed by content would flatter it; validate keys what it reads by path.

    .venv/bin/python bench/validate_speed.py [--leaves 10000] [--repeat 3]
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
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from synthetic import make_package  # noqa: E402

from mlpstorage_py import checker  # noqa: E402
from mlpstorage_py.report import reportgen  # noqa: E402


def rename_system(tree: Path, name: str) -> None:
    """A copy records the system it is filed under (as a real package's runs do), so the bench
    validates a package of valid systems, not 10,000 leaves filed under the wrong name."""
    for path in tree.rglob("*"):
        if path.suffix in (".json", ".yaml") and path.is_file():
            text = path.read_text()
            if "sys1" in text:
                path.write_text(re.sub(r"\bsys1\b", name, text))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--leaves", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of the command; the median is the figure (default 3)")
    opts = parser.parse_args()
    base = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        root = make_package(Path(tmp) / "pkg")
        results = root / "closed" / "Acme" / "results"
        template = results / "sys1"
        per_system = sum(1 for p in template.rglob("*") if p.is_dir() and p.name[:8].isdigit())
        systems = max(1, opts.leaves // per_system)
        for i in range(2, systems + 1):
            shutil.copytree(template, results / f"sys{i}")
            rename_system(results / f"sys{i}", f"sys{i}")
            for ext in ("yaml", "pdf"):
                shutil.copyfile(root / "closed/Acme/systems" / f"sys1.{ext}", root / "closed/Acme/systems" / f"sys{i}.{ext}")
        reportgen.generate(root)
        start = time.perf_counter()
        files = sum(len(f) for _, _, f in os.walk(root))
        walk = time.perf_counter() - start
        # The command first, while this process holds nothing of the package; --repeat times,
        # the median the figure (this shared machine swings by a tenth from run to run).
        commands = []
        for _ in range(opts.repeat):
            start = time.perf_counter()
            cli = subprocess.run([str(Path(sys.executable).parent / "mlpstorage"), "validate", str(root)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            commands.append(time.perf_counter() - start)
            if cli.returncode not in (0, 1):
                sys.exit(f"mlpstorage validate exited {cli.returncode}: {cli.stderr.strip()[-500:]}")
        command = median(commands)
        start = time.perf_counter()
        pkg, findings = checker.validate(root)
        took = time.perf_counter() - start
        leaves = len(pkg.leaves)
        del pkg
    invalid = sum(f.severity == "INVALID" for f in findings)
    print(f"{leaves} leaves ({systems} systems, {files} files): validate {took:.2f} s "
          f"({leaves / took:,.0f} leaves/s), {invalid} invalid findings")
    print(f"mlpstorage validate (the command, output included): {command:.2f} s "
          f"(median of {len(commands)}: {', '.join(f'{c:.2f}' for c in commands)})")
    print(f"os.walk of the same tree: {walk:.2f} s; validate / walk = {took / walk:.1f}x")


if __name__ == "__main__":
    main()
