"""Canonical, fail-loudly serialization of session state.

The worker stores each session's :class:`~streams.core.engine.SessionState` in a
changelogged table, replay compares states byte for byte, and snapshots are kept
for restore.  All of that needs one encoding that is

* **canonical** — the same value always gives the same bytes: object keys
  sorted, compact separators, UTF-8 (no ``\\u`` escapes for non-ASCII), ints stay
  ints, floats are written with ``repr`` (shortest round-tripping form);
* **loud** — anything that is not plainly representable raises
  :class:`~streams.core.errors.UnserializableError` naming the path of the first
  bad leaf (``state.analysis.records[3].params.fn``).  Functions, sets, bytes,
  NaN/infinity, non-``str`` dict keys, cycles and unknown objects are all
  rejected; nothing is ever dropped or stringified behind the caller's back;
* **exact** — frozen dataclasses carry a type tag so :func:`decode_state`
  rebuilds the very same values, and ``encode(decode(encode(s))) == encode(s)``;
* **stable** — a type tag is a name and a version registered for the class
  (``@state_type("repeated_error.snapshot/1")``), not its Python module path, so
  moving or renaming a module does not break the worker's changelogs and
  snapshot topics.

Wire form of non-JSON shapes (JSON itself has only objects and arrays):

=========================  ===============================================
Python value               JSON
=========================  ===============================================
``tuple``                  array
``list``                   ``{"!list": [...]}``
``dict`` (str keys)        object; ``{"!dict": {...}}`` if a key starts "!"
frozen dataclass           ``{"!t": "name/version", "!f": {fields}}``
``datetime.timedelta``     ``{"!td": [days, seconds, microseconds]}``
=========================  ===============================================

**State types.**  Only registered frozen dataclasses are encoded and decoded:
:func:`state_type` (a class decorator) or :func:`register_state_type` ties a
class to its tag, ``name/version`` (lower-case dotted name, positive version).
Encoding an unregistered dataclass raises :class:`UnserializableError` naming
the path, and bytes can never make the decoder construct anything but a
registered class.  Invariants: one tag per class and one class per tag; a
tag, once written to a topic, is never re-used for other fields.  When a
class's fields change so that old records no longer construct it, give it the
next version (``x/2``) and keep reading the old one with ``aliases=("x/1",)`` on
a class whose constructor still accepts the old fields.

**Old states.**  States written before stable tags (module-path tags such as
``streams.core.detectors.repeated_error:RepeatedErrorSnapshot``, in both the
plain and the compressed form) still decode: :data:`LEGACY_TAGS` maps every
module-path tag that version could write to its stable tag, as a literal table
that does not follow later module moves.  Re-encoding writes the stable tags.
The golden bytes in ``tests/fixtures/state/`` hold such states.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import keyword
import marshal
import math
import re
import sys
import zlib
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from types import MappingProxyType
from typing import Any, Final, TypeVar, cast

from streams.core.errors import StateDecodeError, UnserializableError

#: Version of the state envelope; bump on incompatible changes.
STATE_FORMAT: Final = "trajectory-session-state"
STATE_VERSION: Final = 1

_TAG: Final = "!t"
_FIELDS: Final = "!f"
_LIST: Final = "!list"
_DICT: Final = "!dict"
_TD: Final = "!td"

_SCALARS: Final = (str, int, bool, type(None))

#: Per dataclass: (tag, field names), or the error (path suffix, message) it raises.
_CLASS_INFO: dict[type[Any], tuple[str, tuple[str, ...]] | tuple[None, tuple[str, str]]] = {}
#: Per dataclass the fast writer handles: ((field name, key text), ...) in sorted
#: field order, the first key text opening the record; the closing text; and the
#: class's field writer (:func:`_field_writer`).
_FRAG_CLASS: dict[type[Any], tuple[tuple[tuple[str, str], ...], str, _FieldWriter]] = {}
#: tag (stable, alias or legacy) -> class, for the decoder's fast path.
_CLASS_CACHE: dict[str, type[Any]] = {}

#: First byte of a compressed state value.  Canonical JSON always starts with
#: ``{``, so one byte tells the two forms apart and both decode.
_DEFLATED: Final = b"\x00"
#: Level of compressed states: level 1 already shrinks a session state about
#: eightfold, cheaply; higher levels cost more (docs/kafka-notes.md "Changelog volume").
_DEFLATE_LEVEL: Final = 1


def _deflater() -> Callable[[bytes, int], bytes]:
    """ISA-L's deflate (``isal``, a dependency) if it imports, else zlib's.

    Both write zlib streams that :func:`zlib.decompress` reads, so states written
    by either decode the same (and so do states stored before ISA-L was used).
    ISA-L level 1 on the worker's session states (17.5 KB mean): 16.8 µs against
    zlib level 1's 50.4, and ~6 % smaller (``python tests/bench/bench_statecodec.py
    --sessions 1000 --rounds 20``).
    """
    try:
        from isal import isal_zlib
    except ImportError:  # a platform without an isal wheel: same format, slower
        return zlib.compress
    return isal_zlib.compress


#: what ``encode_state(..., compress=True)`` compresses with (:func:`_deflater`)
deflate: Final = _deflater()


# ------------------------------------------------------------------ state types

_T = TypeVar("_T")

#: ``name/version``: a lower-case dotted name (``repeated_error.snapshot``) and
#: a positive version without leading zeros.
_TAG_RE: Final = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*/[1-9][0-9]*")

#: stable tag (and alias) -> class; what the decoder may construct.
_TYPES: dict[str, type[Any]] = {}
#: class -> the tag it is written with.
_TAG_OF: dict[type[Any], str] = {}

#: The module-path tags written before stable tags (commit ef662b0 and older),
#: mapped to the stable tags of the same classes.  A literal table: it must not
#: follow later module moves, it describes bytes already stored in topics.
LEGACY_TAGS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "streams.core.analysis:AnalysisState": "analysis.state/1",
        "streams.core.analysis:PendingCall": "analysis.pending_call/1",
        "streams.core.assessment:Assessment": "assessment/1",
        "streams.core.assessment:AssessmentHistory": "assessment.history/1",
        "streams.core.assessment:CurrentAssessment": "assessment.current/1",
        "streams.core.assessment:Observation": "assessment.observation/1",
        "streams.core.detectors.alternating_cycle:AlternatingCycleSnapshot": (
            "alternating_cycle.snapshot/1"
        ),
        "streams.core.detectors.context_degradation:ContextDegradationSnapshot": (
            "context_degradation.snapshot/1"
        ),
        "streams.core.detectors.context_loop:ContextLoopSnapshot": "context_loop.snapshot/1",
        "streams.core.detectors.doom_loop:DoomLoopSnapshot": "doom_loop.snapshot/1",
        "streams.core.detectors.drift:DriftSnapshot": "drift.snapshot/1",
        "streams.core.detectors.error_cascade:ErrorCascadeSnapshot": "error_cascade.snapshot/1",
        "streams.core.detectors.monologue:MonologueSnapshot": "monologue.snapshot/1",
        "streams.core.detectors.progress_stall:ProgressStallSnapshot": (
            "progress_stall.snapshot/1"
        ),
        "streams.core.detectors.repeated_error:RepeatedErrorSnapshot": (
            "repeated_error.snapshot/1"
        ),
        "streams.core.detectors.thrashing:ThrashingSnapshot": "thrashing.snapshot/1",
        "streams.core.detectors.tool_avoidance:ToolAvoidanceSnapshot": (
            "tool_avoidance.snapshot/1"
        ),
        "streams.core.engine:EngineOutput": "engine.output/1",
        "streams.core.engine:PatternDetection": "engine.pattern_detection/1",
        "streams.core.engine:SessionState": "engine.session_state/1",
        "streams.core.events:Budget": "events.budget/1",
        "streams.core.observers:ObserverState": "observers.observer_state/1",
        "streams.core.patterns:AlternatingCycle": "pattern.alternating_cycle/1",
        "streams.core.patterns:ContextDegradation": "pattern.context_degradation/1",
        "streams.core.patterns:ContextLoop": "pattern.context_loop/1",
        "streams.core.patterns:DoomLoop": "pattern.doom_loop/1",
        "streams.core.patterns:Drift": "pattern.drift/1",
        "streams.core.patterns:ErrorCascade": "pattern.error_cascade/1",
        "streams.core.patterns:FileChurn": "pattern.file_churn/1",
        "streams.core.patterns:Monologue": "pattern.monologue/1",
        "streams.core.patterns:ProgressStall": "pattern.progress_stall/1",
        "streams.core.patterns:RepeatedError": "pattern.repeated_error/1",
        "streams.core.patterns:Thrashing": "pattern.thrashing/1",
        "streams.core.patterns:ToolAvoidance": "pattern.tool_avoidance/1",
        "streams.core.patterns:ToolCallRecord": "tool_call_record/1",
        "streams.core.patterns:TrajectoryPattern": "pattern/1",
    }
)

#: Modules whose import registers every built-in state type (imported before a
#: decode, so a tag is never unknown only because its module was not loaded yet).
_BUILTIN_TYPE_MODULES: Final = (
    "streams.core.engine",
    "streams.core.analysis",
    "streams.core.detectors",
)
_builtins_loaded = False


def _check_tag(tag: object, what: str) -> str:
    if not isinstance(tag, str) or not _TAG_RE.fullmatch(tag):
        raise ValueError(
            f"{what} {tag!r} is not a state type tag: use 'name/version', a lower-case "
            "dotted name and a positive version, e.g. 'repeated_error.snapshot/1'"
        )
    return tag


def register_state_type(cls: type[Any], tag: str, *, aliases: Iterable[str] = ()) -> None:
    """Make frozen dataclass ``cls`` encodable as ``tag`` and decodable from
    ``tag`` and each of ``aliases`` (older versions it still reads).

    Registering the same class with the same tag again is a no-op (a module
    reload); any other clash raises ValueError naming both classes.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if not isinstance(cls, type) or params is None or not params.frozen:
        raise TypeError(
            f"state type {tag!r}: {getattr(cls, '__qualname__', cls)!r} is not a frozen "
            "dataclass; state values must be immutable (@dataclass(frozen=True))"
        )
    names = [_check_tag(tag, "tag"), *(_check_tag(a, "alias") for a in aliases)]
    current = _TAG_OF.get(cls)
    if current is not None and current != tag:
        raise ValueError(
            f"{cls.__qualname__} is already registered as {current!r}, not {tag!r}: "
            "a class has one tag (register older versions as aliases)"
        )
    for name in names:
        other = _TYPES.get(name)
        if other is not None and other is not cls:
            raise ValueError(
                f"state type tag {name!r} is taken by {other.__module__}.{other.__qualname__}; "
                f"pick another name for {cls.__module__}.{cls.__qualname__}"
            )
    for name in names:
        _TYPES[name] = cls
        _CLASS_CACHE[name] = cls
    _TAG_OF[cls] = tag
    _CLASS_INFO.pop(cls, None)  # an earlier "not registered" answer is stale
    _FRAG_CLASS.pop(cls, None)


