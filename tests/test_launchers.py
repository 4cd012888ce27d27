"""Launchers for real: Open MPI and MPICH (the PyPI wheels) across simulated client hosts, Slurm's
srun inside an allocation of a one-node cluster on this machine, and launch failures reported as
launch failures (exit 6 with the launcher's first error line), never as a rules violation."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import MLPSTORAGE, all_leaves, subprocess_env
from simslurm import slurm_cluster, _slurm_session  # noqa: F401  (fixtures)

from mlpstorage_py.errors import BenchmarkFailed
from mlpstorage_py.launch.launchers import classify, first_error_line
from mlpstorage_py.launch.mpi import MpiOptions, mpi_bin_arg, mpi_command
from mlpstorage_py.launch.process import require_success, run_logged

VENV = Path(sys.executable).parent.parent
MPICH_EXEC = VENV / "mpich" / "bin" / "mpiexec"  # `make mpich` (run by make test and make install)
MPICH_LIB = VENV / "mpich" / "lib" / "libmpi.so.12"
SMALL = ["model.num_layers=2", "model.hidden_size=256", "model.ffn_hidden_size=512", "model.vocab_size=4096",
         "model.num_attention_heads=8", "model.num_kv_heads=2", "checkpoint.time_between_checkpoints=0"]
WORLD = """
import json, socket, sys
from mpi4py import MPI
comm = MPI.COMM_WORLD
rows = comm.gather({"rank": comm.Get_rank(), "size": comm.Get_size(), "host": socket.gethostname(),
                    "library": MPI.Get_library_version().splitlines()[0]}, root=0)
if comm.Get_rank() == 0:
    open(sys.argv[1], "w").write(json.dumps(rows))
