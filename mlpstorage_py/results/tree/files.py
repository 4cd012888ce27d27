"""The package as the checker reads it: every directory listed and every file read and parsed
at most once per reading (Package.load starts a new one), however many rules ask.

A path's kind (file, directory, symbolic link) comes from its parent directory's listing, made
with lstat by os.scandir: asking costs no system call, and below the package root nothing is
listed or read through a symbolic link, so the checker never leaves the package (rule 1.1
reports the links). A missing, linked or malformed file comes back as a problem, so it is a
finding about that file, never a crash.

Two reporting styles exist, as the rules were written: (value, problem) for the structure rules
(read_text, load_json, load_yaml, yaml_shape), and a value or {"__unreadable__": why} for the
leaf records of package.py (json_or_unreadable, yaml_or_unreadable). Both parse the same text.
A YAML anchor or alias makes a file not valid YAML here (fast_yaml, aliases=False): the package
comes from elsewhere, and an alias nest expands without bound.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import stat
from pathlib import Path, PurePath
from typing import Any, NamedTuple

import yaml

from mlpstorage_py.results.tree import fast_yaml

try:
    import orjson
except ImportError:  # the standard parser alone: the same data and the same errors, more slowly
    orjson = None  # type: ignore[assignment]  # None stands for the missing module, as checked where used

DIR, FILE, LINK, OTHER = "directory", "file", "symbolic link", "special file"
Entry = tuple[str, str, Path]
SAFE_LOADER = fast_yaml.LOADER  # libyaml when available: same data, much faster
# libyaml's parser alone, where there is one: judging a shape from its events needs neither the
# loader's constructor nor its resolver, whose set-up cost more than parsing a small file.
# (The stubs take CParser into yaml.cyaml from yaml._yaml without exporting it.)
_EVENT_PARSER: Any = yaml.cyaml.CParser if getattr(yaml, "__with_libyaml__", False) else None  # type: ignore[attr-defined]
UNREADABLE = "__unreadable__"


class _Listing(NamedTuple):
    directory: Path
    kinds: dict[str, str]  # name -> kind, in name order; the entries' Paths are made only when asked for


class _Content:
    """A file as read (a class with slots, made for every file: a third cheaper than a named tuple)."""

    __slots__ = ("text", "error", "undecodable", "raw")

    def __init__(self, text: str | None, error: OSError | None, undecodable: UnicodeDecodeError | None,
                 raw: bytes | None = None) -> None:
        self.text = text  # as open(..., errors="replace") reads it: bad bytes replaced, newlines translated
        self.error = error  # why a file could not be read
        self.undecodable = undecodable  # what a strict UTF-8 read raises, when the bytes are not UTF-8
        self.raw = raw  # the bytes, where they are exactly text's UTF-8 (what orjson parses)


# The caches are keyed by the path's string: the rules build a new Path for every file they
# ask about, a Path hashes far more slowly than its string, and os.open needs the string anyway.
Key = str
# The constructor Path.iterdir uses for a child of a listed directory, where this Python's
# pathlib has it: several times cheaper than joining, which parses the name again.
_make_child = getattr(Path, "_make_child_relpath", None)
# Where pathlib keeps a Path's string once made (this Python's PurePath slot): a child's string is
# its directory's and its name, set as the child is made, where a Path would format it part by
# part when first asked (every child is asked, for the caches' keys).
_PRESET_STR = _make_child is not None and "_str" in getattr(PurePath, "__slots__", ())
_root: Key | None = None  # the package root, once a reading has started
_below: Key | None = None  # the root with a trailing separator: what every path below it starts with
_listings: dict[Key, _Listing] = {}
_entries: dict[Key, tuple[Entry, ...]] = {}
_contents: dict[Key, _Content] = {}
_json: dict[Key, tuple[Any, ValueError | None]] = {}
_yaml: dict[Key, tuple[Any, yaml.YAMLError | None]] = {}
_CACHES: tuple[dict[Key, Any], ...] = (_listings, _entries, _contents, _json, _yaml)


def start(root: Path) -> None:
    """Forget every listing and file: a new reading of the package at `root` (trusted as given;
    every symbolic link below it is reported, never followed)."""
    global _root, _below
    _root = str(root)
    _below = _root if _root.endswith("/") else _root + "/"
    for cache in _CACHES:
        cache.clear()


def mark() -> tuple[int, ...]:
    """Where the readings stand now: forget_below(..., since=mark()) looks only at what was
    listed or read after (the caches only grow until then)."""
    return tuple(len(cache) for cache in _CACHES)


def forget_below(directories: frozenset[str], since: tuple[int, ...]) -> None:
    """Forget what was listed or read below some directories since a mark() (the systems'
    results/ directories of a part of the package, once its rules are done): memory stays that
    of a part. Asked for again, a path is listed or read again."""
    heads = tuple(d.rstrip("/") + "/" for d in directories)
    for cache, before in zip(_CACHES, since, strict=True):
        for key in [key for key in itertools.islice(reversed(cache), len(cache) - before) if key.startswith(heads)]:
            del cache[key]


# --- listing -----------------------------------------------------------------------------

def _below_root(key: Key) -> bool:
    return _below is not None and key.startswith(_below) and len(key) > len(_below)


def _listing(directory: Path, key: Key) -> _Listing:
    found = _listings.get(key)
    if found is None:
        if key == _root:
            enterable = True  # as given
        elif _below_root(key):
            enterable = _kind(key, directory) == DIR  # by its parent's listing: nothing below a link is listed
        else:
            enterable = _kind(key, directory) != LINK  # outside the package: os.scandir would follow a link
        found = _listings[key] = _Listing(directory, _scan(directory) if enterable else {})
    return found


def _scan(directory: Path) -> dict[str, str]:
    found: list[tuple[str, str]] = []
    try:
        with os.scandir(directory) as scan:
            for entry in scan:  # none of these follows a link: a link is neither a file nor a directory here
                if entry.is_file(follow_symlinks=False):
                    kind = FILE
                elif entry.is_dir(follow_symlinks=False):
                    kind = DIR
                elif entry.is_symlink():
                    kind = LINK
                else:
                    kind = OTHER
                found.append((entry.name, kind))
    except OSError:
        return {}
    found.sort()
    return dict(found)


def names(directory: Path) -> dict[str, str]:
    """{name: kind} of a directory's entries in name order, without making a Path for each;
    a linked directory lists as empty."""
    key = str(directory)
    found = _listings.get(key)  # _listing, its usual answer inline: asked some twelve times a leaf
    return (found if found is not None else _listing(directory, key)).kinds


def entries(directory: Path) -> tuple[Entry, ...]:
    """(name, kind, path) of a directory's entries, sorted; a linked directory lists as empty."""
    key = str(directory)
    found = _entries.get(key)
    if found is None:
        listing = _listing(directory, key)
        found = _entries[key] = tuple((name, kind, _child(listing.directory, key, name))
                                      for name, kind in listing.kinds.items())
    return found