def state_type(tag: str, *, aliases: Iterable[str] = ()) -> Callable[[type[_T]], type[_T]]:
    """Class decorator: ``@state_type("repeated_error.snapshot/1")`` above
    ``@dataclass(frozen=True)`` (see :func:`register_state_type`)."""
    aliases = tuple(aliases)

    def register(cls: type[_T]) -> type[_T]:
        register_state_type(cls, tag, aliases=aliases)
        return cls

    return register


def state_tag(cls: type[Any]) -> str | None:
    """The tag ``cls`` is written with, or None if it is no registered state type."""
    return _TAG_OF.get(cls)


def state_types() -> Mapping[str, type[Any]]:
    """Every tag the decoder reads (stable tags and aliases) and its class."""
    _load_builtin_types()
    return MappingProxyType(dict(_TYPES))


def _load_builtin_types() -> None:
    global _builtins_loaded
    if not _builtins_loaded:
        for name in _BUILTIN_TYPE_MODULES:
            importlib.import_module(name)
        _builtins_loaded = True


#: The tag of :class:`~streams.core.engine.SessionState`, the root of every state.
_SESSION_STATE_TAG: Final = "engine.session_state/1"


def _session_state_type() -> type[Any]:
    """The SessionState class, found by its tag (not imported: streams.core.engine
    imports this module for ``@state_type``, and this module must not import it back;
    tests/unit/test_import_layers.py fails on such a cycle)."""
    _load_builtin_types()
    return _TYPES[_SESSION_STATE_TAG]


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"


