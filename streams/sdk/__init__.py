"""The SDKs around the pipeline.

* Agents publish: :class:`Publisher` / :class:`Session` (:mod:`streams.sdk.publisher`;
  its docstring states the ordering, delivery, privacy and thread-safety guarantees).
* Consumers subscribe: :class:`AssessmentSubscriber` (:mod:`streams.sdk.subscriber`).
* Agents read their course-correction back: :func:`context_for` and the long-lived
  :class:`PromptContext` (:mod:`streams.sdk.context`).
"""

from streams.sdk._validate import SUMMARY_MAX_CHARS, cap_payload, summarize_params
from streams.sdk.context import PromptContext, context_for, context_from_view, latest_assessment
from streams.sdk.publisher import Publisher, Session, now_ms
from streams.sdk.subscriber import AssessmentSubscriber

__all__ = [
    "SUMMARY_MAX_CHARS",
    "AssessmentSubscriber",
    "PromptContext",
    "Publisher",
    "Session",
    "cap_payload",
    "context_for",
    "context_from_view",
    "latest_assessment",
    "now_ms",
    "summarize_params",
]
