"""OpenTelemetry tracing, off unless OTEL_EXPORTER_OTLP_ENDPOINT is set.

When it is set, each process exports its spans over OTLP (HTTP, protobuf; the standard
OTEL_* variables configure the exporter and the batch processor). The maintained
instrumentations make the spans: FastAPI for requests, Celery for publishing and running
tasks (the trace context travels in the task message's headers), SQLAlchemy for queries,
httpx for webhooks. Narrator adds what no library sees: the engine's own time (`span`) and
a sync request taken off the queue by the realtime lane (`consumed`), which reads its
message without Celery.

Without the variable nothing is set up, and `span` is OpenTelemetry's no-op.
"""

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import context, propagate, trace

ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
_tracer = trace.get_tracer("narrator")
_service: str | None = None


def enabled() -> bool:
    """Return whether this process exports traces."""
    return _service is not None


def setup(service: str) -> None:
    """Export this process's spans and instrument its libraries, once, if configured."""
    global _service
    if _service is not None or not os.environ.get(ENDPOINT):
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    name = os.environ.get("OTEL_SERVICE_NAME", service)
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    CeleryInstrumentor().instrument()  # type: ignore[no-untyped-call]
    # Its declared range stops below SQLAlchemy 2.1, which it traces all the same (its
    # engine events have not changed; tests/test_tracing.py sees the queries).
    SQLAlchemyInstrumentor().instrument(skip_dep_check=True)
    HTTPXClientInstrumentor().instrument()
    _service = name


def instrument_app(app: Any) -> None:
    """Trace the API's requests (FastAPI), if tracing is set up."""
    if enabled():
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        FastAPIInstrumentor.instrument_app(app, excluded_urls="healthz,readyz,metrics")


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[trace.Span]:
    """Time a block as a span of the current trace (a no-op without tracing)."""
    with _tracer.start_as_current_span(name, attributes=attributes) as current:
        yield current


def current() -> object:
    """Return the current trace context, to continue it later elsewhere (`within`)."""
    return context.get_current()


@contextmanager
def within(trace_context: object) -> Iterator[None]:
    """Run a block in a trace context from `current` (another thread's, or earlier)."""
    token = context.attach(trace_context)  # type: ignore[arg-type]
    try:
        yield
    finally:
        context.detach(token)


@contextmanager
def consumed(name: str, headers: Mapping[str, Any], **attributes: Any) -> Iterator[None]:
    """Run a block as a span continuing the trace whose context `headers` carry."""
    with within(propagate.extract(dict(headers))), span(name, **attributes):
        yield
