"""`mlpstorage config show|set|unset|path`: the per-user defaults (results_dir, systemname, ...)."""

from __future__ import annotations

import argparse
from typing import Any

HANDLERS = "mlpstorage_py.results.user_config"


def register(top: Any) -> None:
    p = top.add_parser("config", help="per-user defaults: `config show|set|unset|path`",
                       description="Per-user defaults in $XDG_CONFIG_HOME/mlpstorage/config.yaml. A command takes "
                                   "each setting from its flag, else its MLPSTORAGE_* variable, else this file.")
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    sub = p.add_subparsers(dest="config_command", metavar="<command>", required=True)
    s = sub.add_parser("show", help="every key, its value and where it comes from (environment, file, unset)")
    s.add_argument("--json", action="store_true", help="as JSON: {key: {value, source}}")
    s.set_defaults(_handler=f"{HANDLERS}:config_show")
    s = sub.add_parser("set", help="set KEY to VALUE (hosts and mpi_params take several values)")
    s.add_argument("key", help="results_dir, systemname, data_dir, checkpoint_folder, hosts, mpi_bin, mpi_params, "
                               "oversubscribe, allow_run_as_root")
    s.add_argument("values", nargs="+", metavar="VALUE", help="checked as the flag checks it")
    s.set_defaults(_handler=f"{HANDLERS}:config_set")
    s = sub.add_parser("unset", help="remove KEY from the file")
    s.add_argument("key")
    s.set_defaults(_handler=f"{HANDLERS}:config_unset")
    s = sub.add_parser("path", help="print the file's path")
    s.set_defaults(_handler=f"{HANDLERS}:config_path")
