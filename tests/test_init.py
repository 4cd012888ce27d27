"""`mlpstorage init`: the sentinel, idempotence, refusals and the recorded default."""

from __future__ import annotations

import re

import pytest
import yaml

from conftest import DATASIZE
from mlpstorage_py import __version__
from mlpstorage_py.results.sentinel import resolve_results_dir, user_config_path


def read_yaml(path):
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def test_init_writes_the_sentinel(cli, tmp_path):
    root = tmp_path / "new" / "results"
    res = cli("init", "Acme.Labs-1_x", root)
    assert res.rc == 0, res.err
    assert "initialised" in res.out and "already" not in res.out
    sentinel = read_yaml(root / "mlperf-results.yaml")
    assert sentinel["orgname"] == "Acme.Labs-1_x"
    assert sentinel["mlperf_results_version"] == 3
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", sentinel["initialized_at"])
    assert sentinel["initialized_by"] == f"mlpstorage {__version__}"
    assert sorted(p.name for p in root.iterdir()) == ["mlperf-results.yaml"]


def test_init_records_the_default_in_xdg_config(cli, tmp_path):
    root = tmp_path / "R"
    assert cli("init", "Org", root).rc == 0
    config_file = tmp_path / "xdg" / "mlpstorage" / "config.yaml"
    assert user_config_path() == config_file
    assert read_yaml(config_file)["results_dir"] == str(root.resolve())
    assert resolve_results_dir(None) == (root.resolve(), str(config_file))


def test_init_keeps_other_config_keys(cli, tmp_path):
    config_file = tmp_path / "xdg" / "mlpstorage" / "config.yaml"
    config_file.parent.mkdir(parents=True)
    config_file.write_text("results_dir: /old\nother: kept\n", encoding="utf-8")
    assert cli("init", "Org", tmp_path / "R").rc == 0
    assert read_yaml(config_file) == {"results_dir": str((tmp_path / "R").resolve()), "other": "kept"}


def test_relative_xdg_config_home_is_ignored(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/xdg")
    assert user_config_path() == tmp_path / "home" / ".config" / "mlpstorage" / "config.yaml"


def test_init_is_idempotent_for_the_same_org(cli, tmp_path):
    root = tmp_path / "R"
    assert cli("init", "Org", root).rc == 0
    before = (root / "mlperf-results.yaml").read_bytes()
    res = cli("init", "Org", root)
    assert res.rc == 0
    assert "already initialised" in res.out
    assert (root / "mlperf-results.yaml").read_bytes() == before


def test_init_refuses_a_different_org(cli, tmp_path):
    root = tmp_path / "R"
    assert cli("init", "Org", root).rc == 0
    before = (root / "mlperf-results.yaml").read_bytes()
    res = cli("init", "Other", root)
    assert res.rc == 5
    assert "Org" in res.err and len(res.err_lines) == 1
    assert (root / "mlperf-results.yaml").read_bytes() == before


def test_init_refuses_a_non_empty_directory_without_sentinel(cli, tmp_path):
    root = tmp_path / "busy"
    root.mkdir()
    (root / "data.bin").write_bytes(b"x")
    res = cli("init", "Org", root)
    assert res.rc == 5
    assert not (root / "mlperf-results.yaml").exists()
    assert not (tmp_path / "xdg" / "mlpstorage" / "config.yaml").exists()


def test_init_accepts_an_existing_empty_directory(cli, tmp_path):
    root = tmp_path / "empty"
    root.mkdir()
    assert cli("init", "Org", root).rc == 0
    assert (root / "mlperf-results.yaml").is_file()


@pytest.mark.parametrize("org", ["bad org", "a/b", "", "Org!", "../x"])
def test_init_refuses_a_bad_org_name(cli, tmp_path, org):
    root = tmp_path / "R"
    res = cli("init", org, root)
    assert res.rc == 2
    assert len(res.err_lines) == 1
    assert not root.exists()


def test_init_default_directory_is_under_home(cli, tmp_path):
    assert cli("init", "Org").rc == 0
    assert (tmp_path / "home" / "mlpstorage-results" / "mlperf-results.yaml").is_file()


def test_a_sentinel_without_orgname_is_a_configuration_error(cli, tmp_path):
    root = tmp_path / "R"
    root.mkdir()
    (root / "mlperf-results.yaml").write_text("mlperf_results_version: 3\n", encoding="utf-8")
    assert cli("init", "Org", root).rc == 5
    assert cli("closed", "training", "unet3d", "datasize", "-at", "b200", "-ma", "8", "-cm", "16",
               "-sn", "sys1", "-rd", root).rc == 5


def test_a_sentinel_nested_past_the_parsers_depth_is_a_one_line_error(cli, tmp_path):
    root = tmp_path / "r"
    assert cli("init", "Acme", root).rc == 0
    (root / "mlperf-results.yaml").write_text("orgname: " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    for argv in (("reports", "reportgen", "-rd", root), (*DATASIZE, "-sn", "sys1", "-rd", root)):
        res = cli(*argv)
        assert res.rc == 5 and len(res.err_lines) == 1 and "not a valid results sentinel (RecursionError" in res.err, res.err


# --- the per-user default is never re-pointed behind the user's back ---------------------

def recorded_default(tmp_path):
    return read_yaml(tmp_path / "xdg" / "mlpstorage" / "config.yaml")["results_dir"]


def test_init_elsewhere_keeps_a_default_that_names_another_tree(cli, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    assert cli("init", "Org", first).rc == 0
    res = cli("init", "Other", second)
    assert res.rc == 0, res.err
    assert (second / "mlperf-results.yaml").is_file()
    assert recorded_default(tmp_path) == str(first.resolve())
    assert f"stays {first.resolve()}" in res.out and f"config set results_dir {second.resolve()}" in res.out
    assert "--set-default" in res.out and len(res.out.splitlines()) == 1
    # a later command without --results-dir still lands in the first tree
    assert cli(*DATASIZE, "-sn", "sys1").rc == 0
    assert (first / "closed" / "Org").is_dir() and not (second / "closed").exists()


def test_init_set_default_switches_and_says_so(cli, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    assert cli("init", "Org", first).rc == 0
    res = cli("init", "Org", second, "--set-default")
    assert res.rc == 0, res.err
    assert recorded_default(tmp_path) == str(second.resolve())
    assert f"replacing {first.resolve()} (--set-default)" in res.out


def test_init_again_on_a_kept_tree_does_not_switch(cli, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    assert cli("init", "Org", first).rc == 0
    assert cli("init", "Org", second).rc == 0
    res = cli("init", "Org", second)
    assert "already initialised" in res.out and "stays" in res.out
    assert recorded_default(tmp_path) == str(first.resolve())
    assert "already the default" in cli("init", "Org", first).out


def test_init_replaces_a_default_that_is_no_results_tree(cli, tmp_path):
    gone = tmp_path / "gone"
    assert cli("init", "Org", gone).rc == 0
    (gone / "mlperf-results.yaml").unlink()
    res = cli("init", "Org", tmp_path / "new")
    assert res.rc == 0
    assert recorded_default(tmp_path) == str((tmp_path / "new").resolve())
    assert f"replacing {gone.resolve()} (no results tree there)" in res.out


def test_config_set_is_the_documented_switch(cli, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    assert cli("init", "Org", first).rc == 0
    assert cli("init", "Org", second).rc == 0
    assert cli("config", "set", "results_dir", second).rc == 0
    assert resolve_results_dir(None)[0] == second.resolve()
