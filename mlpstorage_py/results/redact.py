"""Keep credentials out of everything a run writes: every log line the tool or a child process
produces is masked for the values of the secret variables of rules/storage_env.yaml."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

MASK = "***REDACTED***"
MIN_SECRET_LENGTH = 4  # shorter values would mask ordinary text and protect nothing


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of the set secret variables, longest first so overlapping values mask whole."""
    from mlpstorage_py.rules.tables import storage_env  # the YAML table only once a line is logged

    env = os.environ if environ is None else environ
    names = [n for n, spec in storage_env()["connection"].items() if spec.get("secret")]
    return sorted({env[n] for n in names if len(env.get(n, "")) >= MIN_SECRET_LENGTH}, key=len, reverse=True)


def redact(text: str, secrets: list[str] | None = None) -> str:
    for value in secret_values() if secrets is None else secrets:
        text = text.replace(value, MASK)
    return text


def redact_bytes(data: bytes, secrets: list[bytes]) -> bytes:
    for value in secrets:
        data = data.replace(value, MASK.encode())
    return data


class RedactingFormatter(logging.Formatter):
    """A formatter whose output (message, arguments and traceback alike) never holds a secret."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))
