"""The worker's read-only HTTP view (Faust web, ``127.0.0.1:<web_port>``).

::

    GET /sessions                        sessions on THIS worker's partitions (JSON; rows a
                                         store still holds for revoked partitions are left out)
        ?min_severity=caution|warning|info   only sessions whose assessment is at least that
        ?glob=ci-*                           only session ids matching the glob
    GET /sessions/{id}/assessment        the current rendered assessment (text/markdown),
                                         JSON with ``Accept: application/json`` (or ?format=json)
    GET /sessions/{id}/state             table values of the session (JSON)
    GET /sessions/{id}/minutes           per-minute counts of the session (JSON)
    GET /stats                           processor counters of this worker
    GET /metrics                         Prometheus text exposition (streams.worker.metrics)

Per-session views are answered by whichever worker owns the session's
partition: a worker that does not own it forwards the request to the owner's
web endpoint and returns its answer unchanged (status, content type, bytes).
The owner is found as Faust's ``@app.table_route`` finds it: the murmur2
partition of the key (:func:`key_partition`), then the URL the owning member
advertised in the consumer group's assignor metadata (``app.router.table_metadata``;
each worker advertises its ``canonical_url`` = ``http://<web_host>:<web_port>``,
so workers on 127.0.0.1 with different ports are told apart).  We do not
decorate with ``table_route``: (0) its ``app.router.key_store`` asks the
*producer's* metadata for the changelog topic's partitions, which is ``None``
until the worker has produced to it (``TypeError`` -> 500 on a fresh worker;
found here), (1) a
malformed id must be answered 400 *before* anything is forwarded, (2) Faust's
forwarder re-encodes the body as text (``web.text(await response.text())``) while
the markdown must arrive byte-identical, and (3) a request that was already
forwarded once is never forwarded again (header ``X-Trajectory-Forwarded``), so
two workers with momentarily different views of the assignment cannot bounce a
request between them; the second one answers from its own tables (404 with a
hint if it does not have the session).

Invariants: the markdown body of ``/assessment`` is ``CurrentAssessment.render()``
of the session's engine: the one in the worker's memory when it holds it (newer
than the table while it waits for its flush), else the ``engines`` table's -- the
same core, hence
byte-identical to ``trajectory analyze``'s rendering of the same events.  The
views never write a table.  Every error is JSON ``{"error": ..., "session_id":
..., "hint": ...}`` (markdown for ``/assessment`` unless JSON was asked for):
400 malformed id or bad query parameter, 404 unknown session / no assessment
yet (``error`` says which), 502 the owning worker did not answer, 503 no owner
known for the partition (e.g. during a rebalance).
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from aiokafka.partitioner import murmur2  # type: ignore[import-untyped]
from faust.web import Request, Response, View
from yarl import URL

from streams.core.assessment import SEVERITIES, CurrentAssessment, severity_rank
from streams.core.engine import SessionState
from streams.core.statecodec import decode_state
from streams.errors import BadRequest
from streams.settings import SESSION_ID_RE
from streams.worker.auth import ALL_TENANTS, Caller, ViewAuth
from streams.worker.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from streams.worker.metrics import WorkerMetrics, faust_events_lag
from streams.worker.state import BudgetState, MinuteCounts, SessionCounters

log = logging.getLogger(__name__)

FORWARDED_HEADER: Final = "X-Trajectory-Forwarded"
MARKDOWN_TYPE: Final = "text/markdown; charset=utf-8"
MAX_GLOB_CHARS: Final = 200
#: A forwarded request fails (502) after this long: the owner is down or stuck.
FORWARD_TIMEOUT_S: Final = 10.0


# -- pure helpers (unit-tested) ---------------------------------------------
def bad_id_body(session_id: str) -> dict[str, Any] | None:
    """The 400 body for a malformed session id, None when the id is well formed."""
    if SESSION_ID_RE.match(session_id):
        return None
    return {
        "error": "malformed session id",
        "session_id": session_id[:200],
        "hint": "use 1-200 characters of letters, digits, '.', '_' or '-'",
    }


def unknown_session_body(session_id: str) -> dict[str, Any]:
    return {
        "error": "unknown session",
        "session_id": session_id,
        "hint": "no event of this session has reached the worker owning its partition yet "
        "(check the session id and that the router runs)",
    }


def no_assessment_body(session_id: str, reason: str) -> dict[str, Any]:
    return {"error": "no assessment yet", "session_id": session_id, "hint": reason}


def error_markdown(body: Mapping[str, Any], status: int) -> str:
    """A markdown rendering of an error body (for clients that asked for markdown)."""
    lines = [f"# {status}: {body['error']}", ""]
    if body.get("session_id") is not None:
        lines.append(f"session: `{body['session_id']}`")
        lines.append("")
    if body.get("hint"):
        lines.append(str(body["hint"]))
        lines.append("")
    return "\n".join(lines)


def parse_min_severity(value: str | None) -> str | None:
    """``?min_severity=``: one of the core's severities (case-insensitive) or absent."""
    if value is None or value == "":
        return None
    v = value.strip().lower()
    if v not in SEVERITIES:
        raise BadRequest(
            parameter="min_severity",
            message=f"{value[:50]!r} is not one of {', '.join(SEVERITIES)}",
        )
    return v


