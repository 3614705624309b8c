"""Issue 11: persistence/escalation of assessments and the monologue,
context-loop and alternating-cycle detectors, from realistic event sequences."""

from __future__ import annotations

import re

from streams.core.config import EngineConfig
from streams.core.engine import SessionEngine
from streams.core.events import TraceEvent
from streams.core.statecodec import decode_state, encode_state

T0 = 1_700_000_000_000


class Session:
    """Builds a session's events the way the importers emit them."""

    def __init__(self, sid: str = "s") -> None:
        self.sid = sid
        self.events: list[TraceEvent] = [
            TraceEvent("session_start", sid, 0, T0, metadata={"task": "fix the parser"})
        ]
        self.t = T0

    def _add(self, etype: str, **kw: object) -> None:
        self.t += 500
        self.events.append(TraceEvent(etype, self.sid, len(self.events), self.t, **kw))  # type: ignore[arg-type]

    def call(self, cmd: str, output: str = "ok", error: bool = False, thought: str = "") -> None:
        n = len(self.events)
        self._add("model_step", text=thought or f"thinking {n}")
        self._add("tool_call", call_id=f"c{n}", tool_name="bash", input={"command": cmd})
        self._add("tool_result", call_id=f"c{n}", tool_name="bash", output=output, is_error=error)

    def say(self, text: str) -> None:
        self._add("message", text=text, metadata={"role": "assistant"})

    def agent_error(self, text: str) -> None:
        self._add("error", text=text, error_message=text)


def run(events: list[TraceEvent], cfg: EngineConfig | None = None) -> list[tuple[int, str, str]]:
    eng = SessionEngine.create(events[0].session_id, cfg)
    out = []
    for ev in events:
        cur = eng.on_event(ev).assessment
        if cur is not None:
            out.append((cur.call_index, cur.severity, cur.render()))
    return out


def patterns_fired(events: list[TraceEvent]) -> list[str]:
    eng = SessionEngine.create(events[0].session_id)
    return [d.pattern.pattern_type for ev in events for d in eng.on_event(ev).patterns]


# ------------------------------------------------------------ persistence


def loop_session(n: int = 40) -> Session:
    s = Session()
    for i in range(3):
        s.call(f"open src/f{i}.java", f"file {i}")
    for _ in range(n):
        s.call("cd fastxml/ && ls -F", "No such file or directory", error=True)
    return s


def test_assessment_is_refreshed_while_the_loop_lasts_and_never_goes_stale() -> None:
    s = loop_session(40)
    eng = SessionEngine.create("s")
    calls = 0
    stale_at: list[int] = []
    for ev in s.events:
        eng.on_event(ev)
        calls += ev.type == "tool_call"
        if ev.type == "tool_result" and calls >= 6:  # from the loop's 3rd repeat
            cur = eng.current
            assert cur is not None
            if cur.is_stale(calls, 20) or cur.severity == "info":
                stale_at.append(calls)
    assert stale_at == []
    # and the last one says how long, since which call it was reported
    assert eng.current is not None
    text = eng.current.render()
    assert "Still unresolved" in text and "first reported (after call #" in text
    assert re.search(r"It has lasted \d\d calls \(since call #\d\)", text)


def test_caution_escalates_to_warning_when_the_loop_continues_after_the_report() -> None:
    # a 2-action exact cycle starts at caution (doom loop 0.65), then goes on
    s = Session()
    for _ in range(8):
        s.call("mvn compile", "BUILD FAILURE", error=False)
        s.call("cat pom.xml", "<project/>")
    out = run(s.events)
    sevs = [sev for _, sev, _ in out]
    assert sevs[0] == "caution"
    assert "warning" in sevs[1:]
    first_warning = next(text for _, sev, text in out if sev == "warning")
    assert "Raised to warning: it continued after you were told." in first_warning


def test_when_the_loop_stops_the_assessment_says_so() -> None:
    s = Session()
    for _ in range(4):
        s.call("cd fastxml/ && ls -F", "build.xml src")
    for i in range(4):
        s.call(f"open src/Main{i}.java", f"class Main{i}")
    out = run(s.events)
    assert out[0][1] == "warning"
    # the loop's warning lapses: the next assessment no longer names the doom loop
    assert out[-1][1] == "info"
    assert "doom_loop" not in out[-1][2]


def test_persistence_state_survives_snapshot_and_codec() -> None:
    s = loop_session(30)
    whole = run(s.events)
    eng = SessionEngine.create("s")
    cut = len(s.events) // 2
    first = [eng.on_event(ev).assessment for ev in s.events[:cut]]
    resumed = SessionEngine.build(EngineConfig(), decode_state(encode_state(eng.snapshot())))
    second = [resumed.on_event(ev).assessment for ev in s.events[cut:]]
    got = [(c.call_index, c.severity, c.render()) for c in (*first, *second) if c is not None]
    assert got == whole


