"""normalize_error, sequence_similarity, error_signature and describe_action."""

from __future__ import annotations

import pytest

from streams.core.similarity import (
    abbreviate,
    describe_action,
    error_signature,
    is_generic_error,
    normalize_error,
    sequence_similarity,
    summarize_params,
)


class TestNormalizeError:
    def test_paths_become_basenames(self) -> None:
        a = normalize_error("No such file or directory: /tmp/run-1/work/out.txt")
        b = normalize_error("No such file or directory: /home/x/out.txt")
        assert a == b
        assert "out.txt" in a
        assert "/tmp" not in a

    def test_line_and_column_numbers_removed(self) -> None:
        a = normalize_error('File "/a/b/mod.py", line 12, in f: NameError x')
        b = normalize_error('File "/c/mod.py", line 873, in f: NameError x')
        assert a == b
        assert normalize_error("Foo.java:12:5: error: cannot find symbol") == normalize_error(
            "Foo.java:99:1: error: cannot find symbol"
        )

    def test_timestamps_uuids_hex_ids(self) -> None:
        a = normalize_error(
            "2024-01-02T10:11:12.123Z request id=abc123 failed at 0xdeadbeef "
            "(trace 123e4567-e89b-12d3-a456-426614174000) pid 4242"
        )
        b = normalize_error(
            "2025-12-31T23:59:59Z request id=zz99 failed at 0x1f "
            "(trace 00000000-0000-0000-0000-000000000000) pid 7"
        )
        assert a == b
        assert "<uuid>" in a and "<ts>" in a and "<hex>" in a

    def test_whitespace_collapsed_and_lowercase(self) -> None:
        assert normalize_error("  Error:\n\n   BAD\tthing  ") == "error: bad thing"

    def test_different_errors_stay_different(self) -> None:
        assert normalize_error("ImportError: no module foo") != normalize_error("KeyError: 'bar'")

    @pytest.mark.parametrize(
        "msg",
        [
            "x at /a/b/c.py line 3 col 4",
            "2024-01-01 10:00:00 boom 0xff",
            "plain",
            "",
            "id: 77 uuid 123e4567-e89b-12d3-a456-426614174000",
        ],
    )
    def test_idempotent(self, msg: str) -> None:
        once = normalize_error(msg)
        assert normalize_error(once) == once

    def test_bounded_length(self) -> None:
        assert len(normalize_error("word " * 1000)) <= 200


class TestErrorSignature:
    def test_generic_message_takes_output_detail(self) -> None:
        out = (
            "<returncode>1</returncode>\n<output>\n"
            "Traceback (most recent call last):\nValueError: bad\n</output>"
        )
        sig = error_signature("returncode 1", out)
        assert sig.startswith("returncode 1: ")
        assert "valueerror: bad" in sig

    def test_two_generic_failures_with_different_output_differ(self) -> None:
        assert error_signature("returncode 1", "KeyError: a") != error_signature(
            "returncode 1", "ImportError: b"
        )

    def test_informative_message_kept(self) -> None:
        assert error_signature("javac: command not found", "anything") == normalize_error(
            "javac: command not found"
        )

    def test_empty_everything(self) -> None:
        assert error_signature(None, None) == "error"

    def test_is_generic(self) -> None:
        assert is_generic_error("returncode 1")
        assert is_generic_error("exit code 2")
        assert not is_generic_error("command not found")


class TestSequenceSimilarity:
    def test_identical(self) -> None:
        assert sequence_similarity(("a", "b", "c"), ("a", "b", "c")) == 1.0

    def test_disjoint(self) -> None:
        assert sequence_similarity(("a", "b"), ("c", "d")) == 0.0

    def test_partial_overlap_is_jaccard_of_bigrams(self) -> None:
        # bigrams {ab, bc} vs {ab, bd}: 1 shared of 3
        assert sequence_similarity(("a", "b", "c"), ("a", "b", "d")) == pytest.approx(1 / 3)

    def test_symmetric(self) -> None:
        a, b = ("x", "y", "x", "z"), ("y", "x", "z")
        assert sequence_similarity(a, b) == sequence_similarity(b, a)

    def test_empty_cases(self) -> None:
        assert sequence_similarity((), ()) == 1.0
        assert sequence_similarity(("a",), ()) == 0.0

    def test_single_items_compare_as_unigrams(self) -> None:
        assert sequence_similarity(("a",), ("a", "b")) == pytest.approx(1 / 2)

    def test_bad_n(self) -> None:
        with pytest.raises(ValueError, match="n"):
            sequence_similarity(("a",), ("a",), n=0)


class TestDescribeAction:
    def test_shell_verb_and_kind(self) -> None:
        info = describe_action("bash", {"command": "cd /repo && sed -i 's/a/b/' src/x.py"})
        assert info.verb == "sed"
        assert info.kind == "write"
        assert info.resource == "src/x.py"

    def test_sed_print_is_read(self) -> None:
        info = describe_action("bash", {"command": "sed -n '10,20p' src/x.py"})
        assert info.kind == "read"

    def test_exact_key_ignores_whitespace_but_not_args(self) -> None:
        a = describe_action("bash", {"command": "ls   -la /tmp"})
        b = describe_action("bash", {"command": "ls -la /tmp"})
        c = describe_action("bash", {"command": "ls -la /var"})
        assert a.exact_key == b.exact_key
        assert a.exact_key != c.exact_key

    def test_coarse_key_masks_numbers(self) -> None:
        a = describe_action("edit", "1:18\nbody one")
        b = describe_action("edit", "20:31\nbody one")
        assert a.exact_key != b.exact_key
        assert a.coarse_key == b.coarse_key

    def test_swe_agent_style_tools(self) -> None:
        assert describe_action("open", "src/Main.java").kind == "read"
        assert describe_action("open", "src/Main.java").resource == "src/Main.java"
        assert describe_action("create", "Repro.java").kind == "create"
        assert describe_action("find_file", '"README*"').kind == "search"

    def test_path_param(self) -> None:
        info = describe_action("read_file", {"path": "a/b.txt"})
        assert info.resource == "a/b.txt"
        assert info.kind == "read"

    def test_deterministic(self) -> None:
        assert describe_action("bash", {"command": "echo hi"}) == describe_action(
            "bash", {"command": "echo hi"}
        )


def test_abbreviate_and_summary() -> None:
    long = "x" * 500
    assert len(abbreviate(long)) == 80
    assert abbreviate(long).endswith("…")
    assert abbreviate("a   b\nc") == "a b c"
    assert summarize_params({"command": "ls -la", "timeout": 5}) == "ls -la"
    assert summarize_params(None) == ""
