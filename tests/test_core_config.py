"""core-config-v1: canonical values, selection by allowlist, and real published vectors."""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml

from conftest import REALDATA, REPO
from mlpstorage_py.rules.core_config import canonical, core_config, flatten
from mlpstorage_py.rules.tables import comparability_classes


def sha16(kept: dict) -> str:
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]


# --- canonicalisation -------------------------------------------------------------------

@pytest.mark.parametrize("raw, expected", [
    (True, True), (False, False),
    ("true", True), ("True", True), ("False", False), (" FALSE ", False),
    ("14000", 14000), ("-3", -3), ("+7", 7),
    ("0.5", 0.5), (".5", 0.5), ("1.0", 1), ("1e3", 1000), ("2.5e-1", 0.25),
    (5.0, 5), (0.162, 0.162), (7, 7),
    ("pytorch", "pytorch"), ("seed", "seed"), ("1.2.3", "1.2.3"), ("nan", "nan"), ("", ""),
    (["1", "2.0", "x", "true", 3.0], [1, 2, "x", True, 3]),
])
def test_canonical(raw, expected):
    got = canonical(raw)
    assert got == expected
    assert type(got) is type(expected)


def test_canonical_bool_is_not_turned_into_an_int():
    assert canonical(True) is True
    assert canonical([True, 1]) == [True, 1] and canonical([True, 1])[0] is True


