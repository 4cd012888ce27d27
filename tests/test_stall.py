"""The stall watchdog judges a run by its progress, not by a clock (issue 40), with real processes:
a rank frozen with SIGSTOP mid-work is stopped within its stall timeout, naming that rank and
host, with a failed leaf and nothing left running; a run throttled far below the estimate
(blkio on a loop device) finishes with a valid leaf; a frozen simulated host is named; a planned
pause between checkpoints longer than the stall timeout is not a stall."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import MLPSTORAGE, all_leaves, subprocess_env
from faults import assert_failed_leaf, inject, metadata_of, pids_matching, wait_for, work_phase_at, work_started
from test_faults_checkpointing import ENGINE, SMALL, argv, leaves

STALL_S = 8


def rank_of(pid: int) -> int:
    """An engine rank's number, from the launcher's environment of the process."""
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    value = next(v for v in env if v.startswith(b"OMPI_COMM_WORLD_RANK="))
    return int(value.split(b"=", 1)[1])


def checkpoints_made(folder: Path, at_least: int) -> bool:
    """The run's work is under way: the engine has made that many checkpoint directories."""
    return len(list(folder.glob("llama3-8b/ckpt_*"))) >= at_least


def test_a_rank_frozen_mid_work_is_stopped_naming_it(results, other_fs_dir, tmp_path):
    """SIGSTOP to one engine rank once checkpoints are being written: exit 14 within the stall
    timeout (plus the teardown), the rank and its host named, a failed leaf, no process left."""
    run = argv(results, other_fs_dir, 200, 0, "--stall-timeout", str(STALL_S))
    frozen: dict[str, int] = {}

    def freeze(child: subprocess.Popen) -> None:
        pid = max(pids_matching(ENGINE, str(other_fs_dir)))
        frozen["rank"] = rank_of(pid)
        os.kill(pid, signal.SIGSTOP)

    rc, err, took = inject(run, subprocess_env(tmp_path), lambda: work_started(results) and checkpoints_made(other_fs_dir, 2),
                           freeze, str(other_fs_dir))
    assert rc == 14, err
    line = next(l for l in err.splitlines() if "made no progress" in l)
    assert f"rank {frozen['rank']} on {socket.gethostname()}" in line and "no report from" in line, line
    assert f"for {STALL_S} s" in line and "--stall-timeout" in line
    assert took < STALL_S + 40, f"took {took:.1f} s to stop"
    (leaf,) = leaves(results)
    assert_failed_leaf(leaf, 14, "made no progress")


@contextlib.contextmanager
def throttled_disk(tmp_path: Path, read_bps: int) -> Iterator[tuple[Path, Path]]:
    """An ext4 filesystem on a loop device, and a blkio cgroup (v1) that reads it at `read_bps`:
    a slow array. Yields (mount point, the cgroup's procs file); skips, saying why, where the
    machine cannot make one (not root, no loop device, no blkio throttle)."""
    blkio = Path("/sys/fs/cgroup/blkio")
    if os.geteuid() != 0 or not (blkio / "blkio.throttle.read_bps_device").exists() or not shutil.which("losetup"):
        pytest.skip("a throttled disk needs root, losetup and cgroup v1 blkio throttling")
    image, mount = tmp_path / "disk.img", tmp_path / "slow"
    with open(image, "wb") as fh:
        fh.truncate(256 * 2 ** 20)
    made = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"no loop device: {made.stderr.strip()}")
    device = made.stdout.strip()
    group = blkio / f"mlps-test-{os.getpid()}"
    try:
        subprocess.run(["mkfs.ext4", "-q", "-F", device], check=True, capture_output=True)
        mount.mkdir()
        subprocess.run(["mount", device, str(mount)], check=True, capture_output=True)
        group.mkdir()
        rdev = os.stat(device).st_rdev
        (group / "blkio.throttle.read_bps_device").write_text(f"{os.major(rdev)}:{os.minor(rdev)} {read_bps}\n")
        yield mount, group / "cgroup.procs"
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        subprocess.run(["losetup", "-d", device], capture_output=True)
        with contextlib.suppress(OSError):
            for pid in (group / "cgroup.procs").read_text().split():
                (blkio / "cgroup.procs").write_text(pid)
            group.rmdir()


