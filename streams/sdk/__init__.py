"""The agent-side SDK: publish a session's trajectory to Kafka.

:class:`Publisher` / :class:`Session` are in :mod:`streams.sdk.publisher` (read its
docstring for the ordering, delivery, privacy and thread-safety guarantees).
"""

from streams.sdk._validate import SUMMARY_MAX_CHARS, cap_payload, summarize_params
from streams.sdk.publisher import Publisher, Session, now_ms

__all__ = ["SUMMARY_MAX_CHARS", "Publisher", "Session", "cap_payload", "now_ms", "summarize_params"]
