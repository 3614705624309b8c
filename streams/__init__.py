"""trajectory-streams: a Kafka-native trajectory observer for fleets of AI agents.

The agent-facing API is importable from here::

    from streams import Publisher, Settings, context_for

    settings = Settings()  # KAFKA_BOOTSTRAP, TRAJECTORY_PREFIX, ... from the environment
    with Publisher(settings) as pub, pub.session("run-1", agent_id="coder") as session:
        call = session.tool_call("read_file", {"path": "foo.py"})
        session.tool_result(call, "...")
    print(context_for("run-1", settings=settings))  # the course-correction, if any

``Publisher`` / ``Session`` publish (:mod:`streams.sdk.publisher`),
``AssessmentSubscriber`` follows assessments (:mod:`streams.sdk.subscriber`),
``context_for`` / ``context_from_view`` / ``latest_assessment`` / ``PromptContext``
read them back (:mod:`streams.sdk.context`).

Invariant: ``import streams`` imports neither confluent_kafka nor faust (the CLI,
the pure core and ``__version__`` stay cheap); these names are loaded on first
use (PEP 562 ``__getattr__``).  ``tests/unit/test_public_surface.py`` checks it.
"""

from __future__ import annotations

import typing

from streams.core.lazy import lazy_exports as _lazy_exports

#: The one place the version is written; pyproject.toml reads it
#: (``[tool.setuptools.dynamic] version = {attr = "streams.__version__"}``).
__version__ = "0.1.0"

#: Lazily exported name -> the module that defines it.
_LAZY: dict[str, str] = {
    "AssessmentSubscriber": "streams.sdk",
    "PromptContext": "streams.sdk",
    "Publisher": "streams.sdk",
    "Session": "streams.sdk",
    "Settings": "streams.settings",
    "context_for": "streams.sdk",
    "context_from_view": "streams.sdk",
    "latest_assessment": "streams.sdk",
}

if typing.TYPE_CHECKING:
    from streams.sdk import (
        AssessmentSubscriber,
        PromptContext,
        Publisher,
        Session,
        context_for,
        context_from_view,
        latest_assessment,
    )
    from streams.settings import Settings


__getattr__, __dir__ = _lazy_exports(__name__, _LAZY)


__all__ = [
    "AssessmentSubscriber",
    "PromptContext",
    "Publisher",
    "Session",
    "Settings",
    "context_for",
    "context_from_view",
    "latest_assessment",
]
