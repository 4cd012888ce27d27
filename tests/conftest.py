"""Shared fixtures: every test runs isolated from the user's config, environment and home."""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
MLPSTORAGE = VENV_BIN / "mlpstorage"
REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"
LEAF_NAME = re.compile(r"^\d{8}_\d{6}$")
ENV_VARS = ("MLPSTORAGE_RESULTS_DIR", "MLPSTORAGE_SYSTEMNAME", "MLPSTORAGE_DATA_DIR",
            "MLPSTORAGE_CHECKPOINT_FOLDER", "MLPSTORAGE_DLIO_BIN_PATH",
            "MLPSTORAGE_HOSTS", "MLPSTORAGE_MPI_BIN", "MLPSTORAGE_MPI_PARAMS")

# The smallest valid CLOSED training command that writes a leaf (Rules 3.1.2 datasize).
DATASIZE = ["closed", "training", "unet3d", "datasize", "-at", "b200", "-ma", "8", "-cm", "16", "-nc", "1"]


def interruptible() -> None:
    """In a child before exec: SIGINT at its default, as at a terminal. A suite started in the
    background of a non-interactive shell inherits SIGINT ignored, and Python keeps an ignored
    SIGINT ignored, so a test that sends SIGINT would otherwise test nothing but the shell."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def busy_loops(setting: str) -> int:
    """MLPS_TEST_BUSY's value as a number of busy-loop processes: a count, or `all` (one per core)."""
    if setting.strip().lower() == "all":
        return os.cpu_count() or 1
    return int(setting) if setting.strip().isdigit() else 0


def _die_with_pytest() -> None:
    LIBC.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: no loop outlives a killed session


LIBC = ctypes.CDLL(None, use_errno=True)


@pytest.fixture(scope="session", autouse=True)
def busy_machine():
    """MLPS_TEST_BUSY=N (or `all`; `make test-busy`): N processes spin on the CPU for the whole
    session, at the tests' own priority, so every test runs as on a head node whose cores are
    all busy with other work. Nothing in a test may then depend on a timing margin."""
    count = busy_loops(os.environ.get("MLPS_TEST_BUSY", ""))
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=_die_with_pytest,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(count)]
    yield loops
    for loop in loops:
        loop.kill()
        loop.wait()


def pytest_report_header(config) -> str | None:
    count = busy_loops(os.environ.get("MLPS_TEST_BUSY", ""))
    return f"busy machine: {count} busy-loop process(es) for the session (MLPS_TEST_BUSY)" if count else None


@pytest.fixture(scope="session", autouse=True)
def isolated_session(tmp_path_factory):
    """A per-user config of the session's own, set before any module fixture runs: one that
    makes a results tree (init_results_dir records it as the default) must not write the real
    $XDG_CONFIG_HOME/mlpstorage/config.yaml of whoever runs the suite."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("session-xdg")))
        yield


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """Fresh XDG config, HOME and cwd; no MLPSTORAGE_* variables; no cached tree hash."""
    from mlpstorage_py.results import code_image

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    # The tool hashes its own source once per process; other edits to the checkout during a
    # long pytest session would make that cached value stale.
    code_image.own_tree_hash.cache_clear()
    # The console handler binds sys.stderr when made: give each test its own (pytest swaps it).
    from mlpstorage_py.results.logs import setup_console

    setup_console()
    # Ctrl-C reaches the test as KeyboardInterrupt even in a suite started from a background
    # shell, which inherits SIGINT ignored (Python then leaves it ignored).
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, inherited)
    code_image.own_tree_hash.cache_clear()


@pytest.fixture(autouse=bool(os.environ.get("MLPS_CHECK_WORKERS")))
def validate_in_workers(monkeypatch):
    """MLPS_CHECK_WORKERS=1 (`MLPS_CHECK_WORKERS=1 make test`): every in-process validation of
    the suite also runs in forked workers, one system a share, and must find the same."""
    from mlpstorage_py import checker
    from mlpstorage_py.results.tree import shares

    unwrapped = checker.validate

    def both_ways(*args, **kwargs):
        asked = shares.POOL_MIN_LEAVES  # run the other way first, then as the caller asked
        shares.POOL_MIN_LEAVES = 0 if asked else 10 ** 9
        with monkeypatch.context() as m:
            m.setattr(shares, "workers_here", lambda: 2)
            m.setattr(shares, "MIN_SHARE_LEAVES", 1)  # about a system a share
            _, other = unwrapped(*args, **kwargs)
        shares.POOL_MIN_LEAVES = asked
        pkg, found = unwrapped(*args, **kwargs)
        assert [f.as_dict() for f in other] == [f.as_dict() for f in found], "workers differ"
        return pkg, found

    monkeypatch.setattr(checker, "validate", both_ways)


@dataclass
class Result:
    rc: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


@pytest.fixture
def cli(capsys):
    """Call mlpstorage in-process; returns Result(rc, stdout, stderr) of that call only."""
    def call(*argv: str) -> Result:
        from mlpstorage_py.main import main

        capsys.readouterr()
        rc = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return Result(rc, captured.out, captured.err)
    return call


@pytest.fixture
def results(tmp_path) -> Path:
    """An initialised results directory for organization Org (also the recorded default).

    Made with the library call rather than the CLI to keep the suite fast; test_init.py
    covers `mlpstorage init` itself."""
    from mlpstorage_py.results.sentinel import init_results_dir

    root = tmp_path / "R"
    path, created = init_results_dir("Org", root)
    assert created and path == root.resolve()
    return root


def workload_leaves(results_dir: Path, mode: str = "closed", org: str = "Org", system: str = "sys1",
                    tail: str = "training/unet3d/datasize") -> list[Path]:
    parent = results_dir / mode / org / "results" / system / tail
    if not parent.is_dir():
        return []
    return sorted(p for p in parent.iterdir() if p.is_dir())


def all_leaves(results_dir: Path) -> list[Path]:
    """Every timestamp directory anywhere under <results>/<mode>/."""
    found = []
    for mode in ("closed", "open", "whatif"):
        base = results_dir / mode
        if base.is_dir():
            found.extend(p for p in base.rglob("*") if p.is_dir() and LEAF_NAME.match(p.name))
    return sorted(found)


def leaf_metadata(leaf: Path) -> dict:
    files = list(leaf.glob("training_*_metadata.json"))
    assert len(files) == 1, f"expected one metadata file in {leaf}, found {[f.name for f in files]}"
    return json.loads(files[0].read_text(encoding="utf-8"))


def subprocess_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    env["HOME"] = str(tmp_path / "home")
    env.pop("PYTHONPATH", None)
    return env


@pytest.fixture
def shm() -> Path:
    """A fresh directory in /dev/shm (memory: fast KV-cache files), else in /tmp."""
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")
    path = base / f"mlps-test-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def other_fs_dir(tmp_path) -> Path:
    """A directory on another filesystem than the results (tmpfs), as the rules want for data,
    checkpoints and caches; removed afterwards."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs /dev/shm on a separate filesystem")
    path = shm / f"mlps-test-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def realdata_copy(tmp_path) -> Path:
    """A writable copy of the published packages (tests that use it skip without ../shared)."""
    if not REALDATA.is_dir():
        pytest.skip("../shared/realdata is absent")
    root = tmp_path / "pkg"
    shutil.copytree(REALDATA / "closed", root / "closed")
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