def parse_glob(value: str | None) -> str | None:
    """``?glob=``: an fnmatch pattern over session ids (case-sensitive), or absent."""
    if value is None or value == "":
        return None
    if len(value) > MAX_GLOB_CHARS:
        raise BadRequest(parameter="glob", message=f"longer than {MAX_GLOB_CHARS} characters")
    return value


def wants_json(accept: str | None, format_param: str | None = None) -> bool:
    """True when the client prefers JSON over markdown.

    ``?format=json|markdown`` wins; otherwise the ``Accept`` media range with the
    highest q among ``application/json`` and ``text/markdown`` (``text/*`` and
    ``*/*`` count for markdown, the default).  A tie goes to markdown.
    """
    if format_param:
        f = format_param.strip().lower()
        if f not in ("json", "markdown", "md"):
            raise BadRequest(
                parameter="format", message=f"{format_param[:50]!r}: use json or markdown"
            )
        return f == "json"
    if not accept:
        return False
    q_json = q_md = -1.0
    for part in accept.split(","):
        fields = [p.strip() for p in part.split(";")]
        media = fields[0].lower()
        q = 1.0
        for param in fields[1:]:
            name, _, val = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(val)
                except ValueError:
                    q = 0.0
        if media in ("application/json", "application/*"):
            q_json = max(q_json, q)
        elif media in ("text/markdown", "text/*", "*/*"):
            q_md = max(q_md, q)
    return q_json > 0 and q_json > q_md


def assessment_json(session_id: str, current: CurrentAssessment) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "severity": current.severity,
        "call_index": current.call_index,
        "seq": current.seq,
        "trigger": current.trigger,
        "trend": current.trend,
        "generated_at_ms": current.generated_at_ms,
        "observers": [a.observer_name for a in current.assessments],
        "rendered": current.render(),
    }


@dataclass(frozen=True, slots=True)
class SessionRow:
    """One line of ``GET /sessions``."""

    session_id: str
    events: int
    last_seq: int
    last_event_ms: int | None
    severity: str | None  # None: no assessment yet
    call_index: int | None
    assessment_seq: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "events": self.events,
            "last_seq": self.last_seq,
            "last_event_ms": self.last_event_ms,
            "severity": self.severity,
            "call_index": self.call_index,
            "assessment_seq": self.assessment_seq,
        }


