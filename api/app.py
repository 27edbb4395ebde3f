"""The FastAPI application factory."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api import errors
from api.body import BodyLimit
from api.catalogue import Catalogue
from api.enqueue import Planner
from api.limits import RateLimiter
from api.observability import Observability
from api.routes import (
    batch,
    catalog,
    consents,
    health,
    jobs,
    lexicons,
    listen,
    live,
    metrics,
    rerender,
    speech,
    voices,
    web,
)
from api.settings import ApiSettings, get_settings
from api.state import KeyTable, State
from core import tracing
from core.broker import make_app
from core.channel import channel_for
from core.registry import registry_for
from models.db import async_session_factory, async_sql_engine
from storage import store_for


def create_app(settings: ApiSettings | None = None) -> FastAPI:
    """Build the API; resources are created at start-up and closed at shutdown."""
    settings = settings or get_settings()
    tracing.setup("narrator-api")  # before the engines and the Celery publisher exist

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = async_sql_engine()
        sessions = async_session_factory(engine)
        celery = make_app(settings)  # a publisher: tasks are sent by name
        app.state.narrator = State(
            settings=settings, engine=engine, sessions=sessions,
            autocommit=engine.execution_options(isolation_level="AUTOCOMMIT"),
            celery=celery, channel=channel_for(settings), store=store_for(),
            catalogue=Catalogue(settings, registry_for(settings)),
            keys=KeyTable(sessions),
            limiter=RateLimiter(settings.rate_limit_per_minute, settings.broker_url),
            planner=Planner(celery),
            failed_auth=RateLimiter(settings.failed_auth_per_minute, settings.broker_url,
                                    "narrator:authfail", "wrong or missing keys per minute "
                                    "from this address"),
        )
        yield
        await app.state.narrator.limiter.close()
        await app.state.narrator.failed_auth.close()
        await engine.dispose()

    app = FastAPI(title="Narrator", version="0.1.0", lifespan=lifespan,
                  default_response_class=errors.Json)
    errors.install(app)
    for router in (speech.router, live.router, batch.router, jobs.router, listen.router,
                   rerender.router, consents.router, voices.router, lexicons.router, catalog.router,
                   health.router, metrics.router, web.router):
        app.include_router(router)
    app.mount("/web", web.assets, name="web")
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes,
                       read_seconds=settings.request_body_seconds)
    app.add_middleware(Observability)
    tracing.instrument_app(app)
    return app
