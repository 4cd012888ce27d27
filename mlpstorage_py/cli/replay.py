"""replay: its arguments and handler (listed in cli/table.py); the work is mlpstorage_py.trace's."""

from __future__ import annotations

import argparse
from pathlib import Path

from mlpstorage_py.cli.command import Args
from mlpstorage_py.cli.common import _HostsAction, host_list, non_negative_int, positive_float


def replay_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("leaf", help="a run leaf traced with --trace-io (its io_trace.json)")
    p.add_argument("--directory", "-d", required=True, metavar="DIR",
                   help="where fio lays out and does its I/O (fio's --directory; must exist)")
    p.add_argument("--hosts", "-s", type=host_list, nargs="+", action=_HostsAction, metavar="HOST",
                   help="run each traced host's jobs on these hosts, in the trace's host order, one fio per host "
                        "over the remote shell MPI uses (default: every job here)")
    p.add_argument("--runtime-cap", type=positive_float, metavar="SECONDS",
                   help="stop each fio job after this many seconds (fio's --runtime), even if its bytes are not done")
    p.add_argument("--page-cache-mib", type=non_negative_int, metavar="MIB",
                   help="the page cache fio may hold on this host, beside its I/O buffers (a memory cgroup; "
                        "0: unbounded; default: configs/tool.yaml replay.page_cache_mib)")
    p.add_argument("--print-command", action="store_true",
                   help="print the exact commands replay would run on each host (fio, and this host's page-cache "
                        "bound as a memory cgroup), for a shell without mlpstorage; run nothing")
    p.add_argument("--verbose", action="store_true", help="show fio's own output")


def replay(args: Args) -> int:
    """Write the leaf's replay.fio when absent, run it with fio and print its figures beside the run's."""
    from mlpstorage_py.trace import replay_run

    if args.get("print_command"):
        plan = replay_run.prepare(Path(args["leaf"]), Path(args["directory"]), args.get("hosts"),
                                  args.get("runtime_cap"), args.get("page_cache_mib"))
        print(replay_run.command_text(plan))
        return 0
    record, path, written = replay_run.replay(Path(args["leaf"]), Path(args["directory"]), args.get("hosts"),
                                              args.get("runtime_cap"), bool(args.get("verbose")),
                                              args.get("page_cache_mib"))
    job_file = Path(record["leaf"]) / record["job_file"]
    print(f"{'wrote' if written else 'using'} {job_file}")
    print(f"replay of {record['leaf']} on {record['directory']} ({len(record['hosts'])} host(s), "
          f"{len(record['jobs'])} job(s), {record['fio_version']}; traced at the {record['trace_level']} level)")
    print(replay_run.table(record))
    print(f"wrote {path}")
    return 0