def child(directory: Path, name: str) -> Path:
    """directory / name, for one name (a name from the directory's listing, or one without a
    separator): not parsed again."""
    return _child(directory, str(directory), name)


def _child(directory: Path, key: Key, name: str) -> Path:
    """child(), given the directory's string."""
    if _make_child is None:
        return directory / name
    path: Path = _make_child(directory, name)
    if _PRESET_STR and key not in (".", "/"):  # those two are formatted otherwise ("name", "/name")
        path._str = f"{key}/{name}"  # type: ignore[attr-defined]  # pathlib's own slot, where _PRESET_STR found it
    return path


def visible(directory: Path) -> list[Entry]:
    """Entries that are not dot-prefixed (dot entries are version-control or OS clutter)."""
    return [e for e in entries(directory) if not e[0].startswith(".")]


def kind_of(path: Path) -> str | None:
    """DIR, FILE, LINK or OTHER, None when there is no such entry: below the package root as
    the parent's listing has it (no system call), elsewhere by lstat."""
    return _kind(str(path), path)


def _kind(key: Key, path: Path) -> str | None:
    """kind_of for a path whose string the caller has already made (it keys the caches too)."""
    if _below is not None and key.startswith(_below) and len(key) > len(_below):  # _below_root, inline: asked of every file
        parent, _, name = key.rpartition("/")
        listing = _listings.get(parent) or _listing(path.parent, parent)
        return listing.kinds.get(name)
    try:
        mode = os.lstat(key).st_mode
    except OSError:
        return None
    return LINK if stat.S_ISLNK(mode) else DIR if stat.S_ISDIR(mode) else FILE if stat.S_ISREG(mode) else OTHER


