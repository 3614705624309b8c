"""The errors the pure core raises, under the project's root :class:`TrajectoryError`.

Only what ``streams.core`` itself raises lives here: bad configuration, bad events,
values that cannot be encoded and state bytes that cannot be decoded.  All of them
are *usage* errors (:class:`UsageError`): the input or the setting is wrong, and
retrying the same call cannot help.  I/O errors (Kafka, files, HTTP) are not defined
here: the core does no I/O, and this module imports nothing outside the standard
library, so ``import streams.core.errors`` stays pure.

The whole tree, with the I/O branch and the classes the shells raise, is
:mod:`streams.errors` (import from there).  Messages name the field, setting or
input that was wrong and say how to fix it.
"""

from __future__ import annotations


class TrajectoryError(Exception):
    """Root of every error this project raises on purpose.

    Invariant: every concrete class is under exactly one of :class:`UsageError`
    (``streams.core.errors``), ``KafkaIOError`` or ``InternalError``
    (``streams.errors``), which decide the CLI's exit code.
    """


class UsageError(TrajectoryError):
    """Bad usage or bad input: a setting, an event, a file or a message is wrong.

    Fix the named input and run again; retrying unchanged cannot help.  The CLI
    exits 2 for these.
    """


class ConfigError(UsageError, ValueError):
    """A configuration key or setting is invalid; the message names the key."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"{key}: {message}")


class InvalidEventError(UsageError, ValueError):
    """An event is malformed; ``field`` is the dotted path of the bad field."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class UnserializableError(UsageError, TypeError):
    """A value cannot be encoded; ``field`` is the path to the first bad leaf.

    Raised instead of dropping anything: there is no silent path.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"cannot encode {field}: {message}")


class StateDecodeError(UsageError, ValueError):
    """Stored state bytes cannot be decoded (corrupt, or from an unknown version).

    Bad input to the decoder, not a failed read: reading the same bytes again
    gives the same error.
    """


__all__ = [
    "ConfigError",
    "InvalidEventError",
    "StateDecodeError",
    "TrajectoryError",
    "UnserializableError",
    "UsageError",
]
