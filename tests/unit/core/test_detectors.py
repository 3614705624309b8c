"""Every built-in detector (and the FileChurn plugin): positive and negative cases."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from streams.core.analysis import TrajectoryAnalysisConfig, TrajectoryBuilder, load_detector
from streams.core.detectors import (
    DEFAULT_DETECTORS,
    ContextDegradationDetector,
    DoomLoopDetector,
    DriftDetector,
    ErrorCascadeDetector,
    FileChurnDetector,
    ProgressStallDetector,
    RepeatedErrorDetector,
    ThrashingDetector,
    ToolAvoidanceDetector,
)
from streams.core.detectors.drift import task_paths
from streams.core.errors import ConfigError
from streams.core.events import TraceEvent
from streams.core.patterns import (
    ContextDegradation,
    DoomLoop,
    Drift,
    ErrorCascade,
    FileChurn,
    ProgressStall,
    RepeatedError,
    Thrashing,
    ToolAvoidance,
    TrajectoryPattern,
)


@dataclass
class Run:
    """Feeds tool calls (call + result events) into one builder."""

    detectors: tuple[Any, ...] = DEFAULT_DETECTORS
    task: str | None = None
    window_size: int = 50
    builder: TrajectoryBuilder = field(init=False)
    seq: int = 0
    fired: list[TrajectoryPattern] = field(default_factory=list)

    def __post_init__(self) -> None:
        cfg = TrajectoryAnalysisConfig(detectors=self.detectors, window_size=self.window_size)
        self.builder = TrajectoryBuilder.from_config(cfg)
        if self.task is not None:
            self.event("session_start", metadata={"task": self.task})

    def event(self, etype: str, **kw: Any) -> tuple[TrajectoryPattern, ...]:
        self.seq += 1
        ev = TraceEvent(
            type=etype,  # type: ignore[arg-type]
            session_id="s",
            seq=self.seq,
            timestamp_ms=1000 * self.seq,
            **kw,
        )
        out = self.builder.on_event(ev)
        self.fired.extend(out)
        return out

    def call(
        self,
        command: str,
        *,
        tool: str = "bash",
        ok: bool = True,
        error: str | None = None,
        output: str = "ok",
    ) -> tuple[TrajectoryPattern, ...]:
        cid = f"c{self.seq}"
        params: Any = {"command": command} if tool == "bash" else command
        self.event("tool_call", tool_name=tool, call_id=cid, input=params)
        return self.event(
            "tool_result",
            tool_name=tool,
            call_id=cid,
            output=output,
            is_error=not ok,
            error_message=error,
        )

    def active(self) -> dict[str, TrajectoryPattern]:
        return self.builder.build().patterns()

    def fired_types(self) -> list[str]:
        return [p.pattern_type for p in self.fired]


HEALTHY = [
    "ls",
    "grep -rn parse src",
    "cat src/parser.py",
    "sed -n '1,80p' src/util.py",
    "python -m pytest tests/test_parser.py",
    "sed -i 's/x/y/' src/parser.py",
    "git diff",
    "python repro.py",
]


def only(det: Any) -> tuple[Any, ...]:
    return (det,)


class TestDoomLoop:
    def test_exact_single_action_fires_at_threshold_with_high_confidence(self) -> None:
        r = Run(only(DoomLoopDetector()))
        assert r.call("python repro.py", ok=False, error="ImportError: foo") == ()
        assert r.call("python repro.py", ok=False, error="ImportError: foo") == ()
        out = r.call("python repro.py", ok=False, error="ImportError: foo")
        assert len(out) == 1
        loop = out[0]
        assert isinstance(loop, DoomLoop)
        assert loop.cycle_length == 1 and loop.repetitions == 3
        assert loop.confidence >= 0.8
        assert loop.call_index == 3 and loop.occurrences == 1
        assert any(e.startswith("#3 bash(python repro.py") for e in loop.evidence)
        # continuing the same loop does not re-fire, but the details update
        assert r.call("python repro.py", ok=False, error="ImportError: foo") == ()
        p = r.active()["doom_loop"]
        assert isinstance(p, DoomLoop)
        assert p.repetitions == 4 and p.occurrences == 1 and p.call_index == 3
        assert p.confidence > loop.confidence

    def test_same_tool_different_args_is_not_a_loop(self) -> None:
        r = Run(only(DoomLoopDetector()))
        for cmd in HEALTHY:
            r.call(cmd)
        assert r.fired_types() == []

    def test_exact_two_cycle(self) -> None:
        r = Run(only(DoomLoopDetector()))
        for _ in range(3):
            r.call("sed -i 's/a/b/' x.py")
            r.call("python x.py", ok=False, error="SyntaxError: bad")
        assert r.fired_types() == ["doom_loop"]
        p = r.fired[0]
        assert isinstance(p, DoomLoop) and p.cycle_length == 2 and p.exact
        assert p.repetitions == 3
        assert 0.5 <= p.confidence <= 0.95

    def test_two_repeats_of_a_cycle_do_not_fire(self) -> None:
        r = Run(only(DoomLoopDetector()))
        for _ in range(2):
            r.call("sed -i 's/a/b/' x.py")
            r.call("python x.py")
        r.call("ls")
        assert r.fired_types() == []

    def test_fuzzy_cycle_with_argument_noise_has_low_confidence(self) -> None:
        r = Run(only(DoomLoopDetector()))
        for i in range(3):
            r.call(f"sed -n '{10 * i},{10 * i + 40}p' src/a.py")
            r.call(f"python run.py --seed {i}")
        assert r.fired_types() == ["doom_loop"]
        p = r.fired[0]
        assert isinstance(p, DoomLoop) and not p.exact
        assert p.confidence <= 0.6

    def test_loop_stops_then_restarts_counts_occurrences(self) -> None:
        r = Run(only(DoomLoopDetector()))
        for _ in range(3):
            r.call("make")
        r.call("ls src")
        assert "doom_loop" not in r.active()
        for _ in range(3):
            r.call("make")
        assert [p.occurrences for p in r.fired] == [1, 2]

    def test_config_validation(self) -> None:
        with pytest.raises(ConfigError, match=r"doom_loop\.min_length"):
            TrajectoryBuilder(TrajectoryAnalysisConfig(detectors=(DoomLoopDetector(min_length=9),)))


class TestRepeatedError:
    def test_same_error_three_times_in_window(self) -> None:
        r = Run(only(RepeatedErrorDetector()))
        r.call("mvn test -Dtest=A", ok=False, error="/x/Foo.java:[12,5] cannot find symbol")
        r.call("ls")
        r.call("mvn test -Dtest=B", ok=False, error="/y/Foo.java:[99,1] cannot find symbol")
        out = r.call("mvn test -Dtest=C", ok=False, error="/z/Foo.java:[3,3] cannot find symbol")
        assert len(out) == 1
        p = out[0]
        assert isinstance(p, RepeatedError)
        assert p.count == 3 and p.tool_name == "bash"
        assert "cannot find symbol" in p.error_signature

    def test_different_errors_do_not_fire(self) -> None:
        r = Run(only(RepeatedErrorDetector()))
        for msg in ("KeyError: a", "ImportError: b", "TypeError: c", "OSError: d"):
            r.call("python x.py", ok=False, error=msg)
        assert r.fired_types() == []

    def test_errors_spread_beyond_the_window_do_not_fire(self) -> None:
        r = Run(only(RepeatedErrorDetector()))
        for _ in range(3):
            r.call("python x.py", ok=False, error="KeyError: a")
            for cmd in HEALTHY:
                r.call(cmd)
        assert r.fired_types() == []

    def test_generic_exit_codes_of_different_commands_do_not_fire(self) -> None:
        r = Run(only(RepeatedErrorDetector()))
        for pat in ("foo", "bar", "baz", "qux"):
            r.call(f"grep -rn {pat} src", ok=False, error="returncode 1", output="")
        assert r.fired_types() == []

    def test_pattern_clears_when_errors_leave_the_window(self) -> None:
        r = Run(only(RepeatedErrorDetector(window=5)))
        for _ in range(3):
            r.call("python x.py", ok=False, error="KeyError: a")
        assert r.active()
        for cmd in HEALTHY[:3]:
            r.call(cmd)
        assert not r.active()

    def test_two_alternating_errors_do_not_flap(self) -> None:
        r = Run(only(RepeatedErrorDetector()))
        for _ in range(3):
            r.call("python a.py", ok=False, error="KeyError: a")
        for _ in range(3):
            r.call("python b.py", ok=False, error="ImportError: b")
        r.call("python a.py", ok=False, error="KeyError: a")
        # b qualifies too but is not more frequent: a stays reported, no re-fire
        assert r.fired_types() == ["repeated_error"]
        for _ in range(3):
            r.call("python b.py", ok=False, error="ImportError: b")
        # b now dominates the window: that is a different repeated error
        assert [getattr(p, "error_signature", "") for p in r.fired] == [
            "keyerror: a",
            "importerror: b",
        ]


class TestErrorCascade:
    def test_three_failures_in_a_row(self) -> None:
        r = Run(only(ErrorCascadeDetector()))
        r.call("a", ok=False, error="ImportError: x")
        r.call("b", ok=False, error="ImportError: x")
        out = r.call("c", ok=False, error="ImportError: x")
        assert len(out) == 1
        p = out[0]
        assert isinstance(p, ErrorCascade)
        assert p.length == 3 and p.dominant_share == 1.0 and p.start_index == 1
        assert p.confidence > 0.6

    def test_success_breaks_the_streak(self) -> None:
        r = Run(only(ErrorCascadeDetector()))
        for i in range(6):
            r.call(f"cmd{i}", ok=i % 3 == 2, error="boom")
        assert r.fired_types() == []

    def test_new_streak_is_a_new_cascade(self) -> None:
        r = Run(only(ErrorCascadeDetector()))
        for _ in range(3):
            r.call("x", ok=False, error="E: one")
        r.call("ok")
        for _ in range(3):
            r.call("y", ok=False, error="E: two")
        assert r.fired_types() == ["error_cascade", "error_cascade"]
        assert [p.occurrences for p in r.fired] == [1, 1]  # different keys (start index)

    def test_generic_messages_lower_confidence(self) -> None:
        r = Run(only(ErrorCascadeDetector()))
        for i in range(3):
            r.call(f"grep {i} f", ok=False, error="returncode 1", output="")
        assert len(r.fired) == 1
        assert r.fired[0].confidence < 0.5


class TestProgressStall:
    def test_no_success_for_threshold_attempts(self) -> None:
        r = Run(only(ProgressStallDetector()))
        for i in range(4):
            assert r.call(f"try{i}", ok=False, error=f"E{i}: x") == ()
        out = r.call("try5", ok=False, error="E: y")
        assert len(out) == 1
        p = out[0]
        assert isinstance(p, ProgressStall)
        assert p.reason == "no_success" and p.actions_during_stall == 5
        assert p.stall_duration.total_seconds() == 8.0

    def test_no_new_resource_for_many_calls(self) -> None:
        r = Run(only(ProgressStallDetector(no_progress_calls=6)))
        r.call("cat a.py")
        for _ in range(6):
            r.call("cat a.py")  # successful, but nothing new
        assert r.fired_types() == ["progress_stall"]
        p = r.fired[0]
        assert isinstance(p, ProgressStall) and p.reason == "no_progress"
        assert p.confidence <= 0.6

    def test_progress_indicators_prevent_stall(self) -> None:
        r = Run(only(ProgressStallDetector(no_progress_calls=6)))
        for i in range(20):
            r.call(f"cat src/file{i}.py")  # each touches a new resource
        r.call("python -m pytest tests")  # test passed
        assert r.fired_types() == []

    def test_indicators_are_configurable(self) -> None:
        with pytest.raises(ConfigError, match=r"progress_stall\.indicators"):
            TrajectoryBuilder(
                TrajectoryAnalysisConfig(detectors=(ProgressStallDetector(indicators=("bogus",)),))
            )
        r = Run(only(ProgressStallDetector(no_progress_calls=4, indicators=("test_passed",))))
        for i in range(4):
            r.call(f"cat src/file{i}.py")  # new files do not count any more
        assert r.fired_types() == ["progress_stall"]


class TestToolAvoidance:
    def test_suggested_tool_ignored(self) -> None:
        r = Run(only(ToolAvoidanceDetector()))
        r.builder.note_suggestion("run_tests")
        r.builder.note_suggestion("run_tests")
        r.call("ls")
        r.call("cat x")
        out = r.call("cat y")
        assert len(out) == 1
        p = out[0]
        assert isinstance(p, ToolAvoidance)
        assert p.avoided_tool == "run_tests" and p.alternative_attempts == 3 and p.suggestions == 2

    def test_using_the_tool_clears_it(self) -> None:
        r = Run(only(ToolAvoidanceDetector()))
        r.builder.note_suggestion("run_tests")
        r.builder.note_suggestion("run_tests")
        r.call("ls")
        r.call("all", tool="run_tests")
        r.call("cat x")
        r.call("cat y")
        r.call("cat z")
        assert r.fired_types() == []
        assert r.builder.build().suggestions == {}

    def test_single_suggestion_is_not_enough(self) -> None:
        r = Run(only(ToolAvoidanceDetector()))
        r.builder.note_suggestion("run_tests")
        for cmd in HEALTHY:
            r.call(cmd)
        assert r.fired_types() == []


class TestContextDegradation:
    def test_rereads_and_repeated_queries(self) -> None:
        r = Run(only(ContextDegradationDetector()))
        r.call("cat src/a.py")
        r.call("grep -rn foo src")
        r.call("cat src/a.py")  # re-read, nothing changed
        out = r.call("grep -rn foo src")  # repeated query
        assert len(out) == 1
        p = out[0]
        assert isinstance(p, ContextDegradation)
        kinds = {s.split(":")[0] for s in p.symptoms}
        assert kinds == {"re_read", "repeated_query"}

    def test_reread_after_write_is_fine(self) -> None:
        r = Run(only(ContextDegradationDetector()))
        for _ in range(3):
            r.call("cat src/a.py")
            r.call("sed -i 's/a/b/' src/a.py")
        assert r.fired_types() == []

    def test_create_then_delete_is_contradictory(self) -> None:
        r = Run(only(ContextDegradationDetector(min_symptoms=2)))
        r.call("touch notes.txt")
        r.call("rm notes.txt")
        r.call("touch todo.txt")
        r.call("rm todo.txt")
        assert r.fired_types() == ["context_degradation"]
        p = r.fired[0]
        assert isinstance(p, ContextDegradation)
        assert p.symptoms == ("contradiction:notes.txt", "contradiction:todo.txt")

    def test_one_scratch_file_reset_and_rewritten_is_one_symptom(self) -> None:
        """mini-swe-agent django__django-14349 (resolved): the agent builds a patch
        script line by line, removes it once and starts it again.  One ``rm`` is
        one contradiction however many writes to the path follow; counting each
        write raised confidence to 0.8 and a caution on a run that succeeded."""
        r = Run(only(ContextDegradationDetector()))
        r.call("""echo 'lines = open("django/core/validators.py").readlines()' > fix.py""")
        r.call("ls")
        r.call("rm fix.py")
        r.call("""echo "print('hello')" | cat > fix.py""")
        r.call('echo "simple" >> fix.py')
        r.call("""echo 'lines = open("django/core/validators.py").readlines()' > fix.py""")
        r.call("""echo -n 'lines.insert(114, "' >> fix.py""")
        r.call("python3 fix.py")
        assert r.fired_types() == []

    def test_repeated_symptom_is_refreshed_not_counted_twice(self) -> None:
        r = Run(only(ContextDegradationDetector(window=8, min_symptoms=2)))
        r.call("cat src/a.py")
        r.call("grep -rn foo src")
        r.call("cat src/a.py")  # re_read:src/a.py
        r.call("cat src/a.py")  # the same symptom again: still one
        assert r.fired_types() == []
        out = r.call("grep -rn foo src")  # a second, different symptom
        assert [p.pattern_type for p in out] == ["context_degradation"]
        p = out[0]
        assert isinstance(p, ContextDegradation)
        assert sorted(p.symptoms) == ["re_read:src/a.py", "repeated_query:grep -rn foo src"]
        assert p.confidence == pytest.approx(0.35)

    def test_healthy_run_is_quiet(self) -> None:
        r = Run(only(ContextDegradationDetector()))
        for cmd in HEALTHY * 2:
            r.call(cmd)
        assert r.fired_types() == []


class TestThrashing:
    def test_read_write_alternation(self) -> None:
        r = Run(only(ThrashingDetector()))
        for _ in range(3):
            r.call("cat src/a.py")
            r.call("sed -i 's/a/b/' src/a.py")
        assert r.fired_types() == ["thrashing"]
        p = r.fired[0]
        assert isinstance(p, Thrashing) and p.mode == "alternation" and p.subject == "src/a.py"

    def test_same_acting_verb_over_and_over(self) -> None:
        r = Run(only(ThrashingDetector()))
        for i in range(6):
            r.call(f"python script_{i}.py")
        assert r.fired_types() == ["thrashing"]
        p = r.fired[0]
        assert isinstance(p, Thrashing) and p.mode == "same_tool" and p.subject == "python"

    def test_one_interleaved_call_does_not_refire(self) -> None:
        r = Run(only(ThrashingDetector()))
        for i in range(6):
            r.call(f"python script_{i}.py")
        for i in range(5):
            r.call(f"cat notes{i}.md")  # the python count dips to 5 of 10 ...
        for i in range(6):
            r.call(f"python again_{i}.py")  # ... and climbs back to 6
        assert r.fired_types() == ["thrashing"]

    def test_paging_through_a_file_is_not_thrashing(self) -> None:
        r = Run(only(ThrashingDetector()))
        for i in range(10):
            r.call(f"sed -n '{i * 50},{i * 50 + 50}p' src/a.py")
        assert r.fired_types() == []


class TestDrift:
    def test_wandering_to_unrelated_paths(self) -> None:
        r = Run(only(DriftDetector()), task="fix the parser in src/parser/core.py")
        for i in range(5):
            r.call(f"cat src/parser/m{i}.py")
        for i in range(10):
            r.call(f"cat vendor/other/lib{i}/x{i}.c")
        assert "drift" in r.fired_types()
        p = r.active()["drift"]
        assert isinstance(p, Drift)
        assert p.out_of_scope_fraction >= 0.8
        assert p.confidence <= 0.7

    def test_staying_in_scope(self) -> None:
        r = Run(only(DriftDetector()), task="fix src/parser/core.py")
        for i in range(30):
            r.call(f"cat src/parser/m{i % 7}.py")
        assert r.fired_types() == []

    def test_files_named_in_the_task_are_in_scope(self) -> None:
        r = Run(only(DriftDetector()), task="the bug is in helpers.c and in util.h")
        for i in range(5):
            r.call(f"cat src/parser/m{i}.py")
        for _ in range(10):
            r.call("cat lib/deep/helpers.c")
        assert r.fired_types() == []

    def test_scratch_files_the_agent_created_are_not_drift(self) -> None:
        r = Run(only(DriftDetector()), task="fix src/parser/core.py")
        for i in range(5):
            r.call(f"cat src/parser/m{i}.py")
        for i in range(10):
            r.call(f"touch scratch/deep/t{i}.py")
            r.call(f"python scratch/deep/t{i}.py")
        assert r.fired_types() == []

    def test_task_paths_seed_the_scope(self) -> None:
        assert task_paths("see astropy.modeling.separable and lib/x/y.c, v1.2.3") == [
            "astropy/modeling/separable",
            "lib/x/y.c",
        ]
        r = Run(only(DriftDetector()), task="the bug is in lib/core/engine.c")
        for i in range(5):
            r.call(f"cat docs/guide/p{i}.md")
        for i in range(10):
            r.call(f"cat lib/core/f{i}.c")  # named by the task: in scope
        assert r.fired_types() == []


class TestFileChurn:
    def test_loaded_by_entry_point_name_or_path(self) -> None:
        by_path = load_detector("streams.core.detectors.file_churn:FileChurnDetector")
        assert isinstance(by_path, FileChurnDetector)
        try:
            by_name = load_detector("file_churn")
        except ConfigError as exc:  # package metadata not installed
            pytest.skip(f"entry points not installed (pip install -e .): {exc}")
        assert isinstance(by_name, FileChurnDetector)

    def test_churn_fires(self) -> None:
        r = Run(("streams.core.detectors.file_churn:FileChurnDetector",))
        for i in range(5):
            r.call(f"sed -i 's/{i}/x/' src/a.py")
        assert r.fired_types() == ["file_churn"]
        p = r.fired[0]
        assert isinstance(p, FileChurn) and p.churned_file == "src/a.py"
        assert p.modification_count == 5

    def test_spread_edits_do_not_fire(self) -> None:
        r = Run((FileChurnDetector(),))
        for i in range(12):
            r.call(f"sed -i 's/x/y/' src/f{i % 4}.py")
        assert r.fired_types() == []

    def test_not_a_default(self) -> None:
        assert "file_churn" not in {d.name for d in DEFAULT_DETECTORS}


class TestLoadDetector:
    def test_builtin_names(self) -> None:
        assert isinstance(load_detector("doom_loop"), DoomLoopDetector)

    @pytest.mark.parametrize(
        ("spec", "needle"),
        [
            ("no_such_detector", "no_such_detector"),
            ("no.such.module:X", "no.such.module:X"),
            ("streams.core.detectors:Nope", "Nope"),
            ("streams.core.errors:ConfigError", "ConfigError"),
            ("", "detectors"),
        ],
    )
    def test_bad_specs_name_the_spec(self, spec: str, needle: str) -> None:
        with pytest.raises(ConfigError) as exc:
            load_detector(spec)
        assert needle in str(exc.value)

    def test_config_accepts_strings_and_rejects_duplicates(self) -> None:
        cfg = TrajectoryAnalysisConfig(detectors=("doom_loop", "repeated_error"))
        assert [d.name for d in cfg.detectors] == ["doom_loop", "repeated_error"]
        with pytest.raises(ConfigError, match=r"detectors\[1\]"):
            TrajectoryAnalysisConfig(detectors=("doom_loop", DoomLoopDetector()))
        with pytest.raises(ConfigError, match=r"detectors\[0\]"):
            TrajectoryAnalysisConfig(detectors=(object(),))


def test_default_detectors_quiet_on_a_healthy_run() -> None:
    r = Run()
    for cmd in HEALTHY:
        r.call(cmd)
    assert r.fired_types() == []
