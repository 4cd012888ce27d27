"""A fio job file from a results tree is data, not a program: before fio sees replay.fio, every
line is checked against what the distiller (trace/replay.py) writes, and anything else is refused
with one line naming it and its line (issue 39). A leaf travels between people, and fio's job
language can run commands (exec_prerun, exec_postrun, ioengine=exec or external:, triggers),
reach any path or device (filename=, directory=, opendir=, include) and read the environment
(${VAR}); none of that is in the allowlist, so none of it ever reaches fio.

What passes: the options the distiller writes, each with a value of the shape it writes them in
(sizes as 64k/1m/plain bytes, whole numbers within bounds, the rw modes, the safe engines), job
names of letters, digits, `_`, `.` and `-`, and file names that stay inside fio's --directory
(no `/`, no `..`). The bytes the file moves (each job's clones times its size, or its files'
bytes) may not exceed what the trace itself distils to by more than SLACK.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from mlpstorage_py.errors import Refused

MAX_FILE_BYTES = 16 * 1024 ** 2  # a replay.fio larger than this is not one the distiller wrote
SLACK = 0.01  # a job file may move 1 % more than the trace distils to (a hand-rounded size)
_SIZE = re.compile(r"\d{1,15}[kKmMgG]?")
_BSSPLIT = re.compile(r"\d{1,12}[kKmM]?/\d{1,3}(:\d{1,12}[kKmM]?/\d{1,3})*")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_FILENAME_FORMAT = re.compile(r"(\$jobname|\$jobnum|\$filenum|[A-Za-z0-9_-])+(\.(\$jobname|\$jobnum|\$filenum|[A-Za-z0-9_-])+)*")
ENGINES = frozenset({"psync", "sync", "pvsync", "libaio", "io_uring", "posixaio"})  # no exec, external:, net
RW = frozenset({"read", "write", "randread", "randwrite", "readwrite", "rw", "randrw"})


def _int(low: int, high: int) -> Callable[[str], bool]:
    return lambda v: v.isdigit() and low <= int(v) <= high


def _choice(values: frozenset[str]) -> Callable[[str], bool]:
    return lambda v: v in values


def _rate(v: str) -> bool:
    parts = v.split(",")
    return 1 <= len(parts) <= 2 and all(p == "" or _SIZE.fullmatch(p) for p in parts) and any(parts)


# Each option the distiller writes, and the values it may take.
ALLOWED: dict[str, Callable[[str], bool]] = {
    "rw": _choice(RW),
    "rwmixread": _int(0, 100),
    "bssplit": lambda v: all(_BSSPLIT.fullmatch(p) for p in v.split(",")) and v.count(",") <= 1,
    "ioengine": _choice(ENGINES),
    "direct": _int(0, 1),
    "iodepth": _int(1, 4096),
    "numjobs": _int(1, 256),
    "size": lambda v: bool(_SIZE.fullmatch(v)),
    "nrfiles": _int(1, 10_000_000),
    "filesize": lambda v: bool(_SIZE.fullmatch(v)),
    "file_service_type": _choice(frozenset({"sequential", "roundrobin", "random"})),
    "filename_format": lambda v: bool(_FILENAME_FORMAT.fullmatch(v)) and ".." not in v,
    "rate": _rate,
    "startdelay": lambda v: bool(re.fullmatch(r"\d{1,9}(ms|s)?", v)),
    "sync_file_range": lambda v: bool(re.fullmatch(r"write:\d{1,9}", v)),
    "fsync": _int(0, 10_000_000),
    "end_fsync": _int(0, 1),
    "fsync_on_close": _int(0, 1),
    "group_reporting": _int(0, 1),
    "fadvise_hint": _int(0, 1),
    "runtime": lambda v: bool(re.fullmatch(r"\d{1,9}(ms|s|m)?", v)),
}
BARE = frozenset({"stonewall"})  # options written without a value
WHY = {  # what a refused option would have done, for the one-line error
    "exec_prerun": "a command hook", "exec_postrun": "a command hook", "trigger": "a command hook",
    "trigger-file": "a command hook", "trigger-timeout": "a command hook", "trigger-remote-cmd": "a command hook",
    "filename": "a path or device outside --directory", "directory": "a path outside --directory",
    "opendir": "a path outside --directory", "include": "another job file",
}


@dataclass
class Section:
    """One [section] of a checked job file: its name, line and options in order."""

    name: str
    line: int
    options: dict[str, str] = field(default_factory=dict)


def size_bytes(text: str) -> int:
    """fio's size spelling (plain bytes, k, m, g: powers of 1024, as fio reads them here)."""
    scale = {"k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}.get(text[-1:].lower(), 1)
    return int(text[:-1] if scale > 1 else text) * scale


def parse(text: str, source: str) -> list[Section]:
    """The job file's sections, every line checked; a Refused naming `source` and the line for
    the first line that is not one the distiller writes."""
    sections: list[Section] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in ";#":
            continue
        where = f"{source} line {number}"
        if "$" in line.replace("$jobname", "").replace("$jobnum", "").replace("$filenum", ""):
            raise Refused(f"{where}: {line[:60]!r} reads an environment variable or expression: refused")
        if line.startswith("["):
            name = line[1:-1] if line.endswith("]") else ""
            if not _NAME.fullmatch(name):
                raise Refused(f"{where}: {line[:60]!r} is not a job name this tool writes: refused")
            sections.append(Section(name, number))
            continue
        key, eq, value = (part.strip() for part in line.partition("="))
        if key.split()[:1] == ["include"]:  # fio's `include FILE` line
            key = "include"
        check = ALLOWED.get(key)
        if check is None and not (key in BARE and not eq):
            what = WHY.get(key) or "not an option mlpstorage writes"
            raise Refused(f"{where}: option {key!r} ({what}) is not allowed in a replay job: refused")
        if not sections:
            raise Refused(f"{where}: {key!r} stands before any [section]: refused")
        if check is None:
            sections[-1].options[key] = ""
            continue
        if not eq or not check(value):
            what = ("an engine outside " + ", ".join(sorted(ENGINES))) if key == "ioengine" else \
                "a path outside --directory" if key == "filename_format" else "not a value mlpstorage writes"
            raise Refused(f"{where}: {key}={value[:60]!r} ({what}): refused")
        sections[-1].options[key] = value
    return sections


def job_bytes(sections: list[Section]) -> int:
    """The most bytes the job file can lay out or move: per job, its clones times the larger of
    its size and its files' bytes ([global] values apply to every job that does not set its own)."""
    defaults = next((s.options for s in sections if s.name == "global"), {})
    total = 0
    for section in sections:
        if section.name == "global":
            continue
        merged = {**defaults, **section.options}
        size = size_bytes(merged.get("size", "0"))
        files = int(merged.get("nrfiles", "1")) * size_bytes(merged["filesize"]) if "filesize" in merged else 0
        total += int(merged.get("numjobs", "1")) * max(size, files)
    return total


def check(text: str, source: str, budget: int) -> list[Section]:
    """parse(), then refuse a job file that moves more than `budget` bytes (what the trace distils
    to) by over SLACK; its sections."""
    sections = parse(text, source)
    moved = job_bytes(sections)
    if moved > budget * (1 + SLACK):
        raise Refused(f"{source}: its jobs lay out or move {moved} B, beyond the trace's {budget} B "
                      f"(what io_trace.json distils to, {SLACK:.0%} slack): refused")
    return sections
