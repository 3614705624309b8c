"""One exception root for the whole project, with a subclass per failure.

Messages name the field, setting or input that was wrong and say how to fix it.
Every class lives here (pure, no I/O imports) so the core, the serde, the SDK and
the shells all raise from the same tree; ``streams.errors`` re-exports it.
"""

from __future__ import annotations


class TrajectoryError(Exception):
    """Root of every error this project raises on purpose."""


class ConfigError(TrajectoryError, ValueError):
    """A configuration key or setting is invalid; the message names the key."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"{key}: {message}")


class InvalidEventError(TrajectoryError, ValueError):
    """An event is malformed; ``field`` is the dotted path of the bad field."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class UnserializableError(TrajectoryError, TypeError):
    """A value cannot be encoded; ``field`` is the path to the first bad leaf.

    Raised instead of dropping anything: there is no silent path.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"cannot encode {field}: {message}")


class StateDecodeError(TrajectoryError, ValueError):
    """Stored state bytes cannot be decoded (corrupt, or from an unknown version)."""


class ImportFormatError(TrajectoryError, ValueError):
    """A trajectory file is not in the format it claims (or no format matched)."""

    def __init__(self, source: str, message: str) -> None:
        self.source = source
        super().__init__(f"{source}: {message}")


class SerdeError(TrajectoryError):
    """Root of Kafka message encoding/decoding failures."""


class UnknownSchemaError(SerdeError):
    """The message names a schema (fingerprint or registry id) we do not know."""


class MalformedMessageError(SerdeError):
    """The bytes are not a valid framed Avro message of the expected schema."""


class OversizedMessageError(SerdeError):
    """The message is larger than the configured cap."""


class DeliveryError(TrajectoryError):
    """Kafka did not acknowledge a produced message; nothing was silently dropped."""


class BrokerError(TrajectoryError):
    """The local Kafka broker could not be obtained, started, stopped or reached."""


__all__ = [
    "BrokerError",
    "ConfigError",
    "DeliveryError",
    "ImportFormatError",
    "InvalidEventError",
    "MalformedMessageError",
    "OversizedMessageError",
    "SerdeError",
    "StateDecodeError",
    "TrajectoryError",
    "UnknownSchemaError",
    "UnserializableError",
]
