"""Training across simulated client hosts (network namespaces with their own hostname and sshd):
datasize, datagen and run over 3 hosts, and the faults of a cluster: an indivisible file count,
a frozen host, a rank that crashes, SIGINT mid-run. Each fault test bounds the time it takes,
checks the exit code and the failed leaf, and that no process of ours survives on any host."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from conftest import MLPSTORAGE, all_leaves, leaf_metadata, signal_when_ready, subprocess_env
from faults import WORK_PHASE, count_logged, work_phase_at, work_started

pytestmark = pytest.mark.heavy
RECORD = 65536
SMALL = [f"dataset.record_length_bytes={RECORD}", "dataset.record_length_bytes_stdev=0",
         "dataset.record_length_bytes_resize=0", "train.epochs=2", "train.computation_time=0.01",
         "reader.batch_size=1", "reader.read_threads=1"]


def leaves_of(results: Path, command: str) -> list[Path]:
    return [p for p in all_leaves(results) if p.parent.name == command]


def datagen(cli, results, data_dir, hosts, files=12):
    return cli("open", "training", "unet3d", "datagen", "-np", str(len(hosts)), "-dd", data_dir, "-sn", "sys1",
               "-rd", results, "--hosts", *hosts, "-aip", "--params", f"dataset.num_files_train={files}", *SMALL)


@pytest.fixture(scope="module")
def four_files_two_hosts(_sim_cluster, tmp_path_factory) -> Path:
    """A 4-file dataset (unet3d/ with its manifest) generated once for the module by a real
    datagen on the session's first two hosts, on another filesystem than the results; the
    run tests below each copy it into their own data directory (one corrupts a file)."""
    shm = Path("/dev/shm")
    base = tmp_path_factory.mktemp("dataset-2-hosts")
    if not shm.is_dir() or shm.stat().st_dev == base.stat().st_dev:
        pytest.skip("needs /dev/shm on a separate filesystem")
    from mlpstorage_py.results.sentinel import init_results_dir

    results, _ = init_results_dir("Org", base / "R")
    data = shm / f"mlps-test-{uuid.uuid4().hex[:8]}"
    data.mkdir()
    try:
        argv = [str(MLPSTORAGE), "open", "training", "unet3d", "datagen", "-np", "2", "-dd", str(data), "-sn", "sys1",
                "-rd", str(results), "--hosts", *_sim_cluster.names[:2], "-aip", "--params", "dataset.num_files_train=4",
                *SMALL]
        work = base / "cwd"
        work.mkdir()
        gen = subprocess.run(argv, env={**subprocess_env(base), **_sim_cluster.env()}, cwd=work, capture_output=True,
                             text=True, timeout=600)
        assert gen.returncode == 0, gen.stderr
        assert len(list((data / "unet3d" / "train").rglob("*.npz"))) == 4
        yield data
    finally:
        shutil.rmtree(data, ignore_errors=True)


def copy_dataset(dataset: Path, data_dir: Path) -> None:
    """The module's generated dataset into data_dir, as a datagen there would have left it."""
    shutil.copytree(dataset / "unet3d", data_dir / "unet3d", symlinks=True)


def assert_host_records(meta: dict, hosts: list[str], ranks_each: int = 1) -> None:
    records = meta["client_hosts"]
    assert [r["host"] for r in records] == hosts
    assert [r["hostname"] for r in records] == hosts  # each namespace host reports its own name
    assert [r["ranks"] for r in records] == [list(range(i * ranks_each, (i + 1) * ranks_each)) for i in range(len(hosts))]
    for r in records:
        assert r["collection_method"] == "mpi" and r["cpu_count"] >= 1 and r["memory_total_bytes"] > 0
        assert r["kernel"] and r["os"] and r["cpu_model"]
    assert [p["host"] for p in meta["host_preflight"]] == hosts and all(p["ok"] for p in meta["host_preflight"])


