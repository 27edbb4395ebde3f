"""The HTTP protocol the API serves: uvicorn's, with a deadline on each request's head.

uvicorn closes a keep-alive connection left idle, but waits for ever on a request whose
head (the request line and headers) arrives a byte at a time: a few hundred such
connections hold a server's file descriptors and memory (slowloris). Here a connection's
request head must be complete within REQUEST_HEADER_SECONDS of the connection opening or of
the request's first byte; otherwise the connection is closed. The body has a deadline of its
own (api/body.py). httptools' protocol: `uvicorn[standard]`, a dependency, brings it.
"""

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from api.settings import get_settings


class HeadDeadline(HttpToolsProtocol):
    """uvicorn's HTTP protocol, closing a connection whose request head is late."""

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        """Start the first request's clock as the connection opens."""
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        """Start a request's clock at its first byte (a keep-alive connection's next)."""
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        """The head is here in time: stop its clock."""
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the clock with the connection."""
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(get_settings().request_header_seconds,
                                                self._late)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _late(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.close()
