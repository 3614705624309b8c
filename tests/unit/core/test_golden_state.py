"""Golden state bytes written by ef662b0 (module-path type tags) still decode,
resume byte-identically, and re-encode with the stable tags.

The fixtures and how they were made: ``tests/fixtures/state/make_golden.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from streams.core import statecodec as codec
from streams.core.config import EngineConfig
from streams.core.engine import EngineOutput, SessionEngine, SessionState
from streams.core.events import TraceEvent
from streams.core.jsonl import event_from_json
from streams.core.statecodec import decode_state, encode_state
from streams.worker.state import SessionCounters

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "state"
EXPECTED = GOLDEN / "expected"
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text())
CUTS = [(case, cut) for case, spec in sorted(MANIFEST["cases"].items()) for cut in spec["cuts"]]


def _events(case: str) -> list[TraceEvent]:
    lines = (GOLDEN / MANIFEST["cases"][case]["events"]).read_text().splitlines()
    return [event_from_json(json.loads(line)) for line in lines]


def _plain(value: object) -> object:
    if isinstance(value, timedelta):
        return ["timedelta", value.days, value.seconds, value.microseconds]
    raise TypeError(f"cannot render {type(value).__name__}")


def _render(out: EngineOutput) -> str:
    """Same rendering as make_golden.render_output (tag-free, field names only)."""
    return json.dumps(
        dataclasses.asdict(out),
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
        default=_plain,
    )


def _tags(node: Any) -> set[str]:
    out: set[str] = set()
    if isinstance(node, dict):
        if "!t" in node:
            out.add(node["!t"])
        for v in node.values():
            out |= _tags(v)
    elif isinstance(node, list):
        for v in node:
            out |= _tags(v)
    return out


def _retag(node: Any, table: dict[str, str]) -> Any:
    """``node`` with every ``!t`` value replaced through ``table``."""
    if isinstance(node, dict):
        return {k: (table[v] if k == "!t" else _retag(v, table)) for k, v in node.items()}
    if isinstance(node, list):
        return [_retag(v, table) for v in node]
    return node


def test_the_golden_files_hold_old_module_path_tags() -> None:
    """Guard against someone regenerating the fixtures with a newer codec."""
    assert MANIFEST["source_commit"] == "ef662b0"
    for case, cut in CUTS:
        old = json.loads((GOLDEN / f"{case}.{cut}.state.json").read_bytes())
        tags = _tags(old)
        assert tags and all(t.startswith("streams.core.") and ":" in t for t in tags)
        assert (GOLDEN / f"{case}.{cut}.state.z").read_bytes()[:1] == b"\x00"


@pytest.mark.parametrize(("case", "cut"), CUTS, ids=[f"{c}@{n}" for c, n in CUTS])
def test_golden_state_decodes_and_reencodes_with_stable_tags(case: str, cut: int) -> None:
    plain = (GOLDEN / f"{case}.{cut}.state.json").read_bytes()
    packed = (GOLDEN / f"{case}.{cut}.state.z").read_bytes()
    state = decode_state(plain)
    assert isinstance(state, SessionState)
    assert decode_state(packed) == state
    again = encode_state(state)
    # exactly the tags changed, each to its stable tag; nothing else moved
    assert json.loads(again) == _retag(json.loads(plain), dict(codec.LEGACY_TAGS))
    new_tags = _tags(json.loads(again))
    assert new_tags and not any(":" in t or t.startswith("streams.") for t in new_tags)
    assert encode_state(decode_state(again)) == again
    assert encode_state(decode_state(encode_state(state, compress=True))) == again


def _resume(case: str, cut: int, form: str) -> tuple[list[str], bytes]:
    """Resume from the stored ``form`` and run the rest of the case's events."""
    events = _events(case)
    state = decode_state((GOLDEN / f"{case}.{cut}.{form}").read_bytes())
    resumed = SessionEngine.build(EngineConfig(), state)
    got = [_render(resumed.on_event(ev)) for ev in events[cut:]]
    return got, encode_state(resumed.snapshot())


