"""Find, parse and fingerprint the bundled Avro schemas.

The ``.avsc`` files live once, in the repository's top-level ``schemas/``; the
directory ``streams/serde/schemas`` is a symlink to it so that an installed
package carries them as package data (``pyproject.toml``:
``streams.serde = ["schemas/*.avsc"]``).  This module shares the name with that
data directory on purpose: Python prefers a module file over a directory without
``__init__.py``, so ``streams.serde.schemas`` is this module and
``schema_dir()`` is the data.

Invariants:

* ``load_schema(name)`` returns a fresh ``dict`` every call (callers may mutate it).
* ``codec_schema(name)`` is the fastavro-parsed schema used to read and write
  bytes; it is the file's schema with ``logicalType`` annotations removed, so
  timestamps stay ``int`` epoch milliseconds (no ``datetime`` round trip, no range
  limit).  That does not change a single byte on the wire, nor the fingerprint:
  the Parsing Canonical Form drops ``logicalType`` too.
* ``fingerprint(name)`` is the CRC-64-AVRO fingerprint of the Parsing Canonical
  Form as an unsigned 64-bit int; single-object encoding writes it little-endian.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Final

import fastavro
import fastavro.schema

from streams.errors import ConfigError
from streams.serde.fastread import Reader, compile_reader

#: Short name -> file name.  Full names (``io.trajectory.v1.TraceEvent``) and
#: record names (``TraceEvent``) are accepted by :func:`load_schema` too.
SCHEMA_FILES: Final[dict[str, str]] = {
    "trace_event": "trace_event.avsc",
    "budget": "budget.avsc",
    "pattern_detection": "pattern_detection.avsc",
    "assessment_record": "assessment_record.avsc",
}
NAMESPACE: Final = "io.trajectory.v1"
_ALIASES: Final[dict[str, str]] = {
    "TraceEvent": "trace_event",
    "Budget": "budget",
    "PatternDetection": "pattern_detection",
    "AssessmentRecord": "assessment_record",
}

_EMPTY64: Final = 0xC15D213AA4D7A795


def _make_table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_EMPTY64 & -(fp & 1))
        table.append(fp)
    return tuple(table)


_CRC_TABLE: Final = _make_table()


def crc64_avro(data: bytes) -> int:
    """CRC-64-AVRO (the Rabin fingerprint of the Avro specification)."""
    fp = _EMPTY64
    table = _CRC_TABLE
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


def schema_dir() -> Path:
    """The directory holding the ``.avsc`` files (works installed or in a checkout)."""
    return Path(__file__).resolve().parent / "schemas"


def _short_name(name: str) -> str:
    short = name.rsplit(".", 1)[-1] if name.startswith(NAMESPACE + ".") else name
    short = _ALIASES.get(short, short)
    if short.endswith(".avsc"):
        short = short[: -len(".avsc")]
    if short not in SCHEMA_FILES:
        raise ConfigError(
            "schema",
            f"unknown schema {name!r}; bundled schemas: {', '.join(sorted(SCHEMA_FILES))}",
        )
    return short


@functools.cache
def _load_text(short: str) -> str:
    path = schema_dir() / SCHEMA_FILES[short]
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(
            "schema",
            f"{path} is missing: the package was installed without its .avsc files "
            "(reinstall, or check package-data streams.serde = ['schemas/*.avsc'])",
        ) from exc


def load_schema(name: str) -> dict[str, Any]:
    """The schema ``name`` (``trace_event``, ``TraceEvent`` or the full name) as JSON."""
    result = json.loads(_load_text(_short_name(name)))
    if not isinstance(result, dict):
        raise ConfigError("schema", f"{name}: the .avsc file is not a JSON object")
    return result


def _strip_logical(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_logical(v) for k, v in node.items() if k != "logicalType"}
    if isinstance(node, list):
        return [_strip_logical(v) for v in node]
    return node


def parse_codec_schema(schema: dict[str, Any]) -> Any:
    """fastavro-parse ``schema`` for the codec (logical types removed, see module doc)."""
    return fastavro.parse_schema(_strip_logical(schema))


@functools.cache
def codec_schema(name: str) -> Any:
    """The cached fastavro-parsed reader/writer schema of a bundled schema."""
    return parse_codec_schema(load_schema(name))


@functools.cache
def compiled_reader(name: str) -> Reader | None:
    """The cached compiled reader of a bundled schema (:mod:`streams.serde.fastread`),
    or None if it uses a type that module does not compile."""
    return compile_reader(codec_schema(name))


def canonical_form(schema: dict[str, Any]) -> str:
    """The Avro Parsing Canonical Form of ``schema``."""
    return str(fastavro.schema.to_parsing_canonical_form(schema))


def schema_fingerprint(schema: dict[str, Any]) -> int:
    """CRC-64-AVRO fingerprint of the canonical form, as an unsigned int."""
    return crc64_avro(canonical_form(schema).encode("utf-8"))


@functools.cache
def fingerprint(name: str) -> int:
    """Fingerprint of a bundled schema (cached)."""
    return schema_fingerprint(load_schema(name))


__all__ = [
    "NAMESPACE",
    "SCHEMA_FILES",
    "canonical_form",
    "codec_schema",
    "compiled_reader",
    "crc64_avro",
    "fingerprint",
    "load_schema",
    "parse_codec_schema",
    "schema_dir",
    "schema_fingerprint",
]