def _to_plain(value: object, path: str, active: set[int]) -> Any:
    """Translate ``value`` into JSON-ready plain values, or raise naming ``path``.

    ``active`` holds the ids of containers on the current descent path, so a
    container reached again through itself is a cycle (shared, non-cyclic
    references are fine and are simply encoded twice).
    """
    vtype = type(value)
    if vtype is str or vtype is int or vtype is bool or value is None:
        return value
    if vtype is float:
        if not math.isfinite(cast(float, value)):
            raise UnserializableError(
                path, f"{value!r} is not a finite number (JSON has no NaN/inf)"
            )
        return value
    if vtype is tuple or vtype is list or vtype is dict or dataclasses.is_dataclass(value):
        ident = id(value)
        if ident in active:
            raise UnserializableError(path, "cycle: the value contains itself")
        active.add(ident)
        try:
            if vtype is tuple or vtype is list:
                items = cast("tuple[object, ...] | list[object]", value)
                arr = [_to_plain(v, f"{path}[{i}]", active) for i, v in enumerate(items)]
                return arr if vtype is tuple else {_LIST: arr}
            if vtype is dict:
                mapping = cast("dict[object, object]", value)
                out: dict[str, Any] = {}
                escape = False
                for k, v in mapping.items():
                    if type(k) is not str:
                        raise UnserializableError(
                            f"{path}[{k!r}]",
                            f"dict key of type {type(k).__name__}; only str keys are encodable",
                        )
                    if k.startswith("!"):
                        escape = True
                    out[k] = _to_plain(v, _child(path, k), active)
                return {_DICT: out} if escape else out
            return _dataclass_to_plain(value, path, active)
        finally:
            active.discard(ident)
    if vtype is timedelta:
        td: timedelta = value  # type: ignore[assignment]
        return {_TD: [td.days, td.seconds, td.microseconds]}
    if isinstance(value, (set, frozenset)):
        raise UnserializableError(
            path, f"{vtype.__name__} has no canonical order; use a sorted tuple"
        )
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise UnserializableError(
            path, f"{vtype.__name__} where JSON text was expected; decode it first"
        )
    if callable(value):
        raise UnserializableError(
            path, f"{vtype.__name__} {getattr(value, '__qualname__', value)!r} is code, not data"
        )
    if isinstance(value, (str, int, float, tuple, list, dict)):
        raise UnserializableError(
            path, f"subclass {vtype.__qualname__} of a JSON type; convert it to the plain type"
        )
    raise UnserializableError(
        path, f"unknown object of type {vtype.__module__}.{vtype.__qualname__}"
    )


def _class_info(cls: type[Any]) -> tuple[str, tuple[str, ...]] | tuple[None, tuple[str, str]]:
    info = _CLASS_INFO.get(cls)
    if info is not None:
        return info
    params = getattr(cls, "__dataclass_params__", None)
    result: tuple[str, tuple[str, ...]] | tuple[None, tuple[str, str]]
    if params is None or not params.frozen:
        result = (
            None,
            ("", f"dataclass {cls.__qualname__} is not frozen; state values must be immutable"),
        )
    elif (tag := _TAG_OF.get(cls)) is None:
        result = (
            None,
            (
                "",
                f"dataclass {cls.__module__}.{cls.__qualname__} is no registered state type; "
                "give it a stable tag with @state_type('name/1') from streams.core.statecodec",
            ),
        )
    else:
        bad = [f.name for f in dataclasses.fields(cls) if not f.init]
        if bad:
            result = (None, (f".{bad[0]}", "init=False field cannot be reconstructed"))
        else:
            names = tuple(f.name for f in dataclasses.fields(cls))
            result = (tag, names)
    _CLASS_INFO[cls] = result
    return result


def _dataclass_to_plain(value: Any, path: str, active: set[int]) -> Any:
    if isinstance(value, type):
        raise UnserializableError(path, f"class object {value.__qualname__}; expected an instance")
    tag, rest = _class_info(type(value))
    if tag is None:
        suffix, message = cast("tuple[str, str]", rest)
        raise UnserializableError(path + suffix, message)
    fields_out: dict[str, Any] = {}
    for name in rest:
        fields_out[name] = _to_plain(getattr(value, name), f"{path}.{name}", active)
    return {_TAG: tag, _FIELDS: fields_out}


class _Slow(Exception):
    """Raised by the fast writer on anything unusual; the path-tracking walk then
    runs to produce the error with its field path (or the exact result)."""


