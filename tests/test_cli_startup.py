"""`mlpstorage --help` and `version` start light: no numpy, no YAML tables, no engine.

Other command families register parsers in mlpstorage_py/cli/*.py; an import added at a parser
module's top (a table read, an engine) lands here as a failure naming the module."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("numpy", "yaml", "mpi4py", "pymilvus", "s3dlio", "dlio_benchmark", "torch")
HEAVY_PREFIXES = ("mlpstorage_py.checkpoint", "mlpstorage_py.benchmarks", "mlpstorage_py.checker",
                  "mlpstorage_py.vectordb", "mlpstorage_py.report", "mlpstorage_py.storage")
PROBE = """
import json, sys
from mlpstorage_py.main import main
sys.stdout = open("/dev/null", "w")
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
sys.stderr.write(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def loaded(*argv: str) -> tuple[int, list[str]]:
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=60)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    return report["code"], report["modules"]


@pytest.mark.parametrize("argv", [["--help"], ["version"]], ids=["help", "version"])
def test_light_commands_import_no_tables_or_engines(argv: list[str]) -> None:
    code, modules = loaded(*argv)
    assert code == 0
    heavy = [m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY_PREFIXES)]
    assert heavy == [], f"`mlpstorage {' '.join(argv)}` imported {heavy}"


def test_a_benchmark_command_still_builds_its_mode_tree() -> None:
    """The lazy tree is real: a closed command still sees the closed-only refusals and tables."""
    code, modules = loaded("closed", "checkpointing", "--help")
    assert code == 0 and "yaml" in modules
    proc = subprocess.run([sys.executable, "-m", "mlpstorage_py", "closed", "training", "unet3d", "run", "-aip"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not allowed in the closed division" in proc.stderr


def test_the_installed_command_exits_with_a_frozen_heap_and_runs_its_exit_handlers(tmp_path) -> None:
    """console() freezes the heap before exiting, so the interpreter's last collections skip
    what the command left; exit handlers (logging's flush, multiprocessing's) still run, and
    the exit code is main()'s."""
    seen = tmp_path / "seen.json"
    code = (
        "import atexit, gc, json, sys\n"
        f"atexit.register(lambda: open({str(seen)!r}, 'w').write(json.dumps(gc.get_freeze_count())))\n"
        "from mlpstorage_py.main import console\n"
        "sys.argv = ['mlpstorage', 'no-such-command']\n"
        "console()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert json.loads(seen.read_text()) > 0
