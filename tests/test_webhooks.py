"""Webhooks: the job object, signed with HMAC-SHA256, delivered when a job ends, retried."""

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.conftest import WEBHOOK_SECRET
from tests.support import Stack, wait_for, wait_job


class Receiver:
    """A local HTTP server that records webhook calls and can fail the first ones."""

    def __init__(self, failures: int = 0) -> None:
        self.calls: list[tuple[dict[str, str], bytes]] = []
        self.failures = failures
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.calls.append(({k.lower(): v for k, v in self.headers.items()}, body))
                failing = len(receiver.calls) <= receiver.failures
                self.send_response(500 if failing else 204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None  # keep the test output quiet

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def verify(headers: dict[str, str], body: bytes) -> int:
    fields = dict(part.split("=", 1) for part in headers["x-narrator-signature"].split(","))
    expected = hmac.new(WEBHOOK_SECRET.encode(), f"{fields['t']}.".encode() + body,
                        hashlib.sha256).hexdigest()
    assert hmac.compare_digest(fields["v1"], expected)
    return int(fields["t"])


def test_completed_job_calls_its_webhook_signed(local_stack: Stack,
                                                receiver: Receiver) -> None:
    with local_stack.client() as http:
        job = http.post("/v1/audio/jobs", json={"input": "Call me back.",
                                                "webhook_url": receiver.url,
                                                "metadata": {"ticket": 7}}).json()
        wait_job(http, job["id"])
    wait_for(lambda: len(receiver.calls) == 1, 30, "the webhook")
    headers, body = receiver.calls[0]
    assert abs(verify(headers, body) - time.time()) < 60
    sent = json.loads(body)
    assert sent["id"] == job["id"]
    assert sent["status"] == "completed"
    assert sent["metadata"] == {"ticket": 7}
    assert sent["result"]["url"].startswith(local_stack.url)


def test_a_failing_receiver_is_retried(local_stack: Stack) -> None:
    server = Receiver(failures=1)
    try:
        with local_stack.client() as http:
            job = http.post("/v1/audio/jobs", json={"input": "Try again.",
                                                    "webhook_url": server.url}).json()
            wait_job(http, job["id"])
        wait_for(lambda: len(server.calls) == 2, 60, "the retried webhook")
        assert json.loads(server.calls[1][1])["id"] == job["id"]
        verify(*server.calls[1])
    finally:
        server.close()


def test_cancelled_job_calls_its_webhook(local_stack: Stack, receiver: Receiver) -> None:
    long_text = "\n\n".join(["A paragraph that takes a while to speak aloud. " * 8] * 12)
    with local_stack.client() as http:
        job = http.post("/v1/audio/jobs", json={"input": long_text,
                                                "webhook_url": receiver.url}).json()
        assert http.post(f"/v1/audio/jobs/{job['id']}/cancel").json()["status"] == "cancelled"
    wait_for(lambda: len(receiver.calls) >= 1, 30, "the webhook")
    assert json.loads(receiver.calls[0][1])["status"] == "cancelled"
