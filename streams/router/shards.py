"""Static shards: a fixed share of the session topics per router, no group rebalance.

With several routers in one consumer group (the default way to run more than
one), every new session topic changes the regex match of every member and the
group rebalances: under session churn the group spent much of its time in
``PreparingRebalance``, transactions were refused with ``ILLEGAL_GENERATION``
and publish -> routed p99 was 4-11 s with two routers (docs/chaos.md "Rejoins
under session churn").  A router started with ``--shard I/N`` instead *assigns*
itself the session topics whose session id hashes to ``I`` (:func:`shard_of`),
plus every partition of ``<prefix>.control``, and joins no group: a new topic is
added to its assignment by its own metadata refresh, with nothing revoked
anywhere and no other router involved.

What still comes from Kafka: the consumed offsets are committed to the router
group (``RouterConfig.resolved_group_id``) as before, by each shard's transactions
(exactly-once) or offset commits (at-least-once), so a topic's position survives
restarts and a change of ``N``; a shard's transactional id
(``<prefix>.router.shard-I-of-N``) fences a dead predecessor of the same shard and
a second process started for the same shard.

Invariants: :func:`shard_of` is a pure function of the session id and ``N``
(CRC-32 of its UTF-8 bytes, the same in every process and Python version), so the
``N`` shards ``0..N-1`` cover every session topic exactly once.  Hence the rule for
operators: run each index of one ``N`` exactly once, and change ``N`` only with
every router of the deployment stopped (two routers with different ``N`` can both
own a topic and route it twice).  Pure: no Kafka import.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Final

from streams.errors import ConfigError

_SHARD_RE: Final = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")
#: More shards than this is a typo, not a deployment (each is a router process).
MAX_SHARDS: Final = 1024


def shard_of(session_id: str, count: int) -> int:
    """The shard (``0..count-1``) that owns ``session_id``'s topic."""
    return zlib.crc32(session_id.encode("utf-8", "surrogatepass")) % count


@dataclass(frozen=True, slots=True)
class Shard:
    """Shard ``index`` of ``count`` (``--shard index/count``)."""

    index: int
    count: int

    def __post_init__(self) -> None:
        for name in ("index", "count"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"shard.{name}", f"{value!r}: must be an integer")
        if not 1 <= self.count <= MAX_SHARDS:
            raise ConfigError("shard", f"{self}: the count must be 1..{MAX_SHARDS}")
        if not 0 <= self.index < self.count:
            raise ConfigError(
                "shard", f"{self}: the index must be 0..{self.count - 1} (shards count from 0)"
            )

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"I/N"`` -> ``Shard(I, N)``; a ConfigError that shows the form otherwise."""
        m = _SHARD_RE.fullmatch(text)
        if m is None:
            raise ConfigError(
                "shard", f"{text!r}: give INDEX/COUNT, e.g. 0/2 and 1/2 for two routers"
            )
        return cls(int(m.group(1)), int(m.group(2)))

    def owns(self, session_id: str) -> bool:
        """Is ``session_id``'s topic this shard's?"""
        return shard_of(session_id, self.count) == self.index

    def transactional_id(self, prefix: str) -> str:
        """The shard's default transactional id: stable across its restarts, one per
        shard, and apart from the group-mode routers' ``<prefix>.router.K``."""
        return f"{prefix}.router.shard-{self.index}-of-{self.count}"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


__all__ = ["MAX_SHARDS", "Shard", "shard_of"]