def test_datasize_measures_every_host(cli, results, sim_hosts):
    res = cli("closed", "training", "unet3d", "datasize", "-at", "b200", "-ma", "3", "-cm", "1",
              "-sn", "sys1", "-rd", results, "--hosts", *sim_hosts.names)
    assert res.rc == 0, res.err
    (leaf,) = leaves_of(results, "datasize")
    meta = leaf_metadata(leaf)
    assert_host_records(meta, sim_hosts.names)
    assert meta["cluster_information"]["collection_method"] == "mpi"
    assert meta["parameters"]["dataset"]["num_files_train"] % 3 == 0
    assert "across 3 client host(s)" in res.out


def test_datagen_and_run_across_three_hosts(cli, results, other_fs_dir, sim_hosts):
    hosts = sim_hosts.names
    started = time.monotonic()
    gen = datagen(cli, results, other_fs_dir, hosts)
    assert gen.rc == 0, gen.err
    took_gen = time.monotonic() - started
    (gen_leaf,) = leaves_of(results, "datagen")
    assert_host_records(leaf_metadata(gen_leaf), hosts)
    assert len(list((other_fs_dir / "unet3d" / "train").rglob("*.npz"))) == 12

    started = time.monotonic()
    run = cli("open", "training", "unet3d", "run", "-at", "b200", "-na", "3", "-cm", "1", "-dd", other_fs_dir,
              "-sn", "sys1", "-rd", results, "--hosts", *hosts, "-aip", "--params", *SMALL)
    assert run.rc == 0, run.err
    took_run = time.monotonic() - started
    (leaf,) = leaves_of(results, "run")
    meta = leaf_metadata(leaf)
    assert_host_records(meta, hosts)
    summary = json.loads((leaf / "summary.json").read_text())
    assert summary["num_accelerators"] == 3 and summary["num_hosts"] == 3
    cache = meta["page_cache"]
    assert cache["before_run"] == "dropped"
    assert [h["host"] for h in cache["before_run_hosts"]] == hosts
    assert all(h["page_cache"] == "dropped" for h in cache["before_run_hosts"])
    (boundary,) = cache["between_epochs"]
    assert boundary["before_epoch"] == 2 and boundary["summary"] == "dropped"
    assert sorted(h["host"] for h in boundary["hosts"]) == sorted(hosts)
    assert meta["deadline_s"] > 0
    print(f"\nhosts {hosts}: datagen {took_gen:.1f} s, run {took_run:.1f} s wall")


def test_file_count_that_does_not_divide_by_the_ranks(cli, results, other_fs_dir, sim_hosts):
    """16 files on 3 ranks hangs DLIO 2.0.0; CLOSED refuses it, OPEN uses a multiple of the ranks."""
    hosts = sim_hosts.names
    assert datagen(cli, results, other_fs_dir, hosts, files=16).rc == 0
    closed = cli("closed", "training", "unet3d", "run", "-at", "b200", "-na", "3", "-cm", "1", "-dd", other_fs_dir,
                 "-sn", "sys1", "-rd", results, "--hosts", *hosts, "--skip-fs-separation-gate")
    assert closed.rc == 9 and "does not divide by the 3 ranks" in closed.err
    run = cli("open", "training", "unet3d", "run", "-at", "b200", "-na", "3", "-cm", "1", "-dd", other_fs_dir,
              "-sn", "sys1", "-rd", results, "--hosts", *hosts, "-aip", "--params", *SMALL)
    assert run.rc == 0, run.err  # it did not hang: DLIO 2.0.0 would wait forever on 16 files
    assert "using 15 files" in run.err
    (leaf,) = [p for p in leaves_of(results, "run") if leaf_metadata(p)["exit_status"] == 0]
    assert json.loads((leaf / "summary.json").read_text())["num_files_train"] == 15


