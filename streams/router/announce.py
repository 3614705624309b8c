"""Session announcements on ``<prefix>.control``: a hint that a topic is new.

The SDK publishes, for each new session, a message keyed by the session id whose
value names the session topic.  The router treats it only as a *hint* to refresh
metadata now instead of at the next periodic refresh: correctness never depends on
it (the regex subscription still picks the topic up), only latency.

Accepted value forms (the SDK's, plus tolerant variants): the topic name as UTF-8
text, a JSON object with a ``"topic"`` string, or an empty value with the session
id as key.  Anything else is an :class:`~streams.errors.InvalidEventError`
naming the field; the router dead-letters it.

:class:`PendingTopics` remembers announced topics that are not yet assigned, so the
router keeps refreshing (a few times, spaced) when the announcement raced ahead of
topic creation.  Time is passed in by the caller (monotonic ms), never read here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streams.errors import InvalidEventError, MalformedMessageError
from streams.router.validate import session_id_of_topic, session_prefix
from streams.serde.jsontext import loads_json


def parse_announcement(key: bytes | None, value: bytes | None, prefix: str) -> str:
    """The session topic an announcement names (validated against the prefix)."""
    topic: str | None = None
    if value:
        try:
            text = value.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            raise InvalidEventError("control.value", f"not UTF-8 ({exc})") from exc
        if text.startswith("{"):
            try:
                # Bounded and total (a 200,000-deep value must not crash the router).
                obj = loads_json(text, "control.value")
            except MalformedMessageError as exc:
                raise InvalidEventError("control.value", f"invalid JSON ({exc})") from exc
            named = obj.get("topic") if isinstance(obj, dict) else None
            if not isinstance(named, str):
                raise InvalidEventError(
                    "control.value.topic", "JSON announcement without a string 'topic' field"
                )
            topic = named
        else:
            topic = text
    elif key:
        try:
            topic = session_prefix(prefix) + key.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidEventError("control.key", f"not UTF-8 ({exc})") from exc
    if topic is None:
        raise InvalidEventError("control.value", "announcement with neither value nor key")
    if session_id_of_topic(prefix, topic) is None:
        raise InvalidEventError(
            "control.value",
            f"{topic!r} is not a session topic of prefix {prefix!r} "
            f"(expected {session_prefix(prefix)}<session_id>)",
        )
    return topic


@dataclass
class PendingTopics:
    """Announced topics not yet assigned, with a bounded retry schedule.

    Invariant: a topic leaves the set when it is assigned, or seen in a full
    metadata response (:meth:`assigned`: librdkafka has matched it then), or after
    ``max_tries`` refreshes; the regex subscription remains the fallback.
    """

    retry_ms: float = 100.0
    max_tries: int = 20
    _due: dict[str, tuple[float, int]] = field(default_factory=dict)

    def add(self, topic: str, now_ms: float) -> None:
        if topic not in self._due:
            self._due[topic] = (now_ms, 0)

    def assigned(self, topics: set[str] | frozenset[str]) -> None:
        for topic in list(self._due):
            if topic in topics:
                del self._due[topic]

    def refresh_due(self, now_ms: float) -> bool:
        """True when some pending topic wants a metadata refresh now (counts a try)."""
        due = False
        for topic, (at, tries) in list(self._due.items()):
            if now_ms >= at:
                due = True
                if tries + 1 >= self.max_tries:
                    del self._due[topic]
                else:
                    self._due[topic] = (now_ms + self.retry_ms, tries + 1)
        return due

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, topic: object) -> bool:
        return topic in self._due


__all__ = ["PendingTopics", "parse_announcement"]