def real_dir(path: Path) -> bool:
    return kind_of(path) == DIR


def real_file(path: Path) -> bool:
    return kind_of(path) == FILE


# --- reading -----------------------------------------------------------------------------

def _decode(data: bytes) -> tuple[str, UnicodeDecodeError | None]:
    """What a text-mode read returns (errors replaced, universal newlines), and the strict error."""
    try:
        text, problem = data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        text, problem = data.decode("utf-8", "replace"), exc
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text, problem


_CHUNK = 1 << 16


def _read_bytes(path: str | Path, limit: int | None = None) -> bytes:
    """The file's bytes (at most `limit`), by descriptor: several times cheaper than open().
    Only regular files are read (their kind is checked first), and a regular file's read
    returns less than asked only at its end, so a short first read is the whole file: most
    records are, without a second read to find the end."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        want = _CHUNK if limit is None else min(_CHUNK, limit)
        chunk = os.read(fd, want)
        if len(chunk) < want:
            return chunk
        chunks, size = [chunk], len(chunk)
        while limit is None or size < limit:
            chunk = os.read(fd, _CHUNK if limit is None else min(_CHUNK, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _content(key: Key) -> _Content:
    """A regular file's text, read once (the caller has checked its kind)."""
    found = _contents.get(key)
    if found is None:
        try:
            data = _read_bytes(key)
            text, undecodable = _decode(data)
            found = _Content(text, None, undecodable, data if undecodable is None and data.find(b"\r") < 0 else None)
        except OSError as exc:
            found = _Content(None, exc, None)
        _contents[key] = found
    return found


def read_text(path: Path, limit: int | None = None) -> tuple[str | None, str | None]:
    """(text, None) or (None, why); symbolic links are refused. With `limit`, the first `limit`
    characters: a log may be large, so only its head is read and nothing is kept."""
    text, problem, _ = _text(path, str(path), limit)
    return text, problem


def _text(path: Path, key: Key, limit: int | None = None) -> tuple[str | None, str | None, _Content | None]:
    """read_text's answer, with the file's _Content where it was read whole."""
    what = _kind(key, path)
    if what == LINK:
        return None, f"{path.name} is a symbolic link (not followed)", None
    if what != FILE:
        return None, f"{path.name} is missing", None
    if limit is not None and key not in _contents:
        try:
            # Every character takes at most 4 bytes, so 4 * limit + 1 bytes decode to at least
            # `limit` whole characters; a character cut at the end lies beyond them.
            return _decode(_read_bytes(key, 4 * limit + 1))[0][:limit], None, None
        except OSError as exc:
            return None, f"{path.name} cannot be read: {exc.strerror or exc}", None
    content = _content(key)
    if content.error is not None:
        return None, f"{path.name} cannot be read: {content.error.strerror or content.error}", None
    text = content.text or ""  # read without an error: the text
    return text if limit is None else text[:limit], None, content


def _strict_text(path: Path, key: Key) -> tuple[_Content | None, str | None]:
    """(content, None) when a strict UTF-8 read gives the text, or (None, "<name>: <the error it raises>")."""
    what = _kind(key, path)
    if what in (LINK, OTHER):
        return None, f"{path.name} is a {what} (not read)"
    if what != FILE:  # the error open() raises
        code = errno.EISDIR if what == DIR else errno.ENOENT
        return None, f"{path.name}: {OSError(code, os.strerror(code), key)}"
    return _strict_file(path, key)


def _strict_file(path: Path, key: Key) -> tuple[_Content | None, str | None]:
    """_strict_text of a regular file."""
    content = _content(key)
    error = content.error or content.undecodable
    return (None, f"{path.name}: {error}") if error is not None else (content, None)


def strict_text(path: Path) -> str | None:
    """A regular file's text, None for anything else or a file that cannot be read; bytes that
    are not UTF-8 come back replaced (U+FFFD), so the text never parses as a well-formed record
    and the rule reading it reports it, rather than crashing."""
    key = str(path)
    if _kind(key, path) != FILE:
        return None
    return _content(key).text