def test_frozen_host_fails_fast_with_a_failed_leaf(cli, results, other_fs_dir, make_sim_cluster):
    cluster = make_sim_cluster(2)
    good, frozen = cluster.names
    cluster.freeze(frozen)
    started = time.monotonic()
    res = datagen(cli, results, other_fs_dir, cluster.names, files=4)
    elapsed = time.monotonic() - started
    assert res.rc == 10, res.err
    assert elapsed < 60
    line = [l for l in res.err.splitlines() if "unreachable" in l][0]
    assert frozen in line and good not in line.split("unreachable:")[1]
    (leaf,) = all_leaves(results)
    meta = leaf_metadata(leaf)
    assert meta["exit_status"] == 10 and frozen in meta["failure"]
    cluster.thaw(frozen)
    assert not cluster.stray_processes()
    print(f"\nfrozen host detected in {elapsed:.1f} s")


def test_a_crashing_rank_tears_the_job_down_and_its_error_reaches_the_leaf(cli, results, other_fs_dir, sim_hosts,
                                                                           four_files_two_hosts):
    hosts = sim_hosts.names[:2]
    copy_dataset(four_files_two_hosts, other_fs_dir)
    victim = sorted((other_fs_dir / "unet3d" / "train").rglob("*.npz"))[-1]
    victim.write_bytes(b"not an npz file")  # a corrupt sample: the rank that reads it raises
    res = cli("open", "training", "unet3d", "run", "-at", "b200", "-na", "2", "-cm", "1", "-dd", other_fs_dir,
              "-sn", "sys1", "-rd", results, "--hosts", *hosts, "-aip", "--params", *SMALL)
    assert res.rc == 6, res.err
    (leaf,) = [p for p in leaves_of(results, "run")]
    elapsed = time.time() - work_phase_at(leaf)  # the crash is the work's: measured from its start
    assert elapsed < 90
    failure = [l for l in res.err.splitlines() if "DLIO exited with code" in l][0]
    assert "Error" in failure  # the rank's exception, not MPI's abort chatter
    meta = leaf_metadata(leaf)
    assert meta["exit_status"] == 6 and "Error" in meta["failure"]
    assert "Traceback" in (leaf / "training_run.stderr.log").read_text()
    print(f"\nrank crash detected in {elapsed:.1f} s")


def test_sigint_mid_run_on_remote_ranks(results, other_fs_dir, sim_hosts, tmp_path, four_files_two_hosts):
    hosts = sim_hosts.names[:2]
    copy_dataset(four_files_two_hosts, other_fs_dir)
    slow = [p for p in SMALL if not p.startswith(("train.epochs", "train.computation_time"))]
    argv = [str(MLPSTORAGE), "open", "training", "unet3d", "run", "-at", "b200", "-na", "2", "-cm", "1", "-dd",
            str(other_fs_dir), "-sn", "sys1", "-rd", str(results), "--hosts", *hosts, "-aip", "--params",
            *slow, "train.epochs=50", "train.computation_time=1"]
    env = {**subprocess_env(tmp_path), **sim_hosts.env()}
    before = count_logged(results, WORK_PHASE)  # jobs of this results tree before the run's
    code, err, elapsed = signal_when_ready(argv, env, lambda: work_started(results, before) and _dlio_ranks_running(sim_hosts, hosts),
                                           signal.SIGINT)
    assert code == 8, err
    assert elapsed < 30
    run_leaves = leaves_of(results, "run")
    assert len(run_leaves) == 1
    meta = leaf_metadata(run_leaves[0])
    assert meta["exit_status"] == 8 and meta["failure"] == "interrupted"
    print(f"\nSIGINT to a 2-host run: stopped in {elapsed:.1f} s")


def _dlio_ranks_running(cluster, hosts: list[str]) -> bool:
    """A DLIO rank process is alive inside every one of the given hosts' namespaces."""
    return all(cluster.running(b"mlpstorage_py.benchmarks.dlio_rank", hosts).values())
