"""The type checker (mypy) and the linter (ruff) over the package, as configured in
pyproject.toml: a change that adds a type error or a lint finding fails the suite, and the
failure lists every one. mypy keeps its cache in the repository's .mypy_cache (ignored by git),
so a run after the first checks only what changed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LINTED = ("mlpstorage_py", "kv_cache_benchmark", "bench")


def _tool(name: str) -> Path:
    path = BIN / name
    if not path.is_file():
        pytest.skip(f"{name} is not installed in this environment (requirements-test.txt has it)")
    return path


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
