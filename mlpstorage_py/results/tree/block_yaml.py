"""The plain block YAML that records are written in, read line by line, to exactly the data
PyYAML's safe loader gives, several times faster than through libyaml's events.

libyaml makes a Python object for every parse event, with two marks each: building the data
from its events took 2.2 M instructions for a 1.7 KB system description and 1.0 M for a
checkpoint's DLIO config, 0.73 M and 0.35 M here (callgrind), and a package has a description
per system, a config per DLIO leaf and a submission.yaml that lists every leaf. Here only the
block mappings and sequences that DLIO, Hydra and the system descriptions use are read: one
line a key or an item, plain scalars (typed by PyYAML's own resolver and constructors), quoted
scalars on one line without escapes, empty `[]` and `{}`, blank and comment lines. Anything else raises Unhandled before any data is returned (anchors, tags, flow
collections, block or multi-line scalars, inline comments, duplicate keys, tabs, non-ASCII,
any irregular indentation), and the caller hands the text to libyaml, which decides as always.
So a text read here is one that libyaml parses without error, to the same data.
"""

from __future__ import annotations

import re
from sys import intern
from typing import Any

import yaml

STR = "tag:yaml.org,2002:str"
_SAFE = yaml.SafeLoader  # its resolvers and constructors (the C loader shares them)
_RESOLVERS = _SAFE.yaml_implicit_resolvers
_WILDCARD = _RESOLVERS.get(None, [])
_CONSTRUCTOR = yaml.constructor.SafeConstructor()  # constructs one scalar node; keeps no state for it
_PRINTABLE = bytes(range(0x20, 0x7F)) + b"\n"  # what a text read here may hold: printable ASCII and line ends
_PLAIN_KEY = re.compile(r"""[A-Za-z0-9_][^ :'"#]*""")  # no blank, colon, quote or hash; no indicator first
_QUOTED_KEY = re.compile(r"""(?:'([^']*)'|"([^"\\]*)") *:(?: +|$)""")  # without escapes
_SINGLE = re.compile(r"'((?:[^']|'')*)'")
_DOUBLE = re.compile(r'"([^"\\]*)"')
_PLAIN_FIRST = frozenset("-?:,[]{}#&*!|>'\"%@`")  # indicators a plain scalar may not start with ("-x" aside)
_LONGEST_KEY = 1024  # libyaml refuses an implicit key this long
_DEEPEST = 100
_SCALARS: dict[str, Any] = {}  # a value's text -> its value
_KEYS: dict[str, str] = {}  # a plain key's text -> the key
_MOST_KEPT = 1 << 14  # entries each of those keeps, at most
_LONGEST_KEPT = 256  # and only values this short: the memory they hold stays small
# A line as read: (indentation, key or None, the rest, whether it is a sequence item). An item
# whose rest starts a mapping ("- key: value") is two lines: the item, then its mapping's first
# key at the column after the dash, as if written on the next line.
Line = tuple[int, Any, str, bool]


class Unhandled(Exception):
    """Not in the plain block form read here: libyaml decides."""


def load(text: str) -> Any:
    """The data of a block mapping or sequence, as yaml.safe_load gives it; Unhandled otherwise."""
    if not text.isascii() or text.encode().translate(None, _PRINTABLE) or text.startswith(("---", "...", "%")) \
            or "\n---" in text or "\n..." in text or "\n%" in text:
        raise Unhandled("outside the plain block form")
    lines: list[Line] = []
    append = lines.append
    for line in text.split("\n"):
        content = line.lstrip(" ")
        if not content or content[0] == "#":
            continue  # a blank or comment line
        indent = len(line) - len(content)
        content = content.rstrip(" ")
        while content[0] == "-" and (len(content) == 1 or content[1] == " "):  # an item
            inner = content[1:].lstrip(" ")
            if not inner or inner[0] == "#":
                if inner:
                    raise Unhandled("a comment after a dash")
                append((indent, None, "", True))
                break
            key, rest = _split(inner)
            nested = inner[0] == "-" and (len(inner) == 1 or inner[1] == " ")
            if key is None and not nested:
                append((indent, None, inner, True))
                break
            # The item's value starts on its own line: a mapping or an item of its own, read
            # as if written on the next line at the column after the dash.
            append((indent, None, "", True))
            indent += len(content) - len(inner)
            if key is not None:
                append((indent, key, rest, False))
                break
            content = inner
        else:
            key, rest = _split(content)
            if key is None:
                raise Unhandled("a line that is neither a key nor an item")
            append((indent, key, rest, False))
    if not lines:
        raise Unhandled("no node")
    data, end = _block(lines, 0, 0)
    if end != len(lines):
        raise Unhandled("a line outside the document's node")
    return data


