"""Outbound URLs (webhooks) never reach private networks unless allow-listed."""

from typing import Any

import pytest
from sqlalchemy import Engine

from tests.conftest import count_jobs, error_of
from tests.support import Stack
from workers import outbound


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
    from workers import webhooks

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
