"""history rerun runs a command read from the results tree, which travels between people: it
shows the command, asks before it runs it (--yes where there is no terminal), and refuses a
recorded program that is not this installation's unless the user names it again (issue 39).
Real runs: `datasize` launches its host-facts job with the recorded launcher, so a launcher that
leaves a marker shows whether it ran."""

from __future__ import annotations

import os
import pty
import select
import subprocess
from pathlib import Path

import pytest

from conftest import DATASIZE, MLPSTORAGE, subprocess_env, workload_leaves

from mlpstorage_py.results import history


def launcher(tmp_path: Path) -> tuple[Path, Path]:
    """A launcher the tree could bring with it: it leaves a marker, then starts the real mpirun."""
    marker, program = tmp_path / "marker", tmp_path / "tree-bin" / "mpirun-wrapper"
    program.parent.mkdir()
    from mlpstorage_py.launch.mpi import launcher_path

    program.write_text(f"#!/bin/sh\ntouch {marker}\nexec {launcher_path('mpirun')} \"$@\"\n")
    program.chmod(0o755)
    return marker, program


def record(results: Path, *extra: str) -> None:
    """A history entry as a shared tree could hold it: the smallest real command, with `extra`
    (a datagen where `extra` names a DLIO: datasize has no such flag)."""
    command = DATASIZE if "--dlio-bin-path" not in extra else \
        ["closed", "training", "unet3d", "datagen", "-np", "2", "--data-dir", str(results.parent / "data")]
    history.record(results, [*command, "-sn", "sys1", "-rd", str(results), *extra])


@pytest.mark.parametrize("extra, named", [
    (("--mpi-bin", "LAUNCHER"), "--mpi-bin LAUNCHER"),
    (("--mpi-params=--mca plm_rsh_agent LAUNCHER",), "--mpi-params '--mca plm_rsh_agent LAUNCHER'"),
    (("--dlio-bin-path", "BIN"), "--dlio-bin-path BIN"),
])
def test_a_recorded_program_runs_nothing_unless_named_again(cli, results, tmp_path, extra, named):
    """With --yes and without: exit 13, the recorded flag named with how to run it anyway, no
    leaf, the tree's launcher never started."""
    marker, program = launcher(tmp_path)
    swap = {"LAUNCHER": str(program), "BIN": str(program.parent)}
    record(results, *(next((t.replace(k, v) for k, v in swap.items() if k in t), t) for t in extra))
    for flags in ((), ("--yes",)):
        res = cli("history", "rerun", "1", *flags, "-rd", results)
        assert res.rc == 13, res.err
        expected = next((named.replace(k, v) for k, v in swap.items() if k in named), named)
        assert expected in res.err and "nothing run" in res.err and "name it again" in res.err
        assert not marker.exists() and workload_leaves(results) == []


def test_a_program_named_again_is_the_one_that_runs(cli, results, tmp_path):
    """The user names the recorded launcher again: it runs (the marker), and a new leaf is made."""
    marker, program = launcher(tmp_path)
    record(results, "--mpi-bin", str(program))
    res = cli("history", "rerun", "1", "--yes", "--mpi-bin", str(program), "-rd", results)
    assert res.rc == 0, res.err
    assert marker.exists() and len(workload_leaves(results)) == 1


def test_this_installations_launcher_by_name_needs_no_naming(cli, results):
    record(results, "--mpi-bin", "mpirun")
    res = cli("history", "rerun", "1", "--yes", "-rd", results)
    assert res.rc == 0, res.err
    assert len(workload_leaves(results)) == 1


def test_without_a_terminal_or_yes_nothing_runs(cli, results):
    record(results)
    res = cli("history", "rerun", "1", "-rd", results)
    assert res.rc == 2 and "give --yes" in res.err
    assert f"re-running 1: mlpstorage {' '.join(DATASIZE)}" in res.out  # shown before it asks
    assert workload_leaves(results) == []


def ask_on_a_terminal(tmp_path: Path, results: Path, answer: bytes) -> tuple[int, str]:
    """`history rerun 1` on a pseudo-terminal (its standard streams): wait for the question,
    answer it, read the rest until the command ends."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([str(MLPSTORAGE), "history", "rerun", "1", "-rd", str(results)], stdin=follower,
                            stdout=follower, stderr=follower, env=subprocess_env(tmp_path))
    os.close(follower)
    seen, answered = b"", False
    while True:  # wait for the phase (the prompt, then the end), not a clock
        if not answered and b"run it? [y/N]" in seen:
            os.write(leader, answer)
            answered = True
        ready, _, _ = select.select([leader], [], [], 600)
        assert ready, seen
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: every holder of the terminal has closed it
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    return proc.wait(timeout=600), seen.decode(errors="replace")


def test_on_a_terminal_it_asks_and_a_no_runs_nothing(tmp_path, results):
    marker, program = launcher(tmp_path)
    record(results)
    code, out = ask_on_a_terminal(tmp_path, results, b"n\n")
    assert code == 1 and "not confirmed: nothing run" in out
    assert workload_leaves(results) == [] and not marker.exists()
    code, out = ask_on_a_terminal(tmp_path, results, b"y\n")
    assert code == 0, out
    assert len(workload_leaves(results)) == 1


def test_a_recorded_directory_that_is_gone_is_one_line(cli, results, tmp_path):
    import json

    record(results)
    path = results / history.HISTORY
    entry = json.loads(path.read_text())
    entry["cwd"] = str(tmp_path / "gone")
    path.write_text(json.dumps(entry) + "\n")
    res = cli("history", "rerun", "1", "--yes", "-rd", results)
    assert res.rc == 5 and "does not exist" in res.err and workload_leaves(results) == []
