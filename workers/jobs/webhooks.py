"""Webhooks: POST the job object to `webhook_url` when a job ends, signed with HMAC-SHA256.

The signature header is `X-Narrator-Signature: t=<unix>,v1=<hex>` over "<t>.<body>" with
NARRATOR_WEBHOOK_SECRET; receivers should check it and reject old timestamps.
"""

import hashlib
import hmac
import time
import uuid
from typing import Any

import httpx
import orjson
from sqlalchemy import select
from sqlalchemy.orm import defer

from core import outbound
from core.keys import result_store
from core.views import job_object
from models import Job
from models.db import session_scope
from workers.settings import get_settings

TIMEOUT_SECONDS = 10.0


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """Return the signature header value for `body`."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


def payload(job_id: uuid.UUID) -> tuple[str, bytes] | None:
    """Return the webhook URL and the rendered job object of a job that has one."""
    settings = get_settings()
    with session_scope() as session:
        job = session.scalar(select(Job).options(defer(Job.chapters, raiseload=True))
                             .where(Job.id == job_id))
        if job is None or not job.webhook_url or job.deleted_at is not None:
            return None
        store = result_store(job.output_url)
        body = job_object(job, lambda key, local: store.url(key, local_url=local),
                          settings.api_url)
        return job.webhook_url, orjson.dumps(body)


def deliver(url: str, body: bytes) -> int:
    """POST once; raise on a network error or a non-2xx answer (the task retries).

    Raises outbound.RefusedURL, which is not retried, if the URL now leads somewhere
    private: its name may resolve elsewhere than when the job was submitted.
    """
    settings = get_settings()
    address = outbound.check(url, settings.outbound_allow)
    target, headers, extensions = outbound.pinned(url, address)  # no second DNS lookup
    headers |= {"Content-Type": "application/json", "User-Agent": "narrator-webhooks/1"}
    if settings.webhook_secret:
        headers["X-Narrator-Signature"] = sign(settings.webhook_secret, int(time.time()), body)
    # The receiver's answer body is never read: a huge or endless one costs nothing.
    with httpx.Client(timeout=TIMEOUT_SECONDS, follow_redirects=False) as client, \
            client.stream("POST", target, content=body, headers=headers,
                          extensions=extensions) as response:
        response.raise_for_status()
        return response.status_code


def notify(job_id: uuid.UUID) -> dict[str, Any] | None:
    """Deliver the webhook of a job, if it has one."""
    found = payload(job_id)
    if found is None:
        return None
    url, body = found
    return {"status": deliver(url, body)}
