"""The working group's own submission checker (mlpstorage 3.0.26, `mlpstorage_py/submission_checker`
at 058a87e) on a CLOSED package shaped as this tool writes it: no traceback, and no rejection
but those ManPage lists (REFERENCE CHECKER), each of which the edition's rules and the published
v3.0 release make ours right on, and each of which the reference raises on the published release
too.

Its package shares our name `mlpstorage_py`, so it never runs beside ours: it runs from its own
directory (MLPSTORAGE_REFERENCE_CHECKER, default ../scratch/refcheck) with that directory's own
venv (.venv/bin/python), and the test first proves that interpreter imports the reference's
package, not ours. Skips without that copy.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

import synthetic
import synthetic_families
from conftest import REALDATA, REPO

REFERENCE = Path(os.environ.get("MLPSTORAGE_REFERENCE_CHECKER") or REPO.parent / "scratch" / "refcheck")
PYTHON = REFERENCE / ".venv" / "bin" / "python"
pytestmark = pytest.mark.skipif(not (REFERENCE / "mlpstorage_py" / "submission_checker").is_dir() or not PYTHON.is_file(),
                                reason=f"no reference checker copy with its own venv at {REFERENCE} "
                                       "(MLPSTORAGE_REFERENCE_CHECKER; ManPage, REFERENCE CHECKER)")

# The rejections the reference raises where the edition's rules and the published release make
# ours right (ManPage, REFERENCE CHECKER, names the rule of each).
KNOWN = {
    "2.1.2": [r"unexpected top-level directory '[^']+' \(expected only 'closed' and/or 'open'\)"],
    "2.1.5": [r"required subdirectory 'code' missing from (closed|open)/"],
    "2.1.6": [r"required code/ directory missing at "],
    "2.1.7": [r"system_under_test -> solution -> (usable_capacity_tib|availability): Extra inputs are not permitted"],
    "2.1.10": [r"unexpected workload category '(kv_cache|vector_database)'",
               r"unrecognized mode directory '(kv_cache|vector_database)'",
               r"contains neither 'training' nor 'checkpointing'"],
    "2.1.12": [r"unexpected directory 'datasize' in training/"],
}
ROLLUP = re.compile(r"^\[ERROR\] (Some .* failed for: |SUMMARY: submission has errors)")
RULED = re.compile(r"^\[ERROR\] \[(\S+) \w+\] \S+: (.*)$")


def reference(package: Path, tmp_path: Path) -> tuple[int, list[str]]:
    """The reference's exit status and output lines, run from its own directory and venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    which = subprocess.run([str(PYTHON), "-c", "import mlpstorage_py; print(mlpstorage_py.__file__)"], cwd=REFERENCE,
                           env=env, capture_output=True, text=True, timeout=60)
    assert Path(which.stdout.strip()).resolve().is_relative_to(REFERENCE.resolve()), which.stdout + which.stderr
    proc = subprocess.run([str(PYTHON), "-m", "mlpstorage_py.submission_checker", "--input", str(package),
                           "--version", "v3.0", "--csv", str(tmp_path / "reference-summary.csv")],
                          cwd=REFERENCE, env=env, capture_output=True, text=True, timeout=600)
    return proc.returncode, (proc.stdout + proc.stderr).splitlines()


def unexplained(lines: list[str]) -> list[str]:
    """ERROR lines that no KNOWN pattern of their rule explains."""
    left = []
    for line in lines:
        if not line.startswith("[ERROR]") or ROLLUP.match(line):
            continue
        found = RULED.match(line)
        if not found or not any(re.search(p, found[2]) for p in KNOWN.get(found[1], [])):
            left.append(line)
    return left


def explained_by(lines: list[str]) -> set[tuple[str, str]]:
    return {(rule, pattern) for line in lines if (found := RULED.match(line))
            for rule, patterns in KNOWN.items() if rule == found[1] for pattern in patterns if re.search(pattern, found[2])}


@pytest.fixture(scope="module")
def closed_package(tmp_path_factory) -> Path:
    with synthetic_families.registered():
        return synthetic.make_package(tmp_path_factory.mktemp("ref") / "pkg",
                                      families=("training", "checkpointing", "vector_database", "kv_cache"))


def test_no_traceback_and_only_the_documented_rejections(closed_package, tmp_path):
    rc, lines = reference(closed_package, tmp_path)
    text = "\n".join(lines)
    assert "Traceback" not in text and "TypeError" not in text, text[-3000:]
    assert rc in (0, 1), text[-3000:]
    assert unexplained(lines) == [], "\n".join(unexplained(lines))
    # the package is read, not skipped: its training runs and checkpoints reach the reference's checks
    assert any("3.4.2" in line for line in lines) and any("4.4.2" in line for line in lines)


def test_a_null_host_list_would_crash_it(closed_package, tmp_path):
    """Why metadata writes args.hosts as a list: the same package with null there is a traceback."""
    import json
    import shutil

    broken = shutil.copytree(closed_package, tmp_path / "pkg")
    for path in broken.glob("closed/*/results/*/training/*/run/*/training_*_metadata.json"):
        data = json.loads(path.read_text(encoding="utf-8"))
        data["args"]["hosts"] = None
        path.write_text(json.dumps(data), encoding="utf-8")
    _, lines = reference(broken, tmp_path)
    assert "TypeError: object of type 'NoneType' has no len()" in "\n".join(lines)


@pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
def test_each_documented_rejection_is_one_the_published_release_draws_too(closed_package, tmp_path):
    _, ours = reference(closed_package, tmp_path)
    _, published = reference(REALDATA, tmp_path)
    assert explained_by(ours) <= explained_by(published)