# A known secret: tests assert it appears in no file a run writes.
S3_SECRET = "mlpsTestSecret-5b1e0c7d9a"


@dataclass
class S3Endpoint:
    url: str
    env: dict[str, str]

    def bucket(self) -> str:
        """A fresh bucket on this endpoint."""
        import s3dlio

        name = f"mlps-{uuid.uuid4().hex[:10]}"
        s3dlio.create_bucket(name)
        return name


@pytest.fixture(scope="session")
def _moto_server():
    """A real S3 HTTP endpoint (moto's server) on 127.0.0.1 at a free port, for the session."""
    import socket

    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def s3_endpoint(_moto_server, monkeypatch) -> S3Endpoint:
    """The standard AWS variables pointing at the local endpoint, with S3_SECRET as secret key."""
    env = {"AWS_ENDPOINT_URL": _moto_server, "AWS_ACCESS_KEY_ID": "mlpsTestKeyId", "AWS_SECRET_ACCESS_KEY": S3_SECRET,
           "AWS_REGION": "us-east-1"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return S3Endpoint(_moto_server, env)


def assert_no_secret(root: Path) -> None:
    """No file below root holds the test secret (or its key id)."""
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            assert S3_SECRET.encode() not in data and b"mlpsTestKeyId" not in data, f"credential written into {path}"


# -- simulated client hosts (tests/simhosts.py) ------------------------------------------------
@pytest.fixture(scope="session")
def _sim_cluster():
    """Three namespace hosts with their own hostname and sshd, shared by the session's tests."""
    from simhosts import SimCluster, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with SimCluster(3) as cluster:
        yield cluster


@pytest.fixture
def sim_hosts(_sim_cluster, monkeypatch):
    """The session's SimCluster with this test's environment pointing the launchers at it.
    Tests that break a host (freeze, kill) must use `make_sim_cluster` instead."""
    for name, value in _sim_cluster.env().items():
        monkeypatch.setenv(name, value)
    yield _sim_cluster
    assert not _sim_cluster.stray_processes(), "a process of ours survived on a simulated host"


@pytest.fixture
def make_sim_cluster(monkeypatch):
    """Factory for a private SimCluster(count) torn down after the test (for fault tests)."""
    from simhosts import SimCluster, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    made: list = []

    def make(count: int = 2):
        cluster = SimCluster(count)
        cluster.start()
        made.append(cluster)
        for name, value in cluster.env().items():
            monkeypatch.setenv(name, value)
        return cluster
    yield make
    for cluster in made:
        cluster.stop()


def signal_when_ready(argv: list[str], env: dict[str, str], ready, sig: int,
                      start_s: float | None = None, stop_s: float = 60) -> tuple[int, str, float]:
    """Run argv as a child, send `sig` once ready() says its work is under way (the work phase);
    returns (exit code, stderr, seconds from the signal to the exit). The child never outlives
    the call. It waits for the work as long as the product's own start-up allowance lets the run
    start (faults.startup_guard), not for a guess of how fast this machine is."""
    import time

    from faults import startup_guard

    start_s = startup_guard(4, 3) if start_s is None else start_s
    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=interruptible)
    try:
        end = time.monotonic() + start_s
        while not ready():
            assert child.poll() is None, child.communicate()[1]
            assert time.monotonic() < end, "the work never started"
            time.sleep(0.2)
        child.send_signal(sig)
        sent = time.monotonic()
        _, err = child.communicate(timeout=stop_s)
        return child.returncode, err, time.monotonic() - sent
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
