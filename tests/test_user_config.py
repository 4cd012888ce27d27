"""`mlpstorage config`: per-user defaults, checked by the flags' validators, and the precedence
flag > MLPSTORAGE_* environment > user config."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import DATASIZE, workload_leaves

from mlpstorage_py.cli.dispatch import parse
from mlpstorage_py.results.sentinel import user_config_path

RUN = ["closed", "training", "unet3d", "run", "-at", "b200", "-na", "1", "-cm", "16", "--data-dir", "/data"]


def stored() -> dict:
    path = user_config_path()
    return yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else {}


def test_set_show_unset_path(cli, tmp_path):
    assert cli("config", "path").out.strip() == str(user_config_path())
    assert cli("config", "set", "hosts", "node1,node2", "node3:4").rc == 0
    assert cli("config", "set", "systemname", "sysA").rc == 0
    assert cli("config", "set", "oversubscribe", "yes").rc == 0
    assert cli("config", "set", "mpi_params", "--bind-to none", "--map-by node").rc == 0
    assert cli("config", "set", "results_dir", "~/r").rc == 0
    assert stored() == {"hosts": ["node1", "node2", "node3:4"], "systemname": "sysA", "oversubscribe": True,
                        "mpi_params": ["--bind-to none", "--map-by node"], "results_dir": str(tmp_path / "home" / "r")}
    shown = json.loads(cli("config", "show", "--json").out)
    assert shown["hosts"] == {"value": ["node1", "node2", "node3:4"], "source": str(user_config_path())}
    assert shown["mpi_bin"] == {"value": None, "source": "unset"}
    text = cli("config", "show").out
    assert "systemname" in text and "sysA" in text
    assert cli("config", "unset", "hosts").rc == 0 and "hosts" not in stored()
    assert "not set" in cli("config", "unset", "hosts").out


@pytest.mark.parametrize("argv, words", [
    (("set", "colour", "red"), "unknown config key 'colour'"),
    (("set", "hosts", "bad host!"), "not a valid host name"),
    (("set", "mpi_bin", "nompi"), "expected mpirun, mpiexec, srun"),
    (("set", "mpi_bin", "/nonexistent/mpirun"), "not an executable file"),
    (("set", "systemname", "../escape"), "must start with a letter or digit"),
    (("set", "oversubscribe", "maybe"), "not true or false"),
    (("set", "mpi_params", "--x 'unbalanced"), "No closing quotation"),
    (("set", "systemname", "a", "b"), "exactly one value"),
    (("unset", "colour"), "unknown config key"),
])
def test_bad_key_or_value_is_one_line_exit_2(cli, argv, words):
    cli("config", "set", "systemname", "keep")
    res = cli("config", *argv)
    assert res.rc == 2 and len(res.err_lines) == 1 and words in res.err, res.err
    assert stored() == {"systemname": "keep"}


def test_precedence_flag_then_environment_then_config(cli, monkeypatch):
    cli("config", "set", "systemname", "from-config")
    cli("config", "set", "hosts", "cfg1", "cfg2")
    cli("config", "set", "mpi_bin", "mpiexec")
    cli("config", "set", "allow_run_as_root", "true")
    args = parse(RUN)
    assert (args["systemname"], args["hosts"], args["mpi_bin"], args["allow_run_as_root"]) == \
        ("from-config", ["cfg1", "cfg2"], "mpiexec", True)
    monkeypatch.setenv("MLPSTORAGE_SYSTEMNAME", "from-env")
    monkeypatch.setenv("MLPSTORAGE_HOSTS", "env1 env2")
    args = parse(RUN)
    assert (args["systemname"], args["hosts"], args["mpi_bin"]) == ("from-env", ["env1", "env2"], "mpiexec")
    args = parse(RUN + ["-sn", "from-flag", "--hosts", "flag1", "--mpi-bin", "srun"])
    assert (args["systemname"], args["hosts"], args["mpi_bin"]) == ("from-flag", ["flag1"], "srun")


def test_a_bad_environment_or_file_value_is_refused(cli, monkeypatch):
    monkeypatch.setenv("MLPSTORAGE_HOSTS", "ok,bad!host")
    res = cli(*RUN)
    assert res.rc == 2 and len(res.err_lines) == 1 and "MLPSTORAGE_HOSTS" in res.err
    monkeypatch.delenv("MLPSTORAGE_HOSTS")
    path = user_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("systemname: ../up\n", encoding="utf-8")  # edited by hand
    res = cli(*RUN)
    assert res.rc == 2 and len(res.err_lines) == 1 and str(path) in res.err and "systemname" in res.err
    path.write_text("colour: red\n", encoding="utf-8")
    res = cli(*RUN)
    assert res.rc == 2 and "unknown key 'colour'" in res.err
    assert cli("config", "unset", "colour").rc == 0  # the way out is never blocked
    assert cli("version").rc == 0


def test_a_run_takes_its_system_name_from_the_config(cli, results):
    cli("config", "set", "systemname", "cfgsys")
    res = cli(*DATASIZE, "-rd", results)
    assert res.rc == 0, res.err
    assert workload_leaves(results, system="cfgsys") and not workload_leaves(results, system="sys1")


@pytest.mark.parametrize("text", ["[" * 5000 + "]" * 5000 + "\n", "- a list\n", "key: [unclosed\n", "\xff\xfe"])
def test_a_config_file_that_is_no_mapping_is_one_line_exit_2(cli, text):
    """Nested past the parser's depth, a list, a syntax error, not UTF-8: one line, never a traceback."""
    path = user_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("latin-1"))
    for argv in (RUN, ("config", "show"), ("validate",)):
        res = cli(*argv)
        assert res.rc == 2 and len(res.err_lines) == 1 and str(path) in res.err, (argv, res.err)
