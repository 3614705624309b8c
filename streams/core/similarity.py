"""Text and sequence normalization used by the trajectory detectors.

Why this module exists: detectors compare *actions* and *errors* across steps,
and real agents add noise (line numbers, timestamps, temp paths, changing edit
bodies) that would hide a loop from an exact comparison.  Everything here is
pure, deterministic (no ``hash()`` salt, no clock) and cheap enough to run once
per tool call.

Invariants:

* ``normalize_error(m)`` is idempotent: ``normalize_error(normalize_error(m)) ==
  normalize_error(m)``.
* ``sequence_similarity`` is symmetric, in ``[0, 1]``, and 1.0 for equal
  sequences.
* ``describe_action`` depends only on its arguments, so the same call always gets
  the same keys in every process (snapshots stay valid across restarts).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from streams.core.events import JsonValue
from streams.core.jsontext import compiled_encoder

ActionKind: TypeAlias = Literal["read", "search", "write", "create", "delete", "exec", "other"]

#: Summaries are abbreviated to this many characters (deterministic ellipsis).
SUMMARY_LIMIT: Final = 80
#: Texts up to this length are memoized (bounded LRUs) by the pure helpers below.
_MEMO_TEXT_LIMIT: Final = 1024

_UUID = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
)
_ISO_TS = re.compile(
    r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b"
)
_CLOCK = re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b")
_HEX = re.compile(
    r"\b0x[0-9a-fA-F]+\b|\b(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b"
)
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\w.\-~]*[/\\])+([\w.\-]+)")
_LINE_COL = re.compile(
    r"(?i)\b(?:line|ln|col|column|row|offset|position|pos)\b\s*[:=]?\s*\d+"
    r"|(?<=[\w)\]>])(?::\d+)+\b|\[\d+(?:,\s*\d+)?\]"
)
_ID_WORD = re.compile(
    r"(?i)\b(id|pid|tid|uid|request_id|session_id|job_id|port)\b(?:\s*[:=#]\s*|\s+)([\w-]*\d[\w-]*)"
)
_LONG_NUM = re.compile(r"\b\d{4,}\b")
_WS = re.compile(r"\s+")
_DIGITS = re.compile(r"\d+")
_PATHISH = re.compile(r"[\w.\-]*/[\w.\-/]*[\w\-]|[\w\-]+\.[A-Za-z][\w]{0,5}\b")

#: Shell-like tools: the real "verb" is the command's first word.
SHELL_TOOLS: Final[frozenset[str]] = frozenset(
    {
        "bash",
        "sh",
        "shell",
        "run",
        "exec",
        "execute",
        "execute_bash",
        "run_command",
        "terminal",
        "cmd",
        "command",
        "run_shell_command",
    }
)
_PARAM_KEYS: Final = (
    "command",
    "cmd",
    "path",
    "file_path",
    "filename",
    "file",
    "query",
    "pattern",
    "url",
    "code",
)
_PATH_KEYS: Final = ("path", "file_path", "filename", "file", "target", "target_file", "dir")
_READ_VERBS: Final = frozenset(
    {
        "open",
        "cat",
        "head",
        "tail",
        "less",
        "more",
        "view",
        "goto",
        "scroll_up",
        "scroll_down",
        "nl",
        "read",
        "read_file",
        "view_file",
        "get_file",
        "wc",
        "diff",
    }
)
_SEARCH_VERBS: Final = frozenset(
    {
        "find",
        "grep",
        "rg",
        "ag",
        "ls",
        "search_dir",
        "search_file",
        "find_file",
        "search",
        "glob",
        "list_dir",
        "list_files",
        "tree",
        "locate",
        "which",
        "git_grep",
    }
)
_WRITE_VERBS: Final = frozenset(
    {
        "edit",
        "write",
        "write_file",
        "edit_file",
        "str_replace",
        "str_replace_editor",
        "patch",
        "apply_patch",
        "insert",
        "replace",
        "append",
        "tee",
        "update_file",
        "modify",
    }
)
_CREATE_VERBS: Final = frozenset({"create", "touch", "mkdir", "create_file", "new_file"})
_DELETE_VERBS: Final = frozenset({"rm", "rmdir", "delete", "delete_file", "remove", "unlink"})
_EXEC_VERBS: Final = frozenset(
    {
        "python",
        "python3",
        "pytest",
        "mvn",
        "gradle",
        "javac",
        "java",
        "npm",
        "node",
        "yarn",
        "make",
        "go",
        "cargo",
        "tox",
        "bash",
        "sh",
        "ruby",
        "php",
        "gcc",
        "g++",
        "cmake",
        "dotnet",
        "pip",
        "uv",
        "mvnw",
        "gradlew",
        "./mvnw",
        "./gradlew",
    }
)


def abbreviate(text: str, limit: int = SUMMARY_LIMIT) -> str:
    """Whitespace-collapsed ``text`` cut to ``limit`` characters (``…`` marks a cut)."""
    flat = " ".join(text[: limit * 8].split())
    if len(flat) <= limit and len(text) <= limit * 8:
        return flat
    return flat[: max(0, limit - 1)] + "…"


def normalize_error(message: str) -> str:
    """Canonical signature of an error message: the variable parts removed.

    Absolute/relative paths become their basenames; line and column numbers,
    timestamps, uuids, hex values, ids and long numbers become placeholders;
    whitespace collapses; the result is lower-cased and capped at 200 chars so
    signatures stay small keys.  Idempotent.
    """
    if len(message) <= _MEMO_TEXT_LIMIT:
        return _normalize_memo(message)
    return _normalize(message)


@functools.lru_cache(maxsize=4096)
def _normalize_memo(message: str) -> str:
    return _normalize(message)


def _normalize(message: str) -> str:
    text = message
    text = _UUID.sub("<uuid>", text)
    text = _ISO_TS.sub("<ts>", text)
    text = _CLOCK.sub("<ts>", text)
    text = _HEX.sub("<hex>", text)
    text = _PATH.sub(r"\1", text)
    text = _LINE_COL.sub("", text)
    text = _ID_WORD.sub(r"\1 <id>", text)
    text = _LONG_NUM.sub("<n>", text)
    text = _WS.sub(" ", text).strip().lower()
    return text[:200]


_GENERIC = re.compile(
    r"(?:(?:non-?zero |bad )?(?:returncode|return code|exit code|exit status|exit|status|rc|"
    r"error|failed|failure|command failed)(?: with)?\s*[:=]?\s*(?:-?\d+|<n>)?\s*)?"
)
_ERRORISH = re.compile(r"(?:Error|Exception|error|ERROR|FAIL|fatal)\b[:\s]|not found|No such")
_TAGS = re.compile(r"</?[A-Za-z_][\w-]*>")


def is_generic_error(signature: str) -> bool:
    """True when a normalized signature says no more than "it failed (code N)"."""
    return _GENERIC.fullmatch(signature) is not None


def error_signature(message: str | None, output: str | None) -> str:
    """Signature of a failed call: the normalized message, completed by the first
    non-empty output line when the message alone is generic (``returncode 1``).

    Why: some harnesses report only an exit status; two different failures must
    not share a signature just because both exited with 1.
    """
    sig = normalize_error(message or "")
    if sig and not is_generic_error(sig):
        return sig
    if output:
        detail = ""
        first = ""
        for line in output[:8000].splitlines():
            text = _TAGS.sub(" ", line).strip()
            if not text or text.lstrip("-").isdigit():
                continue
            if not first:
                first = text
            if _ERRORISH.search(text):
                detail = text
        chosen = normalize_error(detail or first)
        if chosen:
            return f"{sig}: {chosen}"[:200] if sig else chosen
    return sig or "error"


def _ngrams(seq: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(seq[i : i + n]) for i in range(len(seq) - n + 1)}


def sequence_similarity(seq_a: Sequence[str], seq_b: Sequence[str], n: int = 2) -> float:
    """Jaccard similarity of the action n-grams of two sequences, in ``[0, 1]``.

    ``n`` shrinks to the shorter sequence's length (so single actions compare as
    unigrams).  Two empty sequences are identical (1.0); one empty one is 0.0.
    """
    if n < 1:
        raise ValueError(f"n: must be >= 1, got {n}")
    if not seq_a and not seq_b:
        return 1.0
    if not seq_a or not seq_b:
        return 0.0
    k = min(n, len(seq_a), len(seq_b))
    a = _ngrams(seq_a, k)
    b = _ngrams(seq_b, k)
    union = len(a | b)
    return len(a & b) / union if union else 1.0


#: ``json.dumps(value, sort_keys=True, default=str)``: the same text and errors.
#: It runs per completed tool call (arguments and output), where ``json.dumps``'
#: per-call set-up cost more than the encoding (:mod:`streams.core.jsontext`).
canonical_json: Final = compiled_encoder(json.JSONEncoder(sort_keys=True, default=str))


_JSON_ENCODE: Final = canonical_json


def params_text(params: JsonValue) -> str:
    """The text that identifies a call's arguments (deterministic).

    A string is itself; a mapping contributes its well-known keys first
    (``command``, ``path``, ...) then the rest, sorted; anything else is its
    canonical JSON.
    """
    if params is None:
        return ""
    if isinstance(params, str):
        return params
    if isinstance(params, dict):
        parts: list[str] = []
        for key in _PARAM_KEYS:
            value = params.get(key)
            if isinstance(value, str):
                parts.append(value)
        if len(parts) == len(params):
            return " ".join(parts)
        rest = {k: v for k, v in params.items() if not (k in _PARAM_KEYS and isinstance(v, str))}
        return " ".join(parts) + " " + _JSON_ENCODE(rest)
    return _JSON_ENCODE(params)


def summarize_params(params: JsonValue, limit: int = SUMMARY_LIMIT) -> str:
    """Short human description of a call's arguments (the preferred key's value)."""
    if isinstance(params, dict):
        for key in _PARAM_KEYS:
            value = params.get(key)
            if isinstance(value, str):
                return abbreviate(value, limit)
        for value in params.values():
            if isinstance(value, str):
                return abbreviate(value, limit)
    return abbreviate(params_text(params), limit)


@dataclass(frozen=True, slots=True)
class ActionInfo:
    """What a detector needs to know about one call, derived once.

    ``exact_key`` identifies the call exactly (tool + whitespace-normalized full
    arguments, digested); ``coarse_key`` forgets argument noise (digits masked,
    only the first 60 characters) for fuzzy loop matching; ``verb`` is the tool,
    or for shell tools the command's first word; ``resource`` is the file/path
    the call targets if one can be seen.
    """

    exact_key: str
    coarse_key: str
    verb: str
    kind: ActionKind
    resource: str | None


def _strip_prefix_words(words: list[str]) -> list[str]:
    """Skip ``cd X &&``, env assignments and ``sudo``/``timeout N`` before the verb."""
    i = 0
    n = len(words)
    while i < n:
        w = words[i]
        if w == "cd" and i + 2 < n and words[i + 2] in ("&&", ";"):
            i += 3
        elif w in ("&&", ";", "sudo", "time", "env", "nohup") or (
            "=" in w and not w.startswith("-")
        ):
            i += 1
        elif w == "timeout" and i + 1 < n:
            i += 2
        else:
            break
    return words[i:]


def _classify(verb: str, words: list[str], text: str) -> ActionKind:
    v = verb.lower()
    if v in _DELETE_VERBS or v.startswith("delete"):
        return "delete"
    if v in _CREATE_VERBS or v.startswith("create"):
        return "create"
    if v == "sed":
        return "write" if any(w.startswith("-i") for w in words[1:4]) else "read"
    if v in ("cat", "echo", "printf") and (">" in words or "<<" in text or ">>" in words):
        return "create"
    if v in _WRITE_VERBS or v.startswith(("edit", "write")):
        return "write"
    if v in _READ_VERBS or v.startswith(("read", "view", "open")):
        return "read"
    if v in _SEARCH_VERBS or v.startswith(("search", "find", "list")):
        return "search"
    if v in _EXEC_VERBS or v.startswith(("test", "run", "build")):
        return "exec"
    return "other"


def describe_action(tool_name: str, params: JsonValue) -> ActionInfo:
    """Derive the :class:`ActionInfo` of a call (pure, deterministic).

    Results for short argument texts are memoized (bounded LRU): agents repeat
    themselves, and this is the most expensive per-call step.
    """
    text = params_text(params)
    given: str | None = None
    if isinstance(params, dict):
        for key in _PATH_KEYS:
            value = params.get(key)
            if isinstance(value, str) and value:
                given = value
                break
    if len(text) <= _MEMO_TEXT_LIMIT:
        return _describe_memo(tool_name, text, given)
    return _describe(tool_name, text, given)


@functools.lru_cache(maxsize=4096)
def _describe_memo(tool_name: str, text: str, given: str | None) -> ActionInfo:
    return _describe(tool_name, text, given)


def _describe(tool_name: str, text: str, given: str | None) -> ActionInfo:
    norm = " ".join(text.split())
    digest = hashlib.blake2b(norm.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    exact_key = f"{tool_name}:{digest}"
    coarse_key = f"{tool_name}:{_DIGITS.sub('#', norm[:60])}"
    first_line = text.split("\n", 1)[0]
    words = _strip_prefix_words(first_line.split())
    shell = tool_name.lower() in SHELL_TOOLS
    if shell and words:
        verb = words[0].rsplit("/", 1)[-1] if not words[0].startswith("./") else words[0]
    else:
        verb = tool_name
        if words and tool_name.lower() in ("str_replace_editor", "editor", "file_editor"):
            verb = words[0]
    kind = _classify(verb, words if shell else [verb, *words], text)
    resource = given
    if resource is None:
        for word in reversed(words[1:] if shell else words):
            w = word.strip("'\"`;,()")
            if w.startswith("-") or not w or "<" in w or ">" in w or "=" in w:
                continue
            if _PATHISH.fullmatch(w):
                resource = w
                break
    if resource is not None and resource.startswith("./"):
        resource = resource[2:]
    return ActionInfo(exact_key, coarse_key, verb, kind, resource)


__all__ = [
    "SHELL_TOOLS",
    "SUMMARY_LIMIT",
    "ActionInfo",
    "ActionKind",
    "abbreviate",
    "canonical_json",
    "describe_action",
    "error_signature",
    "is_generic_error",
    "normalize_error",
    "params_text",
    "sequence_similarity",
    "summarize_params",
]
