"""Row cells read from one leaf, with the fallback each has in the leaf's own files.

A published package often lacks a file the cell is normally read from (a pruned or never
written *_metadata.json, a .mlps-code-image left out). The leaf still records the same fact
elsewhere (dlio_config/, the metadata's pool hash), so the cell is taken from there rather than
left blank or, worse, computed from a default (DP Instances came out 64 instead of 8 for a
llama3-70b run on 64 accelerators with tensor parallelism 8). Each cell comes back with the
note reportgen adds to the row's Issues when it used the fallback: a reader can tell where the
figure came from.
"""

from __future__ import annotations

from typing import Any

from mlpstorage_py.report.table import link
from mlpstorage_py.results import code_image
from mlpstorage_py.results.tree import files
from mlpstorage_py.results.tree.package import Leaf, Package
from mlpstorage_py.results.tree.values import as_int, dig

Cell = tuple[Any, str | None]  # (the cell, the note saying it came from a fallback, or None)
POOL_HASH = ("args", "_validated_pool_hash")  # where the v3.0 tool's metadata records the leaf's code image


def _metadata_gap(leaf: Leaf) -> str:
    """Why the metadata did not give the cell: it is not there, or it does not state the value."""
    if leaf.metadata is None:
        return f"{leaf.path.name} has no readable *_metadata.json"
    return "its metadata does not state it"


def _dlio_file(leaf: Leaf, name: str) -> tuple[Any, str | None]:
    """(parsed dlio_config/<name>, its path as the note names it) or (None, None)."""
    folder = files.child(leaf.path, "dlio_config")
    if not files.real_dir(folder):
        return None, None
    data, problem = files.load_yaml(files.child(folder, name))
    return (data, f"{leaf.path.name}/dlio_config/{name}") if problem is None else (None, None)


def accelerator(leaf: Leaf) -> Cell:
    """Training's Accelerator Type: the metadata's, else the DLIO workload the leaf ran (hydra.yaml's
    runtime choice, else overrides.yaml's `workload=<model>_<accelerator>`)."""
    value = (leaf.metadata or {}).get("accelerator")
    if isinstance(value, str) and value:
        return value, None
    prefix = leaf.model + "_"
    hydra, where = _dlio_file(leaf, "hydra.yaml")
    choice = dig(hydra, "hydra", "runtime", "choices", "workload")
    if not isinstance(choice, str):
        overrides, where = _dlio_file(leaf, "overrides.yaml")
        named = [o.split("=", 1)[1] for o in overrides if isinstance(o, str) and o.startswith("workload=")] \
            if isinstance(overrides, list) else []
        choice = named[0] if named else None
    if isinstance(choice, str) and choice.startswith(prefix) and len(choice) > len(prefix):
        found = choice[len(prefix):]
        return found, f"Accelerator Type {found} read from {where} (workload {choice}): {_metadata_gap(leaf)}"
    return None, None


def _parallelism(leaf: Leaf) -> tuple[dict | None, str | None]:
    """(model.parallelism as the run was configured, the note when it came from dlio_config/)."""
    model = dig(leaf.metadata, "parameters", "model")
    if isinstance(model, dict):
        found = model.get("parallelism")
        return (found if isinstance(found, dict) else {}), None
    config, where = _dlio_file(leaf, "config.yaml")
    model = dig(config, "workload", "model")
    if isinstance(model, dict):
        found = model.get("parallelism")
        return (found if isinstance(found, dict) else {}), where
    return None, None


def dp_instances(leaf: Leaf) -> Cell:
    """Checkpointing's DP Instances: accelerators / (tensor x pipeline) of the configured model, the
    parallelism from the metadata, else from the leaf's dlio_config/config.yaml (DLIO's default
    of 1 where the model states none); blank, never a guess, when neither says."""
    ranks = as_int((leaf.summary or {}).get("num_accelerators"))
    par, where = _parallelism(leaf)
    if ranks is None:
        return None, None
    if par is None:
        return None, (f"DP Instances is blank: {leaf.path.name} records its model parallelism neither in "
                      "*_metadata.json nor in dlio_config/config.yaml")
    tensor, pipeline = as_int(par.get("tensor", 1)), as_int(par.get("pipeline", 1))
    if not tensor or not pipeline or tensor < 0 or pipeline < 0:
        return None, (f"DP Instances is blank: the parallelism (tensor {par.get('tensor')}, "
                      f"pipeline {par.get('pipeline')}) is no count")
    value = ranks // (tensor * pipeline)
    note = (f"DP Instances {value} = {ranks} accelerators / (tensor {tensor} x pipeline {pipeline}) from {where}: "
            f"{_metadata_gap(leaf)}") if where else None
    return value, note


def checkpoint_mode(leaf: Leaf) -> Cell:
    """`subset` or `default`: the metadata's --checkpoint-subset, else the leaf's dlio_config/
    config.yaml checkpoint.mode (the override a subset run writes)."""
    if leaf.metadata is not None:
        return ("subset" if (leaf.metadata.get("args") or {}).get("checkpoint_subset") else "default"), None
    config, where = _dlio_file(leaf, "config.yaml")
    mode = dig(config, "workload", "checkpoint", "mode")
    if where is None:
        return "default", None
    value = "subset" if mode == "subset" else "default"
    return value, f"Checkpoint Mode {value} read from {where}: {_metadata_gap(leaf)}"


def code(pkg: Package, leaf: Leaf) -> Cell:
    """The Code cell: the image the leaf's .mlps-code-image names, else the one its metadata records
    (args._validated_pool_hash), linked to that image's directory in the package's pool (code-images/,
    else the organization's own <org>/ pool of the v3.0 packages). A link is made only to an image
    that is there: an image not in the package is its pointer as plain text, and says so."""
    text = (leaf.pointer or "").strip()
    note = None
    if not text:
        recorded = dig(leaf.metadata, *POOL_HASH)
        if not isinstance(recorded, str) or code_image.parse_pointer(code_image.pointer_text(recorded)) is None:
            return "unknown", None
        text = code_image.pointer_text(recorded)
        where = leaf.record("metadata").path
        note = (f"Code from {where.name if where else 'metadata'} args._validated_pool_hash: "
                f"{leaf.path.name} has no {code_image.POINTER_FILE}")
    digest = code_image.parse_pointer(text)
    if digest is None:
        return "malformed", None
    image = _image_dir(pkg, leaf, digest)
    if image is None:
        missing = (f"Code: code image code-{digest[:8]} is not in the package's pool "
                   f"({code_image.POOL_DIR}/ or {leaf.org}/)")
        return code_image.pointer_text(digest), "; ".join(n for n in (note, missing) if n)
    return link(code_image.pointer_text(digest), image), note


def _image_dir(pkg: Package, leaf: Leaf, digest: str) -> str | None:
    """The image's directory relative to the package root, when it is a real directory inside it."""
    found = pkg.resolve_image(leaf, digest)
    if found is None or not files.real_dir(found):
        return None
    try:
        return found.resolve().relative_to(pkg.root.resolve()).as_posix()
    except ValueError:  # a pool reached through a link leads out of the package
        return None