# ------------------------------------------------------------- fast fragment writer
#
# The hot path (the worker re-encodes every changed session's state about once a
# second) writes the canonical JSON text directly, node by node, instead of
# building plain dicts for ``json.dumps``.  Every fragment is exactly the text
# ``json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
# allow_nan=False)`` writes for that node: strings through json's own
# ``encode_basestring``, ints and floats through ``int.__repr__`` and
# ``float.__repr__`` (as json's C encoder does), keys sorted by code point.
# Anything unusual raises :class:`_Slow` and the path-tracking walk runs instead.
#
# Fragments of frozen dataclass instances are memoized by identity.  Between two
# encodes of one session almost all of them are the very same objects, so only
# the few new leaves are written.  A record whose whole subtree is deeply
# immutable (scalars, tuples, timedeltas and frozen dataclasses only) is cached
# as its complete text.  A record with a field that holds a dict or list
# somewhere below is cached as the text *around* those fields, which are written
# afresh every time (a dict or list may have changed in place; the field itself
# cannot be rebound, the dataclass being frozen).
#
# Composites.  A record holding other records (a composite) that holds a dict
# or list somewhere below, or whose text is longer than ``_FRAGMENT_MAX_CHARS``,
# is only cached when it is met a second time.  The spine of a state -- the
# SessionState and its analysis state, which hold the trajectory window (tool
# call records with their ``params`` dicts) -- is built afresh by each
# ``snapshot()`` call and never met again, and caching it would copy most of
# the state's text into the cache on every encode; the records it holds are
# cached on their own, so writing a fresh composite is mostly joining cached
# texts.  Composites seen once wait in ``_probation`` (id -> object: kept alive
# so that the id of a dead one cannot let another object in), which is emptied
# when it holds more than ``_PROBATION_LIMIT``.
#
# A deeply immutable composite of at most ``_FRAGMENT_MAX_CHARS`` is cached at
# once: a detector's snapshot, which the analysis builder hands out again, the
# very same object, at every commit until a call reaches that detector (most
# events complete no tool call; streams/core/analysis.py ``_DetectorSlot``).
# Waiting for a second sight made that first re-encode a full write, and with
# one event per session per commit the snapshot is mostly replaced after one or
# two re-encodes.  Such texts are a few KB, so besides the entry count their
# characters bound a generation too: it becomes the old one after
# ``_COMPOSITE_CHARS`` characters of composite text.  Records holding no other
# record (most of them: tool call records, observations, patterns) are cached
# at once, as before.
#
# An entry is ``(obj, cached)``: it keeps ``obj`` alive, so its id cannot be
# reused by another object while the entry exists, and a lookup also checks
# ``entry[0] is obj``.  Memory is bounded with two generations: entries go into
# ``new``; a hit in ``old`` is moved to ``new``; when ``new`` holds more than
# ``_FRAGMENT_CACHE_LIMIT`` entries it becomes ``old`` and the previous ``old``
# is dropped.
#
# A memo per session.  An encode given an :class:`EncodeMemo` reads and writes
# that memo instead of the shared generations (same entries, same probation
# rule), and afterwards the memo keeps exactly the entries the encode touched.
# The worker keeps one per session in memory: the shared generations are
# bounded by what is written, and a worker flushing 1,000 long-running sessions
# in turn wrote them over before any session came round again.

#: Entries per cache generation (at most about twice this many are held).
_FRAGMENT_CACHE_LIMIT: int = 200_000
#: Records holding other records that were seen once (at most this many are held).
_PROBATION_LIMIT: int = 20_000
#: Longer texts are not cached (their parts are): a big aggregate is cheap to
#: join from its cached parts, and it is often built afresh for every encode.
_FRAGMENT_MAX_CHARS: int = 8192

#: The whole text of a record, or (text up to the first field written afresh,
#: ((that field's name, text up to the next such field or the end), ...)).
_Cached = str | tuple[str, tuple[tuple[str, str], ...]]

_frag_new: dict[int, tuple[object, _Cached]] = {}
_frag_old: dict[int, tuple[object, _Cached]] = {}
#: id -> record seen once: records holding other records wait here (see above).
_probation: dict[int, object] = {}
#: Characters of composite text a cache generation takes before it becomes the
#: old one (see "Composites" above): bounds the memory of composite texts to about
#: twice this many characters.
_COMPOSITE_CHARS: int = 16_000_000
#: Characters of composite text remembered in the current generation.
_composite_chars: int = 0


# Dicts (and lists).  A dict is mutable, so a record holding one (a tool call
# record and its ``params``) is cached as its head and tail with the dict's field written afresh
# at every encode; with full trajectory windows re-writing those dicts was most of
# a worker's flush (docs/faust-notes.md "Full windows").  Their texts are cached
# by *content*: the key is the dict's ``marshal.dumps(value, 2)`` (after a tag byte), which only
# builtin types pass (an int, float and bool differ in it, a subclass or any other
# object raises ValueError and is written as before), from which marshal.loads
# rebuilds an equal value of the very same types: equal keys, equal content, the
# same canonical text.  A dict changed in place gets other bytes, so a stale text
# is never served; the same content in another dict (a looping agent's calls) is
# a hit.  Version 2 writes no back-references, whose placement depends on
# reference counts.  Only texts of a walk that succeeded are stored (a cycle or a
# ``!``-key raises first), at most ``_FRAGMENT_MAX_CHARS`` long, in two
# generations of ``_DICT_CACHE_LIMIT`` entries.  Lists are cached the same way;
# keys start with ``D`` or ``L`` (marshal already tells a list from a dict; the
# prefix keeps the two texts apart in any case).  Only the outermost dict or list
# of a record's field is looked up (``_Walk.keyed``): marshalling every nested
# level again made a deep value cost depth x size (a 60-deep chain: 3x the walk).

#: Entries per generation of the dict text cache (at most about twice this many).
_DICT_CACHE_LIMIT: int = 50_000
#: Characters (texts and keys) per generation of the dict text cache: with texts
#: of up to ``_FRAGMENT_MAX_CHARS`` the entry count alone would allow ~1 GB.
_DICT_CACHE_CHARS: int = 8_000_000
_dict_chars: int = 0
#: Dicts whose marshal form is longer are not looked up (their text would be too).
_DICT_KEY_MAX_BYTES: int = 2 * 8192
_dict_new: dict[bytes, str] = {}
_dict_old: dict[bytes, str] = {}
_marshal_dumps: Final = marshal.dumps


def _content_key(value: dict[Any, Any] | list[Any], tag: bytes) -> bytes | None:
    """The dict-text cache key of ``value`` (``tag``: ``D`` dict, ``L`` list), or None
    when it holds anything but builtins, nests too deep, or is too long to cache."""
    try:
        key = tag + _marshal_dumps(value, 2)
    except ValueError:
        return None
    return key if len(key) <= _DICT_KEY_MAX_BYTES else None


def _dict_text_cached(key: bytes) -> str | None:
    global _dict_new, _dict_old
    text = _dict_new.get(key)
    if text is None:
        text = _dict_old.pop(key, None)
        if text is not None:
            _remember_dict_text(key, text)
    return text


def _remember_dict_text(key: bytes, text: str) -> None:
    global _dict_new, _dict_old, _dict_chars
    _dict_new[key] = text
    _dict_chars += len(key) + len(text)
    if len(_dict_new) > _DICT_CACHE_LIMIT or _dict_chars > _DICT_CACHE_CHARS:
        _dict_old = _dict_new
        _dict_new = {}
        _dict_chars = 0


