"""CLI parsing, exit codes, error lines and results-directory resolution."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import DATASIZE, MLPSTORAGE, all_leaves, leaf_metadata, subprocess_env, workload_leaves
from mlpstorage_py import LAYOUT_VERSION, RULES_EDITION, __version__
from mlpstorage_py.main import main

HEAVY = ("torch", "numpy", "dlio_benchmark", "pymilvus", "tensorflow")


def tree_snapshot(root):
    return sorted((str(p.relative_to(root)), p.stat().st_size if p.is_file() else -1) for p in root.rglob("*"))


# --- help, version, no arguments --------------------------------------------------------

def test_help_subprocess_exits_zero(tmp_path):
    """(How fast it starts is bench/cli_startup.py's ratio against a bare interpreter.)"""
    proc = subprocess.run([str(MLPSTORAGE), "--help"], capture_output=True, text=True, timeout=30,
                          env=subprocess_env(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "usage: mlpstorage" in proc.stdout
    for word in ("closed", "open", "whatif", "init", "validate", "history", "version"):
        assert word in proc.stdout


def test_importing_main_pulls_in_no_engine(tmp_path):
    code = ("import mlpstorage_py.main, sys; "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                          env=subprocess_env(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_help_and_a_datasize_run_pull_in_no_engine(tmp_path):
    root = tmp_path / "R"
    code = (
        "import sys\n"
        "from mlpstorage_py.main import main\n"
        f"assert main(['init', 'Org', {str(root)!r}]) == 0\n"
        f"rc = main({DATASIZE + ['-sn', 'sys1', '-rd', str(root)]!r})\n"
        f"print('HEAVY', rc, [m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                          env=subprocess_env(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY 0 []" in proc.stdout


def test_help_in_process_exits_zero(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    assert "usage: mlpstorage" in capsys.readouterr().out


def test_version(cli):
    res = cli("version")
    assert res.rc == 0
    assert res.out.strip() == f"mlpstorage {__version__} (rules edition {RULES_EDITION}, layout version {LAYOUT_VERSION})"


def test_no_arguments_is_a_usage_error(cli):
    res = cli()
    assert res.rc == 2
    assert len(res.err_lines) == 1


# --- CLOSED vs OPEN flags ---------------------------------------------------------------

@pytest.mark.parametrize("flag", [["--loops", "2"], ["--loops=2"], ["--allow-invalid-params"], ["-aip"]])
def test_closed_rejects_open_only_flags(cli, results, flag):
    res = cli(*DATASIZE, "-sn", "sys1", "-rd", results, *flag)
    assert res.rc == 2
    assert len(res.err_lines) == 1
    line = res.err_lines[0].lower()
    assert "closed" in line and "not allowed" in line
    assert flag[0].split("=")[0] in res.err_lines[0]
    assert all_leaves(results) == []


def test_closed_run_explains_open_only_loops(cli, results):
    res = cli("closed", "training", "unet3d", "run", "-at", "b200", "-cm", "16", "-na", "1", "--loops", "2",
              "-sn", "sys1", "-rd", results)
    assert res.rc == 2
    assert "not allowed in the closed division" in res.err
    assert all_leaves(results) == []


def test_closed_explains_open_only_flag_after_top_level_debug(cli, results):
    res = cli("--debug", *DATASIZE, "-sn", "sys1", "-rd", results, "--loops", "2")
    assert res.rc == 2
    assert "not allowed in the closed division" in res.err


def test_open_accepts_loops_and_writes_one_leaf_per_loop(cli, results):
    res = cli("open", "training", "unet3d", "datasize", "-at", "b200", "-ma", "8", "-cm", "16",
              "-sn", "sys1", "-rd", results, "--loops", "2")
    assert res.rc == 0, res.err
    leaves = workload_leaves(results, mode="open")
    assert len(leaves) == 2 and leaves[0] != leaves[1]


def test_open_allow_invalid_params_marks_the_run_invalid(cli, results):
    res = cli("open", "training", "unet3d", "datasize", "-at", "b200", "-ma", "8", "-cm", "16",
              "-sn", "sys1", "-rd", results, "--allow-invalid-params", "--params", "reader.batch_size=3")
    assert res.rc == 0, res.err
    meta = leaf_metadata(workload_leaves(results, mode="open")[0])
    assert meta["verification"] == "INVALID"
    assert meta["parameters"]["dataset"]["num_files_train"] == 500 * 3 * 8


def test_open_extra_tunable_is_recorded_as_open(cli, results):
    res = cli("open", "training", "unet3d", "datasize", "-at", "b200", "-ma", "8", "-cm", "16",
              "-sn", "sys1", "-rd", results, "--params", "dataset.num_samples_per_file=2")
    assert res.rc == 0, res.err
    meta = leaf_metadata(workload_leaves(results, mode="open")[0])
    assert meta["verification"] == "OPEN"
    assert meta["parameters"]["dataset"]["num_files_train"] == 14000


def test_open_without_allow_invalid_refuses_non_allowlisted_override(cli, results):
    res = cli("open", "training", "unet3d", "datasize", "-at", "b200", "-ma", "8", "-cm", "16",
              "-sn", "sys1", "-rd", results, "--params", "reader.batch_size=3")
    assert res.rc == 9
    assert all_leaves(results) == []


# --- argument errors --------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["closed", "training", "bert", "datasize", "-at", "b200", "-ma", "8", "-cm", "16"],
    ["closed", "nosuchbenchmark"],
    ["closed", "training", "unet3d", "datasize", "-at", "h100", "-ma", "8", "-cm", "16"],  # not a CLOSED accelerator
    ["closed", "training", "unet3d", "datasize", "-at", "b200", "-ma", "0", "-cm", "16"],
    ["closed", "training", "unet3d", "datasize", "-at", "b200", "-ma", "8", "-cm", "-1"],
    ["closed", "training", "unet3d", "datasize", "-at", "b200", "-cm", "16"],  # -ma missing
    ["sometimes", "training"],
])
def test_bad_arguments_exit_2_with_one_line(cli, argv):
    res = cli(*argv)
    assert res.rc == 2
    assert len(res.err_lines) == 1, res.err
    assert "Traceback" not in res.err


@pytest.mark.parametrize("params", [["foo"], ["a b=1"], ["reader.read_threads"], ["reader.read_threads="],
                                    ["=3"], ["reader..x=1"], ["reader.read_threads=4", "oops"]])
def test_bad_params_exit_2_with_one_line(cli, results, params):
    res = cli(*DATASIZE, "-sn", "sys1", "-rd", results, "--params", *params)
    assert res.rc == 2
    assert len(res.err_lines) == 1, res.err
    assert "Traceback" not in res.err
    assert "--params" in res.err
    assert all_leaves(results) == []


def test_params_value_that_is_not_yaml_is_a_usage_error(cli, results):
    res = cli(*DATASIZE, "-sn", "sys1", "-rd", results, "--params", "reader.read_threads=[8")
    assert res.rc == 2
    assert len(res.err_lines) == 1, res.err


def test_closed_non_allowlisted_override_is_refused_without_a_leaf(cli, results):
    res = cli(*DATASIZE, "-sn", "sys1", "-rd", results, "--params", "reader.batch_size=3")
    assert res.rc == 9
    assert "reader.batch_size" in res.err and "closed" in res.err
    assert all_leaves(results) == []
    assert not (results / "closed").exists()


def test_closed_override_replacing_a_section_is_refused(cli, results):
    res = cli(*DATASIZE, "-sn", "sys1", "-rd", results, "--params", "dataset=5")
    assert res.rc == 9
    assert all_leaves(results) == []


def test_debug_shows_a_traceback(cli, results):
    res = cli("--debug", *DATASIZE, "-rd", results)  # no --systemname: a ConfigurationError
    assert res.rc == 5
    assert "Traceback" in res.err
    plain = cli(*DATASIZE, "-rd", results)
    assert plain.rc == 5
    assert "Traceback" not in plain.err


def test_missing_systemname_is_a_configuration_error(cli, results):
    res = cli(*DATASIZE, "-rd", results)
    assert res.rc == 5
    assert "--systemname" in res.err
    assert all_leaves(results) == []


def test_systemname_from_environment(cli, results, monkeypatch):
    monkeypatch.setenv("MLPSTORAGE_SYSTEMNAME", "envsys")
    res = cli(*DATASIZE, "-rd", results)
    assert res.rc == 0, res.err
    assert len(workload_leaves(results, system="envsys")) == 1


@pytest.mark.parametrize("name", ["../escape", "a/b", ".hidden", "-x"])
def test_unsafe_systemname_is_refused(cli, results, tmp_path, name):
    res = cli(*DATASIZE, f"--systemname={name}", "-rd", results)
    assert res.rc == 2
    assert all_leaves(results) == []
    assert not (results / "closed" / "Org" / "escape").exists()


def test_uninitialised_results_dir(cli, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    res = cli(*DATASIZE, "-sn", "sys1", "-rd", empty)
    assert res.rc == 5
    assert "init" in res.err
    assert list(empty.iterdir()) == []
    missing = cli(*DATASIZE, "-sn", "sys1", "-rd", tmp_path / "missing")
    assert missing.rc == 5
    assert not (tmp_path / "missing").exists()


def test_no_results_dir_at_all(cli):
    res = cli(*DATASIZE, "-sn", "sys1")
    assert res.rc == 5
    assert "results" in res.err


def test_validate_missing_package(cli):
    res = cli("validate", "/nonexistent")
    assert res.rc == 3
    assert len(res.err_lines) == 1


def test_object_storage_is_not_available_for_vectordb(cli, results):
    res = cli("open", "vectordb", "HNSW", "run", "object", "-sn", "sys1", "-rd", results)
    assert res.rc == 1
    assert "object storage for vectordb is not part of this build" in res.err
    assert all_leaves(results) == []


# --- whatif -----------------------------------------------------------------------------

def test_whatif_prints_the_plan_and_writes_nothing(cli, tmp_path):
    before = tree_snapshot(tmp_path)
    res = cli("whatif", "training", "unet3d", "datasize", "-at", "h100", "-ma", "8", "-cm", "16")
    assert res.rc == 0, res.err
    assert res.out.startswith("whatif training unet3d datasize (file): plan only")
    assert "nothing is executed" in res.out
    assert "28,000" in res.out and "h100" in res.out
    assert tree_snapshot(tmp_path) == before


def test_whatif_leaves_an_initialised_results_dir_unchanged(cli, results):
    before = tree_snapshot(results)
    res = cli("whatif", "training", "retinanet", "datasize", "-at", "a100", "-ma", "8", "-cm", "16",
              "-sn", "sys1", "-rd", results)
    assert res.rc == 0, res.err
    assert tree_snapshot(results) == before


# --- results-directory resolution -------------------------------------------------------

def test_results_dir_resolution_order(cli, tmp_path, monkeypatch):
    flag_dir, env_dir, default_dir = tmp_path / "flag", tmp_path / "env", tmp_path / "default"
    for org, path in (("DefaultOrg", default_dir), ("FlagOrg", flag_dir), ("EnvOrg", env_dir)):
        assert cli("init", org, path).rc == 0  # the first init is the recorded default; later ones keep it

    monkeypatch.setenv("MLPSTORAGE_RESULTS_DIR", str(env_dir))
    assert cli(*DATASIZE, "-sn", "sys1", "--results-dir", flag_dir).rc == 0
    assert len(workload_leaves(flag_dir, org="FlagOrg")) == 1
    assert all_leaves(env_dir) == [] and all_leaves(default_dir) == []

    assert cli(*DATASIZE, "-sn", "sys1").rc == 0
    assert len(workload_leaves(env_dir, org="EnvOrg")) == 1
    assert all_leaves(default_dir) == []

    monkeypatch.delenv("MLPSTORAGE_RESULTS_DIR")
    assert cli(*DATASIZE, "-sn", "sys1").rc == 0
    assert len(workload_leaves(default_dir, org="DefaultOrg")) == 1
    assert len(all_leaves(flag_dir)) == 1 and len(all_leaves(env_dir)) == 1


def test_relative_results_dir_flag_is_resolved_against_cwd(cli, tmp_path):
    assert cli("init", "Org", "rel").rc == 0
    assert cli(*DATASIZE, "-sn", "sys1", "-rd", "rel").rc == 0
    assert len(workload_leaves(tmp_path / "cwd" / "rel")) == 1


# --- history ----------------------------------------------------------------------------

def test_history_records_shows_and_reruns(cli, results):
    argv = DATASIZE + ["-sn", "sys1", "-rd", str(results)]
    assert cli(*argv).rc == 0
    from mlpstorage_py.results import history

    entries = history.entries(results)
    assert len(entries) == 1
    assert entries[0]["id"] == 1 and entries[0]["argv"] == argv

    shown = cli("history", "show", "-rd", results)
    assert shown.rc == 0
    lines = [line for line in shown.out.splitlines() if line.strip()]
    assert len(lines) == 1
    assert lines[0].split()[0] == "1"
    assert "closed training unet3d datasize" in lines[0]

    first = workload_leaves(results)
    assert len(first) == 1
    rerun = cli("history", "rerun", "1", "--yes", "-rd", results)
    assert rerun.rc == 0, rerun.err
    leaves = workload_leaves(results)
    assert len(leaves) == 2 and first[0] in leaves
    assert leaves[0].name != leaves[1].name
    assert all(leaf_metadata(p)["exit_status"] == 0 for p in leaves)


def test_history_is_not_recorded_for_failed_parses_or_whatif(cli, results):
    from mlpstorage_py.results import history

    assert cli("closed", "training", "bert", "datasize", "-rd", results).rc == 2
    assert cli("whatif", "training", "unet3d", "datasize", "-at", "b200", "-ma", "8", "-cm", "16",
               "-rd", results).rc == 0
    assert history.entries(results) == []


def test_history_rerun_unknown_id(cli, results):
    res = cli("history", "rerun", "7", "-rd", results)
    assert res.rc == 3
    assert all_leaves(results) == []


def test_history_rerun_from_another_directory(cli, tmp_path, monkeypatch):
    assert cli("init", "Org", "R").rc == 0  # cwd is tmp_path/cwd
    results = tmp_path / "cwd" / "R"
    assert cli(*DATASIZE, "-sn", "sys1", "-rd", "R").rc == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    res = cli("history", "rerun", "1", "--yes", "-rd", results)
    assert res.rc == 0, res.err
    assert len(workload_leaves(results)) == 2


def test_a_reader_that_goes_away_early_is_not_an_error():
    """`mlpstorage validate --list-rules | head -1`: the command stops quietly with exit 0."""
    import fcntl
    import os

    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, 1031, 4096)  # F_SETPIPE_SZ: a pipe smaller than the listing
    proc = subprocess.Popen([str(MLPSTORAGE), "validate", "--list-rules"], stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        assert reader.read(64)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert err == b""
