"""The live OTLP/HTTP receiver: agents instrumented with OpenTelemetry, observed as sessions.

:mod:`.decode` turns request bodies (protobuf or JSON, gzip or not) into the
normalized spans and log records of :mod:`streams.importers.otlp`, whose mapper
gives the events; :mod:`.ingest` numbers them per session, drops redeliveries and
publishes through the publisher SDK; :mod:`.server` is the HTTP face (auth, TLS,
size limit, back-pressure, Prometheus metrics).  ``opentelemetry-proto`` (the
``otlp`` extra) is imported only when a protobuf body arrives.
"""

__all__: list[str] = []
