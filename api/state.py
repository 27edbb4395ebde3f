"""Process-wide resources the routes share, created once at start-up."""

import hashlib
from dataclasses import dataclass
from typing import Annotated, Any

from celery import Celery
from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.catalogue import Catalogue
from api.errors import ApiError
from api.settings import ApiSettings
from storage import MediaStore
from workers.channel import Channel


@dataclass
class State:
    """Everything a request needs: settings, database, broker, channel, storage, catalogue."""

    settings: ApiSettings
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    celery: Celery
    channel: Channel
    store: MediaStore
    catalogue: Catalogue


def get_state(request: Request) -> State:
    """Return the app's shared state."""
    state: State = request.app.state.narrator
    return state


StateDep = Annotated[State, Depends(get_state)]


async def get_session(state: StateDep) -> Any:
    """Yield a session; routes that write commit it themselves before enqueuing."""
    async with state.sessions() as session:
        yield session


SessionDep = Annotated[AsyncSession, Depends(get_session)]


def get_owner(request: Request, state: StateDep) -> str:
    """Authenticate the caller and return the owner id of its jobs ('' when the API is open)."""
    keys = state.settings.keys
    if not keys:
        return ""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if not token or scheme.lower() != "bearer":
        raise ApiError(401, "missing API key: send 'Authorization: Bearer <key>'",
                       type="authentication_error", code="missing_api_key")
    if token not in keys:
        raise ApiError(401, "invalid API key", type="authentication_error",
                       code="invalid_api_key")
    return hashlib.sha256(token.encode()).hexdigest()[:32]


OwnerDep = Annotated[str, Depends(get_owner)]