def clear_fragment_cache() -> None:
    """Forget every memoized fragment (for tests and benchmarks)."""
    global _frag_new, _frag_old, _probation, _composite_chars, _dict_new, _dict_old, _dict_chars
    _frag_new = {}
    _frag_old = {}
    _probation = {}
    _composite_chars = 0
    _dict_new = {}
    _dict_old = {}
    _dict_chars = 0


def _remember_composite(ident: int, entry: tuple[object, str]) -> None:
    """:func:`_remember` for the text of a composite, counting its characters."""
    global _frag_new, _frag_old, _composite_chars
    _composite_chars += len(entry[1])
    _frag_new[ident] = entry
    if _composite_chars > _COMPOSITE_CHARS or len(_frag_new) > _FRAGMENT_CACHE_LIMIT:
        _frag_old = _frag_new
        _frag_new = {}
        _composite_chars = 0


def _remember(ident: int, entry: tuple[object, _Cached]) -> None:
    global _frag_new, _frag_old, _composite_chars
    new = _frag_new
    new[ident] = entry
    if len(new) > _FRAGMENT_CACHE_LIMIT:
        _frag_old = new
        _frag_new = {}
        _composite_chars = 0


def _on_probation(ident: int, value: object) -> None:
    global _probation
    _probation[ident] = value
    if len(_probation) > _PROBATION_LIMIT:
        _probation = {}


class EncodeMemo:
    """The record texts of one session's last :func:`encode_state`, for its next one.

    Why: the shared record cache above is bounded by what is *written* into it,
    not by who reads it.  A worker holding 1,000 long-running sessions flushes
    each every ~30 s; the composites of their full windows are ~50-100 M
    characters, so at ``_COMPOSITE_CHARS`` a generation turns over in seconds and
    a session finds none of its own texts at its next flush, which then costs
    about twice as much (docs/faust-notes.md "A memo per session").  A memo keyed
    by session keeps exactly what that session needs, for as long as the caller
    keeps the session: pass ``memo=`` to every encode of one session, and drop
    the memo with the session.

    Invariants: after an encode that succeeded, the memo holds exactly the records
    that encode wrote or read from it (``(record, text)``: it keeps each record
    alive, so an id cannot be reused while its text is held), and nothing else.
    Its memory is therefore about one copy of that state's canonical text: the
    records below a composite served whole are not read, so not kept.  An encode
    that fails keeps the last good encode's records.  A memo serves one session
    at a time; using one for several sessions is correct (entries are checked by
    identity) but keeps only the last one's records.  Not thread-safe.
    """

    __slots__ = ("_last", "_now")

    def __init__(self) -> None:
        #: id -> (record, text), or (record, None): a composite seen once
        self._last: dict[int, tuple[object, _Cached | None]] = {}
        #: the same, for the encode under way
        self._now: dict[int, tuple[object, _Cached | None]] = {}

    def __len__(self) -> int:
        """How many records the memo holds."""
        return len(self._last)

    def _hit(self, ident: int, value: object) -> tuple[object, _Cached] | None:
        now = self._now
        entry = now.get(ident)
        if entry is None:
            entry = self._last.get(ident)
            if entry is None or entry[0] is not value:
                return None
            now[ident] = entry  # read in this encode: kept for the next
        elif entry[0] is not value:
            return None
        cached = entry[1]
        return None if cached is None else (value, cached)

    def _again(self, ident: int, value: object) -> bool:
        """True if composite ``value`` was seen before (the last encode or this one),
        else remember that it was seen once (see "Composites" above)."""
        entry = self._now.get(ident)
        if entry is not None and entry[0] is value:
            return True
        self._now[ident] = (value, None)
        return False


_encode_str: Final = json.encoder.encode_basestring
_isfinite: Final = math.isfinite
_int_repr: Final = int.__repr__
_float_repr: Final = float.__repr__


def _frag_class(
    cls: type[Any],
) -> tuple[tuple[tuple[str, str], ...], str, _FieldWriter] | None:
    """The writer's layout for dataclass ``cls``, or None if it is not a frozen,
    decodable dataclass (or not a dataclass at all)."""
    if not hasattr(cls, "__dataclass_fields__") or issubclass(cls, type):
        return None
    tag, names = _class_info(cls)
    if tag is None:
        return None
    opening = "{" + _encode_str(_FIELDS) + ":{"
    closing = "}," + _encode_str(_TAG) + ":" + _encode_str(tag) + "}"
    keys = [(name, "," + _encode_str(name) + ":") for name in sorted(names)]
    if not keys:
        return (), opening + closing, _field_writer(cls, ())
    keys[0] = (keys[0][0], opening + keys[0][1][1:])
    return tuple(keys), closing, _field_writer(cls, tuple(keys))


#: ``writer(record, cx) -> (parts, fresh)``: the key texts and field texts of a
#: record in sorted field order (``[key0, text0, key1, text1, ...]``), and the
#: indexes in ``parts`` of the field texts that reached a dict or list.
_FieldWriter = Callable[[Any, "_Walk"], "tuple[list[str], list[int]]"]


def _field_writer(cls: type[Any], keys: tuple[tuple[str, str], ...]) -> _FieldWriter:
    """A function made for ``cls`` that writes its fields' texts.

    Why generated: a record not in the cache (a new one, or the spine and detector
    snapshots each ``snapshot()`` builds afresh) had its fields written by a loop
    with a ``getattr``, a ``_frag`` call and a ``cx.mutable`` check per field.  The
    generated code reads each field as an attribute and writes the common scalars
    inline, with the texts ``_frag`` gives them; anything else goes through
    ``_frag``, and a field whose walk reached a dict or list is noted in ``fresh``
    as the loop did.  Invariant: the same ``(parts, fresh)`` as that loop, and the
    same exceptions (an unset slot: AttributeError, handed to the slow walk).
    """
    lines = ["def writer(value, cx):", "    fresh = []", "    m = cx.mutable"]
    out = []
    for i, (name, _key) in enumerate(keys):
        if name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("__"):
            lines.append(f"    x = value.{name}")
        else:  # not an attribute name one can spell (a keyword; private names are mangled)
            lines.append(f"    x = getattr(value, {name!r})")
        lines += [
            "    t = type(x)",
            f"    if t is str: f{i} = E(x)",
            f"    elif x is None: f{i} = 'null'",
            f"    elif t is int: f{i} = I(x)",
            f"    elif t is bool: f{i} = 'true' if x else 'false'",
            "    else:",
            f"        f{i} = F(x, cx)",
            "        if cx.mutable != m:",
            f"            fresh.append({2 * i + 1})",
            "            m = cx.mutable",
        ]
        out += [f"K{i}", f"f{i}"]
    lines.append(f"    return [{', '.join(out)}], fresh")
    env: dict[str, Any] = {"E": _encode_str, "I": _int_repr, "F": _frag}
    for i, (_name, key) in enumerate(keys):
        env[f"K{i}"] = key
    exec(compile("\n".join(lines), f"<state writer of {cls.__qualname__}>", "exec"), env)
    writer: _FieldWriter = env["writer"]
    return writer