def select_rows(
    rows: list[SessionRow], min_severity: str | None, glob: str | None
) -> list[SessionRow]:
    """Rows passing both filters, by session id.  With ``min_severity`` a session
    without an assessment is left out (it has no severity to compare)."""
    out = []
    floor = severity_rank(min_severity) if min_severity is not None else None
    for row in rows:
        if glob is not None and not fnmatch.fnmatchcase(row.session_id, glob):
            continue
        if floor is not None and (row.severity is None or severity_rank(row.severity) < floor):
            continue
        out.append(row)
    out.sort(key=lambda r: r.session_id)
    return out


def engine_summary(state: SessionState, state_bytes: int) -> dict[str, Any]:
    """A JSON view of a stored engine state (not the whole state: it can be large)."""
    current = state.current
    return {
        "last_seq": state.last_seq,
        "profile": state.profile,
        "tokens_used": state.tokens_used,
        "budget": {
            "deadline_ms": state.budget.deadline_ms,
            "max_tokens": state.budget.max_tokens,
            "max_tool_calls": state.budget.max_tool_calls,
        },
        "state_bytes": state_bytes,
        "assessment": None
        if current is None
        else {
            "severity": current.severity,
            "seq": current.seq,
            "call_index": current.call_index,
            "trigger": current.trigger,
            "observers": [a.observer_name for a in current.assessments],
            "rendered": current.render(),
        },
    }


def key_partition(session_id: str, partitions: int) -> int:
    """The partition of ``session_id`` among ``partitions``: Java-compatible murmur2,
    as aiokafka's ``DefaultPartitioner``, Faust's routing and librdkafka's
    ``murmur2_random`` (the router's partitioner) compute it for a non-empty key."""
    if partitions < 1:
        raise ValueError(f"partitions: {partitions}; need at least 1")
    h: int = murmur2(session_id.encode("utf-8"))
    return (h & 0x7FFFFFFF) % partitions


def owner_url(metadata: Mapping[str, Mapping[str, Any]], topic: str, partition: int) -> str | None:
    """The worker URL whose assignment holds ``topic[partition]`` (Faust's
    ``app.router.table_metadata(table)``: ``{url: {topic: [partitions]}}``), else None."""
    for url, topics in metadata.items():
        if partition in topics.get(topic, ()):
            return str(url)
    return None


def key_str(key: Any) -> str:
    """A table key as the session id (stores may hold bytes or str keys)."""
    return key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)


class _EngineStates:
    """Decoded engine states, re-decoded only when a session's stored bytes changed.

    ``GET /sessions`` over 1,000 sessions would otherwise decode every full
    engine state on every poll.  Bounded: cleared past ``limit`` entries.
    """

    def __init__(self, engines: Any, limit: int = 50_000) -> None:
        self.engines = engines
        self.limit = limit
        self._cache: dict[str, tuple[bytes, SessionState]] = {}

    def get(self, session_id: str) -> tuple[SessionState, int] | None:
        if self.engines is None:
            return None
        raw = self.engines.get(session_id.encode())
        if raw is None:
            self._cache.pop(session_id, None)
            return None
        hit = self._cache.get(session_id)
        if hit is not None and hit[0] == raw:
            return hit[1], len(raw)
        state = decode_state(raw)
        if len(self._cache) >= self.limit:
            self._cache.clear()
        self._cache[session_id] = (raw, state)
        return state, len(raw)


class HeldSessions(Protocol):
    """What the worker holds in memory per session (``EventProcessor``): newer than
    the tables while a session waits for its flush; None / empty when not held."""

    def held_assessment(self, session_id: str) -> tuple[bool, CurrentAssessment | None]: ...

    def held_state(self, session_id: str) -> SessionState | None: ...

    def counters(self, session_id: str) -> SessionCounters | None: ...

    def held_budget(self, session_id: str) -> BudgetState | None: ...

    def held_minutes(self, session_id: str) -> list[MinuteCounts]: ...


