"""Entry point: parse, dispatch, and turn every failure into one line and an exit code."""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
import traceback
from typing import Any

from mlpstorage_py.cli.dispatch import parse, run
from mlpstorage_py.errors import Interrupted, MlpsError


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Interrupted("terminated by SIGTERM")


def _prints_only(argv: list[str]) -> bool:
    """`version`, and help with no command named: they print and log nothing, so they start
    without the logging machinery (tests/test_cli_startup.py keeps them light)."""
    command = next((token for token in argv if not token.startswith("-")), None)
    return command == "version" or (command is None and any(t in ("-h", "--help") for t in argv))


def main(argv: list[str] | None = None) -> int:
    """The exit code of one command line."""
    started = time.time()
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    if not _prints_only(argv):
        from mlpstorage_py.results.logs import setup_console  # logging: for commands that log

        setup_console(debug=debug, verbose="--verbose" in argv)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return run(parse(argv), argv, started)
    except KeyboardInterrupt:
        print("mlpstorage: interrupted", file=sys.stderr)
        return Interrupted.exit_code
    except BrokenPipeError:  # `mlpstorage validate | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except MlpsError as exc:
        if debug:
            traceback.print_exc()
        from mlpstorage_py.results.tree.untrusted import shown  # a name from a tree stays one line

        print(f"mlpstorage: error: {shown(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # an unexpected bug still ends in one line and a non-zero code
        if debug:
            traceback.print_exc()
        print(f"mlpstorage: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)


def console() -> None:
    """The installed `mlpstorage` command: main(), then exit with its code. The heap is frozen
    first: the interpreter's last collections would walk, and free, every object the command
    left (1.4 s after validating 100,000 leaves, ManPage, Performance), and the memory goes back
    with the process anyway; the exit handlers still run (logs flushed, children ended)."""
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    console()
