"""One exception type and one renderer for every error, in OpenAI's shape."""

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import structlog
from asyncpg.exceptions import CannotConnectNowError, TooManyConnectionsError
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from storage import StorageUnavailable

log = structlog.get_logger()


class Json(JSONResponse):
    """A JSON response rendered by orjson."""

    def render(self, content: Any) -> bytes:
        """Serialise with orjson (UUIDs, datetimes and numpy scalars included)."""
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


class ApiError(Exception):
    """An expected failure: it carries its HTTP status and the OpenAI error fields."""

    def __init__(self, status_code: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status_code, self.message, self.type = status_code, message, type
        self.param, self.code, self.headers = param, code, headers


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    """Return a 400 invalid_request_error."""
    return ApiError(400, message, param=param, code=code)


def not_found(message: str, param: str | None = None) -> ApiError:
    """Return a 404."""
    return ApiError(404, message, param=param, code="not_found")


def unavailable(message: str, retry_after: int = 5) -> ApiError:
    """Return a 503 for a dependency that is down."""
    return ApiError(503, message, type="service_unavailable", code="dependency_unavailable",
                    headers={"Retry-After": str(retry_after)})


def _body(message: str, type: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


_STATUS_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
                 405: "invalid_request_error", 409: "conflict_error", 413: "invalid_request_error",
                 429: "rate_limit_error"}


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "literal", "none"}


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    first = exc.errors()[0]
    # Union members add their type to the location ('voice.str'): keep field names only.
    loc = [str(p) for p in first.get("loc", ())
           if p != "body" and not (isinstance(p, str) and (p in _TYPE_TAGS or p[:1].isupper()))]
    param = ".".join(loc) or None
    if first.get("type") == "json_invalid":
        return "the request body is not valid JSON: " + str(first.get("ctx", {}).get(
            "error", first.get("msg"))), None
    if first.get("type") == "missing":
        return f"{param}: this field is required", param
    if first.get("type") == "extra_forbidden":
        return f"{param}: unknown field", param
    message = str(first.get("msg")).removeprefix("Value error, ")
    return f"{param}: {message}" if param else message, param


async def _api_error(_: Request, exc: ApiError) -> Json:
    return Json(_body(exc.message, exc.type, exc.param, exc.code),
                status_code=exc.status_code, headers=exc.headers)


async def _invalid(_: Request, exc: RequestValidationError) -> Json:
    message, param = _validation_message(exc)
    return Json(_body(message, "invalid_request_error", param, "invalid_value"), status_code=400)


async def _http(_: Request, exc: HTTPException) -> Json:
    return Json(
        _body(str(exc.detail), _STATUS_TYPES.get(exc.status_code, "invalid_request_error"),
              None, None),
        status_code=exc.status_code, headers=exc.headers)


async def _database(request: Request, exc: DBAPIError) -> Json:
    unreachable = isinstance(exc, OperationalError | InterfaceError)
    if not exc.connection_invalidated and not unreachable:
        return await _unexpected(request, exc)
    log.warning("database.unavailable", path=request.url.path, error=str(exc.orig))
    return Json(_body("the database is unreachable; retry shortly", "service_unavailable",
                      None, "dependency_unavailable"),
                status_code=503, headers={"Retry-After": "5"})


async def _pool(request: Request, _exc: PoolTimeout) -> Json:
    log.warning("database.pool_exhausted", path=request.url.path)
    return Json(_body("the server is busy: no database connection came free in time; "
                      "retry shortly", "service_unavailable", None, "server_busy"),
                status_code=503, headers={"Retry-After": "2"})


async def _storage(request: Request, exc: StorageUnavailable) -> Json:
    log.warning("storage.unavailable", path=request.url.path, error=str(exc))
    return Json(_body("storage is unreachable; retry shortly",
                      "service_unavailable", None, "dependency_unavailable"),
                status_code=503, headers={"Retry-After": "5"})


async def _unreachable(request: Request, exc: Exception) -> Json:
    # asyncpg raises these unwrapped when a new connection cannot be opened (refused,
    # timed out, the server starting up or full); psycopg's come as OperationalError.
    log.warning("dependency.unavailable", path=request.url.path, error=repr(exc))
    return Json(_body("the database is unreachable; retry shortly", "service_unavailable",
                      None, "dependency_unavailable"),
                status_code=503, headers={"Retry-After": "5"})


async def _unexpected(request: Request, _exc: Exception) -> Json:
    log.exception("request.unhandled", path=request.url.path)
    return Json(_body("internal error", "server_error", None, None), status_code=500)


# Each kind of exception and how it is answered; the most specific handler wins.
HANDLERS: list[tuple[type[Exception], Callable[[Request, Any], Awaitable[Json]]]] = [
    (ApiError, _api_error), (RequestValidationError, _invalid), (HTTPException, _http),
    (DBAPIError, _database), (PoolTimeout, _pool), (StorageUnavailable, _storage),
    (OSError, _unreachable), (CannotConnectNowError, _unreachable),
    (TooManyConnectionsError, _unreachable), (Exception, _unexpected),
]


def install(app: FastAPI) -> None:
    """Register the handlers that render every error in OpenAI's shape."""
    for kind, handler in HANDLERS:
        app.add_exception_handler(kind, handler)