@pytest.mark.parametrize(("case", "cut"), CUTS, ids=[f"{c}@{n}" for c, n in CUTS])
def test_resuming_from_golden_state_is_byte_identical(case: str, cut: int) -> None:
    """Both stored forms, resumed twice each, give the same outputs and final state
    (a replay of an old state is byte-identical), and that is the continuation
    pinned in ``expected/`` (``make_expected.py``: regenerated only with an
    intended behaviour change, so an unintended one fails here)."""
    runs = [_resume(case, cut, form) for form in ("state.json", "state.z") for _ in range(2)]
    assert all(run == runs[0] for run in runs)
    got, final = runs[0]
    pinned = (EXPECTED / f"{case}.{cut}.resume.jsonl").read_text().splitlines()
    assert got == pinned
    digest = (EXPECTED / f"{case}.{cut}.final.sha256").read_text().strip()
    assert hashlib.sha256(final).hexdigest() == digest


@pytest.mark.parametrize(("case", "cut"), CUTS, ids=[f"{c}@{n}" for c, n in CUTS])
def test_resuming_where_the_rules_did_not_change_equals_a_fresh_run(case: str, cut: int) -> None:
    """Where today's engine reaches the very state ef662b0 stored at the cut, going
    on from the stored bytes is the same run as going on in memory.  (Where a rule
    changed since, e.g. a detector's counting, the old state differs from the one
    today's rules reach, and only the pinned continuation above applies.)"""
    events = _events(case)
    fresh = SessionEngine.create(events[0].session_id)
    for ev in events[:cut]:
        fresh.on_event(ev)
    stored = encode_state(decode_state((GOLDEN / f"{case}.{cut}.state.json").read_bytes()))
    if encode_state(fresh.snapshot()) != stored:
        pytest.skip(f"{case}@{cut}: the rules before this cut changed since ef662b0")
    fresh_out = [_render(fresh.on_event(ev)) for ev in events[cut:]]
    got, final = _resume(case, cut, "state.z")
    assert got == fresh_out
    assert final == encode_state(fresh.snapshot())


@pytest.mark.parametrize(("case", "cut"), CUTS, ids=[f"{c}@{n}" for c, n in CUTS])
def test_golden_session_counters_decode_and_match_the_events(case: str, cut: int) -> None:
    """The stored counters decode, re-encode to the same bytes, and are the events
    up to the cut with the pattern tallies of what ef662b0's engine fired."""
    data = (GOLDEN / f"{case}.{cut}.counters.json").read_bytes()
    stored = SessionCounters.decode(data)
    events = _events(case)
    golden_outputs = (GOLDEN / MANIFEST["cases"][case]["outputs"]).read_text().splitlines()
    assert len(golden_outputs) == len(events)
    counters = SessionCounters(session_id=events[0].session_id)
    for ev, line in zip(events[:cut], golden_outputs[:cut], strict=True):
        fired = tuple(p["pattern"]["pattern_type"] for p in json.loads(line)["patterns"])
        nxt = counters.apply(ev)
        if nxt is not None:
            counters = nxt.with_patterns(fired)
    assert stored == counters
    assert stored.encode() == data


def test_golden_state_decodes_after_its_modules_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module move (old path gone, class's ``__module__`` changed) changes
    neither decoding of stored states nor the bytes written."""
    from streams.core.detectors import repeated_error

    plain = (GOLDEN / "loops.96.state.json").read_bytes()
    want = encode_state(decode_state(plain))
    old_path = "streams.core.detectors.repeated_error"
    monkeypatch.setitem(sys.modules, old_path, None)  # import of the old path fails
    monkeypatch.setattr(repeated_error.RepeatedErrorSnapshot, "__module__", "streams.core.moved")
    # forget everything resolved so far; keep only what registration provides
    stable = dict(codec.state_types())
    monkeypatch.setattr(codec, "_CLASS_CACHE", stable)
    monkeypatch.setattr(codec, "_CLASS_INFO", {})
    monkeypatch.setattr(codec, "_FRAG_CLASS", {})
    codec.clear_fragment_cache()
    state = decode_state(plain)
    assert encode_state(state) == want
