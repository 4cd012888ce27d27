"""Logging: a console for the user, and per leaf mlpstorage.log plus mlpstorage.errors.log.

Messages logged before the leaf exists are buffered and replayed into its log files, so
the leaf holds everything the invocation said.
"""

from __future__ import annotations

import logging
from pathlib import Path

from mlpstorage_py.results.redact import RedactingFormatter

LOGGER_NAME = "mlpstorage"
LOG_FILE = "mlpstorage.log"
ERRORS_FILE = "mlpstorage.errors.log"
FILE_FORMAT = "%(asctime)s %(levelname)s %(module)s:%(lineno)d %(message)s"

log = logging.getLogger(LOGGER_NAME)


class _Buffer(logging.Handler):
    """Keeps every record until the leaf's files exist (not logging.handlers' BufferingHandler:
    that module pulls in sockets and pickling at every start-up)."""

    def __init__(self) -> None:
        super().__init__()
        self.buffer: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.buffer.append(record)


_buffer = _Buffer()


def setup_console(debug: bool = False, verbose: bool = False) -> None:
    """Console on stderr: INFO by default, DEBUG with --debug; always buffer for the leaf."""
    log.handlers.clear()
    log.setLevel(logging.DEBUG)
    log.propagate = False
    console = logging.StreamHandler()
    console.setLevel(logging.DEBUG if debug or verbose else logging.INFO)
    console.setFormatter(RedactingFormatter("%(message)s" if not debug else "%(levelname)s %(module)s:%(lineno)d %(message)s"))
    log.addHandler(console)
    _buffer.buffer.clear()
    log.addHandler(_buffer)


class _LeafFile(logging.FileHandler):
    """A leaf log file: when its filesystem refuses a write (full, gone), the run's own error
    says so in one line; the log does not add a traceback per record to the console."""

    def handleError(self, record: logging.LogRecord) -> None:  # logging's name
        pass


def attach_leaf(leaf: Path) -> list[logging.Handler]:
    """Start writing the leaf's two log files, beginning with what was buffered."""
    handlers: list[logging.Handler] = []
    for name, level in ((LOG_FILE, logging.DEBUG), (ERRORS_FILE, logging.WARNING)):
        handler = _LeafFile(leaf / name, encoding="utf-8")
        handler.setLevel(level)
        handler.setFormatter(RedactingFormatter(FILE_FORMAT))
        for record in _buffer.buffer:
            if record.levelno >= level:
                handler.handle(record)
        log.addHandler(handler)
        handlers.append(handler)
    return handlers


def detach(handlers: list[logging.Handler]) -> None:
    for handler in handlers:
        log.removeHandler(handler)
        handler.close()