def test_a_run_far_slower_than_its_estimate_finishes(results, tmp_path):
    """The checkpoints read back at 2 MiB/s (43 MiB: over 20 s, several stall timeouts and far
    beyond the estimate's floor of 20 MiB/s): the run keeps making progress and ends with exit 0
    and a valid leaf; its reads took longer than three stall timeouts."""
    stall = 5
    with throttled_disk(tmp_path, 2 * 2 ** 20) as (disk, procs):
        (disk / "ckpt").mkdir()
        run = argv(results, disk / "ckpt", 1, 1, "--stall-timeout", str(stall))
        script = f'echo $$ > {procs} && exec "$@"'
        started = time.monotonic()
        done = subprocess.run(["sh", "-c", script, "sh", *run], env=subprocess_env(tmp_path), capture_output=True,
                              text=True, timeout=600)
        took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    (leaf,) = leaves(results)
    assert metadata_of(leaf)["exit_status"] == 0
    load = json.loads((leaf / "summary.json").read_text())["metric"]["load_checkpoint_duration_mean_seconds"]
    assert load > 3 * stall, f"the throttled reads took {load:.1f} s: not slow enough to prove anything"
    print(f"\nthrottled run: {took:.1f} s wall, reads {load:.1f} s against a stall timeout of {stall} s")


def test_a_planned_pause_longer_than_the_stall_timeout_is_not_a_stall(results, other_fs_dir, tmp_path):
    """time_between_checkpoints of 3x the stall timeout: the ranks say they pause; exit 0."""
    paused = [p for p in SMALL if not p.startswith("checkpoint.time_between_checkpoints=")]
    run = [*argv(results, other_fs_dir, 2, 0, "--stall-timeout", "3")[:-len(SMALL)], *paused,
           "checkpoint.time_between_checkpoints=9"]
    done = subprocess.run(run, env=subprocess_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr


@pytest.mark.heavy
def test_a_frozen_host_is_named(results, other_fs_dir, make_sim_cluster):
    """Every process of one simulated host (its sshd, daemon and ranks) stopped with SIGSTOP
    mid-work: exit 14 naming that host's ranks and the host, not the other's; a failed leaf;
    once thawed, nothing of the run is left on either host."""
    cluster = make_sim_cluster(2)
    good, frozen = cluster.names
    run = [str(MLPSTORAGE), "open", "checkpointing", "llama3-8b", "run", "-np", "4", "-at", "b200", "-cm", "8",
           "-cf", str(other_fs_dir), "-sn", "sys1", "-rd", str(results), "-ncw", "200", "-ncr", "0",
           "--hosts", good, frozen, "--stall-timeout", str(STALL_S), "--params", *SMALL]
    env = {**subprocess_env(results.parent), **cluster.env()}
    stopped: list[int] = []

    def freeze(child: subprocess.Popen) -> None:
        stopped.extend(cluster.host(frozen).pids())
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    try:
        # the frozen host's processes cannot end until thawed: wait here for mlpstorage alone
        rc, err, took = inject(run, env, lambda: work_started(results) and checkpoints_made(other_fs_dir, 2), freeze,
                               "--stall-timeout")
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    assert rc == 14, err
    line = next(l for l in err.splitlines() if "made no progress" in l)
    named = line.split("no report from", 1)[1]
    assert f"on {frozen}" in named and f"on {good}" not in named, line
    (leaf,) = all_leaves(results)
    assert_failed_leaf(leaf, 14, frozen)
    assert time.time() - work_phase_at(leaf) < 600
    assert not cluster.stray_processes(settle_s=30)
