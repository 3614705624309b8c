"""A reader compiled from one Avro schema: fastavro's result, about twice as fast.

Why: decoding a trace event is the largest cost of the worker's per-event path
outside the core, and of a replay beside the core (docs/faust-notes.md "Measured
costs behind the worker's code").  fastavro's reader interprets the parsed schema
for every record (a dict lookup and a call per field); for our 19-field event that
is ~9 µs of a ~500-byte message.  :func:`compile_reader` turns a parsed schema into
straight-line Python source once (``exec``), so reading an event is one call that
walks the bytes with local variables.

Contract (what :class:`streams.serde.avro.AvroSerde` relies on): for any bytes, the
compiled reader either returns exactly the value fastavro's ``schemaless_reader``
returns for the same schema (same types, same dict keys, same values), with the
offset where the body ended, or None.  It is deliberately
stricter than fastavro (a boolean byte other than 0 or 1, a varint longer than 10
bytes or beyond 64 bits, an ``int`` outside 32 bits, a negative length, an index
outside its union or enum, bytes that are not UTF-8, a body cut short): the caller
then decodes with fastavro, so every error message, and fastavro's answer on the
odd-but-valid inputs this reader does not take, stay exactly what they were.
``tests/unit/serde/test_fastread.py`` checks the contract against fastavro on
real, generated and mutated messages.

Only the types our schemas use are compiled: record, enum, string, long, int,
boolean, double, float, null, union, map and array.  :func:`compile_reader`
returns None for a schema with anything else (bytes, fixed, a logical type, a
named type referred to by name, a recursive record), and the caller keeps
fastavro.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

__all__ = ["Reader", "compile_reader", "read_long"]

#: ``reader(data, pos) -> (value, end)``: the value whose body starts at ``pos`` and
#: the offset after it, or None for bytes it does not take (decode those with fastavro)
Reader = Callable[[bytes, int], tuple[Any, int] | None]


class _Fallback(Exception):
    """Inside a compiled reader: it does not take these bytes (the reader returns None)."""


class _Unsupported(Exception):
    pass


_INT_MIN: Final = -(2**31)
_INT_MAX: Final = 2**31 - 1


def _varint(data: bytes, pos: int, first: int) -> tuple[int, int]:
    """The rest of a varint whose first byte ``first`` (at ``pos - 1``) had its high bit set.

    At most 10 bytes and 64 bits, as a long has: anything longer or wider is left
    to fastavro, which also decides what such bytes mean."""
    value = first & 0x7F
    shift = 7
    while True:
        byte = data[pos]
        pos += 1
        if shift == 63 and byte > 1:
            raise _Fallback
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def read_long(data: bytes, pos: int) -> tuple[int, int] | None:
    """The zig-zag varint Avro ``long`` at ``pos`` and the position after it, or None
    when the varint runs past the end of ``data`` or past 64 bits (the compiled
    readers inline the first byte and call :func:`_varint` for the rest)."""
    try:
        x = data[pos]
        pos += 1
        if x & 0x80:
            x, pos = _varint(data, pos, x)
    except (IndexError, _Fallback):
        return None
    return (x >> 1) ^ -(x & 1), pos


class _Compiler:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {}
        self.counter = 0
        self.stack: list[str] = []  # names of the records being compiled (recursion)

    def var(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def const(self, value: Any) -> str:
        name = self.var("K")
        self.consts[name] = value
        return name

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def long(self, indent: int, target: str) -> None:
        """``target`` = the zigzag long at ``pos``."""
        self.emit(indent, "x = data[pos]")
        self.emit(indent, "pos += 1")
        self.emit(indent, "if x & 0x80:")
        self.emit(indent + 1, "x, pos = _varint(data, pos, x)")
        self.emit(indent, f"{target} = (x >> 1) ^ -(x & 1)")

    def value(self, schema: Any, indent: int, target: str) -> None:
        """Code that reads one value of ``schema`` into ``target``."""
        if isinstance(schema, list):
            self.union(schema, indent, target)
            return
        kind = schema if isinstance(schema, str) else schema.get("type")
        if isinstance(schema, dict) and "logicalType" in schema:
            raise _Unsupported(f"logical type {schema['logicalType']}")
        if kind == "null":
            self.emit(indent, f"{target} = None")
        elif kind == "boolean":
            self.emit(indent, "x = data[pos]")
            self.emit(indent, "pos += 1")
            self.emit(indent, "if x > 1:")
            self.emit(indent + 1, "raise _Fallback")
            self.emit(indent, f"{target} = x == 1")
        elif kind == "long":
            self.long(indent, target)
        elif kind == "int":
            self.long(indent, target)
            self.emit(indent, f"if not {_INT_MIN} <= {target} <= {_INT_MAX}:")
            self.emit(indent + 1, "raise _Fallback")
        elif kind == "string":
            n = self.var("n")
            self.long(indent, n)
            self.emit(indent, f"end = pos + {n}")
            self.emit(indent, f"if {n} < 0 or end > size:")
            self.emit(indent + 1, "raise _Fallback")
            self.emit(indent, f"{target} = data[pos:end].decode('utf-8')")
            self.emit(indent, "pos = end")
        elif kind in ("double", "float"):
            width, code = (8, "<d") if kind == "double" else (4, "<f")
            self.emit(indent, f"if pos + {width} > size:")
            self.emit(indent + 1, "raise _Fallback")
            self.emit(indent, f"{target} = _unpack({code!r}, data, pos)[0]")
            self.emit(indent, f"pos += {width}")
        elif kind == "enum":
            symbols = self.const(tuple(schema["symbols"]))
            i = self.var("i")
            self.long(indent, i)
            self.emit(indent, f"if not 0 <= {i} < {len(schema['symbols'])}:")
            self.emit(indent + 1, "raise _Fallback")
            self.emit(indent, f"{target} = {symbols}[{i}]")
        elif kind in ("map", "array"):
            self.block(schema, kind, indent, target)
        elif kind == "record":
            self.record(schema, indent, target)
        else:
            raise _Unsupported(f"type {kind!r}")

    def union(self, branches: list[Any], indent: int, target: str) -> None:
        i = self.var("u")
        self.long(indent, i)
        for n, branch in enumerate(branches):
            self.emit(indent, f"{'if' if n == 0 else 'elif'} {i} == {n}:")
            self.value(branch, indent + 1, target)
        self.emit(indent, "else:")
        self.emit(indent + 1, "raise _Fallback")

    def block(self, schema: dict[str, Any], kind: str, indent: int, target: str) -> None:
        count = self.var("c")
        item = self.var("v")
        self.emit(indent, f"{target} = {{}}" if kind == "map" else f"{target} = []")
        self.long(indent, count)
        self.emit(indent, f"while {count}:")
        self.emit(indent + 1, f"if {count} < 0:")
        self.emit(indent + 2, f"{count} = -{count}")
        self.long(indent + 2, "_")  # the block's size in bytes: not needed to read it
        # each entry takes a byte at least (only a null or empty-record item takes
        # none): a count beyond the bytes left is a hostile one, not a long loop here
        self.emit(indent + 1, f"if {count} > size - pos:")
        self.emit(indent + 2, "raise _Fallback")
        self.emit(indent + 1, f"for _ in range({count}):")
        if kind == "map":
            key = self.var("k")
            self.value("string", indent + 2, key)
            self.value(schema["values"], indent + 2, item)
            self.emit(indent + 2, f"{target}[{key}] = {item}")
        else:
            self.value(schema["items"], indent + 2, item)
            self.emit(indent + 2, f"{target}.append({item})")
        self.long(indent + 1, count)

    def record(self, schema: dict[str, Any], indent: int, target: str) -> None:
        name = schema.get("name", "")
        if name in self.stack:
            raise _Unsupported(f"recursive record {name}")
        self.stack.append(name)
        names = []
        for field in schema["fields"]:
            v = self.var("f")
            self.value(field["type"], indent, v)
            names.append((field["name"], v))
        self.stack.pop()
        items = ", ".join(f"{fname!r}: {v}" for fname, v in names)
        self.emit(indent, f"{target} = {{{items}}}")


def compile_reader(parsed_schema: Any) -> Reader | None:
    """A reader for ``parsed_schema`` (as ``fastavro.parse_schema`` returns it, with
    named types expanded where first used), or None if it uses a type this module
    does not compile."""
    compiler = _Compiler()
    try:
        compiler.value(parsed_schema, 1, "result")
    except _Unsupported:
        return None
    source = "\n".join(
        [
            "def read(data, pos):",
            "    size = len(data)",
            "    try:",
            *("    " + line for line in compiler.lines),
            # bytes it does not take: a body cut short (IndexError), not UTF-8, or
            # what the code above refuses (_Fallback)
            "    except (_Fallback, IndexError, UnicodeDecodeError):",
            "        return None",
            "    return result, pos",
        ]
    )
    namespace: dict[str, Any] = {
        "_varint": _varint,
        "_unpack": struct.unpack_from,
        "_Fallback": _Fallback,
        **compiler.consts,
    }
    exec(compile(source, f"<avro reader {_name(parsed_schema)}>", "exec"), namespace)
    reader: Reader = namespace["read"]
    reader.__doc__ = f"Compiled Avro reader of {_name(parsed_schema)} (streams.serde.fastread)."
    return reader


def _name(schema: Any) -> str:
    return str(schema.get("name", "?")) if isinstance(schema, dict) else repr(schema)
