"""The checker fuzzed: hypothesis mutates a valid synthetic package (all four families) and a
copy of the real corpus (../shared/realdata; skipped when absent), then runs `validate` and
`reports reportgen` in-process through main() with a deadline on each.

A case crashes when either command ends in a traceback or an internal error, when a rule
crashes (its finding says "checker error"), when it hangs past the deadline, or when anything
outside the package was read or written: every link out points at a FIFO or into a directory
of FIFOs, so opening one hangs, and its contents are compared afterwards. Figures printed:
cases, crashes (goal 0), and how often each mutation kind was reported as a new finding.

CI runs the "mlps-ci" profile (a few hundred cases, derandomized); bench/faults.py sets
MLPS_FUZZ_CASES (10,000) and the "mlps-bench" profile; MLPS_FUZZ_DUMP=FILE writes the crashes and
the mutations no finding reported there.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

import synthetic
import synthetic_families
from conftest import REALDATA
from fault_figures import record

CASES = int(os.environ.get("MLPS_FUZZ_CASES") or 0) or None
# CI: 150 cases on the synthetic package, 30 on the (larger) real corpus.
settings.register_profile("mlps-ci", max_examples=150, derandomize=True, deadline=None, database=None,
                          suppress_health_check=list(HealthCheck))
settings.register_profile("mlps-bench", max_examples=(CASES or 10000) // 2, deadline=None, database=None,
                          suppress_health_check=list(HealthCheck))
PROFILE = settings.get_profile("mlps-bench" if CASES else "mlps-ci")
DEADLINE_S = 20.0
FAMILIES = ("training", "checkpointing", "vector_database", "kv_cache")
CONTENT_KINDS = ("truncate", "non_utf8", "empty", "wrong_type", "nan_inf_huge", "deep_nesting")
ENTRY_KINDS = ("missing", "extra_file", "link_inside", "link_outside", "fifo", "not_a_file", "odd_name")
KINDS = CONTENT_KINDS + ENTRY_KINDS
ODD_NAMES = ("a" * 255, "new\nline", " leading space", "-dash", "ünïcødé", "semi;$(id)`x`", "...", "20991231_235959",
             b"bad-\xff\xfe-bytes")
OTHER_TYPES: tuple[Any, ...] = (None, True, "text", 7, -1, 1.5, [], {}, [1, "2"], {"a": {"b": None}})


class Hang(BaseException):
    """Raised by the deadline alarm; a BaseException so main()'s handlers do not turn it into an exit code."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hang()


@contextlib.contextmanager
def deadline(seconds: float):
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# A case may use this much more address space than the test had when the fuzzing started: a
# package that makes the checker allocate without bound (a count of 2**63 turned into a range)
# is then a MemoryError in that case, a crash with its seed, not the machine running out.
MEMORY_BOUND = 4 << 30