# orjson parses JSON several times faster than json, to the same values, except that it reads an
# integer beyond 64 bits as a float and nests deeper than Python's recursion limit lets json:
# a text that may hold either (a run of 19 digits, many brackets) is left to json. So is any
# text orjson refuses, so a broken record is described in json's words, as it always was.
# One translation finds both: digits become "0", opening brackets "[", the rest " ".
_SKETCH = bytes(0x30 if 0x30 <= b <= 0x39 else 0x5B if b in (0x5B, 0x7B) else 0x20 for b in range(256))
_LONG_NUMBER = b"0" * 19
_MOST_BRACKETS = 400


def _json_loads(text: str, raw: bytes | None = None) -> Any:
    """json.loads(text), by orjson where it gives the same value; `raw`, when given, is text's
    UTF-8 (the file's bytes), which spares encoding it again."""
    if orjson is not None:
        if raw is None:
            raw = text.encode("utf-8", "surrogatepass")  # a lone surrogate makes it invalid: json decides
        sketch = raw.translate(_SKETCH)
        # find, not `in`: bytes' `in` tries its operand as an integer first, and the TypeError
        # it raises and clears cost more than the search.
        if sketch.find(_LONG_NUMBER) < 0 and sketch.count(b"[") < _MOST_BRACKETS:
            try:
                return orjson.loads(raw)
            except orjson.JSONDecodeError:
                pass
    return json.loads(text)


def _parsed_json(key: Key, content: _Content | None, text: str) -> tuple[Any, ValueError | None]:
    """The file's JSON value or the error json gives for `text` (its text as read, strictly or not)."""
    found = _json.get(key)
    if found is None:
        try:
            found = _json_loads(text, content.raw if content is not None and content.text is text else None), None
        except ValueError as exc:
            found = None, exc
        except RecursionError:  # nesting deeper than the parser goes: as malformed as a syntax error
            found = None, ValueError("nested too deeply to parse")
        _json[key] = found
    return found


def load_json(path: Path) -> tuple[Any, str | None]:
    """(data, None) or (None, why the file is missing, linked, unreadable or not JSON)."""
    key = str(path)
    text, problem, content = _text(path, key)
    if problem or text is None:
        return None, problem
    data, exc = _parsed_json(key, content, text)
    return (None, f"{path.name} is not valid JSON ({exc})") if exc else (data, None)


def load_strict_json(path: Path, regular: bool = False) -> tuple[Any, str | None]:
    """(data, None) or (None, why): as load_json, but text that is not UTF-8 is a problem too
    (a record must be read as written, not with its bytes replaced). `regular`: the caller has
    the path's kind from its listing, a regular file, so it is not looked up again."""
    key = str(path)
    content, problem = _strict_file(path, key) if regular else _strict_text(path, key)
    if problem or content is None or content.text is None:
        return None, problem
    data, exc = _parsed_json(key, content, content.text)
    return (None, f"{path.name} is not valid JSON ({exc})") if exc else (data, None)


def _or_unreadable(path: Path, parse: Any) -> Any:
    """Parsed data, or {"__unreadable__": reason} so one bad file is a finding, not a crash."""
    key = str(path)
    content, problem = _strict_text(path, key)
    if problem or content is None:
        return {UNREADABLE: problem}
    data, exc = parse(key, content, content.text)
    return {UNREADABLE: f"{path.name}: {exc}"} if exc else data


def json_or_unreadable(path: Path) -> Any:
    return _or_unreadable(path, _parsed_json)


MAPPING, SEQUENCE, SCALAR = "mapping", "sequence", "scalar"
_NODE_KINDS = {yaml.MappingNode: MAPPING, yaml.SequenceNode: SEQUENCE, yaml.ScalarNode: SCALAR}
_START_KINDS = {yaml.MappingStartEvent: MAPPING, yaml.SequenceStartEvent: SEQUENCE, yaml.ScalarEvent: SCALAR}
# Text holding any of these may have anchors, aliases or a second document, and is judged by
# composing it (a BOM or a Unicode line break may put a document marker at a line's start).
_COMPOSE_ONLY = ("&", "*", "\n---", "\n...", "\ufeff", "\x85", "\u2028", "\u2029")