def register_views(
    app: Any,
    *,
    sessions: Any,
    budgets: Any,
    minutes: Any,
    engines: Any,
    stats: Callable[[], dict[str, Any]],
    metrics: WorkerMetrics | None = None,
    events_topic: str | None = None,
    auth: ViewAuth | None = None,
    held: HeldSessions | None = None,
) -> None:
    """Register the views above on ``app`` (a ``faust.App``); tables are Faust tables.

    ``auth``: bearer tokens per tenant (:mod:`streams.worker.auth`); None leaves the
    view open.

    ``held``: the session values the worker holds in memory (its
    ``EventProcessor``): the views show those, which are newer than the tables while
    a session waits for its flush (``--engine-flush-interval``), and read the tables
    for the rest.

    ``stats()`` gives the ``/stats`` body.  ``/metrics`` is served when ``metrics``
    is given; with ``events_topic`` it samples the consumer lag of that topic at
    every scrape.  The tables must be co-partitioned with the events topic (they
    are: same partition count, keyed by session id), so the owner of a key in
    ``sessions`` owns the session.
    """
    states = _EngineStates(engines)
    route_table = sessions.name
    route_topic = sessions.changelog_topic.get_topic_name()
    route_partitions = int(sessions.partitions)

    def current_of(session_id: str) -> CurrentAssessment | None:
        """The session's current assessment: the held engine's, else the table's."""
        if held is not None:
            in_memory, current = held.held_assessment(session_id)
            if in_memory:
                return current
        eng = states.get(session_id)
        return eng[0].current if eng is not None else None

    def owned_partitions() -> set[int]:
        """Partitions of the route table assigned to this worker (same metadata as routing)."""
        here = app.conf.canonical_url
        owned: set[int] = set()
        for url, topics in app.router.table_metadata(route_table).items():
            u = URL(str(url))
            if (u.host, u.port) == (here.host, here.port):
                owned.update(topics.get(route_topic, ()))
        return owned

    def caller_of(request: Request) -> Caller:
        if auth is None:
            return Caller(ALL_TENANTS)
        return auth.caller(request.headers.get("Authorization")) or Caller("")

    def denied(
        view: View, request: Request, session_id: str | None = None, fleet: bool = False
    ) -> Response | None:
        """401 without a valid token; 404 for another tenant's session; 403 fleet views."""
        if auth is None:
            return None
        caller = caller_of(request)
        out: Response
        if not caller.tenant:
            out = view.json(
                {
                    "error": "unauthorized",
                    "hint": "send Authorization: Bearer <token> (a token of the tokens file)",
                },
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="trajectory"'},
            )
            return out
        if fleet and not caller.all_tenants:
            out = view.json({"error": "forbidden", "hint": "needs an all-tenant token"}, status=403)
            return out
        if session_id is not None and not caller.may_see(session_id):
            out = view.json(unknown_session_body(session_id), status=404)
            return out
        return None

    def bad_request(view: View, exc: BadRequest) -> Response:
        out: Response = view.json(
            {"error": "bad request", "parameter": exc.parameter, "hint": str(exc)}, status=400
        )
        return out

    async def routed(
        view: View,
        request: Request,
        session_id: str,
        local: Callable[[], Response],
        markdown_errors: bool = False,
    ) -> Response:
        body = bad_id_body(session_id)
        if body is not None:
            return error_response(view, body, 400, markdown_errors)
        if request.headers.get(FORWARDED_HEADER):
            return local()  # forwarded once already: answer from our own tables
        partition = key_partition(session_id, route_partitions)
        owner = owner_url(app.router.table_metadata(route_table), route_topic, partition)
        if owner is None:
            return error_response(
                view,
                {
                    "error": "no owner known for this session's partition",
                    "session_id": session_id,
                    "hint": f"partition {partition} of {route_topic} is not assigned to any "
                    "worker right now (the consumer group is rebalancing or this worker has "
                    "not joined it yet); retry in a few seconds",
                },
                503,
                markdown_errors,
            )
        dest = URL(owner)
        here = app.conf.canonical_url
        if (dest.host, dest.port) == (here.host, here.port):
            return local()
        return await forward(view, request, dest, session_id, markdown_errors)

    async def forward(
        view: View, request: Request, dest: Any, session_id: str, markdown_errors: bool
    ) -> Response:
        import aiohttp

        url = request.url.with_host(dest.host).with_port(dest.port)
        headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
        headers[FORWARDED_HEADER] = str(app.conf.canonical_url)
        try:
            async with app.http_client.request(
                method=request.method,
                headers=headers,
                url=url,
                timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S),
            ) as resp:
                body = await resp.read()
                ctype = resp.headers.get("Content-Type", "application/octet-stream")
                out: Response = view.bytes(
                    body, status=resp.status, headers={"Content-Type": ctype}
                )
                return out
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("forwarding %s to %s failed: %r", request.url.path, url, exc)
            return error_response(
                view,
                {
                    "error": "the worker owning this session did not answer",
                    "session_id": session_id,
                    "hint": f"{dest} ({type(exc).__name__}: {exc}); retry when the group "
                    "has rebalanced",
                },
                502,
                markdown_errors,
            )

    def error_response(view: View, body: dict[str, Any], status: int, markdown: bool) -> Response:
        out: Response
        if markdown:
            out = view.bytes(
                error_markdown(body, status).encode("utf-8"),
                status=status,
                headers={"Content-Type": MARKDOWN_TYPE},
            )
        else:
            out = view.json(body, status=status)
        return out

    @app.page("/sessions")
    class SessionsView(View):
        """Sessions on this worker's partitions with their latest severity (JSON list)."""

        async def get(self, request: Request) -> Response:
            refused = denied(self, request)
            if refused is not None:
                return refused
            caller = caller_of(request)
            try:
                min_sev = parse_min_severity(request.query.get("min_severity"))
                glob = parse_glob(request.query.get("glob"))
            except BadRequest as exc:
                return bad_request(self, exc)
            rows = []
            owned = owned_partitions()
            for key, raw in sessions.items():
                sid = key_str(key)
                if glob is not None and not fnmatch.fnmatchcase(sid, glob):
                    continue  # cheap filter before decoding anything
                if key_partition(sid, route_partitions) not in owned:
                    continue  # a store can keep rows of partitions revoked from us
                if not caller.may_see(sid):
                    continue  # a tenant token lists its own tenant's sessions only
                counters = (held.counters(sid) if held is not None else None) or (
                    SessionCounters.decode(raw)
                )
                current = current_of(sid)
                has = current is not None and bool(current.assessments)
                rows.append(
                    SessionRow(
                        session_id=sid,
                        events=counters.events,
                        last_seq=counters.last_seq,
                        last_event_ms=counters.last_event_ms,
                        severity=current.severity if has and current else None,
                        call_index=current.call_index if has and current else None,
                        assessment_seq=current.seq if has and current else None,
                    )
                )
            selected = select_rows(rows, min_sev, glob)
            return self.json(
                {
                    "worker": str(app.conf.canonical_url),
                    "scope": "sessions on this worker's partitions only",
                    "count": len(selected),
                    "sessions": [r.to_json() for r in selected],
                }
            )

    @app.page("/sessions/{session_id}/assessment")
    class AssessmentView(View):
        """The session's current assessment: markdown (default) or JSON."""

        async def get(self, request: Request, session_id: str) -> Response:
            refused = denied(self, request, session_id)
            if refused is not None:
                return refused
            try:
                as_json = wants_json(request.headers.get("Accept"), request.query.get("format"))
            except BadRequest as exc:
                return bad_request(self, exc)

            def local() -> Response:
                if sessions.get(session_id.encode()) is None:
                    return error_response(self, unknown_session_body(session_id), 404, not as_json)
                if engines is None:
                    return error_response(
                        self,
                        no_assessment_body(
                            session_id, "this worker runs without the engine (--no-engine)"
                        ),
                        404,
                        not as_json,
                    )
                current = current_of(session_id)
                if current is None or not current.assessments:
                    return error_response(
                        self,
                        no_assessment_body(
                            session_id,
                            "the session is known but no observer has assessed it yet "
                            "(healthy sessions may never get one)",
                        ),
                        404,
                        not as_json,
                    )
                if as_json:
                    out: Response = self.json(assessment_json(session_id, current))
                    return out
                out = self.bytes(
                    current.render().encode("utf-8"), headers={"Content-Type": MARKDOWN_TYPE}
                )
                return out

            return await routed(self, request, session_id, local, markdown_errors=not as_json)

    @app.page("/sessions/{session_id}/state")
    class SessionStateView(View):
        """JSON of one session's table values (404 unknown, 400 malformed id)."""

        async def get(self, request: Request, session_id: str) -> Response:
            refused = denied(self, request, session_id)
            if refused is not None:
                return refused

            def local() -> Response:
                key = session_id.encode()
                raw = sessions.get(key)
                if raw is None:
                    out: Response = self.json(unknown_session_body(session_id), status=404)
                    return out
                braw = budgets.get(key)
                eng = states.get(session_id)
                counters = SessionCounters.decode(raw)
                budget = None if braw is None else BudgetState.decode(braw)
                if held is not None:  # newer than the tables while the session waits
                    counters = held.counters(session_id) or counters
                    budget = held.held_budget(session_id) or budget
                    state = held.held_state(session_id)
                    if state is not None:  # state_bytes: the stored size
                        eng = (state, eng[1] if eng is not None else 0)
                out = self.json(
                    {
                        "session_id": session_id,
                        "state": counters.to_json(),
                        "budget": None if budget is None else budget.to_json(),
                        "engine": None if eng is None else engine_summary(*eng),
                    }
                )
                return out

            return await routed(self, request, session_id, local)

    @app.page("/sessions/{session_id}/minutes")
    class SessionMinutesView(View):
        """Per-minute counts of one session, oldest first (scans the minutes table)."""

        async def get(self, request: Request, session_id: str) -> Response:
            refused = denied(self, request, session_id)
            if refused is not None:
                return refused

            def local() -> Response:
                prefix = f"{session_id}@"
                by_start = {
                    m.minute_start_ms: m
                    for m in (
                        MinuteCounts.decode(raw)
                        for key, raw in minutes.items()
                        if key_str(key).startswith(prefix)
                    )
                }
                if held is not None:  # newer than the table while the session waits
                    by_start.update((m.minute_start_ms, m) for m in held.held_minutes(session_id))
                if not by_start and sessions.get(session_id.encode()) is None:
                    out: Response = self.json(unknown_session_body(session_id), status=404)
                    return out
                rows = [by_start[k].to_json() for k in sorted(by_start)]
                out = self.json({"session_id": session_id, "minutes": rows})
                return out

            return await routed(self, request, session_id, local)

    @app.page("/stats")
    class StatsView(View):
        """Processor counters (events applied / duplicates ignored) of this worker."""

        async def get(self, request: Request) -> Response:
            refused = denied(self, request, fleet=True)
            if refused is not None:
                return refused
            return self.json(stats())

    if metrics is not None:
        worker_metrics = metrics

        @app.page("/metrics")
        class MetricsView(View):
            """Prometheus text exposition of this worker's registry."""

            async def get(self, request: Request) -> Response:
                refused = denied(self, request, fleet=True)
                if refused is not None:
                    return refused
                if events_topic is not None:
                    worker_metrics.sample_lag(faust_events_lag(app, events_topic))
                out: Response = self.bytes(
                    worker_metrics.render(), headers={"Content-Type": METRICS_CONTENT_TYPE}
                )
                return out


__all__ = [
    "FORWARDED_HEADER",
    "MARKDOWN_TYPE",
    "BadRequest",
    "HeldSessions",
    "SessionRow",
    "assessment_json",
    "bad_id_body",
    "engine_summary",
    "error_markdown",
    "no_assessment_body",
    "parse_glob",
    "parse_min_severity",
    "register_views",
    "select_rows",
    "unknown_session_body",
    "wants_json",
]