"""

needs_mpich = pytest.mark.skipif(not MPICH_EXEC.is_file(), reason=f"no MPICH at {MPICH_EXEC} (`make mpich`)")


@pytest.fixture
def world_program(tmp_path):
    path = tmp_path / "world.py"
    path.write_text(WORLD, encoding="utf-8")
    return path


@pytest.fixture
def hydra_on_bridge(sim_hosts, monkeypatch):
    """Hydra's proxies connect back to the launching host by its name, which resolves to a
    loopback address here; the bridge the namespace hosts hang off is the address they can reach."""
    monkeypatch.setenv("HYDRA_IFACE", sim_hosts.bridge)
    return sim_hosts


def run_world(argv: list[str], out: Path, tmp_path: Path, env=None) -> list[dict]:
    code = run_logged(argv, stdout_path=tmp_path / "out.log", stderr_path=tmp_path / "err.log", cwd=tmp_path,
                      env=env, label="world", deadline_s=120)
    require_success(code, "world", tmp_path / "err.log")
    return sorted(json.loads(out.read_text()), key=lambda r: r["rank"])


# -- fast: detection, argument checks, command shapes ---------------------------------------
def test_launchers_are_told_apart_by_their_version_output():
    assert classify("mpirun (Open MPI) 5.0.11\n\nReport bugs to https://www.open-mpi.org") == "openmpi"
    assert classify("prterun (PRRTE) 3.0.13") == "openmpi"
    assert classify("HYDRA build details:\n    Version:  5.0.2") == "mpich"
    assert classify("slurm-wlm 22.05.8") == "slurm"
    assert classify("GNU bash, version 5.2") is None


def test_mpi_bin_accepts_names_and_executable_paths_only(tmp_path):
    assert mpi_bin_arg("srun") == "srun" and mpi_bin_arg("mpiexec") == "mpiexec"
    assert mpi_bin_arg(sys.executable) == os.path.abspath(sys.executable)
    for bad in ("mpich", str(tmp_path / "absent"), str(tmp_path)):
        with pytest.raises(argparse.ArgumentTypeError):
            mpi_bin_arg(bad)


def test_cli_refuses_a_launcher_path_that_is_not_executable(cli, results, tmp_path):
    res = cli("open", "checkpointing", "llama3-8b", "run", "-np", "2", "-at", "b200", "-cm", "8", "-cf", str(tmp_path),
              "-sn", "s", "-rd", results, "--mpi-bin", str(tmp_path / "no-such-mpiexec"))
    assert res.rc == 2 and "not an executable file" in res.err


@needs_mpich
def test_mpich_command_forwards_by_name_and_points_mpi4py_at_its_library():
    env = {"AWS_SECRET_ACCESS_KEY": "s3cr3t", "DLIO_X": "1", "HOME": "/root"}
    argv = mpi_command(MpiOptions(hosts=["a", "b"], mpi_bin=str(MPICH_EXEC), allow_run_as_root=True,
                                  oversubscribe=True), 3, ["prog"], env=env)
    assert argv[:5] == [str(MPICH_EXEC), "-n", "3", "-hosts", "a:2,b:1"]
    assert argv[argv.index("-genvlist") + 1] == "AWS_SECRET_ACCESS_KEY,DLIO_X"
    assert argv[argv.index("-genv") + 1:argv.index("-genv") + 3] == ["MPI4PY_LIBMPI", str(MPICH_LIB)]
    assert not {"--allow-run-as-root", "-x", "--oversubscribe", "--bind-to"} & set(argv)
    assert not any("s3cr3t" in a for a in argv) and argv[-1] == "prog"


def test_srun_command_wires_the_ranks_mpi(tmp_path):
    fake = tmp_path / "srun"
    fake.write_text("#!/bin/sh\necho slurm-wlm 22.05.8\n")
    fake.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": "7"}
    argv = mpi_command(MpiOptions(hosts=["n1", "n2"], mpi_bin=str(fake)), 3, ["prog"], env=env)
    assert argv[:4] == [str(fake), "--mpi=pmix", "-n", "3"]  # this venv's mpi4py loads Open MPI
    assert argv[argv.index("--nodelist") + 1] == "n1,n1,n2" and "--distribution=arbitrary" in argv
    assert "--kill-on-bad-exit=1" in argv and argv[-1] == "prog"
    # Default hosts: Slurm places the ranks in the allocation.
    local = mpi_command(MpiOptions(mpi_bin=str(fake)), 2, ["prog"], env=env)
    assert "--nodelist" not in local
    assert "--nodelist" not in mpi_command(MpiOptions(hosts=["localhost", "127.0.1.1"], mpi_bin=str(fake)), 2, ["p"], env=env)
    # This host's own name is a node of the allocation, not a loopback name: it is named.
    here = mpi_command(MpiOptions(hosts=[socket.gethostname()], mpi_bin=str(fake)), 2, ["p"], env=env)
    assert here[here.index("--nodelist") + 1] == f"{socket.gethostname()},{socket.gethostname()}"
    if MPICH_LIB.is_file():
        mpich = mpi_command(MpiOptions(mpi_bin=str(fake)), 2, ["prog"], env=dict(env, MPI4PY_LIBMPI=str(MPICH_LIB)))
        assert mpich[1] == "--mpi=pmi2"


def test_first_error_line_of_each_launcher():
    hydra = ("ssh: Could not resolve hostname nosuch: Name or service not known\n"
             "[mpiexec@vm] ui_cmd_cb (pmiserv_pmci.c:51): Launch proxy failed.\n"
             "[mpiexec@vm] main (mpiexec.c:270): process manager error waiting for completion\n")
    assert first_error_line(hydra).startswith("ssh: Could not resolve hostname nosuch")
    srun = "srun: cluster configuration lacks support for cpu binding\nsrun: error: Unable to allocate resources: Invalid node name specified\n"
    assert first_error_line(srun) == "srun: error: Unable to allocate resources: Invalid node name specified"
    ompi = ("-" * 60 + "\nA daemon failed to report back after being spawned. This could\nbe due to several factors\n"
            + "-" * 60 + "\n")
    assert first_error_line(ompi).startswith("A daemon failed to report back after being spawned.")
    bad_arg = ("[mpiexec@vm] match_arg (/mpich-5.0.2/src/pm/hydra/lib/utils/args.c:166): unrecognized argument nope\n"
               "[mpiexec@vm] main (/mpich-5.0.2/src/pm/hydra/mpiexec/mpiexec.c:49): error parsing parameters\n")
    assert first_error_line(bad_arg) == "[mpiexec@vm] unrecognized argument nope"
    # Open MPI's ssh launcher warns when setpgid races its child; the rank's own error is the cause.
    warned = ("[mlps-t-h1:04242] plm:ssh: Warning: setpgid(4243, 4243) failed in parent with errno=Permission denied\n"
              "kv-cache.py: error: cannot write /cache/x.npy: [Errno 28] No space left on device\n")
    assert first_error_line(warned).startswith("kv-cache.py: error: cannot write")
    bare = "ssh: Warning: setpgid(11498,11498) failed in parent with errno=Permission denied(13)\n" + hydra
    assert first_error_line(bare).startswith("ssh: Could not resolve hostname nosuch")


def test_a_rank_error_quotes_the_cause_not_the_worker_wrapper(tmp_path):
    """PyTorch's DataLoader re-raises a worker's exception as `Caught ... in DataLoader worker
    process N.`; the line to quote is the worker's own, further down (here behind MPI's tags)."""
    err = tmp_path / "err.log"
    err.write_text("[1,0]<stderr>:Traceback (most recent call last):\n"
                   '[1,0]<stderr>:  File "main.py", line 1, in <module>\n'
                   "[1,0]<stderr>:RuntimeError: Caught RuntimeError in DataLoader worker process 0.\n"
                   "[1,0]<stderr>:Original Traceback (most recent call last):\n"
                   '[1,0]<stderr>:  File "reader.py", line 9, in get\n'
                   "[1,0]<stderr>:RuntimeError: S3 GET for s3://bk/x.npz failed: dispatch failure\n"
                   "[1,1]<stderr>:ValueError: a later rank's echo\n")
    with pytest.raises(BenchmarkFailed) as failed:
        require_success(1, "DLIO", err)
    assert "DLIO exited with code 1: RuntimeError: S3 GET for s3://bk/x.npz failed" in str(failed.value)
    err.write_text("ValueError: the cause\nOriginal text that is no traceback\n")
    with pytest.raises(BenchmarkFailed) as failed:
        require_success(1, "DLIO", err)
    assert "code 1: ValueError: the cause (see" in str(failed.value)


def test_a_program_that_is_no_launcher_is_a_launch_failure(cli, results, tmp_path):
    res = cli("open", "checkpointing", "llama3-8b", "run", "-np", "2", "-at", "b200", "-cm", "8", "-cf", str(tmp_path),
              "-sn", "s", "-rd", results, "--mpi-bin", "/bin/false")
    assert res.rc == 6, res.err
    assert "is not an MPI launcher" in res.err and "Rules" not in res.err


# -- across simulated hosts ---------------------------------------------------------------
@pytest.mark.heavy
def test_open_mpi_one_world_across_hosts(sim_hosts, world_program, tmp_path):
    hosts = sim_hosts.names[:2]
    out = tmp_path / "world.json"
    started = time.monotonic()
    argv = mpi_command(MpiOptions(hosts=hosts, mpi_bin="mpirun", allow_run_as_root=True), 3,
                       [sys.executable, str(world_program), str(out)])
    rows = run_world(argv, out, tmp_path)
    print(f"open mpi: 3 ranks on {hosts} in {time.monotonic() - started:.1f} s")
    assert [r["size"] for r in rows] == [3, 3, 3]
    assert [r["host"] for r in rows] == [hosts[0], hosts[0], hosts[1]]
    assert all(r["library"].startswith("Open MPI") for r in rows)


@pytest.mark.heavy
@needs_mpich
def test_mpich_one_world_across_hosts(hydra_on_bridge, world_program, tmp_path):
    hosts = hydra_on_bridge.names[:2]
    out = tmp_path / "world.json"
    started = time.monotonic()
    argv = mpi_command(MpiOptions(hosts=hosts, mpi_bin=str(MPICH_EXEC), allow_run_as_root=True), 3,
                       [sys.executable, str(world_program), str(out)])
    rows = run_world(argv, out, tmp_path)
    print(f"mpich: 3 ranks on {hosts} in {time.monotonic() - started:.1f} s")
    assert [r["size"] for r in rows] == [3, 3, 3]
    assert [r["host"] for r in rows] == [hosts[0], hosts[0], hosts[1]]
    assert all(r["library"].startswith("MPICH") for r in rows)


def _unresolvable_cases():
    return [pytest.param("mpirun", id="openmpi"),
            pytest.param(str(MPICH_EXEC), id="mpich", marks=needs_mpich)]


@pytest.mark.heavy
@pytest.mark.parametrize("launcher", _unresolvable_cases())
def test_unresolvable_host_is_a_launch_failure_with_the_launchers_first_error(hydra_on_bridge, world_program,
                                                                             tmp_path, launcher):
    argv = mpi_command(MpiOptions(hosts=[hydra_on_bridge.names[0], "no-such-host.invalid"], mpi_bin=launcher,
                                  allow_run_as_root=True), 2, [sys.executable, str(world_program), str(tmp_path / "o")])
    started = time.monotonic()
    code = run_logged(argv, stdout_path=tmp_path / "out.log", stderr_path=tmp_path / "err.log", cwd=tmp_path,
                      label="world", deadline_s=120)
    assert code != 0 and time.monotonic() - started < 60
    first = first_error_line((tmp_path / "err.log").read_text())
    assert "no-such-host.invalid" in first and first.startswith("ssh:"), first
    with pytest.raises(BenchmarkFailed) as failed:
        require_success(code, "world", tmp_path / "err.log")
    assert failed.value.exit_code == 6
    assert first in str(failed.value)


@pytest.mark.heavy
@needs_mpich
def test_checkpointing_through_mlpstorage_on_mpich_across_two_hosts(hydra_on_bridge, results, other_fs_dir, tmp_path):
    hosts = hydra_on_bridge.names[:2]
    env = subprocess_env(tmp_path)
    started = time.monotonic()
    done = subprocess.run([str(MLPSTORAGE), "open", "checkpointing", "llama3-8b", "run", "-np", "2", "-at", "b200",
                           "-cm", "8", "-cf", str(other_fs_dir), "-sn", "sys1", "-rd", str(results), "-ncw", "1",
                           "-ncr", "1", "--hosts", *hosts, "--mpi-bin", str(MPICH_EXEC),
                           "--params", *SMALL], capture_output=True, text=True, env=env, timeout=600)
    wall = time.monotonic() - started
    print(f"checkpointing on MPICH across {hosts}: {wall:.1f} s")
    assert done.returncode == 0, done.stderr[-3000:]
    (leaf,) = [p for p in all_leaves(results) if p.parent.name == "llama3-8b"]
    meta = json.loads(next(leaf.glob("checkpointing_*_metadata.json")).read_text())
    argv = meta["executed_argv"][0]
    assert argv[0] == str(MPICH_EXEC) and "-hosts" in argv
    assert (leaf / "0_per_epoch_stats.json").is_file() and (leaf / "1_per_epoch_stats.json").is_file()
    placed = {h["host"]: h.get("hostname") for h in meta.get("client_hosts", [])}
    assert set(placed) == set(hosts)


# -- Slurm ----------------------------------------------------------------------------------
@pytest.mark.heavy
def test_srun_gives_one_world_inside_an_allocation(slurm_cluster, world_program, tmp_path):
    out = tmp_path / "world.json"
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import json, sys\nfrom mlpstorage_py.launch.mpi import MpiOptions, mpi_command, launcher_record\n"
        f"argv = mpi_command(MpiOptions(), 2, [sys.executable, {str(world_program)!r}, {str(out)!r}])\n"
        "print(json.dumps({'argv': argv, 'record': launcher_record(MpiOptions())}))\n", encoding="utf-8")
    env = slurm_cluster.client_env()
    started = time.monotonic()
    plan = subprocess.run(["salloc", "-n", "2", sys.executable, str(driver)], capture_output=True, text=True,
                          env=env, timeout=120, cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    planned = json.loads(plan.stdout.strip().splitlines()[-1])
    assert Path(planned["argv"][0]).name == "srun" and planned["argv"][1] == "--mpi=pmix"
    assert planned["record"]["kind"] == "slurm" and planned["record"]["rank_mpi"] == "openmpi"
    done = subprocess.run(["salloc", "-n", "2", *planned["argv"]], capture_output=True, text=True, env=env,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = sorted(json.loads(out.read_text()), key=lambda r: r["rank"])
    print(f"srun --mpi=pmix: 2 ranks in {time.monotonic() - started:.1f} s")
    assert [r["size"] for r in rows] == [2, 2] and [r["rank"] for r in rows] == [0, 1]


@pytest.mark.heavy
@needs_mpich
def test_srun_wires_mpich_ranks_with_pmi2(slurm_cluster, world_program, tmp_path):
    out = tmp_path / "world.json"
    env = dict(slurm_cluster.client_env(), MPI4PY_LIBMPI=str(MPICH_LIB))
    argv = mpi_command(MpiOptions(mpi_bin="srun"), 2, [sys.executable, str(world_program), str(out)], env=env)
    assert argv[1] == "--mpi=pmi2"
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())
    assert sorted(r["rank"] for r in rows) == [0, 1] and {r["size"] for r in rows} == {2}
    assert all(r["library"].startswith("MPICH") for r in rows)


def _mlps_checkpointing(results, ckpt, *extra):
    return [str(MLPSTORAGE), "open", "checkpointing", "llama3-8b", "run", "-np", "2", "-at", "b200", "-cm", "8",
            "-cf", str(ckpt), "-sn", "sys1", "-rd", str(results), "-ncw", "1", "-ncr", "1", *extra, "--params", *SMALL]


@pytest.mark.heavy
@pytest.mark.parametrize("mpi_bin", [None, "mpirun"], ids=["srun-by-default", "mpirun-in-allocation"])
def test_checkpointing_inside_a_slurm_allocation(slurm_cluster, results, other_fs_dir, tmp_path, mpi_bin):
    env = dict(subprocess_env(tmp_path), **slurm_cluster.env())
    extra = ["--mpi-bin", mpi_bin] if mpi_bin else []
    started = time.monotonic()
    done = subprocess.run(["salloc", "-n", "2", *_mlps_checkpointing(results, other_fs_dir, *extra)],
                          capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    print(f"checkpointing in a Slurm allocation ({mpi_bin or 'srun'}): {time.monotonic() - started:.1f} s")
    assert done.returncode == 0, done.stderr[-3000:]
    (leaf,) = [p for p in all_leaves(results) if p.parent.name == "llama3-8b"]
    meta = json.loads(next(leaf.glob("checkpointing_*_metadata.json")).read_text())
    argv = meta["executed_argv"][0]
    assert meta["exit_status"] == 0
    if mpi_bin is None:
        assert Path(argv[0]).name == "srun" and "--mpi=pmix" in argv
        assert meta["launcher"]["kind"] == "slurm" and meta["launcher"]["pmi"] == "pmix"
        # srun places the ranks: the host record comes from every rank, grouped by hostname, no ssh preflight
        (host,) = meta["client_hosts"]
        assert host["collection_method"] == "srun" and host["ranks"] == [0, 1] and "host_preflight" not in meta
    else:
        assert Path(argv[0]).name == "mpirun" and meta["launcher"]["kind"] == "openmpi"
    # One world of two ranks: rank 1 wrote its own statistics (singletons would all be rank 0).
    assert (leaf / "0_per_epoch_stats.json").is_file() and (leaf / "1_per_epoch_stats.json").is_file()


@pytest.mark.heavy
def test_srun_launch_failure_is_exit_6_with_sruns_error(slurm_cluster, results, other_fs_dir, tmp_path):
    env = dict(subprocess_env(tmp_path), **slurm_cluster.env())
    done = subprocess.run(_mlps_checkpointing(results, other_fs_dir, "--mpi-bin", "srun",
                                              "--mpi-params=--partition=nosuchpartition"),
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 6, done.stderr[-3000:]
    assert "srun: error:" in done.stderr and "partition" in done.stderr, done.stderr[-2000:]
    assert "Rules" not in done.stderr
    (leaf,) = [p for p in all_leaves(results) if p.parent.name == "llama3-8b"]
    meta = json.loads(next(leaf.glob("checkpointing_*_metadata.json")).read_text())
    assert meta["exit_status"] == 6


def _bad_option_cases():
    return [pytest.param("mpirun", "--no-such-option", "An unrecognized option was included on the mpirun command line:",
                         id="openmpi"),
            pytest.param(str(MPICH_EXEC), "-no-such-option", "unrecognized argument no-such-option", id="mpich",
                         marks=needs_mpich)]


@pytest.mark.heavy
@pytest.mark.parametrize("launcher,option,first", _bad_option_cases())
def test_launcher_refusing_its_arguments_is_exit_6_with_a_failed_leaf(hydra_on_bridge, results, other_fs_dir,
                                                                     tmp_path, launcher, option, first):
    """A launch failure the ssh preflight cannot see (the launcher itself refuses to start):
    exit 6, a failed leaf, never a rules message."""
    env = subprocess_env(tmp_path)
    done = subprocess.run(_mlps_checkpointing(results, other_fs_dir, "--hosts", *hydra_on_bridge.names[:2],
                                              "--mpi-bin", launcher, f"--mpi-params={option}"),
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 6, done.stderr[-3000:]
    assert "Rules" not in done.stderr
    (leaf,) = [p for p in all_leaves(results) if p.parent.name == "llama3-8b"]
    meta = json.loads(next(leaf.glob("checkpointing_*_metadata.json")).read_text())
    assert meta["exit_status"] == 6
    assert meta.get("failure") or meta.get("error") or meta["exit_status"] == 6
    assert first in done.stderr
