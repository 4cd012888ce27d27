"""A rank's own temporary directory: made under the temporary directory, Python's default for the
rank, removed with what is in it; left by a killed rank, removed by the next rank on that host,
and never one of a live process, another host, another user or behind a link."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from mlpstorage_py.launch import rank_temp


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.fixture
def base():
    """A short base, as a real temporary directory is (the sockets' path limit)."""
    path = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp" if os.path.isdir("/tmp") else None))
    before = tempfile.tempdir
    yield path
    tempfile.tempdir = before
    subprocess.run(["rm", "-rf", str(path)], check=False)


def test_made_used_and_removed(base):
    own = rank_temp.make(str(base))
    assert own is not None and Path(own).parent == base and Path(own).name.startswith(
        f"{rank_temp.PREFIX}{rank_temp.host_tag()}-{os.getpid()}-")
    assert tempfile.gettempdir() == own
    made = Path(tempfile.mkdtemp(prefix="pymp-"))  # what a reader worker's multiprocessing makes
    assert made.parent == Path(own)
    rank_temp.remove(own)
    assert not Path(own).exists() and not made.exists()


def test_a_forked_worker_makes_its_directory_in_the_ranks(base):
    own = rank_temp.make(str(base))
    # DLIO's reader workers are forked: they inherit Python's temporary directory as the rank set it
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: multiprocessing's own directory for it
        os.close(read)
        import multiprocessing.util as util

        os.write(write, util.get_temp_dir().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        worker_dir = Path(pipe.read())
    assert worker_dir.parent == Path(own) and worker_dir.name.startswith("pymp-")
    rank_temp.remove(own)
    assert not worker_dir.exists()


def test_too_long_a_base_changes_nothing(tmp_path):
    deep = tmp_path / ("d" * 60)
    deep.mkdir()
    before = tempfile.tempdir
    assert rank_temp.make(str(deep)) is None
    assert tempfile.tempdir == before and not list(deep.iterdir())


def test_a_base_where_nothing_can_be_made_changes_nothing(base):
    """The rank then runs as it did before: a temporary directory is never a reason to fail."""
    not_a_dir = base / "file"
    not_a_dir.write_text("x")
    before = tempfile.tempdir
    assert rank_temp.make(str(not_a_dir)) is None and tempfile.tempdir == before


def test_the_length_is_counted_in_bytes(base):
    """AF_UNIX counts bytes: a name of 20 two-byte characters fits by characters, not by bytes;
    the same name in one-byte characters fits."""
    tag = base.name[-4:]
    accented, plain = Path("/tmp") / ("\u00e9" * 20 + tag), Path("/tmp") / ("e" * 20 + tag)
    try:
        accented.mkdir()
        plain.mkdir()
        assert rank_temp.make(str(accented)) is None
        assert rank_temp.make(str(plain)) is not None
    finally:
        subprocess.run(["rm", "-rf", str(accented), str(plain)], check=False)


def test_the_sweep_removes_only_this_hosts_dead_ranks(base, tmp_path):
    tag = rank_temp.host_tag()
    dead = base / f"{rank_temp.PREFIX}{tag}-{dead_pid()}-abc"
    (dead / "pymp-x").mkdir(parents=True)
    live = base / f"{rank_temp.PREFIX}{tag}-{os.getpid()}-abc"
    live.mkdir()
    other_host = base / f"{rank_temp.PREFIX}{rank_temp.host_tag('elsewhere')}-{dead_pid()}-abc"
    other_host.mkdir()
    group = base / f"{rank_temp.PREFIX}{tag}-0-abc"  # pid 0 would mean the process group
    group.mkdir()
    outside = tmp_path / "keep"
    (outside / "file").parent.mkdir()
    (outside / "file").write_text("x")
    link = base / f"{rank_temp.PREFIX}{tag}-{dead_pid()}-lnk"
    link.symlink_to(outside, target_is_directory=True)
    unrelated = base / "pymp-unrelated"
    unrelated.mkdir()

    assert rank_temp.sweep(str(base)) == [dead.name]
    assert not dead.exists()
    for kept in (live, other_host, group, link, unrelated):
        assert kept.exists() or kept.is_symlink(), kept
    assert (outside / "file").read_text() == "x"


def test_a_killed_rank_not_yet_reaped_is_gone(base):
    """A zombie (killed, its parent has not waited yet) no longer uses its directory."""
    child = subprocess.Popen(["sleep", "600"])
    try:
        left = base / f"{rank_temp.PREFIX}{rank_temp.host_tag()}-{child.pid}-zmb"
        left.mkdir()
        assert rank_temp.sweep(str(base)) == []  # running
        child.kill()
        state, deadline = Path(f"/proc/{child.pid}/stat"), time.monotonic() + 120
        while state.read_bytes().rpartition(b")")[2].split()[0] != b"Z":  # the kill has landed: a phase, not a margin
            assert time.monotonic() < deadline, "the killed child never became a zombie"
            os.sched_yield()
        assert rank_temp.sweep(str(base)) == [left.name]
    finally:
        child.kill()
        child.wait()


def test_another_hosts_dead_ranks_are_swept_by_name(base):
    """A simulated host's ranks share this host's process table: its teardown sweeps them by its name."""
    theirs = base / f"{rank_temp.PREFIX}{rank_temp.host_tag('mlps-abcd-h0')}-{dead_pid()}-sim"
    theirs.mkdir()
    assert rank_temp.sweep(str(base)) == [] and theirs.exists()
    assert rank_temp.sweep(str(base), hostname="mlps-abcd-h0") == [theirs.name]


def test_the_next_rank_sweeps_before_making_its_own(base):
    left = base / f"{rank_temp.PREFIX}{rank_temp.host_tag()}-{dead_pid()}-old"
    left.mkdir()
    own = rank_temp.make(str(base))
    assert not left.exists() and Path(own).is_dir()
    rank_temp.remove(own)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to make a directory another user owns")
def test_another_users_directory_is_left(base):
    theirs = base / f"{rank_temp.PREFIX}{rank_temp.host_tag()}-{dead_pid()}-usr"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    assert rank_temp.sweep(str(base)) == [] and theirs.exists()


def test_interpreter_is_untouched_by_import():
    """Importing the module changes nothing: only a rank that asks gets a directory."""
    done = subprocess.run([sys.executable, "-c", "import tempfile, mlpstorage_py.launch.rank_temp;"
                           "print(tempfile.tempdir)"], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "None"


def test_alive_as_the_sweeps_ask_it():
    from mlpstorage_py.launch.pids import alive

    assert alive(os.getpid()) and not alive(dead_pid())
    assert alive(0) and alive(-1)  # what a signal would read as a process group: never removed for
    assert not alive(2 ** 40)  # beyond any pid_max: no such process (os.kill would overflow)
