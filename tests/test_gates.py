"""Gates from the tables: a run-time gate and the checker rule that judges the same thing read one
edition value through rules/predicates.py, so changing that value in the loaded table moves both
(the gate refuses what it accepted, the rule flags what it passed)."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from mlpstorage_py.benchmarks.base import Request
from mlpstorage_py.benchmarks.checkpointing import CheckpointingBenchmark
from mlpstorage_py.benchmarks.options import CheckpointingOptions, VectorDBOptions
from mlpstorage_py.checker.registry import INVALID
from mlpstorage_py.errors import GateRefused
from mlpstorage_py.rules import tables
from synthetic import edit_json, fresh, leaves_of, metadata_file, workload  # noqa: F401
from test_checker_structure import findings_of


@pytest.fixture
def table(monkeypatch) -> Callable[[str, Any], None]:
    """Set one key of the loaded checker block (gate and checker share it) for the test."""
    return lambda key, value: monkeypatch.setitem(tables.checker(), key, value)


def gate(model: str, processes: int, writes: int = 10, reads: int = 10, subset: bool = False) -> None:
    """The CLOSED checkpointing preflight of a planned configview (nothing is written)."""
    options = CheckpointingOptions(num_processes=processes, client_host_memory_in_gb=64, accelerator_type="b200",
                                   num_checkpoints_write=writes, num_checkpoints_read=reads, checkpoint_subset=subset)
    bench = CheckpointingBenchmark(Request("closed", "checkpointing", model, "configview", options))
    bench.preflight(bench.plan())


def test_the_closed_checkpoint_count_moves_gate_and_rule(fresh, table):
    root = fresh()
    gate("llama3-8b", 8, 10, 0)
    assert [f for f in findings_of(root, "4.7.1") if f.severity == INVALID] == []
    table("checkpoint_closed_count", 5)
    gate("llama3-8b", 8, 5, 5)
    gate("llama3-8b", 8, 0, 5)
    with pytest.raises(GateRefused, match="write and read 5 checkpoints"):
        gate("llama3-8b", 8, 10, 0)
    flagged = [f for f in findings_of(root, "4.7.1") if f.severity == INVALID]
    assert flagged and "5-write phase then a 5-read phase" in flagged[0].message


def test_the_subset_model_moves_gate_and_rule(fresh, table):
    root = fresh()
    write_leaf = leaves_of(workload(root, "checkpointing"))[0]
    edit_json(metadata_file(write_leaf), lambda d: d["args"].update(checkpoint_subset=True))
    gate("llama3-8b", 8, 10, 0, subset=True)
    assert findings_of(root, "4.3.5") == []
    table("checkpoint_subset_model", "llama3-70b")
    processes = tables.checker()["closed_mpi_processes"]["llama3-70b"]
    with pytest.raises(GateRefused, match=f"must be llama3-70b on exactly {processes} processes"):
        gate("llama3-8b", 8, 10, 0, subset=True)
    messages = [f.message for f in findings_of(root, "4.3.5") if f.severity == INVALID]
    assert "a subset run must be llama3-70b, not llama3-8b" in messages
    assert f"a subset run uses exactly {processes} accelerators, not 8" in messages


def test_the_accelerator_memory_moves_gate_and_rule(fresh, table):
    root = fresh()
    gate("llama3-8b", 8, 10, 0)
    assert findings_of(root, "4.3.4") == []
    table("accelerator_memory_gb", dict(tables.checker()["accelerator_memory_gb"], b200=1))
    with pytest.raises(GateRefused, match=r"8 x b200 \(1 GiB each\) = 8 GiB cannot hold"):
        gate("llama3-8b", 8, 10, 0)
    flagged = [f.message for f in findings_of(root, "4.3.4") if f.severity == INVALID]
    assert flagged and all("x b200 (1 GiB) =" in m and "< checkpoint" in m for m in flagged)


def test_the_closed_count_is_the_flags_choice(cli, results, table):
    table("checkpoint_closed_count", 5)
    args = ("closed", "checkpointing", "llama3-8b", "configview", "-np", "8", "-cm", "64", "-at", "b200", "-rd", results)
    assert cli(*args, "-ncw", "5", "-ncr", "0").rc == 0
    refused = cli(*args, "-ncw", "10", "-ncr", "0")
    assert refused.rc == 2 and "invalid choice: 10" in refused.err


def test_the_training_sizing_moves_the_datasize_and_rule_3_1_2(fresh, table):
    from mlpstorage_py.benchmarks.training import sizing
    from mlpstorage_py.rules import configs

    root = fresh()
    parameters = configs.training("unet3d", "b200")
    before = sizing(parameters, 8, 1, 16).num_files_train
    assert [f for f in findings_of(root, "3.1.2") if f.severity == INVALID] == []
    table("training_steps_per_epoch", tables.checker()["training_steps_per_epoch"] * 10)
    assert sizing(parameters, 8, 1, 16).num_files_train > before
    flagged = [f for f in findings_of(root, "3.1.2") if f.severity == INVALID]
    assert flagged and all("< required minimum" in f.message for f in flagged)


def test_the_vdb_closed_values_move_the_plan_and_the_rule(table):
    from mlpstorage_py.benchmarks.vectordb import VectorDBBenchmark

    fixed = dict(tables.checker()["vdb_closed_fixed"], **{"dataset.seed": 7})
    table("vdb_closed_fixed", fixed)

    def planned(mode: str, **flags: Any) -> Any:
        options = VectorDBOptions(num_vectors=1000, dimension=8, num_shards=1, **flags)
        return VectorDBBenchmark(Request(mode, "vectordb", "HNSW", "run", options)).plan()

    closed = planned("closed")
    assert closed.parameters["dataset"]["seed"] == 7 and closed.verification == "CLOSED"
    assert planned("open", seed=42).verification == "OPEN"
    assert planned("open", seed=7).verification == "CLOSED"