def _frag(value: Any, cx: _Walk) -> str:
    """Canonical JSON text of ``value`` (see above), or :class:`_Slow`."""
    vtype = type(value)
    if vtype is str:
        return _encode_str(value)
    if value is None:
        return "null"
    if vtype is int:
        return _int_repr(value)
    if vtype is bool:
        return "true" if value else "false"
    if vtype is float:
        if not _isfinite(value):
            raise _Slow
        return _float_repr(value)
    if vtype is tuple:
        # Not cached: most tuples are built afresh for every snapshot (a window's
        # ``tuple(deque)``); their records are.  A tuple can only reach itself
        # again through a dict, list or dataclass, which are tracked.
        return _bracketed("[", _frag_items(value, cx), "]")
    if vtype is dict:
        ident = id(value)
        active = cx.active
        if ident in active:
            raise _Slow
        cx.mutable += 1
        outermost = not cx.keyed
        ckey = _content_key(value, b"D") if outermost else None
        if ckey is not None:
            cached_text = _dict_text_cached(ckey)
            if cached_text is not None:
                return cached_text
        for k in value:
            if type(k) is not str or k.startswith("!"):
                raise _Slow
        active.add(ident)
        keys = sorted(value)
        cx.keyed = True
        frags = _frag_items(map(value.__getitem__, keys), cx)
        cx.keyed = not outermost
        active.discard(ident)
        text = _bracketed(
            "{", [_encode_str(k) + ":" + f for k, f in zip(keys, frags, strict=True)], "}"
        )
        if ckey is not None and len(text) <= _FRAGMENT_MAX_CHARS:
            _remember_dict_text(ckey, text)
        return text
    if vtype is list:
        ident = id(value)
        active = cx.active
        if ident in active:
            raise _Slow
        cx.mutable += 1
        outermost = not cx.keyed
        ckey = _content_key(value, b"L") if outermost else None
        if ckey is not None:
            cached_text = _dict_text_cached(ckey)
            if cached_text is not None:
                return cached_text
        active.add(ident)
        cx.keyed = True
        frags = _frag_items(value, cx)
        cx.keyed = not outermost
        active.discard(ident)
        text = _bracketed('{"!list":[', frags, "]}")
        if ckey is not None and len(text) <= _FRAGMENT_MAX_CHARS:
            _remember_dict_text(ckey, text)
        return text
    if vtype is timedelta:
        return f'{{"!td":[{value.days},{value.seconds},{value.microseconds}]}}'
    if cx.keyed:  # a record inside a dict or list: its own dicts are outermost again
        cx.keyed = False
        text = _frag_record(value, vtype, cx)
        cx.keyed = True
        return text
    return _frag_record(value, vtype, cx)


def _bracketed(opening: str, items: list[str], closing: str) -> str:
    """``opening + ",".join(items) + closing``, with the joined text copied once.

    Why: the two concatenations each copied the whole joined text again, at every
    level of a state (a window's tuple of records inside the analysis state inside
    the session state): ~12 % of a long-running session's flush encode (py-spy,
    docs/faust-notes.md "A generated field writer").  ``items`` is changed in place
    (its first and last entries take the brackets)."""
    if not items:
        return opening + closing
    items[0] = opening + items[0]
    items[-1] += closing
    return ",".join(items)


def _frag_items(values: Iterable[Any], cx: _Walk) -> list[str]:
    """``[_frag(v, cx) for v in values]``, writing the common scalars inline."""
    out: list[str] = []
    add = out.append
    for v in values:
        vtype = type(v)
        if vtype is str:
            add(_encode_str(v))
        elif vtype is bool:
            add("true" if v else "false")
        elif v is None:
            add("null")
        elif vtype is int:
            add(_int_repr(v))
        else:
            add(_frag(v, cx))
    return out


class _Walk:
    """State of one :func:`_frag` walk.

    ``active``: ids of the dicts, lists and dataclasses on the current descent
    path (a container reached again through itself is a cycle).  ``mutable``:
    how many dicts and lists were reached so far, so a caller can tell whether a
    subtree was deeply immutable; ``records`` likewise counts dataclass records.
    ``seen``: id -> (record, text) of the records with a dict or list inside
    already written in this walk (a record is often reachable twice, e.g. from
    the analysis window and from a detector's history; within one walk its dicts
    and lists cannot change).
    """

    __slots__ = ("active", "keyed", "memo", "mutable", "records", "seen")

    def __init__(self, memo: EncodeMemo | None = None) -> None:
        #: the session's memo, or None: the module's shared record cache
        self.memo = memo
        self.active: set[int] = set()
        self.mutable = 0
        self.records = 0
        self.seen: dict[int, tuple[object, str]] = {}
        #: inside a dict or list that was looked up in the dict-text cache: its
        #: content key covered the nested ones, which are not marshalled again
        self.keyed = False


