"""YAML documents loaded as ``yaml.load(text, Loader=SafeLoader)`` loads them, several times faster.

PyYAML's libyaml loader parses in C but composes a node for every scalar and resolves its tag in
Python: a package's submission.yaml listing 10,000 leaves took 1.3 s to load, of which parsing
was 0.14 s. Here the data is built straight from libyaml's parse events. A plain scalar whose
first character no implicit resolver claims is a string without asking the resolver; every other
scalar is resolved and constructed by PyYAML's own resolver and constructors, so its type and
value are PyYAML's. Whatever this path does not handle itself (anchors, aliases, explicit tags,
merge keys, unhashable keys, a second document, any error) is handed to yaml.load unchanged,
which then gives the data or raises exactly as it always does. Before either, the plain block
form most records are written in is read line by line (block_yaml), faster still.

A package's YAML comes from elsewhere: read with aliases=False, a text with an anchor or alias is
refused before yaml.load sees it, since yaml.load expands every alias (a 2 KB nest of eight made
624 MB of tables) and no record the tool or DLIO writes has one.
"""

from __future__ import annotations

from collections.abc import Callable
from sys import intern
from typing import Any

import yaml

from mlpstorage_py.results.tree import block_yaml

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
STR = "tag:yaml.org,2002:str"
_CLAIMED = frozenset(k for k in LOADER.yaml_implicit_resolvers if k)  # first characters some resolver looks at
_WILDCARD = None in LOADER.yaml_implicit_resolvers or bool(LOADER.yaml_path_resolvers)
_SCALAR, _SEQUENCE, _SEQUENCE_END = yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.SequenceEndEvent
_MAPPING, _MAPPING_END = yaml.MappingStartEvent, yaml.MappingEndEvent


class _Unhandled(Exception):
    """Something only the full loader decides."""


class AliasRefused(yaml.composer.ComposerError):
    """An anchor or alias in a text read with aliases=False (a YAMLError: the file is not valid
    YAML to the package reader, reported as any other)."""


def load(text: str, aliases: bool = True) -> Any:
    """The data of a single-document YAML text, or the exception yaml.load raises for it; with
    aliases=False, AliasRefused for a text with an anchor or alias (the fast paths never expand one)."""
    try:
        return block_yaml.load(text)
    except block_yaml.Unhandled:
        pass
    try:
        return _from_events(LOADER(text))
    except (_Unhandled, yaml.YAMLError, TypeError, ValueError, RecursionError):
        if not aliases:
            _refuse_aliases(LOADER(text))
        return yaml.load(text, Loader=LOADER)


def _refuse_aliases(loader: Any) -> None:
    """Raise AliasRefused at the first anchor or alias, or the parser's own error before it."""
    try:
        while loader.check_event():
            event = loader.get_event()
            if getattr(event, "anchor", None) is not None:  # an AliasEvent's anchor is the name it repeats
                raise AliasRefused(None, None, "anchors and aliases are refused in a package's YAML "
                                               "(an alias nest expands without bound)", event.start_mark)
    finally:
        loader.dispose()


def _from_events(loader: Any) -> Any:
    try:
        get = loader.get_event
        get()  # stream start
        event = get()
        if type(event) is yaml.StreamEndEvent:
            return None
        data = _node(loader, get, get())  # after the document start
        get()  # document end
        if type(get()) is not yaml.StreamEndEvent:
            raise _Unhandled("more than one document")
        return data
    finally:
        loader.dispose()


def _node(loader: Any, get: Callable[[], Any], event: Any) -> Any:
    """The value an event starts; events are told apart by exact type (libyaml makes no
    subclasses). A scalar item or key is read on the spot, not by a call of its own: a large
    submission.yaml is some two million scalars."""
    kind = type(event)
    if kind is _SCALAR:
        return _scalar(loader, event)
    if event.anchor is not None or event.tag not in (None, "!"):
        raise _Unhandled("anchor, alias or explicit tag")
    if kind is _SEQUENCE:
        items: list[Any] = []
        event = get()
        while type(event) is not _SEQUENCE_END:
            items.append(_scalar(loader, event) if type(event) is _SCALAR else _node(loader, get, event))
            event = get()
        return items
    if kind is _MAPPING:
        mapping: dict[Any, Any] = {}
        event = get()
        while type(event) is not _MAPPING_END:
            key = _scalar(loader, event) if type(event) is _SCALAR else _node(loader, get, event)
            if type(key) is str:  # one string for each key a large document repeats: half the pickle's work
                key = intern(key)
            event = get()  # a merge key `<<` has no constructor: _Unhandled; an unhashable key raises TypeError
            mapping[key] = _scalar(loader, event) if type(event) is _SCALAR else _node(loader, get, event)
            event = get()
        return mapping
    raise _Unhandled(kind.__name__)


def _scalar(loader: Any, event: Any) -> Any:
    value = event.value
    if event.anchor is not None or event.tag is not None:
        raise _Unhandled("anchor or explicit tag")
    if not event.implicit[0] or (value and value[0] not in _CLAIMED and not _WILDCARD):
        return value  # quoted, or plain and no resolver looks at it: a string
    tag = loader.resolve(yaml.ScalarNode, value, event.implicit)
    if tag == STR:
        return value
    construct = LOADER.yaml_constructors.get(tag)
    if construct is None:
        raise _Unhandled(tag)
    return construct(loader, yaml.ScalarNode(tag, value, style=event.style))
