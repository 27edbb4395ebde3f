"""Models and voices the API offers: its own configuration plus what live workers publish."""

import time

import anyio
import structlog

from core.catalog import ModelInfo, catalog
from core.registry import Registry, WorkerRecord
from core.settings import CoreSettings

log = structlog.get_logger()
CACHE_SECONDS = 2.0


class Catalogue:
    """Cached view of the configured models and the worker registry."""

    def __init__(self, settings: CoreSettings, registry: Registry) -> None:
        self.registry = registry
        try:
            self.local: tuple[ModelInfo, ...] = catalog(settings)
        except (OSError, ValueError, ImportError) as exc:
            # A GPU checkpoint is often mounted on GPU workers only: they publish it instead.
            log.info("catalogue.local_unavailable", engine=settings.engine, error=str(exc))
            self.local = ()
        self._workers: list[WorkerRecord] = []
        self._read_at = 0.0

    async def workers(self) -> list[WorkerRecord]:
        """Return the live workers (cached for a couple of seconds)."""
        if time.monotonic() - self._read_at > CACHE_SECONDS:
            try:
                self._workers = await anyio.to_thread.run_sync(self.registry.live)
            except Exception as exc:  # advisory: a registry outage must not fail requests
                log.warning("catalogue.registry_unavailable", error=str(exc))
            self._read_at = time.monotonic()
        return self._workers

    async def models(self) -> tuple[ModelInfo, ...]:
        """Return every model, configured ones first, then those only workers know."""
        models = {m.id: m for m in self.local}
        for worker in await self.workers():
            for model in worker.models:
                models.setdefault(model.id, model)
        return tuple(models.values())
