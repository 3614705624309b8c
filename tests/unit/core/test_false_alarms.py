"""Issue 11, false alarms: what the agent hears on runs that resolved their task.

Each sequence below is shortened from a resolved run of ``../shared/trajdata``
that got a caution before the change (heuristic patterns needed only the
generic 0.6 caution confidence; context degradation counted one ``rm`` of a
scratch file once per later write).  The detectors still *see* the pattern
(it is reported at ``info`` when the observer speaks for another reason), but
the agent is not interrupted.  The loop sequences check that loop-like
patterns keep their caution at 0.6 and so their recall and delay.
"""

from __future__ import annotations

import json

import pytest

from streams.core.assessment import severity_rank
from streams.core.config import EngineConfig, ObserverSpec
from streams.core.engine import SessionEngine
from streams.core.errors import ConfigError
from streams.core.events import TraceEvent
from streams.core.observers import ObserverTrigger
from streams.core.pattern_observer import ESCALATING_PATTERNS, PatternObserver

T0 = 1_700_000_000_000

SPHINX_ERROR = (
    "reading sources... [100%] index\n\nException occurred:\n"
    '  File "/testbed/sphinx/ext/autodoc/__init__.py", line 80, in members_option\n'
    "    return [x.strip() for x in arg.split(',') if x.strip()]\n"
    "AttributeError: 'list' object has no attribute 'split'\n"
    "The full traceback has been saved in /tmp/sphinx-err-{}.log\n"
)


class Session:
    """A session's events the way the importers emit them (call, result, model step)."""

    def __init__(self, sid: str = "s") -> None:
        self.sid = sid
        self.events: list[TraceEvent] = [TraceEvent("session_start", sid, 0, T0)]
        self.t = T0

    def _add(self, etype: str, **kw: object) -> None:
        self.t += 1000
        self.events.append(TraceEvent(etype, self.sid, len(self.events), self.t, **kw))  # type: ignore[arg-type]

    def call(
        self,
        params: dict[str, object],
        *,
        tool: str = "bash",
        output: str = "ok",
        error: str | None = None,
    ) -> None:
        cid = f"c{len(self.events)}"
        self._add("tool_call", call_id=cid, tool_name=tool, input=params)
        self._add(
            "tool_result",
            call_id=cid,
            tool_name=tool,
            output=output,
            is_error=error is not None,
            error_message=error,
        )
        self._add("model_step", text="next", input_tokens=1000, output_tokens=50)


def flags(events: list[TraceEvent], cfg: EngineConfig | None = None) -> list[int]:
    """Tool calls after which the agent's context holds a fresh caution or warning."""
    eng = SessionEngine.create(events[0].session_id, cfg)
    calls = 0
    out: list[int] = []
    for ev in events:
        eng.on_event(ev)
        calls += ev.type == "tool_call"
        cur = eng.current
        if (
            ev.type == "tool_result"
            and cur is not None
            and severity_rank(cur.severity) >= severity_rank("caution")
            and not cur.is_stale(calls, 20)
        ):
            out.append(calls)
    return out


def patterns_seen(events: list[TraceEvent]) -> set[str]:
    eng = SessionEngine.create(events[0].session_id)
    seen: set[str] = set()
    for ev in events:
        eng.on_event(ev)
        seen.update(p.pattern_type for p in eng.analysis().patterns().values())
    return seen


def enumerate_reservations() -> Session:
    """tau-bench airline task16 trial3 (reward 1.0): the agent looks up each of
    the user's ten reservations, one id after the other, then acts."""
    s = Session("tau-task16")
    s.call({"user_id": "ethan_martin_2396"}, tool="get_user_details", output='{"name": "Ethan"}')
    for rid in (
        "GXWCPN",
        "DQST39",
        "BSSSM3",
        "RVQC22",
        "P824NH",
        "3HE6QG",
        "NTIRXF",
        "HG8X9P",
        "M61CQM",
    ):
        s.call(
            {"reservation_id": rid},
            tool="get_reservation_details",
            output=json.dumps({"reservation_id": rid, "user_id": "ethan_martin_2396"}),
        )
    s.call(
        {"user_id": "ethan_martin_2396", "amount": 150},
        tool="send_certificate",
        output="Certificate certificate_3221322 added to user ethan_martin_2396 with amount 150.",
    )
    return s


def reproduce_crash() -> Session:
    """mini-swe-agent sphinx-doc__sphinx-8035 (resolved): while reproducing the
    issue's own crash the agent runs three sphinx builds in a row that fail with
    the traceback it is about to fix, then reads the config and moves on."""
    s = Session("sphinx-8035")
    s.call({"command": "nl -ba sphinx/ext/autodoc/__init__.py | sed -n '650,675p'"})
    s.call(
        {
            "command": "cat <<'EOF' > reproduction/conf.py\n...\nEOF\ncd reproduction\n"
            "rm -rf _build\nsphinx-build -b text . _build/text\ncat _build/text/index.txt"
        },
        output=SPHINX_ERROR.format("xzxeba81") + "cat: _build/text/index.txt: No such file",
        error="returncode 1",
    )
    s.call(
        {
            "command": "cat <<'EOF' > reproduction/conf.py\n...\nEOF\ncd reproduction\n"
            "rm -rf _build\nsphinx-build -b text . _build/text"
        },
        output=SPHINX_ERROR.format("mk2qimrn"),
        error="returncode 2",
    )
    s.call(
        {
            "command": "cd reproduction && rm -rf _build && sphinx-build -b text . _build/text "
            "&& cat _build/text/index.txt"
        },
        output=SPHINX_ERROR.format("wc2xiql8"),
        error="returncode 2",
    )
    s.call({"command": "cat reproduction/conf.py"}, output="import os\nimport sys\n")
    return s


