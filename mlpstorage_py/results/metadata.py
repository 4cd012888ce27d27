"""A leaf's <benchmark_type>_<run_datetime>_metadata.json: what mlpstorage ran, on which hosts,
and how it ended. Written last, whatever happened (benchmarks/lifecycle.py), read by every rule,
by `mlpstorage status` (results/tree/run_state) and by reportgen.

Metadata, key "schema_version":
    none    the reference tool's (v3.0) and ours before it stamped one: benchmark_type, model,
            command, run_datetime, num_processes, accelerator, args, parameters, engine_parameters,
            system_info (results/host.HostInfo), invocation_start_time/end_time, runtime; ours add
            exit_status and failure, executed_argv, client_hosts, libraries_by_host, ...
    1       the same fields, the version first
"""

from __future__ import annotations

from typing import Any

from mlpstorage_py.results.schema import LIST, NUMBER, OBJECT, TEXT, Schema


class Metadata(Schema):
    KIND = "metadata"
    VERSION = 1
    FIELDS = {"benchmark_type": TEXT, "model": TEXT, "command": TEXT, "run_datetime": TEXT, "num_processes": NUMBER,
              "accelerator": TEXT, "args": OBJECT, "parameters": OBJECT, "engine_parameters": OBJECT,
              "system_info": OBJECT, "exit_status": NUMBER, "failure": TEXT, "runtime": NUMBER, "client_hosts": LIST}

    @property
    def engine_parameters(self) -> dict[str, Any]:
        return self.object("engine_parameters")
