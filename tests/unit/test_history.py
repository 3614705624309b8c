"""Pure parts of history queries: tree closure and the filter/sort/limit step."""

from __future__ import annotations

import pytest

from streams.errors import ConfigError
from streams.history import HistoryItem, descendants, query, select
from streams.settings import Settings


def test_descendants_follows_chains_and_ignores_other_trees() -> None:
    parents = {
        "root": None,
        "a": "root",
        "b": "root",
        "a1": "a",
        "a1x": "a1",
        "other": None,
        "o1": "other",
    }
    assert descendants("root", parents) == {"root", "a", "b", "a1", "a1x"}
    assert descendants("a", parents) == {"a", "a1", "a1x"}
    assert descendants("o1", parents) == {"o1"}
    assert descendants("unknown", parents) == {"unknown"}


def test_descendants_survives_cycles_and_self_loops() -> None:
    parents = {"x": "y", "y": "x", "z": "z", "w": "x"}
    assert descendants("x", parents) == {"x", "y", "w"}
    assert descendants("z", parents) == {"z"}


def _item(kind: str, sid: str, seq: int, ts: int, offset: int = 0) -> HistoryItem:
    return HistoryItem(
        kind=kind,  # type: ignore[arg-type]
        session_id=sid,
        seq=seq,
        timestamp_ms=ts,
        parent_session_id=None,
        agent_id=None,
        record=None,
        topic="t",
        partition=0,
        offset=offset,
    )


ITEMS = [
    _item("assessment", "a", 3, 300, 1),
    _item("pattern", "a", 3, 300, 2),
    _item("pattern", "b", 1, 100, 3),
    _item("assessment", "b", 9, 900, 4),
    _item("pattern", "a", 5, 500, 5),
    _item("pattern", "c", 7, 700, 6),
]


def _keys(items: list[HistoryItem]) -> list[tuple[str, str, int]]:
    return [(i.kind, i.session_id, i.timestamp_ms) for i in items]


def test_select_orders_by_event_time_and_breaks_ties() -> None:
    got = select(
        ITEMS, sessions=None, since=None, until=None, limit=100, kinds=("pattern", "assessment")
    )
    assert _keys(got) == [
        ("pattern", "b", 100),
        ("assessment", "a", 300),
        ("pattern", "a", 300),
        ("pattern", "a", 500),
        ("pattern", "c", 700),
        ("assessment", "b", 900),
    ]


def test_select_since_inclusive_until_exclusive_and_newest_limit() -> None:
    got = select(
        ITEMS, sessions=None, since=300, until=900, limit=2, kinds=("pattern", "assessment")
    )
    assert _keys(got) == [("pattern", "a", 500), ("pattern", "c", 700)]
    got = select(
        ITEMS, sessions=frozenset({"a", "b"}), since=None, until=None, limit=10, kinds=("pattern",)
    )
    assert _keys(got) == [("pattern", "b", 100), ("pattern", "a", 300), ("pattern", "a", 500)]


def test_select_rejects_bad_limit() -> None:
    with pytest.raises(ConfigError):
        select(ITEMS, sessions=None, since=None, until=None, limit=0, kinds=("pattern",))


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"session": "a", "tree": "b"}, "--session/--tree"),
        ({"kinds": ("patterns",)}, "kinds"),
        ({"kinds": ()}, "kinds"),
        ({"since": 10, "until": 10}, "--until"),
        ({"limit": 0}, "--limit"),
    ],
)
def test_query_validates_before_touching_kafka(kwargs: dict[str, object], key: str) -> None:
    # an unroutable bootstrap: validation must fail first, without network I/O
    s = Settings(bootstrap="127.0.0.1:1", prefix="nowhere")
    with pytest.raises(ConfigError) as info:
        query(s, **kwargs)  # type: ignore[arg-type]
    assert info.value.key == key