def rebuild_patch_script() -> Session:
    """mini-swe-agent django__django-14349 (resolved): the agent writes a patch
    script with ``echo``, removes it once, and writes it again line by line."""
    s = Session("django-14349")
    s.call({"command": 'grep -n "if value:" django/core/validators.py'}, output="114: if value:")
    s.call({"command": "echo 'lines = open(\"django/core/validators.py\").readlines()' > fix.py"})
    s.call({"command": "ls"}, output="AUTHORS\ndjango\nfix.py\n")
    s.call({"command": "rm fix.py"})
    s.call({"command": "echo \"print('hello')\" | cat > fix.py"})
    s.call({"command": 'echo "simple" >> fix.py'})
    s.call({"command": "echo 'lines = open(\"django/core/validators.py\").readlines()' > fix.py"})
    s.call({"command": "echo -n 'lines.insert(114, \"' >> fix.py"})
    s.call({"command": "echo '\")' >> fix.py"})
    s.call({"command": "python3 fix.py"})
    s.call({"command": "sed -n '113,118p' django/core/validators.py"}, output="if value:")
    return s


def test_enumerating_records_is_not_a_caution() -> None:
    s = enumerate_reservations()
    assert "thrashing" in patterns_seen(s.events)  # the detector still sees it ...
    assert flags(s.events) == []  # ... but the agent is not interrupted


def test_reproducing_the_crash_under_repair_is_not_a_caution() -> None:
    s = reproduce_crash()
    assert "error_cascade" in patterns_seen(s.events)
    assert flags(s.events) == []


def test_rewriting_one_scratch_file_is_not_a_caution() -> None:
    assert flags(rebuild_patch_script().events) == []


def test_the_same_failing_call_again_is_still_a_caution_at_the_third_failure() -> None:
    """tau-bench airline task13 trial2: the agent resubmits a reservation update
    that keeps failing on the same unavailable flight.  Repeating the failing
    call is loop-like evidence: caution at the third failure, as before."""
    s = Session("tau-task13")
    update = {
        "reservation_id": "XEWRD9",
        "cabin": "economy",
        "flights": [{"flight_number": "HAT030", "date": "2024-05-13"}],
    }
    err = "Error: flight HAT030 not available on date 2024-05-13"
    s.call({"reservation_id": "XEWRD9"}, tool="get_reservation_details", output="{}")
    s.call(update, tool="update_reservation_flights", output=err, error=err)
    s.call({"origin": "LAX", "destination": "LAS"}, tool="search_direct_flight", output="[]")
    s.call(update, tool="update_reservation_flights", output=err, error=err)
    s.call({"origin": "LAX", "destination": "ORD"}, tool="search_onestop_flight", output="[]")
    s.call(update, tool="update_reservation_flights", output=err, error=err)
    assert flags(s.events) == [6]


def test_a_loop_is_still_flagged_by_its_third_repeat() -> None:
    """SWE-agent's `cd fastxml/ && ls -F` loop: caution by the 3rd identical call
    and a fresh flag on every call after it while the loop lasts."""
    s = Session("loop")
    s.call({"command": "find_file PackageVersion.java"}, output="Found 1 matches")
    for _ in range(12):
        s.call({"command": "cd fastxml/ && ls -F"}, output="src/\npom.xml\n")
    assert flags(s.events) == list(range(4, 14))


@pytest.mark.parametrize("ptype", sorted(ESCALATING_PATTERNS))
def test_loop_like_patterns_caution_at_the_generic_confidence(ptype: str) -> None:
    class P:
        pattern_type = ptype
        confidence = 0.6
        occurrences = 3
        count = 3
        evidence = ()
        call_index = 1

    assert PatternObserver().pattern_severity(P()) == "caution"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "ptype",
    [
        "context_degradation",
        "error_cascade",
        "thrashing",
        "progress_stall",
        "drift",
        "tool_avoidance",
        "file_churn",
    ],
)
def test_heuristic_patterns_need_the_heuristic_confidence(ptype: str) -> None:
    class P:
        pattern_type = ptype
        confidence = 0.65
        occurrences = 1
        evidence = ()
        call_index = 1

    obs = PatternObserver()
    assert obs.pattern_severity(P()) == "info"  # type: ignore[arg-type]
    lenient = PatternObserver(heuristic_caution_confidence=0.6)
    assert lenient.pattern_severity(P()) == "caution"  # type: ignore[arg-type]
    P.confidence = 0.7
    assert obs.pattern_severity(P()) == "caution"  # type: ignore[arg-type]


def test_heuristic_threshold_is_configurable_and_validated() -> None:
    with pytest.raises(ConfigError, match=r"thresholds\.heuristic_caution_confidence"):
        PatternObserver(heuristic_caution_confidence=1.5)
    # the old behaviour, opted into by configuration: the tau-bench enumeration cautions again
    old = EngineConfig(
        observers=(
            ObserverSpec(
                "pattern",
                ObserverTrigger(on_every_call=True),
                (("heuristic_caution_confidence", 0.6),),
            ),
        )
    )
    assert flags(enumerate_reservations().events, old) != []
