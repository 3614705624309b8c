"""Kafka message serde: fastavro bodies with Avro single-object or Confluent framing.

See :mod:`streams.serde.avro` for the framing and error contract and
:mod:`streams.serde.schemas` for the bundled ``.avsc`` files.  Depends on the core,
fastavro and (only for Confluent framing) ``confluent_kafka.schema_registry``.
"""

from streams.errors import (
    MalformedMessageError,
    OversizedMessageError,
    SerdeError,
    UnknownSchemaError,
)
from streams.serde.avro import (
    FRAMINGS,
    AssessmentSerde,
    AssessmentWire,
    AvroSerde,
    EventSerde,
    Framing,
    PatternRecord,
    PatternSerde,
    make_registry,
)
from streams.serde.schemas import crc64_avro, fingerprint, load_schema

__all__ = [
    "FRAMINGS",
    "AssessmentSerde",
    "AssessmentWire",
    "AvroSerde",
    "EventSerde",
    "Framing",
    "MalformedMessageError",
    "OversizedMessageError",
    "PatternRecord",
    "PatternSerde",
    "SerdeError",
    "UnknownSchemaError",
    "crc64_avro",
    "fingerprint",
    "load_schema",
    "make_registry",
]