# -------------------------------------------------------------- monologue


def test_monologue_same_message_three_times_without_a_tool_call() -> None:
    s = Session()
    s.call("ls", "src tests")
    for i in range(3):
        s.say(f"I have fixed the issue in parser.py (attempt {i}). The task is complete.")
    assert "monologue" in patterns_fired(s.events)
    out = run(s.events)
    assert out and out[-1][1] == "caution"
    assert "the same message 3 times without a tool call" in out[-1][2]


def test_monologue_grows_to_warning_and_a_tool_call_ends_it() -> None:
    s = Session()
    for _ in range(5):
        s.say("Let me check the file.")
    out = run(s.events)
    assert [sev for _, sev, _ in out] == ["caution", "warning"]
    s.call("cat parser.py", "def parse(): ...")
    eng = SessionEngine.create("s")
    for ev in s.events:
        eng.on_event(ev)
    assert "monologue" not in eng.analysis().patterns()


def test_different_messages_are_no_monologue() -> None:
    s = Session()
    s.say("Let me look at the parser first.")
    s.say("The bug is in the tokenizer: it drops the last token.")
    s.say("I will write a test that reproduces it.")
    assert "monologue" not in patterns_fired(s.events)


def test_interleaved_tool_calls_reset_the_monologue() -> None:
    s = Session()
    for i in range(4):
        s.say("Running the tests again.")
        s.call("pytest", f"{i} passed")
    assert "monologue" not in patterns_fired(s.events)


# ----------------------------------------------------------- context loop


def test_repeated_context_window_errors_are_a_context_loop() -> None:
    s = Session()
    s.call("cat big.log", "x" * 100)
    for _ in range(3):
        s.agent_error(
            "litellm.ContextWindowExceededError: This model's maximum context length is "
            "128000 tokens. However, your messages resulted in 131072 tokens."
        )
    assert "context_loop" in patterns_fired(s.events)
    out = run(s.events)
    assert out[-1][1] == "caution" and "context-window errors or condensations" in out[-1][2]


def test_condensations_with_no_progress_between_and_progress_resets() -> None:
    s = Session()
    for _ in range(3):
        s._add("tool_call", call_id=f"k{len(s.events)}", tool_name="condensation", input={})
        s._add("tool_result", call_id=f"k{len(s.events) - 1}", tool_name="condensation")
    assert "context_loop" in patterns_fired(s.events)
    t = Session()
    for i in range(3):
        t._add("tool_call", call_id=f"k{i}", tool_name="condensation", input={})
        t._add("tool_result", call_id=f"k{i}", tool_name="condensation")
        t.call(f"edit src/f{i}.py", "edited")  # progress between condensations
    assert "context_loop" not in patterns_fired(t.events)


def test_other_agent_errors_are_no_context_loop() -> None:
    s = Session()
    for _ in range(4):
        s.agent_error("Invalid tool call: missing argument 'path'")
    assert "context_loop" not in patterns_fired(s.events)


# ------------------------------------------------------- alternating cycle


def test_alternating_edit_and_test_with_identical_results() -> None:
    s = Session()
    for i in range(4):
        s.call(f"edit src/Parser.java {10 + i}:{12 + i}", "File updated.")
        s.call("mvn test -q", "Tests run: 12, Failures: 1")
    fired = patterns_fired(s.events)
    assert "alternating_cycle" in fired
    out = run(s.events)
    assert any("Alternating" in text for _, _, text in out)
    assert out[-1][1] in ("caution", "warning")


def test_alternation_with_changing_results_stays_below_caution() -> None:
    s = Session()
    for i in range(4):
        s.call(f"edit src/Parser.java {10 + i}:{12 + i}", f"File updated ({i}).")
        s.call("mvn test -q", f"Tests run: 12, Failures: {4 - i}")
    eng = SessionEngine.create("s")
    for ev in s.events:
        eng.on_event(ev)
    p = eng.analysis().patterns().get("alternating_cycle")
    assert p is not None and p.confidence < 0.6


def test_exact_alternation_is_left_to_the_doom_loop() -> None:
    s = Session()
    for _ in range(4):
        s.call("mvn compile", "BUILD FAILURE")
        s.call("cat pom.xml", "<project/>")
    fired = patterns_fired(s.events)
    assert "doom_loop" in fired and "alternating_cycle" not in fired


def test_new_detectors_are_configurable() -> None:
    import pytest

    from streams.core.errors import ConfigError

    cfg = EngineConfig.from_mapping({"analysis": {"detectors": ["monologue", "doom_loop"]}})
    names = [d.name for d in cfg.analysis.detectors]
    assert names == ["monologue", "doom_loop"]
    from streams.core.detectors import MonologueDetector

    with pytest.raises(ConfigError, match=r"monologue\.threshold"):
        MonologueDetector(threshold=1).build(cfg.analysis)