def _compose_only(text: str) -> bool:
    return text.startswith(("---", "...")) or any(mark in text for mark in _COMPOSE_ONLY)


class Shape(NamedTuple):
    """What a YAML document is at its top: enough to tell a record from an empty or truncated one."""
    kind: str | None  # MAPPING, SEQUENCE or SCALAR; None for an empty stream
    empty: bool  # a mapping or sequence without items
    value_kind: str | None  # in a mapping, the kind of the value of the first key named as asked


def _shape_of_node(node: Any, key: str | None) -> Shape:
    kind = _NODE_KINDS.get(type(node))
    value = next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None) \
        if kind == MAPPING and key is not None else None
    return Shape(kind, kind in (MAPPING, SEQUENCE) and not node.value, _NODE_KINDS.get(type(value)))


def _skip_node(loader: Any, event: Any) -> None:
    """Consume the events of the node `event` starts."""
    depth = 0 if isinstance(event, yaml.ScalarEvent) else 1
    while depth:
        event = loader.get_event()
        depth += 1 if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)) else \
            -1 if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)) else 0


def _shape_of_events(loader: Any, key: str | None) -> Shape:
    """The shape from the first few parse events; the rest of the stream is parsed in C only.

    Without anchors, aliases or document markers, composing can fail only where parsing does,
    and at the same event, so this judges a document exactly as composing it would."""
    loader.get_event()  # the stream's start
    if isinstance(loader.get_event(), yaml.StreamEndEvent):
        return Shape(None, False, None)
    root = loader.get_event()
    kind = _START_KINDS[type(root)]
    empty, value_kind = False, None
    if kind in (MAPPING, SEQUENCE):
        event = loader.get_event()
        empty = isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent))
        while kind == MAPPING and key is not None and not isinstance(event, yaml.MappingEndEvent):
            if isinstance(event, yaml.ScalarEvent) and event.value == key:
                value_kind = _START_KINDS[type(loader.get_event())]
                break
            _skip_node(loader, event)  # the key
            _skip_node(loader, loader.get_event())  # its value
            event = loader.get_event()
    loader.raw_parse()  # the rest of the stream, for the errors composing would meet
    return Shape(kind, empty, value_kind)


def yaml_shape(path: Path, key: str | None = None) -> tuple[Shape | None, str | None]:
    """(shape, None) of a YAML document, or (None, why the file is missing, linked, unreadable
    or not YAML). Judging a file is cheaper than composing or loading it, and nothing is kept."""
    text, problem = read_text(path)
    if problem or text is None:
        return None, problem
    composed = _compose_only(text) or _EVENT_PARSER is None
    loader = SAFE_LOADER(text) if composed else _EVENT_PARSER(text)
    try:
        if composed:
            return _shape_of_node(loader.get_single_node(), key), None
        return _shape_of_events(loader, key), None
    except yaml.YAMLError as exc:
        return None, _yaml_problem(path, exc)
    except RecursionError:
        return None, f"{path.name} is not valid YAML (nested too deeply to parse)"
    finally:
        loader.dispose()


def _parsed_yaml(key: Key, _: _Content | None, text: str) -> tuple[Any, yaml.YAMLError | None]:
    found = _yaml.get(key)
    if found is None:
        try:
            found = fast_yaml.load(text, aliases=False), None  # an alias nest would expand into every table
        except yaml.YAMLError as exc:
            found = None, exc
        except RecursionError:
            found = None, yaml.YAMLError("nested too deeply to parse")
        _yaml[key] = found
    return found


def _yaml_problem(path: Path, exc: yaml.YAMLError) -> str:
    where = getattr(exc, "problem_mark", None)
    return f"{path.name} is not valid YAML ({getattr(exc, 'problem', None) or exc}{f' at line {where.line + 1}' if where else ''})"


def load_yaml(path: Path) -> tuple[Any, str | None]:
    """(data, None) or (None, why the file is missing, linked, unreadable or not YAML)."""
    key = str(path)
    text, problem, content = _text(path, key)
    if problem or text is None:
        return None, problem
    data, exc = _parsed_yaml(key, content, text)
    return (None, _yaml_problem(path, exc)) if exc else (data, None)


def yaml_or_unreadable(path: Path) -> Any:
    return _or_unreadable(path, _parsed_yaml)
