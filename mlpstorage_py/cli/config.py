"""`mlpstorage config show|set|unset|path`: the per-user defaults (results_dir, systemname, ...);
arguments and handlers (listed in cli/table.py), the keys and their checks in cli/user_config.py."""

from __future__ import annotations

import argparse

from mlpstorage_py.cli.command import Args


def show_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="as JSON: {key: {value, source}}")


def show(args: Args) -> int:
    import json

    from mlpstorage_py.cli.user_config import KEYS, effective

    shown = effective()
    if args.get("json"):
        print(json.dumps(shown, indent=2))
        return 0
    width = max(map(len, KEYS))
    for name, entry in shown.items():
        value = "-" if entry["value"] is None else (" ".join(map(str, entry["value"])) if isinstance(entry["value"], list)
                                                   else str(entry["value"]))
        print(f"{name:<{width}}  {value}  ({entry['source']})")
    return 0


def set_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", help="results_dir, systemname, data_dir, checkpoint_folder, hosts, mpi_bin, mpi_params, "
                               "oversubscribe, allow_run_as_root")
    p.add_argument("values", nargs="+", metavar="VALUE", help="checked as the flag checks it")


def set_key(args: Args) -> int:
    from mlpstorage_py.cli.user_config import check, key_of, save
    from mlpstorage_py.results.sentinel import read_user_config

    key = key_of(args["key"])
    data = read_user_config()
    data[key.name] = check(key, args["values"], "config set")
    print(f"{key.name} = {data[key.name]!r} in {save(data)}")
    return 0


def unset_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("key")


def unset_key(args: Args) -> int:
    """Remove a key; one the file holds is removed even when unknown (the way out of a typo)."""
    from mlpstorage_py.cli.user_config import key_of, save
    from mlpstorage_py.results.sentinel import read_user_config, user_config_path

    name, data = args["key"], read_user_config()
    if name not in data:
        print(f"{key_of(name).name} is not set in {user_config_path()}")
        return 0
    del data[name]
    print(f"{name} removed from {save(data)}")
    return 0


def path(args: Args) -> int:
    from mlpstorage_py.results.sentinel import user_config_path

    print(user_config_path())
    return 0