@contextlib.contextmanager
def memory_bound(extra: int):
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    now = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = now + extra if hard == resource.RLIM_INFINITY else min(now + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


# --- mutations ---------------------------------------------------------------------------

def _entries(root: Path) -> tuple[list[Path], list[Path]]:
    """(files, directories) below root, sorted, links not followed."""
    found_files, dirs = [], []
    for base, names, filenames in os.walk(root):
        dirs.extend(Path(base) / n for n in names)
        found_files.extend(Path(base) / n for n in filenames)
    return sorted(found_files), sorted(dirs)


def _nodes(data: Any, path: tuple = ()) -> list[tuple]:
    """Paths to every value inside parsed JSON/YAML (dict keys and list indexes)."""
    out = [path]
    if isinstance(data, dict):
        for key, value in data.items():
            out.extend(_nodes(value, path + (key,)))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out.extend(_nodes(value, path + (i,)))
    return out


def _replace(data: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return data


def _parsed(path: Path) -> tuple[Any, Callable[[Any], str]] | None:
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        if path.suffix == ".json":
            return json.loads(text), lambda d: json.dumps(d, allow_nan=True)
        if path.suffix in (".yaml", ".yml"):
            return yaml.safe_load(text), lambda d: yaml.safe_dump(d, allow_unicode=True)
    except (ValueError, yaml.YAMLError):
        return None
    return None


def _structured(path: Path, rng: random.Random, pick: Callable[[Any, random.Random], Any]) -> bool:
    """Replace one value of a JSON/YAML file by pick(old value); False when the file is neither."""
    parsed = _parsed(path)
    if parsed is None:
        return False
    data, dump = parsed
    nodes = _nodes(data)
    node = rng.choice(nodes)
    old = data
    for key in node:
        old = old[key]
    path.write_text(dump(_replace(data, node, pick(old, rng))), encoding="utf-8")
    return True


def _other_type(old: Any, rng: random.Random) -> Any:
    return rng.choice([v for v in OTHER_TYPES if type(v) is not type(old)])


def _bad_number(old: Any, rng: random.Random) -> Any:
    return rng.choice([math.nan, math.inf, -math.inf, 1e308, -1e308, 10 ** 400, -(10 ** 30), 2 ** 63])


def mutate(root: Path, outside: Path, kind: str, index: int, rng: random.Random) -> str:
    """Apply one mutation of `kind` to the entry `index` picks; returns what was done."""
    files, dirs = _entries(root)
    if kind in CONTENT_KINDS:
        structured = [f for f in files if f.suffix in (".json", ".yaml", ".yml")]
        pool = structured if kind in ("wrong_type", "nan_inf_huge", "deep_nesting") else files
        target = pool[index % len(pool)]
        raw = target.read_bytes()
        if kind == "truncate":
            target.write_bytes(raw[:rng.randrange(max(len(raw), 1))])
        elif kind == "non_utf8":
            at = rng.randrange(len(raw) + 1)
            target.write_bytes(raw[:at] + rng.choice([b"\xff\xfe", b"\xc3\x28", b"\x80", b"\xed\xa0\x80"]) + raw[at:])
        elif kind == "empty":
            target.write_bytes(b"")
        elif kind == "wrong_type":
            _structured(target, rng, _other_type)
        elif kind == "nan_inf_huge":
            _structured(target, rng, _bad_number)
        else:  # deep_nesting
            depth = rng.choice([200, 5000, 100000])
            if target.suffix == ".json":
                target.write_text("[" * depth + "1" + "]" * depth, encoding="utf-8")
            else:
                target.write_text("a: " + "[" * depth + "1" + "]" * depth + "\n", encoding="utf-8")
        return f"{kind} {target.relative_to(root)}"
    entries = files + dirs
    target = entries[index % len(entries)]
    rel = target.relative_to(root)
    if kind == "missing":
        shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink()
    elif kind == "extra_file":
        where = target if target.is_dir() else target.parent
        name = rng.choice(["extra.json", "notes.txt", "20990101_000000", ".hidden", "results.csv.bak", "x.yaml"])
        if name.startswith("2099"):
            (where / name).mkdir(exist_ok=True)
        elif not (where / name).exists():
            (where / name).write_bytes(rng.choice([b"", b"{}", b"\xff", b"key: [unclosed"]))
    elif kind == "link_inside":
        other = rng.choice(entries)
        _remove(target)
        os.symlink(other, target)
    elif kind == "link_outside":
        _remove(target)
        os.symlink(outside / ("trap" if rng.random() < 0.5 else "fifo"), target)
    elif kind == "fifo":
        _remove(target)
        os.mkfifo(target)
    elif kind == "not_a_file":  # root reads any mode bits: a directory is what cannot be read as a file
        _remove(target)
        target.mkdir()
        (target / "inner.json").write_text("{}", encoding="utf-8")
    else:  # odd_name
        name = rng.choice(ODD_NAMES)
        if isinstance(name, bytes):
            os.rename(bytes(target), bytes(target.parent) + b"/" + name)
        else:
            target.rename(target.parent / name)
    return f"{kind} {rel}"


def _remove(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def make_outside(where: Path) -> Path:
    """What links out point at: a FIFO, and a directory of FIFOs named like package files."""
    outside = where / "outside"
    (outside / "trap").mkdir(parents=True)
    os.mkfifo(outside / "fifo")
    for name in ("summary.json", "submission.yaml", "results.json", "results.csv", "metadata.json", "code-00000000"):
        os.mkfifo(outside / "trap" / name)
    return outside


def outside_state(outside: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(outside)), p.lstat().st_mode) for p in outside.rglob("*"))


# --- running the commands -----------------------------------------------------------------

def run_main(argv: list[str]) -> tuple[int | None, str, str]:
    """main(argv) in-process with a deadline: (exit code or None on a hang, stdout, stderr)."""
    from mlpstorage_py.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            with deadline(DEADLINE_S):
                rc = main(argv)
        except Hang:
            rc = None
    return rc, out.getvalue(), err.getvalue()


def check(root: Path, outside: Path, baseline: set[tuple]) -> tuple[list[str], int]:
    """(crash descriptions, new findings) of validate and reportgen on the mutated package."""
    crashes = []
    before = outside_state(outside)
    report = root.parent / "findings.json"
    rc, out, err = run_main(["validate", str(root), "--json", str(report)])
    if rc is None:
        crashes.append("validate hung")
    elif rc not in (0, 1) or "internal error" in err or "Traceback" in err:
        crashes.append(f"validate exit {rc}: {err.strip()[-300:]}")
    findings = json.loads(report.read_text(encoding="utf-8"))["findings"] if rc in (0, 1) and report.exists() else []
    broken = [f for f in findings if "checker error" in f["message"]]
    crashes.extend(f"rule {f['rule']} crashed: {f['message'][:200]}" for f in broken)
    new = {(f["rule"], f["severity"], f["message"]) for f in findings} - baseline
    rc, out, err = run_main(["reports", "reportgen", "--results-dir", str(root)])
    if rc is None:
        crashes.append("reportgen hung")
    elif "internal error" in err or "Traceback" in err or (rc != 0 and "mlpstorage: error:" not in err):
        crashes.append(f"reportgen exit {rc}: {err.strip()[-300:]}")
    if outside_state(outside) != before:
        crashes.append("something outside the package changed")
    return crashes, len(new)


class Tally:
    def __init__(self) -> None:
        self.cases = Counter()
        self.reported = Counter()
        self.crashes: list[str] = []
        self.unreported: list[str] = []

    def figures(self, base: str, seconds: float) -> None:
        per_kind = {k: f"{self.reported[k]}/{self.cases[k]}" for k in KINDS if self.cases[k]}
        record("fuzz", sum(self.cases.values()), sum(self.cases.values()) - len(self.crashes), base=base,
               crashes=len(self.crashes), reported_per_kind=per_kind, seconds=round(seconds, 1))


def with_sentinel(root: Path, org: str) -> None:
    """reportgen writes into an initialised tree: the package gets the sentinel init writes."""
    (root / "mlperf-results.yaml").write_text(yaml.safe_dump({"mlperf_results_version": 1, "orgname": org}),
                                              encoding="utf-8")


def fuzz(base: Path, org: str, label: str) -> None:
    scratch = Path(tempfile.mkdtemp(dir=synthetic.scratch_dir()))
    pristine = scratch / "pristine"
    shutil.copytree(base, pristine, symlinks=True)
    with_sentinel(pristine, org)
    rc, _, err = run_main(["validate", str(pristine), "--json", str(scratch / "baseline.json")])
    assert rc in (0, 1), err
    baseline = {(f["rule"], f["severity"], f["message"])
                for f in json.loads((scratch / "baseline.json").read_text(encoding="utf-8"))["findings"]}
    tally, started = Tally(), time.monotonic()

    @settings(PROFILE, max_examples=PROFILE.max_examples if CASES or label != "realdata" else 30)
    @given(kind=st.sampled_from(KINDS), index=st.integers(0, 10 ** 6), seed=st.integers(0, 2 ** 32))
    def case(kind: str, index: int, seed: int) -> None:
        work = Path(tempfile.mkdtemp(dir=scratch))
        try:
            root = work / "pkg"
            shutil.copytree(pristine, root, symlinks=True)
            outside = make_outside(work)
            what = mutate(root, outside, kind, index, random.Random(seed))
            crashes, new = check(root, outside, baseline)
            tally.cases[kind] += 1
            tally.reported[kind] += new > 0
            if not new:
                tally.unreported.append(what)
            tally.crashes.extend(f"{what!r} (seed {seed}): {c}" for c in crashes)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    try:
        with memory_bound(MEMORY_BOUND):
            case()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    tally.figures(label, time.monotonic() - started)
    if os.environ.get("MLPS_FUZZ_DUMP"):
        Path(os.environ["MLPS_FUZZ_DUMP"]).write_text("\n".join(tally.crashes + ["UNREPORTED"] + tally.unreported))
    assert not tally.crashes, "\n".join(tally.crashes[:20])
    # links, FIFOs and directories in place of files are defects a reviewer must see
    for kind in ("link_inside", "link_outside", "fifo"):
        assert tally.reported[kind] == tally.cases[kind], f"{kind}: {tally.reported[kind]}/{tally.cases[kind]} reported"


def test_fuzz_synthetic_package():
    with synthetic_families.registered():
        base = synthetic.pristine(families=FAMILIES)
    fuzz(base, "Acme", "synthetic")


@pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
def test_fuzz_realdata_copy(realdata_copy):
    fuzz(realdata_copy, "NewFW", "realdata")


def test_unreadable_files_are_findings_not_crashes(tmp_path):
    """Root reads any file whatever its mode, so validate runs here without the two capabilities
    that let it (setpriv drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from a child)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0:
        pytest.skip("needs root and util-linux setpriv to make a file unreadable")
    with synthetic_families.registered():
        root = synthetic.copy_package(tmp_path / "pkg", families=FAMILIES)
    files, dirs = _entries(root)
    chosen = [f for f in files if f.name.endswith(("summary.json", "_metadata.json", "submission.yaml"))][:6]
    chosen.append(next(d for d in dirs if d.name == "systems"))
    for path in chosen:
        path.chmod(0)
    argv = [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--", sys.executable, "-m", "mlpstorage_py.main"]
    started = time.monotonic()
    res = subprocess.run([*argv, "validate", str(root)], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[1])
    assert res.returncode == 1, res.stderr
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr and "checker error" not in res.stdout
    for path in chosen[:-1]:
        assert path.name in res.stdout, f"{path.name} unreadable but not reported"
    record("fuzz", 1, 1, base="unreadable (setpriv)", files=len(chosen), seconds=round(time.monotonic() - started, 1))


def test_counts_of_2_63_are_answered_without_building_them():
    """Found by the 10,000-case fuzz on the real corpus: a num_hosts (checkpointing) or rank_count
    (kvcache) of 2**63 was turned into a range and filled the memory."""
    from types import SimpleNamespace

    from mlpstorage_py.checker.rules_checkpointing_run import _per_host
    from mlpstorage_py.checker.rules_kvcache_aggregate import lists_every_rank

    with memory_bound(1 << 30):
        rec = SimpleNamespace(metadata={}, summary={"num_accelerators": 8, "num_hosts": 2 ** 63})
        assert _per_host(rec) == (None, "nowhere")
        rec.summary["num_hosts"] = 2
        assert _per_host(rec) == ([4, 4], "summary.json num_accelerators / num_hosts")
        assert not lists_every_rank([0, 1, 2], 2 ** 63)
        assert lists_every_rank([2, 0, 1], 3) and not lists_every_rank([0, 2], 2)