def test_flatten():
    assert flatten({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": "x"}) == {"a.b": 1, "a.c.d": [1, 2], "e": "x"}


# --- selection and hashing --------------------------------------------------------------

def test_hash_is_sha256_prefix_of_canonical_json():
    cc = core_config("training", {"framework": "pytorch", "reader": {"batch_size": "7", "read_threads": 4}})
    assert cc == {"algorithm": "core-config-v1", "allowlist": "training@1",
                  "hash": sha16({"framework": "pytorch", "reader.batch_size": 7}),
                  "keys": ["framework", "reader.batch_size"]}


def test_flat_and_nested_spellings_hash_alike():
    nested = {"framework": "pytorch", "reader": {"batch_size": 7}, "model": {"name": "unet3d"}}
    flat = {"framework": "pytorch", "reader.batch_size": 7, "model.name": "unet3d"}
    assert core_config("training", nested) == core_config("training", flat)


def test_value_spellings_hash_alike():
    a = core_config("training", {"reader": {"batch_size": 7, "file_shuffle": "seed"}, "train": {"epochs": 5.0},
                                 "workflow": {"train": True}})
    b = core_config("training", {"reader": {"batch_size": "7", "file_shuffle": "seed"}, "train": {"epochs": "5"},
                                 "workflow": {"train": "True"}})
    assert a["hash"] == b["hash"]


def test_site_tunables_and_excluded_keys_do_not_change_the_hash():
    base = {"framework": "pytorch", "reader": {"batch_size": 7},
            "checkpoint": {"checkpoint_after_epoch": 5, "checkpoint_folder": "a"}}
    h = core_config("training", base)["hash"]
    tuned = json.loads(json.dumps(base))
    tuned["checkpoint"]["checkpoint_folder"] = "/elsewhere"  # explicitly excluded
    tuned["reader"]["read_threads"] = 64  # not on the allowlist
    tuned["dataset"] = {"data_folder": "/mnt/x", "num_files_train": 1}
    tuned["storage"] = {"storage_root": "/mnt"}
    cc = core_config("training", tuned)
    assert cc["hash"] == h
    assert "checkpoint.checkpoint_folder" not in cc["keys"]


def test_allowlisted_key_changes_the_hash():
    base = {"framework": "pytorch", "checkpoint": {"checkpoint_after_epoch": 5}}
    changed = {"framework": "pytorch", "checkpoint": {"checkpoint_after_epoch": 6}}
    assert core_config("training", base)["hash"] != core_config("training", changed)["hash"]


def test_wildcard_matches_only_below_its_prefix():
    cc = core_config("training", {"model": "flat-value", "modelx": {"y": 1}, "model_extra": 2, "framework": "pt"})
    assert cc["keys"] == ["framework"]


def test_checkpointing_excludes_write_and_read_counts():
    base = {"framework": "pytorch", "checkpoint": {"num_checkpoints_write": 10, "num_checkpoints_read": 0,
                                                  "checkpoint_folder": "/a", "fsync": True}}
    other = {"framework": "pytorch", "checkpoint": {"num_checkpoints_write": 0, "num_checkpoints_read": 10,
                                                   "checkpoint_folder": "/b", "fsync": True}}
    a, b = core_config("checkpointing", base), core_config("checkpointing", other)
    assert a["allowlist"] == "checkpointing@1" and a["hash"] == b["hash"]
    assert a["keys"] == ["checkpoint.fsync", "framework"]


@pytest.mark.parametrize("params", [{}, {"reader": {"read_threads": 4}, "dataset": {"data_folder": "/x"}}])
def test_nothing_selected_gives_unknown(params):
    cc = core_config("training", params)
    assert cc["hash"] == "unknown" and cc["keys"] == [] and cc["allowlist"] == "training@1"


def test_family_without_allowlist():
    assert core_config("no-such-family", {"framework": "pytorch"}) == {
        "algorithm": "core-config-v1", "allowlist": "unknown", "hash": "unknown", "keys": []}


# --- real vectors -----------------------------------------------------------------------

NEWFW = "closed/NewFW/results/Solidigm_D5-P5336_61TB_Gen4_NVMe_QLC"
needs_realdata = pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is not present")


@needs_realdata
@pytest.mark.parametrize("family, rel, expected", [
    ("training", f"{NEWFW}/training/unet3d/run/20260712_161152/dlio_config/config.yaml", "0d3ad0dec188becd"),
    ("training", "closed/Alluxio/results/aws_c7i48xlarge_i3en12xlarge_1c_1s_8a/training/retinanet/run/"
                 "20260710_072716/dlio_config/config.yaml", "20c73f53486caba0"),
    ("checkpointing", f"{NEWFW}/checkpointing/llama3-8b/20260713_104840/dlio_config/config.yaml", "68df04b7240e3fb0"),
])
def test_published_dlio_configs(family, rel, expected):
    with open(REALDATA / rel, encoding="utf-8") as fh:
        workload = yaml.safe_load(fh)["workload"]
    assert core_config(family, workload)["hash"] == expected


@needs_realdata
def test_published_metadata_parameters_with_string_spellings():
    path = REALDATA / NEWFW / "training/unet3d/run/20260712_134711/training_20260712_134711_metadata.json"
    parameters = json.loads(path.read_text(encoding="utf-8"))["parameters"]
    assert parameters["dataset"]["num_files_train"] == "14000"  # the spelling canonical() must absorb
    assert core_config("training", parameters)["hash"] == "0d3ad0dec188becd"


@pytest.mark.parametrize("name, family, model, accelerator, expected", [
    ("unet3d_b200", "training", "unet3d", "b200", "0d3ad0dec188becd"),
    ("retinanet_b200", "training", "retinanet", "b200", "20c73f53486caba0"),
    ("unet3d_a100", "training", "unet3d", "a100", "691cea309c4f2f52"),
    ("unet3d_h100", "training", "unet3d", "h100", "0f3dd7a4bf6433a3"),
    ("llama3_8b", "checkpointing", "llama3-8b", "any", "68df04b7240e3fb0"),
    ("llama3_70b", "checkpointing", "llama3-70b", "any", "3c53fe70d64f91d4"),
    ("llama3_405b", "checkpointing", "llama3-405b", "any", "7adcfa87a5c4c8e6"),
    ("llama3_1t", "checkpointing", "llama3-1t", "any", "45fd627ad9dc5f4c"),
])
def test_own_configs_reproduce_class_hashes(name, family, model, accelerator, expected):
    with open(REPO / "configs" / "dlio" / "workload" / f"{name}.yaml", encoding="utf-8") as fh:
        parameters = yaml.safe_load(fh)
    assert core_config(family, parameters)["hash"] == expected
    classes = [c for c in comparability_classes()
               if c["family"] == family and c["model"] == model and c["accelerator"] == accelerator]
    assert any(expected in c["core_configs"] for c in classes)
