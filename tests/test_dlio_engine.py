"""DLIO 2.0.0 silently ignores unknown keys: the translation table must match what it reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlpstorage_py.benchmarks import dlio
from mlpstorage_py.rules import configs as workloads
from mlpstorage_py.errors import BenchmarkFailed


def test_table_matches_what_the_installed_dlio_reads():
    pkg = pytest.importorskip("dlio_benchmark")
    source = (Path(pkg.__file__).parent / "utils" / "config.py").read_text(encoding="utf-8")
    read = set(re.findall(r"config\['([a-z_]+)'\]\['([a-z_]+)'\]", source))
    read |= {("reader", k) for k in re.findall(r"reader\['([a-z_]+)'\]", source)}
    table = dlio.engine_table()
    listed = {(section, key) for section, keys in table["known"].items() for key in keys if section != "framework"}
    assert read - listed == set(), f"DLIO reads keys the table does not list: {sorted(read - listed)}"
    assert listed - read == set(), f"the table lists keys DLIO does not read: {sorted(listed - read)}"


def test_edition_spelling_is_renamed_and_unknown_keys_are_reported():
    params = workloads.training("unet3d", "b200")
    params["reader"]["odirect"] = True
    engine, dropped = dlio.translate(params, dlio.engine_table())
    assert engine["dataset"]["record_length"] == 146600628
    assert engine["dataset"]["record_length_stdev"] == 68341808
    assert engine["dataset"]["record_length_resize"] == 2097152
    assert "record_length_bytes" not in engine["dataset"]
    assert engine["model"] == params["model"]
    assert dropped == ["reader.odirect"]


def test_outputs_are_required_even_after_exit_zero(tmp_path):
    with pytest.raises(BenchmarkFailed, match="dlio.log"):
        dlio.read_outputs(tmp_path, expect_training=True)
    (tmp_path / "dlio.log").write_text("x")
    (tmp_path / "dlio_config").mkdir()
    for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
        (tmp_path / "dlio_config" / name).write_text("{}")
    assert dlio.read_outputs(tmp_path, expect_training=False) == {}
    with pytest.raises(BenchmarkFailed, match="summary.json"):
        dlio.read_outputs(tmp_path, expect_training=True)
    (tmp_path / "per_epoch_stats.json").write_text("{}")
    (tmp_path / "0_output.json").write_text("{}")
    (tmp_path / "summary.json").write_text('{"metric": {"train_au_mean_percentage": 1}}')
    with pytest.raises(BenchmarkFailed, match="did no training"):
        dlio.read_outputs(tmp_path, expect_training=True)


def test_datagen_variants_share_the_record_layout():
    for model in ("unet3d", "retinanet"):
        gen = workloads.datagen(model)
        run = workloads.training(model, "b200")
        assert gen["workflow"]["generate_data"] is True and gen["workflow"]["train"] is False
        for key in ("format", "num_samples_per_file", "record_length_bytes"):
            assert gen["dataset"][key] == run["dataset"][key]
