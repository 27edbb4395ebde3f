"""The client's exceptions: one per kind of error answer, carrying the API's error object."""

from typing import Any

import httpx

Job = dict[str, Any]


class NarratorError(Exception):
    """The API answered with an error; `error` is its `{"message", "type", "param", "code"}`."""

    def __init__(self, status: int, error: dict[str, Any], retry_after: float | None = None
                 ) -> None:
        super().__init__(f"{status} {error.get('type') or 'error'}: {error.get('message')}")
        self.status = status
        self.error = error
        self.message: str = str(error.get("message") or "")
        self.code: str | None = error.get("code")
        self.param: str | None = error.get("param")
        self.retry_after = retry_after


class BadRequest(NarratorError):
    """400, 413 or 422: the request is wrong (the message says which field)."""


class Unauthorized(NarratorError):
    """401 or 403: a missing or wrong API key."""


class NotFound(NarratorError):
    """404: no such job, voice or model (or one that belongs to another key)."""


class Conflict(NarratorError):
    """409: e.g. content asked for before the job is completed."""


class RateLimited(NarratorError):
    """429: over a rate limit or quota, after the client's retries."""


class Unavailable(NarratorError):
    """503: a dependency of the API is down, after the client's retries."""


class ServerError(NarratorError):
    """Any other 5xx."""


class JobFailed(Exception):
    """`wait` saw the job end other than `completed`; `job` is its last state."""

    def __init__(self, job: Job) -> None:
        super().__init__(f"job {job.get('id')} {job.get('status')}: {job.get('error')}")
        self.job = job


_BY_STATUS: dict[int, type[NarratorError]] = {
    400: BadRequest, 413: BadRequest, 422: BadRequest, 401: Unauthorized, 403: Unauthorized,
    404: NotFound, 409: Conflict, 429: RateLimited, 503: Unavailable}
RETRIED = (429, 503)


def error_for(response: httpx.Response) -> NarratorError:
    """Return the typed exception for an error answer."""
    try:
        error = response.json()["error"]
        assert isinstance(error, dict)
    except (ValueError, KeyError, TypeError, AssertionError):
        error = {"message": response.text[:500], "type": None, "param": None, "code": None}
    kind = _BY_STATUS.get(response.status_code,
                          ServerError if response.status_code >= 500 else NarratorError)
    return kind(response.status_code, error, retry_after(response))


def retry_after(response: httpx.Response) -> float | None:
    """Return the seconds a Retry-After header asks for (delta-seconds form), or None."""
    try:
        return max(0.0, float(response.headers["retry-after"]))
    except (KeyError, ValueError):
        return None
