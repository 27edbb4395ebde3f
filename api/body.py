"""Bounds on every request's body, before a route reads it: size, read time, cross-site posts.

An ASGI middleware in front of every route:
- a Content-Length over MAX_BODY_BYTES is a 413 before a byte of the body is read, and a
  body sent without one (chunked) is counted as it arrives and cut off past it: a route
  never holds more, and a multipart upload is never spooled past it;
- the whole body must arrive within REQUEST_BODY_SECONDS of its first read (a 408 after),
  so a client that sends a byte now and then cannot hold a connection and a route;
- a body whose type a web page can send without asking (text/plain, a form) is a 415 unless
  the route reads that type, and a POST from a browser on another site is a 403: a keyless
  server on a laptop must not take jobs from any page its user opens.
The request head has its own deadline in the HTTP protocol (api/http_protocol.py).
"""

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio
import orjson

from api.errors import ApiError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

JSON_TYPES = ("application/json", "application/jsonl", "application/x-ndjson",
              "application/jsonlines", "application/x-jsonlines")
UPLOAD_TYPES = ("multipart/form-data",)
WRITES = {"POST", "PUT", "PATCH"}


def too_large(limit: int) -> ApiError:
    """Return the 413 for a body over `limit` bytes."""
    return ApiError(413, f"the request body is over the limit of {limit} bytes "
                    "(NARRATOR_MAX_BODY_BYTES)", code="body_too_large")


class BodyLimit:
    """The middleware: see the module's docstring."""

    def __init__(self, app: App, max_bytes: int, read_seconds: float) -> None:
        self.app, self.max_bytes, self.read_seconds = app, max_bytes, read_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        refused = self._refused(scope["method"], headers)
        if refused is not None:
            await _answer(send, refused)
            return
        await self.app(scope, self._limited(receive), send)

    def _refused(self, method: str, headers: dict[str, str]) -> ApiError | None:
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return too_large(self.max_bytes) if length.isdigit() else \
                ApiError(400, "Content-Length is not a number", code="invalid_value")
        if method not in WRITES:
            return None
        if _foreign(headers):
            return ApiError(403, "a cross-site request from a browser page is not accepted",
                            type="permission_error", code="cross_site_request")
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        has_body = length not in (None, "0") or "transfer-encoding" in headers
        if has_body and not (kind in JSON_TYPES or kind.endswith("+json")
                             or kind in UPLOAD_TYPES):
            return ApiError(415, f"Content-Type '{kind or 'none'}': send JSON "
                            "(application/json) or a multipart upload",
                            code="unsupported_media_type")
        return None

    def _limited(self, receive: Receive) -> Receive:
        """Return `receive`, counting the body and holding it to its deadline."""
        received, deadline, done = 0, 0.0, False

        async def limited() -> Message:
            nonlocal received, deadline, done
            if done:  # after the body: disconnect waits have no deadline
                return await receive()
            deadline = deadline or time.monotonic() + self.read_seconds
            with anyio.move_on_after(max(0.0, deadline - time.monotonic())) as scope:
                message = await receive()
            if scope.cancelled_caught:
                raise ApiError(408, f"the request body did not arrive within "
                               f"{self.read_seconds:.0f} s", code="request_timeout")
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise too_large(self.max_bytes)
                done = not message.get("more_body", False)
            return message

        return limited


def _foreign(headers: dict[str, str]) -> bool:
    """Say whether a browser sent this from a page of another origin. Browsers say so in
    Sec-Fetch-Site; one that does not is judged by its Origin against the Host the request
    came to (or the one a proxy forwarded). Clients other than browsers send neither."""
    site = headers.get("sec-fetch-site")
    if site is not None:
        return site == "cross-site"
    origin = headers.get("origin")
    if origin is None:
        return False
    host = origin.split("://", 1)[-1]
    return host not in (headers.get("host"), headers.get("x-forwarded-host"))


async def _answer(send: Send, error: ApiError) -> None:
    body = orjson.dumps({"error": {"message": error.message, "type": error.type,
                                   "param": error.param, "code": error.code}})
    await send({"type": "http.response.start", "status": error.status_code,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
