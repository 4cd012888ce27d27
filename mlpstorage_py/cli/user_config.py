"""Per-user defaults in $XDG_CONFIG_HOME/mlpstorage/config.yaml (`mlpstorage config`, handled in
cli/config.py), and the order every command resolves them in: the flag, else its MLPSTORAGE_* variable, else the file.

Each key is checked by the validator its flag uses, whether it comes from `config set`, the
environment or the file, so a default can never hold what the flag would refuse.
"""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mlpstorage_py.cli.common import host_list, mpi_bin_arg
from mlpstorage_py.errors import UsageError
from mlpstorage_py.results.io import atomic_write_text
from mlpstorage_py.results.leaf import check_name
from mlpstorage_py.results.sentinel import read_user_config, user_config_path


def _path(text: str) -> str:
    if not text.strip() or "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a path")
    return str(Path(text).expanduser().absolute())


def _location(text: str) -> str:
    """A directory, or an s3:// URI for object storage (kept as given)."""
    return text if text.startswith("s3://") and len(text) > 5 else _path(text)


def _mpi_params(text: str) -> str:
    try:
        shlex.split(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    return text


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "on", "1"):
        return True
    if lowered in ("false", "no", "off", "0"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def _system(text: str) -> str:
    return check_name("system name", text)


@dataclass(frozen=True)
class Key:
    name: str
    flag: str
    env: str | None
    parse: Callable[[str], Any]
    many: bool = False      # a list, as the flag's repeated values are (set takes several values)


KEYS = {k.name: k for k in (
    Key("results_dir", "--results-dir", "MLPSTORAGE_RESULTS_DIR", _path),
    Key("systemname", "--systemname", "MLPSTORAGE_SYSTEMNAME", _system),
    Key("data_dir", "--data-dir", "MLPSTORAGE_DATA_DIR", _location),
    Key("checkpoint_folder", "--checkpoint-folder", "MLPSTORAGE_CHECKPOINT_FOLDER", _location),
    Key("hosts", "--hosts", "MLPSTORAGE_HOSTS", host_list, many=True),
    Key("mpi_bin", "--mpi-bin", "MLPSTORAGE_MPI_BIN", mpi_bin_arg),
    Key("mpi_params", "--mpi-params", "MLPSTORAGE_MPI_PARAMS", _mpi_params, many=True),
    Key("oversubscribe", "--oversubscribe", None, _bool),
    Key("allow_run_as_root", "--allow-run-as-root", None, _bool),
)}


def key_of(name: str) -> Key:
    if name not in KEYS:
        raise UsageError(f"unknown config key {name!r} (keys: {', '.join(KEYS)})")
    return KEYS[name]


def check(key: Key, values: list[str], where: str) -> Any:
    """The stored form of values for key, by the flag's own validator; one line when refused."""
    if not values or (len(values) > 1 and not key.many):
        raise UsageError(f"{where}: {key.name} takes {'one or more values' if key.many else 'exactly one value'}")
    try:
        parsed = [key.parse(str(v)) for v in values]
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"{where}: {key.name} ({key.flag}): {exc}") from None
    except UsageError as exc:
        raise UsageError(f"{where}: {key.name} ({key.flag}): {exc}") from None
    if not key.many:
        return parsed[0]
    return [h for chunk in parsed for h in chunk] if key.name == "hosts" else parsed


def stored(key: Key, value: Any, path: Path) -> Any:
    """A value read back from the file, checked again (the file may have been edited by hand)."""
    if isinstance(value, bool) and key.parse is _bool:
        return value
    if isinstance(value, list) and key.many:
        return check(key, [str(v) for v in value], str(path))
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return check(key, [str(value)], str(path))
    raise UsageError(f"{path}: {key.name} is {value!r}, not a value {key.flag} accepts (see `mlpstorage config set`)")


def read_checked() -> dict[str, Any]:
    """The user config with every key known and every value valid, else one UsageError line."""
    path = user_config_path()
    return {name: stored(key_of_file(name, path), value, path) for name, value in read_user_config().items()}


def key_of_file(name: str, path: Path) -> Key:
    if name not in KEYS:
        raise UsageError(f"{path}: unknown key {name!r} (keys: {', '.join(KEYS)}; `mlpstorage config unset {name}`)")
    return KEYS[name]


def apply_defaults(args: dict[str, Any]) -> None:
    """Fill each setting the command has but the flag left empty: its MLPSTORAGE_* variable,
    else the user config. results_dir is resolved later, in the same order (resolve_results_dir)."""
    empty = [KEYS[k] for k in KEYS if k != "results_dir" and k in args and not args[k]]
    if not empty:
        return
    config: dict[str, Any] | None = None
    for key in empty:
        if key.env and os.environ.get(key.env):
            args[key.name] = check(key, [os.environ[key.env]], key.env)
            continue
        if config is None:
            config = read_checked()
        if key.name in config:
            args[key.name] = config[key.name]


def save(data: dict[str, Any]) -> Path:
    """Write the whole user config (atomically, so a reader never sees half of it); its path."""
    path = user_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, yaml.safe_dump(data, sort_keys=True))
    return path


def effective() -> dict[str, dict[str, Any]]:
    """{key: {value, source}} as a command without the flag would resolve it."""
    config, path = read_checked(), str(user_config_path())
    shown: dict[str, dict[str, Any]] = {}
    for name, key in KEYS.items():
        if key.env and os.environ.get(key.env):
            shown[name] = {"value": check(key, [os.environ[key.env]], key.env), "source": key.env}
        elif name in config:
            shown[name] = {"value": config[name], "source": path}
        else:
            shown[name] = {"value": None, "source": "unset"}
    return shown