def _split(content: str) -> tuple[Any, str]:
    """(key, the rest) of a line that starts a key's value, (None, the line) of any other."""
    if content[0] == "'" or content[0] == '"':
        found = _QUOTED_KEY.match(content)
        if found is None:
            return None, content
        single, double = found.groups()
        return _quoted_key(single if single is not None else double), content[found.end():]
    head, colon, rest = content.partition(": ")
    if not colon:
        if content[-1] != ":":
            return None, content
        head = content[:-1]
    key = _KEYS.get(head)
    if key is None:
        key = _plain_key(head)
        if key is None:
            return None, content
    return key, rest.lstrip(" ")


def _block(lines: list[Line], i: int, depth: int) -> tuple[Any, int]:
    """The mapping or sequence whose first line is lines[i], and the line after it."""
    if depth > _DEEPEST:
        raise Unhandled("deep")
    indent = lines[i][0]
    if lines[i][3]:
        return _sequence(lines, i, indent, depth)
    return _mapping(lines, i, indent, depth)


def _sequence(lines: list[Line], i: int, indent: int, depth: int) -> tuple[list[Any], int]:
    items: list[Any] = []
    end = len(lines)
    while i < end:
        line_indent, _, rest, item = lines[i]
        if line_indent != indent or not item:
            break
        i += 1
        if rest:
            items.append(_scalar(rest))
        elif i < end and lines[i][0] > indent:
            value, i = _block(lines, i, depth + 1)
            items.append(value)
            continue
        else:
            items.append(None)
        if i < end and lines[i][0] > indent:
            raise Unhandled("a continued scalar")
    if i < end and lines[i][0] > indent:
        raise Unhandled("irregular indentation")
    return items, i


def _mapping(lines: list[Line], i: int, indent: int, depth: int) -> tuple[dict[Any, Any], int]:
    mapping: dict[Any, Any] = {}
    end = len(lines)
    while i < end:
        line_indent, key, rest, item = lines[i]
        if line_indent != indent:
            if line_indent > indent:
                raise Unhandled("irregular indentation")
            break
        if item:
            raise Unhandled("an item among keys")
        if key in mapping:
            raise Unhandled("a duplicate key")
        i += 1
        if rest:
            mapping[key] = _scalar(rest)
            if i < end and lines[i][0] > indent:
                raise Unhandled("a continued scalar")
        elif i < end and (lines[i][0] > indent or (lines[i][0] == indent and lines[i][3])):
            mapping[key], i = _block(lines, i, depth + 1)  # deeper, or a sequence at the key's own column
        else:
            mapping[key] = None
    return mapping, i


def _plain_key(written: str) -> str | None:
    """A plain key as a string (kept for the next text), None when it is not one read here."""
    if len(written) >= _LONGEST_KEY or not _PLAIN_KEY.fullmatch(written) or type(_resolve(written)) is not str:
        return None
    if len(_KEYS) >= _MOST_KEPT:
        _KEYS.clear()
    key = _KEYS[written] = intern(written)  # one string for each key a large document repeats, as fast_yaml keeps them
    return key


def _quoted_key(key: str) -> str:
    if len(key) + 2 >= _LONGEST_KEY:
        raise Unhandled("a long key")
    return intern(key)


def _scalar(text: str) -> Any:
    """A value on one line: quoted, empty flow, or plain (resolved as PyYAML resolves it).
    Values are kept by their text (each is immutable but the empty flows), as records repeat
    most of theirs: this is what the loader's resolver and constructors would make of it again."""
    value = _SCALARS.get(text, _SCALARS)
    if value is _SCALARS:
        if text == "[]" or text == "{}":
            return [] if text == "[]" else {}
        value = _uncached_scalar(text)
        if len(text) <= _LONGEST_KEPT:
            if len(_SCALARS) >= _MOST_KEPT:
                _SCALARS.clear()
            _SCALARS[text] = value
    return value


def _uncached_scalar(text: str) -> Any:
    first = text[0]
    if first == "'":
        found = _SINGLE.fullmatch(text)
        if found is None:
            raise Unhandled("a single-quoted scalar")
        return found.group(1).replace("''", "'")
    if first == '"':
        found = _DOUBLE.fullmatch(text)
        if found is None:
            raise Unhandled("a double-quoted scalar")
        return found.group(1)
    if (first in _PLAIN_FIRST and not (first == "-" and len(text) > 1 and text[1] not in " -")) \
            or ": " in text or " #" in text or text.endswith(":"):
        raise Unhandled("not a plain scalar")
    return _resolve(text)


def _resolve(value: str) -> Any:
    """A plain scalar's value, typed by the loader's implicit resolvers and constructors."""
    found = None
    for tag, pattern in _RESOLVERS.get(value[0], []) + _WILDCARD:
        if pattern.match(value):
            found = tag
            break
    if found is None or found == STR:
        return value
    construct = _SAFE.yaml_constructors.get(found)
    if construct is None:
        raise Unhandled(found)
    return construct(_CONSTRUCTOR, yaml.ScalarNode(found, value))
