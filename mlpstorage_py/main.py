"""Entry point: parse, dispatch, and turn every failure into one line and an exit code."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import time
import traceback
from typing import Any

from mlpstorage_py import LAYOUT_VERSION, RULES_EDITION, __version__
from mlpstorage_py.cli import build_parser
from mlpstorage_py.cli.common import OPEN_ONLY_FLAGS
from mlpstorage_py.errors import Interrupted, MlpsError, NotAvailable, UsageError

# Benchmark name on the command line -> "module:Class" (imported only when used).
BENCHMARKS = {
    "training": "mlpstorage_py.benchmarks.training:TrainingBenchmark",
    "checkpointing": "mlpstorage_py.benchmarks.checkpointing:CheckpointingBenchmark",
    "vectordb": "mlpstorage_py.benchmarks.vectordb:VectorDBBenchmark",
    "kvcache": "mlpstorage_py.benchmarks.kvcache:KVCacheBenchmark",
}
# Benchmarks whose data can live in an S3 bucket (the `object` storage positional, via s3dlio).
OBJECT_BENCHMARKS = ("training", "checkpointing")
# Settings that fall back to an environment variable only (the per-user defaults, with their
# variables and the user config, are mlpstorage_py/results/user_config.py KEYS).
ENV_FALLBACKS = {
    "dlio_bin_path": "MLPSTORAGE_DLIO_BIN_PATH",
}


# Handlers that only read a package or results tree (see _read_package).
PACKAGE_READERS = {"validate", "reportgen", "mlpstorage_py.submission.status:command"}
_skip_teardown = False


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Interrupted("terminated by SIGTERM")


def _prints_only(argv: list[str]) -> bool:
    """`version`, and help with no command named: they print and log nothing, so they start
    without the logging machinery (tests/test_cli_startup.py keeps them light)."""
    command = next((token for token in argv if not token.startswith("-")), None)
    return command == "version" or (command is None and any(t in ("-h", "--help") for t in argv))


def main(argv: list[str] | None = None) -> int:
    started = time.time()
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    if not _prints_only(argv):
        from mlpstorage_py.results.logs import setup_console  # logging: for commands that log

        setup_console(debug=debug, verbose="--verbose" in argv)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return dispatch(argv, started)
    except KeyboardInterrupt:
        print("mlpstorage: interrupted", file=sys.stderr)
        return Interrupted.exit_code
    except BrokenPipeError:  # `mlpstorage validate | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except MlpsError as exc:
        if debug:
            traceback.print_exc()
        print(f"mlpstorage: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # an unexpected bug still ends in one line and a non-zero code
        if debug:
            traceback.print_exc()
        print(f"mlpstorage: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)


def parse(argv: list[str]) -> dict[str, Any]:
    """argv -> a plain dict of settings; explains flags CLOSED deliberately does not have."""
    if not argv:
        raise UsageError("a mode or command is required (see mlpstorage --help)")
    parser = build_parser(argv)
    if next((t for t in argv if not t.startswith("-")), None) == "closed":
        flag = next((t.split("=")[0] for t in argv if t.split("=")[0] in OPEN_ONLY_FLAGS), None)
        if flag:
            raise UsageError(f"{flag} is not allowed in the closed division (it exists only in open and whatif)")
    namespace, extras = parser.parse_known_args(argv)
    if extras:
        raise UsageError(f"unrecognized arguments: {' '.join(extras)} (see --help)")
    args = vars(namespace)
    if args.get("_benchmark"):  # the per-user defaults are benchmark settings; other commands stay light
        from mlpstorage_py.results.user_config import apply_defaults

        apply_defaults(args)  # flag > MLPSTORAGE_* > user config, each value checked by its flag's validator
    for key, env in ENV_FALLBACKS.items():
        if key in args and not args[key] and os.environ.get(env):
            args[key] = os.environ[env]
            args[f"_{key}_from"] = env  # where it came from, for what the run prints
    return args


def dispatch(argv: list[str], started: float) -> int:
    args = parse(argv)
    handler = args.get("_handler")
    if handler:
        # "name" is a function of mlpstorage_py.commands; "package.module:name" one of that module,
        # so each command family keeps its handlers (and its imports) to itself.
        module, _, function = handler.rpartition(":")
        if handler in PACKAGE_READERS:
            return _read_package(getattr(importlib.import_module(module or "mlpstorage_py.commands"), function),
                                 args, argv)
        return getattr(importlib.import_module(module or "mlpstorage_py.commands"), function)(args, argv)
    return run_benchmark(args, argv, started)


def _read_package(handler: Any, args: dict[str, Any], argv: list[str]) -> int:
    """A package reader runs with the cyclic collector paused (collector.py), as do the checker's
    forked workers, which inherit it; the installed command then also skips the interpreter's
    teardown of what it read (console())."""
    global _skip_teardown
    from mlpstorage_py import collector

    try:
        with collector.paused():
            return handler(args, argv)
    finally:
        _skip_teardown = True


def console() -> None:
    """The installed `mlpstorage` command: main(), then exit. After a package reader the
    interpreter's teardown (freeing every object of a 10,000-leaf package, a second or more) is
    skipped once the output is flushed; nothing of ours runs at exit for those commands."""
    code = main()
    if _skip_teardown:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except OSError:  # a reader that went away (`| head`): what it wanted was written
                pass
        os._exit(code)
    sys.exit(code)


def run_benchmark(args: dict[str, Any], argv: list[str], started: float) -> int:
    from mlpstorage_py.benchmarks import lifecycle
    from mlpstorage_py.benchmarks.base import Request
    from mlpstorage_py.results import history
    from mlpstorage_py.results.sentinel import resolve_results_dir

    name = args["_benchmark"]
    if args.get("storage") == "object" and name not in OBJECT_BENCHMARKS:
        raise NotAvailable(f"object storage for {name} is not part of this build; object runs are training and checkpointing")
    module, _, cls = BENCHMARKS[name].partition(":")
    try:
        benchmark_class = getattr(importlib.import_module(module), cls)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        raise NotAvailable(f"the {name} benchmark's engine is not part of this build yet") from None
    args["_started_at"] = started
    if args["mode"] != "whatif":
        results_dir, _ = resolve_results_dir(args.get("results_dir"))
        if (results_dir / "mlperf-results.yaml").is_file():
            history.record(results_dir, argv)
    status = 0
    for _ in range(args.get("loops") or 1):
        request = Request(mode=args["mode"], benchmark=name, model=args["model"], command=args["command"],
                          storage=args.get("storage") or "file", args=args)
        status = lifecycle.run(benchmark_class(request))
    return status


def version_text() -> str:
    return f"mlpstorage {__version__} (rules edition {RULES_EDITION}, layout version {LAYOUT_VERSION})"


def version(args: dict[str, Any], argv: list[str]) -> int:
    """`mlpstorage version`, handled here so it imports nothing beyond the parser."""
    print(version_text())
    return 0


if __name__ == "__main__":
    console()
