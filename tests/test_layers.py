"""The package's layers kept by contract (.importlinter, the architecture's picture), no dead
code (vulture), no type error (mypy) and no lint finding (ruff): all run here so a change that
breaks any fails the suite. mypy keeps its cache in the repository's .mypy_cache (ignored by
git), so a run after the first checks only what changed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# What ruff checks (pyproject.toml's [tool.ruff]); mypy checks mlpstorage_py ([tool.mypy]).
LINTED = ("mlpstorage_py", "kv_cache_benchmark", "bench")
# vulture reports names it cannot see used at 60 % confidence and up: unused functions,
# classes, methods, attributes and variables (100 % for unreachable code and unused arguments).
VULTURE_CONFIDENCE = 60


def _tool(name: str) -> Path:
    path = BIN / name
    if not path.is_file():
        pytest.skip(f"{name} is not installed in this environment (requirements-test.txt has it)")
    return path


def test_imports_follow_the_layers():
    """Every contract in .importlinter holds: lint-imports exits 0 and says so."""
    done = subprocess.run([str(_tool("lint-imports")), "--config", str(ROOT / ".importlinter"), "--no-cache"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_no_dead_code():
    """vulture finds no unused code in the package, the KV cache benchmark, the tests or the
    benches. A rule's checks are used by their registration: the registry lists the registered
    rules' (`@rule(...).check(...)`, which vulture cannot name), `@<rule>.check(...)` marks the
    others'; tests/vulture_allowlist.py names what a framework or an entry point calls by name."""
    vulture = pytest.importorskip("vulture", reason="vulture is not installed (requirements-test.txt has it)")
    from mlpstorage_py.checker import RULES

    # a calibrated rule's check is wrapped (checker.calibrations.install): its function is the wrapped one
    funcs = [getattr(c.func, "__wrapped__", c.func) for r in RULES.values() for c in r.checks]
    registered = {(Path(f.__code__.co_filename).resolve(), f.__name__) for f in funcs}
    scan = vulture.Vulture(ignore_decorators=["@*.check"])
    scan.scavenge([str(ROOT / p) for p in ("mlpstorage_py", "kv_cache_benchmark", "tests", "bench")])
    unused = [f"{item.filename}:{item.first_lineno}: {item.message}"
              for item in scan.get_unused_code(min_confidence=VULTURE_CONFIDENCE)
              if (Path(item.filename).resolve(), item.name) not in registered]
    assert not unused, "\n".join(unused)


def test_readme_layout_matches_the_contract():
    """README's layout table names every layer of .importlinter, in the contract's order."""
    contract = (ROOT / ".importlinter").read_text()
    layers = contract.split("layers =", 1)[1].split("\n\n", 1)[0].split()
    rooms = [name.removeprefix("mlpstorage_py.") for name in layers if name.startswith("mlpstorage_py.")]
    readme = (ROOT / "README.md").read_text()
    table = readme.split("<!-- layers -->", 2)[1]
    positions = [table.find(f"`{room}`") for room in rooms]
    assert -1 not in positions, [room for room, at in zip(rooms, positions) if at == -1]
    assert positions == sorted(positions), "README's layout table lists the layers out of the contract's order"


def test_readers_contract_names_every_rule_module():
    """The contract that keeps report/ and submission/ off the checker's rule modules lists each
    of them (import-linter's wildcards replace whole names only): a new rules_*.py joins it."""
    contract = (ROOT / ".importlinter").read_text().split("[importlinter:contract:readers-not-rules]", 1)[1]
    listed = {line.strip() for line in contract.split("forbidden_modules =", 1)[1].split("allow_indirect", 1)[0].splitlines()
              if line.strip() and not line.strip().startswith(";")}
    present = {f"mlpstorage_py.checker.{path.stem}" for path in (ROOT / "mlpstorage_py" / "checker").glob("rules_*.py")}
    assert listed == present


def test_mypy_finds_no_type_errors():
    """mypy over mlpstorage_py (pyproject.toml's [tool.mypy]: strict on results/, checker/ and
    launch/, checked everywhere else) reports no error."""
    done = subprocess.run([str(_tool("mypy")), "--cache-dir", str(ROOT / ".mypy_cache"), "--no-pretty",
                           "--no-error-summary"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert not errors, f"{len(errors)} mypy errors:\n" + "\n".join(errors)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


def test_ruff_finds_nothing():
    """`ruff check` over the package, the KV cache benchmark and the benches (pyproject.toml's
    [tool.ruff]) reports no finding."""
    done = subprocess.run([str(_tool("ruff")), "check", "--no-fix", "--output-format", "concise", *LINTED],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    findings = [line for line in done.stdout.splitlines() if line.startswith(LINTED)]
    assert not findings, f"{len(findings)} ruff findings:\n" + "\n".join(findings)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
