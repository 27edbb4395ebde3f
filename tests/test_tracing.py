"""OpenTelemetry tracing across real processes (core/tracing.py).

The API and the worker run as processes with OTEL_EXPORTER_OTLP_ENDPOINT pointing at an
OTLP/HTTP receiver in this test, which decodes what their exporters send (the collector's
own protobuf messages). A job is one trace from the submitting request through plan,
segments (the engine's time a span of its own), assembly and the webhook; a sync request is
one trace through the queue. Without the variable, nothing is exported.
"""

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.conftest import base_env, redis_url
from tests.support import Stack, start_stack, wait_for, wait_job


class Collector:
    """Spans received over OTLP/HTTP: (trace id, service, span name, attributes)."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str, str, dict[str, str]]] = []
        self.webhooks = 0
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path == "/v1/traces":
                    collector.receive(body)
                else:  # the job's webhook
                    with collector._lock:
                        collector.webhooks += 1
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def receive(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        with self._lock:
            for resource in request.resource_spans:
                service = next(a.value.string_value for a in resource.resource.attributes
                               if a.key == "service.name")
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        attributes = {a.key: str(a.value.string_value or a.value.int_value)
                                      for a in span.attributes}
                        self.spans.append((span.trace_id.hex(), service, span.name, attributes))

    def trace_of(self, name: str) -> str | None:
        """Return the trace id of the first span called `name` (None before it arrives)."""
        with self._lock:
            return next((trace_id for trace_id, _, found, _ in self.spans if found == name), None)

    def in_trace(self, name: str) -> list[tuple[str, str]]:
        """Return (service, span name) of every span in the trace of the span `name`."""
        trace_id = self.trace_of(name)
        with self._lock:
            return [(service, n) for t, service, n, _ in self.spans if t == trace_id]


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory,
           database_url: str) -> Iterator[tuple[Stack, Collector]]:
    import redis

    redis.Redis.from_url(redis_url(3)).flushdb()
    collector = Collector()
    tmp = tmp_path_factory.mktemp("traced")
    env = base_env(tmp, database_url, 3) | {
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_BSP_SCHEDULE_DELAY": "200",  # export every 0.2 s, not 5 s: the test waits less
    }
    stack = start_stack(tmp, env)
    yield stack, collector
    stack.stop()
    collector.server.shutdown()
    collector.server.server_close()


def test_a_job_is_one_trace_from_request_to_webhook(traced: tuple[Stack, Collector]) -> None:
    stack, collector = traced
    with stack.client() as http:
        job = http.post("/v1/audio/jobs", json={
            "model": "piper", "voice": "joe", "response_format": "mp3",
            "input": "The first sentence is short. The second one is a little longer.\n\n"
                     "A second paragraph ends the job.",
            "webhook_url": f"{collector.url}/hook"}).json()
        assert wait_job(http, job["id"])["status"] == "completed"
    wait_for(lambda: collector.webhooks >= 1, 30, "the webhook")

    def whole() -> bool:
        names = {name for _, name in collector.in_trace("POST /v1/audio/jobs")}
        return {"run/narrator.plan", "run/narrator.assemble", "run/narrator.notify",
                "engine.synthesize"} <= names and bool(names & {"POST", "HTTP POST"})

    wait_for(whole, 30, "the job's spans")
    spans = collector.in_trace("POST /v1/audio/jobs")
    services = {service for service, _ in spans}
    names = [name for _, name in spans]
    assert services == {"narrator-api", "narrator-worker"}
    assert names.count("run/narrator.synthesize") >= 2  # each segment, in the job's trace
    assert names.count("engine.synthesize") == names.count("run/narrator.synthesize")
    queried = {service for service, name in spans
               if name.split()[0] in ("INSERT", "SELECT", "UPDATE")}
    assert queried == {"narrator-api", "narrator-worker"}  # SQLAlchemy's spans, in the trace


def test_a_sync_request_is_one_trace_through_the_queue(
        traced: tuple[Stack, Collector]) -> None:
    stack, collector = traced
    with stack.client() as http:
        answer = http.post("/v1/audio/speech", json={
            "model": "piper", "voice": "joe", "input": "Traced through the queue.",
            "response_format": "wav"})
    assert answer.status_code == 200

    def whole() -> bool:
        names = {n for _, n in collector.in_trace("POST /v1/audio/speech")}
        return {"realtime.speak", "engine.synthesize"} <= names

    wait_for(whole, 30, "the sync request's spans")
    spans = collector.in_trace("POST /v1/audio/speech")
    assert {service for service, _ in spans} == {"narrator-api", "narrator-worker"}


def test_without_an_endpoint_spans_are_not_recorded() -> None:
    """The default: setup() does nothing without the variable, and Narrator's spans are
    OpenTelemetry's no-op (this test process never set tracing up)."""
    from core import tracing

    tracing.setup("narrator-test")
    assert not tracing.enabled()
    with tracing.span("engine.synthesize") as span:
        assert not span.is_recording()
