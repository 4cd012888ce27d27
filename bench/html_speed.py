"""How long `reports html` takes on a large package: the valid synthetic package (tests/synthetic.py,
training and checkpointing) with its system directory replicated until it holds about --leaves
leaves (as validate_speed.py builds it), rendered by `mlpstorage reports html` in a subprocess,
as the user runs it (start-up, one validation, every chart). Prints leaves, results, charts and
seconds, and two references measured in the same run: `mlpstorage validate` of the same tree
(the validation the page includes; the rest is the page's own cost) and an os.walk of it. The
goal (<= 30 s for 1,000 leaves) is the command's.

    .venv/bin/python bench/html_speed.py [--leaves 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from validate_speed import build

from mlpstorage_py.report import reportgen

MLPSTORAGE = str(Path(sys.executable).parent / "mlpstorage")


def build_reported(root: Path, leaves: int) -> int:
    """validate_speed's package of about `leaves` leaves, with its tables written (reports html
    shows them); returns the number of systems."""
    systems, _ = build(root, leaves)
    reportgen.generate(root)
    return systems


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    took = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(argv[:3])} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return took, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--leaves", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command; the median is the figure (default 3)")
    opts = parser.parse_args()
    base = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        root = Path(tmp) / "pkg"
        systems = build_reported(root, opts.leaves)
        # matplotlib's font cache is built once, before any timed run (a first run elsewhere pays it once, too)
        env = dict(os.environ, MPLCONFIGDIR=str(Path(tmp) / "mpl"))
        page = Path(tmp) / "page.html"
        html_argv = [MLPSTORAGE, "reports", "html", "--results-dir", str(root), "--output", str(page), "--force"]
        timed(html_argv, env)
        pages, checks = [], []
        for _ in range(opts.repeat):
            took, out = timed(html_argv, env)
            pages.append(took)
            checks.append(timed([MLPSTORAGE, "validate", str(root)], env)[0])
        start = time.perf_counter()
        files = sum(len(f) for _, _, f in os.walk(root))
        walk = time.perf_counter() - start
        leaves = sum(1 for p in root.rglob("*") if p.is_dir() and re.fullmatch(r"\d{8}_\d{6}", p.name))
    counts = re.search(r"(\d+) results, (\d+) charts", out)
    results, charts = (counts[1], counts[2]) if counts else ("?", "?")
    print(f"{leaves} leaves ({systems} systems, {files} files): {results} results, {charts} charts")
    print(f"mlpstorage reports html (the command): {median(pages):.2f} s "
          f"(median of {len(pages)}: {', '.join(f'{p:.2f}' for p in pages)})")
    print(f"mlpstorage validate of the same tree: {median(checks):.2f} s; os.walk of it: {walk:.3f} s")
    print(f"reports html / validate = {median(pages) / median(checks):.1f}x")


if __name__ == "__main__":
    main()