def _frag_record(value: Any, vtype: type[Any], cx: _Walk) -> str:
    """:func:`_frag` of a frozen dataclass instance, through the cache."""
    ident = id(value)
    cx.records += 1
    memo = cx.memo
    if memo is not None:
        entry = memo._hit(ident, value)
    else:
        entry = _frag_new.get(ident)
        if entry is None or entry[0] is not value:
            entry = _frag_old.pop(ident, None)
            if entry is not None and entry[0] is value:
                _remember(ident, entry)
            else:
                entry = None
    if entry is not None:
        cached: Any = entry[1]
        if type(cached) is str:
            return cached  # deeply immutable: cannot contain a cycle
        seen = cx.seen.get(ident)
        if seen is not None and seen[0] is value:
            cx.mutable += 1  # the record holds a dict or list: tell the callers
            return seen[1]
        active = cx.active
        if ident in active:
            raise _Slow
        head, rest = cached
        active.add(ident)
        parts = [head]
        for name, after in rest:
            parts.append(_frag(getattr(value, name), cx))
            parts.append(after)
        active.discard(ident)
        text = "".join(parts)
        cx.seen[ident] = (value, text)
        return text

    active = cx.active
    if ident in active:
        raise _Slow
    layout = _FRAG_CLASS.get(vtype)
    if layout is None:
        layout = _frag_class(vtype)
        if layout is None:
            raise _Slow
        _FRAG_CLASS[vtype] = layout
    keys, closing, writer = layout
    active.add(ident)
    records = cx.records
    # fresh: indexes in parts of the fields that reached a dict or list
    parts, fresh = writer(value, cx)
    parts.append(closing)
    active.discard(ident)
    text = "".join(parts)
    if cx.records != records:  # a composite (see "Composites" above)
        if not fresh and len(text) <= _FRAGMENT_MAX_CHARS:
            # deeply immutable: at once
            if memo is None:
                _remember_composite(ident, (value, text))
            else:
                memo._now[ident] = (value, text)
            return text
        if memo is None:
            if _probation.pop(ident, None) is not value:
                _on_probation(ident, value)  # cached when seen again
                return text
        elif not memo._again(ident, value):
            return text
    keep: tuple[object, _Cached] | None = None
    if not fresh:
        if len(text) <= _FRAGMENT_MAX_CHARS:
            keep = (value, text)
    elif len(text) - sum([len(parts[i]) for i in fresh]) <= _FRAGMENT_MAX_CHARS:
        names = [keys[(i - 1) // 2][0] for i in fresh]
        ends = [*fresh[1:], len(parts)]
        rest = tuple(
            (name, "".join(parts[i + 1 : end]))
            for name, i, end in zip(names, fresh, ends, strict=True)
        )
        keep = (value, ("".join(parts[: fresh[0]]), rest))
        cx.seen[ident] = (value, text)
    if keep is not None:
        if memo is None:
            _remember(ident, keep)
        else:
            memo._now[ident] = keep
    return text


def _encode(value: object, root: str, memo: EncodeMemo | None = None) -> bytes:
    """Canonical bytes of ``value``: the fast writer, else the path-tracking walk.

    Any exception in the fast writer (not only :class:`_Slow`: also, say, the
    ValueError of an int with too many digits, or an AttributeError of an unset
    slot) hands over to the slow walk, which visits fields in declaration order
    like the encoder always did, so the same first problem raises the same error.
    """
    try:
        if memo is None:
            text = _frag(value, _Walk())
        else:
            memo._now = {}
            text = _frag(value, _Walk(memo))
            memo._last = memo._now  # exactly the records this encode wrote or read
            memo._now = {}
    except Exception:
        if memo is not None:
            memo._now = {}  # keep the last complete encode's records
        try:
            return _dumps(_to_plain(value, root, set()), root, value)
        except RecursionError as exc:
            # Both walks recurse once per level: a value nested deeper than the
            # stack allows (a 100,000-deep dict) is an error naming where it starts,
            # not a bare RecursionError.  (No fixed depth limit: it would refuse, in
            # the slow walk only, values the fast writer writes.)
            raise UnserializableError(
                root or "state",
                "nested too deep to encode (past Python's recursion limit of "
                f"{sys.getrecursionlimit()} frames); flatten or summarize the value "
                "before it enters the state",
            ) from exc
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _surrogate_error(value, root) from exc


def _dumps(plain: Any, root: str, original: object) -> bytes:
    text = json.dumps(
        plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _surrogate_error(original, root) from exc


def _surrogate_error(original: object, root: str) -> UnserializableError:
    # Rare path: find which string holds the lone surrogate, for the message.
    bad = _find_unencodable(original, root, set())
    return UnserializableError(bad or root, "string is not valid Unicode (lone surrogate)")


def _find_unencodable(value: object, path: str, seen: set[int]) -> str | None:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if id(value) in seen:
        return None
    seen.add(id(value))
    items: list[tuple[str, object]] = []
    if isinstance(value, (tuple, list)):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str):
                try:
                    k.encode("utf-8")
                except UnicodeEncodeError:
                    return f"{path}[{k!r}]"
                items.append((_child(path, k), v))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [(f"{path}.{f.name}", getattr(value, f.name)) for f in dataclasses.fields(value)]
    for p, v in items:
        found = _find_unencodable(v, p, seen)
        if found:
            return found
    return None


def to_canonical(value: object, root: str = "state", *, memo: EncodeMemo | None = None) -> bytes:
    """Canonical JSON bytes of ``value``; :class:`UnserializableError` names a bad path.

    ``memo``: as for :func:`encode_state` (the same bytes, fewer re-writes).
    """
    return _encode(value, root, memo)


# --------------------------------------------------------------------------- decode


def _resolve(tag: object, path: str) -> type[Any]:
    if not isinstance(tag, str):
        raise StateDecodeError(f"{path}: type tag must be a string, got {type(tag).__name__}")
    cached = _CLASS_CACHE.get(tag)
    if cached is not None:
        return cached
    _load_builtin_types()
    cls = _TYPES.get(tag)
    if cls is None:
        stable = LEGACY_TAGS.get(tag)
        if stable is not None:
            cls = _TYPES.get(stable)
    if cls is None:
        raise StateDecodeError(
            f"{path}: unknown type tag {tag!r} (state from another version, or a plugin "
            "whose state types are not registered?); rebuild the state by replaying the "
            "session's events"
        )
    _CLASS_CACHE[tag] = cls
    return cls


def _from_plain(value: Any, path: str) -> Any:
    vtype = type(value)
    if vtype is str or vtype is int or vtype is float or vtype is bool or value is None:
        return value
    if vtype is list:
        return tuple([_from_plain(v, f"{path}[{i}]") for i, v in enumerate(value)])
    if vtype is dict:
        if _TAG in value:
            if set(value) != {_TAG, _FIELDS} or not isinstance(value[_FIELDS], dict):
                raise StateDecodeError(f"{path}: malformed dataclass record (keys {sorted(value)})")
            cls = _resolve(value[_TAG], path)
            kwargs = {k: _from_plain(v, f"{path}.{k}") for k, v in value[_FIELDS].items()}
            try:
                return cls(**kwargs)
            except (TypeError, ValueError) as exc:
                raise StateDecodeError(f"{path}: cannot rebuild {value[_TAG]}: {exc}") from exc
        if _LIST in value:
            if len(value) != 1 or not isinstance(value[_LIST], list):
                raise StateDecodeError(f"{path}: malformed list record")
            return [_from_plain(v, f"{path}[{i}]") for i, v in enumerate(value[_LIST])]
        if _TD in value:
            td = value[_TD]
            if len(value) != 1 or not (
                isinstance(td, list) and len(td) == 3 and all(type(x) is int for x in td)
            ):
                raise StateDecodeError(f"{path}: malformed timedelta record")
            return timedelta(days=td[0], seconds=td[1], microseconds=td[2])
        if _DICT in value:
            if len(value) != 1 or not isinstance(value[_DICT], dict):
                raise StateDecodeError(f"{path}: malformed escaped dict record")
            value = value[_DICT]
        elif any(k.startswith("!") for k in value):
            raise StateDecodeError(f"{path}: unknown record marker in keys {sorted(value)}")
        return {k: _from_plain(v, _child(path, k)) for k, v in value.items()}
    return value


def _fast_from_plain(value: Any) -> Any:
    """:func:`_from_plain` without path strings; raises :class:`_Slow` on anything
    unusual so the path-tracking decoder produces the error."""
    vtype = type(value)
    if vtype is str or vtype is int or vtype is float or vtype is bool or value is None:
        return value
    if vtype is list:
        return tuple([_fast_from_plain(v) for v in value])
    if vtype is dict:
        if _TAG in value:
            cls = _CLASS_CACHE.get(value[_TAG]) if type(value[_TAG]) is str else None
            fields_in = value.get(_FIELDS)
            if cls is None or len(value) != 2 or type(fields_in) is not dict:
                raise _Slow
            try:
                return cls(**{k: _fast_from_plain(v) for k, v in fields_in.items()})
            except (TypeError, ValueError) as exc:
                raise _Slow from exc
        for k in value:
            if k.startswith("!"):
                raise _Slow
        return {k: _fast_from_plain(v) for k, v in value.items()}
    raise _Slow


def _decode_plain(plain: Any, root: str) -> Any:
    _load_builtin_types()
    try:
        return _fast_from_plain(plain)
    except _Slow:
        return _from_plain(plain, root)


def from_canonical(data: bytes, root: str = "state") -> Any:
    """Inverse of :func:`to_canonical` (raises :class:`StateDecodeError` on bad bytes)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise StateDecodeError(f"expected bytes, got {type(data).__name__}")
    try:
        plain = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StateDecodeError(f"state bytes are not canonical JSON: {exc}") from exc
    return _decode_plain(plain, root)


def encode_state(state: object, *, compress: bool = False, memo: EncodeMemo | None = None) -> bytes:
    """Versioned canonical bytes of a :class:`~streams.core.engine.SessionState`.

    ``compress=True`` deflates them behind a ``0x00`` marker byte: the form the
    worker stores in its engine table and changelog, where a state (mostly its
    trajectory window) is written once per commit per active session and the
    JSON would be many times larger.  The uncompressed form is the canonical one that
    replays and tests compare; :func:`decode_state` reads both.  Compression is
    deterministic for a given compressor build (:data:`deflate`: ISA-L, else
    zlib), not across builds, so compare states by their uncompressed bytes.

    ``memo`` (one :class:`EncodeMemo` per session, kept with the session) makes
    the next encode of the same session reuse the texts of every record that did
    not change, whatever else was encoded in between; the bytes are the same with
    or without it.
    """
    session_state = _session_state_type()
    if not isinstance(state, session_state):
        raise UnserializableError("state", f"expected SessionState, got {type(state).__name__}")
    envelope = {"format": STATE_FORMAT, "version": STATE_VERSION, "state": state}
    data = _encode(envelope, "", memo)
    if compress:
        return _DEFLATED + deflate(data, _DEFLATE_LEVEL)
    return data


def decode_state(data: bytes) -> Any:
    """Rebuild the :class:`SessionState` that :func:`encode_state` wrote.

    Reads the canonical JSON and the compressed form (``encode_state(...,
    compress=True)``).  Raises :class:`StateDecodeError` for garbage, a corrupt
    compressed value, another format, an unknown version, or a payload that is
    not a SessionState.
    """
    session_state = _session_state_type()
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise StateDecodeError(f"expected bytes, got {type(data).__name__}")
    if bytes(data[:1]) == _DEFLATED:
        try:
            data = zlib.decompress(data[1:])
        except zlib.error as exc:
            raise StateDecodeError(
                f"compressed state bytes are corrupt ({exc}); not written by encode_state"
            ) from exc
    try:
        plain = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StateDecodeError(
            f"state bytes are not canonical JSON ({exc}); not written by encode_state"
        ) from exc
    if not isinstance(plain, dict) or plain.get("format") != STATE_FORMAT:
        raise StateDecodeError(f"not a session state: expected format {STATE_FORMAT!r}")
    version = plain.get("version")
    if version != STATE_VERSION:
        raise StateDecodeError(
            f"unknown state version {version!r} (this build reads version {STATE_VERSION}); "
            "rebuild the state by replaying the session's events"
        )
    if set(plain) != {"format", "version", "state"}:
        raise StateDecodeError(f"unexpected envelope keys {sorted(plain)}")
    state = _decode_plain(plain["state"], "state")
    if not isinstance(state, session_state):
        raise StateDecodeError(f"state payload is a {type(state).__name__}, not a SessionState")
    return state


__all__ = [
    "LEGACY_TAGS",
    "STATE_FORMAT",
    "STATE_VERSION",
    "EncodeMemo",
    "decode_state",
    "deflate",
    "encode_state",
    "from_canonical",
    "register_state_type",
    "state_tag",
    "state_type",
    "state_types",
    "to_canonical",
]
