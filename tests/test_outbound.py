"""Outbound URLs (webhooks) never reach private networks unless allow-listed."""

from typing import Any

import pytest
from sqlalchemy import Engine

from core import outbound
from tests.conftest import count_jobs, error_of
from tests.support import Stack


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8080/hook",  # loopback
    "http://localhost/hook",
    "http://[::1]/hook",
    "http://10.1.2.3/hook",  # RFC 1918
    "http://192.168.0.10/hook",
    "http://169.254.169.254/latest/meta-data/",  # cloud metadata (link-local)
    "http://100.64.0.1/hook",  # carrier-grade NAT
    "http://[::ffff:10.0.0.1]/hook",  # IPv4-mapped IPv6
    "http://[fd00::1]/hook",  # unique local
    "http://[2002:7f00:1::1]/hook",  # 6to4 of 127.0.0.1
    "http://[2002:a9fe:a9fe::1]/hook",  # 6to4 of 169.254.169.254
    "http://[fec0::1]/hook",  # site-local
    "http://[64:ff9b::a9fe:a9fe]/hook",  # NAT64 of 169.254.169.254
    "http://0.0.0.0/hook",
    "ftp://example.com/hook",
    "file:///etc/passwd",
    "http:///no-host",
    "http://host.invalid/hook",  # does not resolve
    "http://example.com:notaport/hook",
])
def test_private_odd_and_unresolvable_urls_are_refused(url: str) -> None:
    with pytest.raises(outbound.RefusedURL):
        outbound.check(url)


def test_public_and_allow_listed_addresses_pass() -> None:
    outbound.check("https://93.184.215.14/hook")  # a public address: no DNS needed
    outbound.check("http://10.1.2.3/hook", "10.0.0.0/8")
    outbound.check("http://127.0.0.1:9000/hook", "192.168.0.0/16, 127.0.0.1/32")
    outbound.check("http://hooks.internal/x", "hooks.internal")  # a named host, as is
    with pytest.raises(outbound.RefusedURL):
        outbound.check("http://10.1.2.3/hook", "10.2.0.0/16")


def test_the_worker_refuses_a_private_url_before_connecting() -> None:
    from workers.jobs import webhooks

    with pytest.raises(outbound.RefusedURL, match=r"10\.9\.9\.9"):
        webhooks.deliver("http://10.9.9.9:1/hook", b"{}")


@pytest.mark.parametrize("url", ["http://10.0.0.1/hook", "http://169.254.169.254/",
                                 "gopher://example.com/", "http://[::1]:1/"])
def test_a_refused_webhook_url_is_a_400_and_nothing_is_stored(local_stack: Stack, db: Engine,
                                                              url: str) -> None:
    before = count_jobs(db)
    with local_stack.client() as http:
        response = http.post("/v1/audio/jobs", json={"input": "Hello.", "webhook_url": url})
    assert response.status_code == 400, response.text
    error: dict[str, Any] = error_of(response)
    assert error["param"] == "webhook_url"
    assert error["code"] == "webhook_url_refused"
    assert count_jobs(db) == before


def test_a_delivery_connects_to_the_address_it_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """DNS rebinding: the name answers 127.0.0.1 (allowed) to the check, then a refused
    address; the delivery still goes to 127.0.0.1, with the original Host header."""
    import http.server
    import socket
    import threading

    from workers.jobs import webhooks
    from workers.settings import get_settings

    seen: list[str] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.headers["Host"])
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            """Keep the test's output quiet."""

    server = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    real = socket.getaddrinfo
    answers = iter(["127.0.0.1"])

    def rebinding(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "rebind.test":  # first the allowed address, then a refused one
            host = next(answers, "10.255.255.1")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    monkeypatch.setenv("NARRATOR_OUTBOUND_ALLOW", "127.0.0.1/32")
    get_settings.cache_clear()
    port = server.server_address[1]
    try:
        assert webhooks.deliver(f"http://rebind.test:{port}/hook", b"{}") == 204
        with pytest.raises(outbound.RefusedURL, match=r"10\.255\.255\.1"):
            webhooks.deliver(f"http://rebind.test:{port}/hook", b"{}")
    finally:
        server.shutdown()
        server.server_close()
        get_settings.cache_clear()
    assert seen == [f"rebind.test:{port}"]


def test_pinned_keeps_the_host_name_for_tls_and_the_host_header() -> None:
    url, headers, extensions = outbound.pinned("https://user:pw@hooks.example:8443/a?b=1",
                                               "2606:2800:220:1::1")
    assert url == "https://user:pw@[2606:2800:220:1::1]:8443/a?b=1"
    assert headers == {"Host": "hooks.example:8443"}
    assert extensions == {"sni_hostname": "hooks.example"}
    assert outbound.pinned("http://hooks.internal/x", None) == ("http://hooks.internal/x", {}, {})
