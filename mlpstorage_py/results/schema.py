"""What every record family of a leaf shares: a schema version, where the record writes it,
and one pair of methods, `to_json` for the writer and `from_json` for every reader, so the two
cannot drift apart (in the spirit of pyperf's Run: validated when built, serialised by its own
methods, a JSON version history in the docstring).

A writer builds the record (`Record(data)`: every field it declares checked, a wrong type is a
bug in the writer and raises) and writes `record.to_json()`. A reader calls
`Record.from_json(value)`: the typed record, read leniently (a field of the wrong type reads
as absent, as the rules have always read it), or an `Unread` that names the record and the
version it carries when this tool does not know that version: never a crash. A record with no
version at all is the unversioned form (UNVERSIONED): every published v3.0 record and every
record this tool wrote before it stamped a version, which each family reads as its first.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from mlpstorage_py.results.io import write_json

JsonObject = dict[str, Any]
Version = int | str | None
S = TypeVar("S", bound="Schema")
UNVERSIONED: Version = None  # a record written before its family carried a version
NUMBER = (int, float)
TEXT = (str,)
OBJECT = (dict,)
LIST = (list,)
FLAG = (bool,)


@dataclass(frozen=True)
class Unread:
    """A record this tool cannot read as any version it knows: named, not guessed at."""

    kind: str
    version: Version
    reads: tuple[Version, ...]

    def text(self) -> str:
        known = ", ".join("none" if v is None else str(v) for v in self.reads)
        return f"{self.kind} records schema version {self.version!r}, which this tool does not read (it reads {known})"


class Schema:
    """A record family. Subclasses name their KIND (how a sentence names the file), VERSION_KEY
    (the key that carries the version; None: the record is versioned with the record that holds
    it), VERSION (what this tool writes now), OLDER (the older versions it still reads, in order)
    and FIELDS (each key's JSON types, checked when a writer builds one; None is always allowed)."""

    KIND: ClassVar[str]
    VERSION_KEY: ClassVar[str | None] = "schema_version"
    VERSION: ClassVar[Version]
    OLDER: ClassVar[tuple[Version, ...]] = (UNVERSIONED,)
    FIELDS: ClassVar[Mapping[str, tuple[type, ...]]] = {}

    __slots__ = ("data",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        bad = [key for key, types in self.FIELDS.items() if not _fits(data.get(key), types)]
        if bad:
            raise ValueError(f"{self.KIND}: {', '.join(f'{k}={data.get(k)!r}' for k in bad)} of the wrong type")
        self.data: JsonObject = dict(data)

    @classmethod
    def reads(cls) -> tuple[Version, ...]:
        return (cls.VERSION, *cls.OLDER)

    @classmethod
    def version_of(cls, data: Mapping[str, Any]) -> Version:
        found = data.get(cls.VERSION_KEY) if cls.VERSION_KEY else cls.VERSION
        return found if isinstance(found, (int, str)) and not isinstance(found, bool) else UNVERSIONED

    @classmethod
    def unread(cls, data: Mapping[str, Any]) -> Unread | None:
        """Why a record cannot be read as this schema (a version it does not know), or None."""
        version = cls.version_of(data)
        return None if version == cls.VERSION or version in cls.OLDER else Unread(cls.KIND, version, cls.reads())

    @classmethod
    def from_json(cls: type[S], data: Mapping[str, Any]) -> S | Unread:
        """The record as read back (not validated: a published record is what it is)."""
        unread = cls.unread(data)
        return unread if unread is not None else cls.any_version(data)

    @classmethod
    def any_version(cls: type[S], data: Mapping[str, Any]) -> S:
        """The record read as this schema whatever version it names: for the readers that judge
        each of its fields themselves (the rules of its own section)."""
        record = cls.__new__(cls)
        record.data = data if isinstance(data, dict) else dict(data)
        return record

    @property
    def version(self) -> Version:
        return self.version_of(self.data)

    def to_json(self) -> JsonObject:
        """The object to write: the fields as built, the version first where they lack one."""
        if self.VERSION_KEY is None or self.VERSION is UNVERSIONED or self.VERSION_KEY in self.data:
            return dict(self.data)
        return {self.VERSION_KEY: self.VERSION, **self.data}

    def write(self, path: Path) -> None:
        write_json(path, self.to_json())

    # -- typed reads of the fields: the wrong type reads as absent ----------------------------
    def text(self, key: str) -> str | None:
        value = self.data.get(key)
        return value if isinstance(value, str) else None

    def number(self, key: str) -> float | int | None:
        value = self.data.get(key)
        return value if isinstance(value, NUMBER) and not isinstance(value, bool) else None

    def object(self, key: str) -> JsonObject:
        value = self.data.get(key)
        return value if isinstance(value, dict) else {}


@functools.cache
def of_record(kind: str, benchmark: str) -> type[Schema] | None:
    """The schema a leaf's record of a layout kind (rules/layout.yaml's records) is read as, for
    one benchmark. Imported when first asked: the families' modules read leaves themselves."""
    from mlpstorage_py.results import fs_probe, kv, metadata, provenance, summary, vdb

    summaries: dict[str, type[Schema]] = {kv.FAMILY: kv.KvSummary, vdb.FAMILY: vdb.VdbSummary}
    found: dict[str, type[Schema]] = {"metadata": metadata.Metadata, "provenance": provenance.Provenance,
                                      "fs_separation": fs_probe.FsSeparation,
                                      "summary": summaries.get(benchmark, summary.DlioSummary)}
    return found.get(kind)


def _fits(value: Any, types: tuple[type, ...]) -> bool:
    if value is None:
        return True
    if isinstance(value, bool) and bool not in types:
        return False  # a flag is no number
    return isinstance(value, types)
