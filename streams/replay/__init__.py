"""Offline replay of recorded topics through the core, export, re-publishing.

* :mod:`streams.replay.reader`: bounded, group-less reads of session topics or
  ``<prefix>.events`` (high watermark captured at start, ``read_committed``).
* :mod:`streams.replay.replay`: re-run the core (``OfflineAnalyzer``), write
  JSONL/Avro, diff with the live ``<prefix>.patterns`` / ``.assessments``
  (allowed repeats told from differences).
* :mod:`streams.replay.state`: the worker's tables rebuilt from events, and
  their diff with the live changelogs.
* :mod:`streams.replay.compare`: ``compare_live(...) -> CompareReport``, the
  verdict of ``trajectory replay --compare-live`` (outputs + table state).
* :mod:`streams.replay.republish`: re-publish in event-time order at a speed.
* :mod:`streams.replay.export`: events to Avro / JSONL / Parquet files.
"""

from streams.replay.compare import CompareReport, compare_live, compare_replay
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
    "CompareReport",
    "DecodeFailure",
    "LiveDiff",
    "ReplayReadError",
    "ReplayResult",
    "RepublishStats",
    "TopicReader",
    "compare_live",
    "compare_replay",
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
