"""Offline replay of recorded topics through the core, export, re-publishing.

* :mod:`streams.replay.reader`: bounded, group-less reads of session topics or
  ``<prefix>.events`` (high watermark captured at start, ``read_committed``).
* :mod:`streams.replay.replay`: re-run the core (``OfflineAnalyzer``), write
  JSONL/Avro, compare with the live ``<prefix>.patterns`` / ``.assessments``.
* :mod:`streams.replay.republish`: re-publish in event-time order at a speed.
* :mod:`streams.replay.export`: events to Avro / JSONL / Parquet files.
"""

from streams.replay.reader import (
    Bound,
    DecodeFailure,
    ReplayReadError,
    TopicReader,
    open_event_reader,
    parse_bound,
    session_topics,
)
from streams.replay.replay import (
    LiveDiff,
    ReplayResult,
    compare_with_live,
    diff_live,
    replay_events,
    write_avro,
    write_jsonl,
)
from streams.replay.republish import RepublishStats, event_time_order, republish

__all__ = [
    "Bound",
    "DecodeFailure",
    "LiveDiff",
    "ReplayReadError",
    "ReplayResult",
    "RepublishStats",
    "TopicReader",
    "compare_with_live",
    "diff_live",
    "event_time_order",
    "open_event_reader",
    "parse_bound",
    "replay_events",
    "republish",
    "session_topics",
    "write_avro",
    "write_jsonl",
]
