"""Per-request id, access log line and HTTP metrics, as one pure ASGI middleware.

Every request gets an id (`req_<hex>`), returned in X-Request-Id and bound to every log line
written while it is answered; an id the client sent is logged beside it as
`client_request_id` (never reused: sync speech routes its audio by the server's id).
"""

import re
import time
import uuid
from typing import Any

import structlog

from core import metrics

log = structlog.get_logger()
_SAFE = re.compile(rb"[A-Za-z0-9._:-]{1,128}")
Scope = dict[str, Any]


class Observability:
    """Wrap the app: request id, one `http.request` log line, request count and latency."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = f"req_{uuid.uuid4().hex}"
        bound: dict[str, Any] = {"request_id": request_id}
        for name, value in scope["headers"]:
            if name == b"x-request-id" and _SAFE.fullmatch(value):
                bound["client_request_id"] = value.decode()
        tokens = structlog.contextvars.bind_contextvars(**bound)
        scope.setdefault("state", {})["request_id"] = request_id
        status = 500
        started = time.perf_counter()

        async def send_with_id(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", [])
                           if k.lower() != b"x-request-id"]
                message = message | {"headers": [*headers,
                                                 (b"x-request-id", request_id.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            route = getattr(scope.get("route"), "path", "unmatched")
            method = scope["method"]
            metrics.http_requests.labels(method, route, str(status)).inc()
            metrics.http_latency.labels(method, route).observe(elapsed)
            log.info("http.request", method=method, route=route, status=status,
                     ms=round(elapsed * 1000, 2))
            structlog.contextvars.reset_contextvars(**tokens)
