"""What CLOSED requires where a run-time gate and a checker rule judge the same thing. Both ask
these predicates over an edition's checker block (editions.yaml), so a gate and its rule cannot
disagree: a gate passes `tables.checker()` (the edition this tool runs), a rule the block that
judges the leaf (checker/judging.py). tests/test_gates.py changes a table value and sees both move.
"""

from __future__ import annotations

import functools
from typing import Any

Block = dict[str, Any]


# -- training (Rules 3.1.2) ------------------------------------------------------------------
def training_sizing(block: Block) -> tuple[int, int]:
    """(steps per epoch, host-memory multiplier) Rules 3.1.2 sizes a training dataset by."""
    return int(block["training_steps_per_epoch"]), int(block["training_host_memory_multiplier"])


def training_min_samples(block: Block, *, batch_size: int, accelerators: int, host_memory_gib: float,
                         record_length: int) -> tuple[int, float]:
    """Rules 3.1.2's two lower bounds on a training dataset's samples: the edition's steps per
    epoch on every accelerator, and its multiple of the clients' memory (summed over the hosts)."""
    steps_per_epoch, multiplier = training_sizing(block)
    return steps_per_epoch * batch_size * accelerators, host_memory_gib * multiplier * 2 ** 30 / record_length


# -- checkpointing (Rules 4.3.4, 4.3.5, 4.7.1) ------------------------------------------------------
def checkpoint_combined(block: Block) -> tuple[int, int]:
    """(writes, reads) of one CLOSED invocation that writes and then reads (4.7.1, Table 4)."""
    count = int(block["checkpoint_closed_count"])
    return count, count


def checkpoint_phases(block: Block) -> tuple[tuple[int, int], tuple[int, int]]:
    """(writes, reads) of a CLOSED result run as two invocations, in order: the writes, then the reads."""
    count = int(block["checkpoint_closed_count"])
    return (count, 0), (0, count)


def checkpoint_invocation_ok(block: Block, writes: int, reads: int) -> bool:
    """Whether one CLOSED invocation's counts are the combined shape or one of the two phases."""
    return (writes, reads) == checkpoint_combined(block) or (writes, reads) in checkpoint_phases(block)


def checkpoint_accelerator_memory(block: Block, accelerator: str, count: int) -> int:
    """GiB `count` accelerators of Table 3's kind hold together, which must hold the checkpoint (4.3.4)."""
    return int(block["accelerator_memory_gb"][accelerator]) * count


def checkpoint_subset(block: Block) -> tuple[str, int]:
    """(model, processes) of the one CLOSED subset run there is (4.3.5)."""
    model = str(block["checkpoint_subset_model"])
    return model, int(block["closed_mpi_processes"][model])


# -- vector database (Rules 5.1.1, 5.6.4) ----------------------------------------------------
def vdb_closed_fixed(block: Block) -> dict[str, Any]:
    """The OPEN-only settings and the value a CLOSED run keeps for each, by parameter path
    (dataset.seed, ...; 5.6.4)."""
    return dict(block.get("vdb_closed_fixed") or {})


def vdb_closed_values(block: Block) -> dict[str, Any]:
    """vdb_closed_fixed by the name of the flag that sets each (the path's last part: seed, ...)."""
    return {path.rsplit(".", 1)[-1]: value for path, value in vdb_closed_fixed(block).items()}


def vdb_scales(block: Block) -> tuple[list[tuple[int, int]] | None, str]:
    """(num_vectors, dimension) pairs of 5.1.1's table and where they come from: the checker
    block's vdb_scales, else configs/vectordb/default.yaml's sanctioned_scales; None: no table."""
    if block.get("vdb_scales"):
        return [(int(n), int(d)) for n, d in block["vdb_scales"]], "the edition's checker block (vdb_scales)"
    scales = _configured_scales()
    if not scales:
        return None, "no table"
    return list(scales), "configs/vectordb/default.yaml sanctioned_scales"


@functools.cache
def _configured_scales() -> tuple[tuple[int, int], ...]:
    """configs/vectordb/default.yaml's sanctioned_scales, read once (every run asks)."""
    import yaml

    from mlpstorage_py.rules.configs import configs_dir

    try:
        path = configs_dir() / "vectordb" / "default.yaml"
        scales = (yaml.safe_load(path.read_text(encoding="utf-8")) or {})["vector_database"].get("sanctioned_scales")
    except (OSError, KeyError, TypeError, yaml.YAMLError):  # no source checkout, unreadable: no table
        scales = None
    return tuple((int(n), int(d)) for n, d in scales or ())
