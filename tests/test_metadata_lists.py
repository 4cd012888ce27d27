"""A leaf's metadata writes the published metadata's list fields as lists, never null: readers
(the reference checker's 3.3.4 among them) take len() of `args.hosts`, and crash on null."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import DATASIZE, REALDATA, workload_leaves
from mlpstorage_py.benchmarks.lifecycle import _published_args
from mlpstorage_py.launch.mpi import DEFAULT_HOSTS


def leaf_args(results: Path) -> dict[str, Any]:
    leaf = workload_leaves(results)[-1]
    (meta,) = leaf.glob("training_*_metadata.json")
    return json.loads(meta.read_text(encoding="utf-8"))["args"]


def published_list_args(benchmark_type: str) -> set[str]:
    """The args keys that some published metadata of this family writes as a list."""
    found: set[str] = set()
    for path in REALDATA.glob(f"closed/*/results/**/{benchmark_type}_*_metadata.json"):
        args = json.loads(path.read_text(encoding="utf-8")).get("args") or {}
        found.update(k for k, v in args.items() if isinstance(v, list))
    return found


def test_a_run_without_hosts_or_params_writes_lists(cli, results):
    assert cli(*DATASIZE, "-sn", "sys1").rc == 0
    args = leaf_args(results)
    assert args["hosts"] == DEFAULT_HOSTS == ["127.0.0.1"]
    assert args["params"] == []


def test_given_hosts_and_params_are_written_as_given(cli, results):
    # names that do not resolve: the preflight refuses (exit 10), and the leaf still records what was asked
    res = cli(*DATASIZE, "-sn", "sys1", "--hosts", "node1.invalid", "node2.invalid",
              "--params", "dataset.num_subfolders_train=4")
    assert res.rc == 10, res.err
    args = leaf_args(results)
    assert args["hosts"] == ["node1.invalid", "node2.invalid"]
    assert args["params"] == ["dataset.num_subfolders_train=4"]


def test_every_family_gets_the_lists_and_the_resolved_results_dir(tmp_path):
    shown = _published_args({"hosts": None, "params": None, "results_dir": None, "mpi_params": None}, tmp_path)
    assert shown == {"hosts": ["127.0.0.1"], "params": [], "results_dir": str(tmp_path), "mpi_params": None}
    shown["hosts"].append("x")
    assert DEFAULT_HOSTS == ["127.0.0.1"]  # a copy, never the launcher's own list
    assert _published_args({"model": "m"}, None) == {"model": "m"}  # a family without the option gains none


@pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
def test_our_training_metadata_lists_what_the_published_one_lists(cli, results):
    listed = published_list_args("training")
    assert {"hosts", "params"} <= listed
    assert cli(*DATASIZE, "-sn", "sys1").rc == 0
    args = leaf_args(results)
    assert sorted(k for k in listed if not isinstance(args.get(k), list)) == []
