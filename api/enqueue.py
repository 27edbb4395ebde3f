"""Group commit for the broker: one Celery message plans every job submitted meanwhile.

Publishing a Celery message costs the API about 1.5 ms of CPU (kombu builds the message and
a Redis client per publish; bench.submit --profile), more than the rest of a submit. So a
submit awaits `Planner.plan(job_id)`: the first caller's job is published at once, in a
thread, and the jobs submitted while that publish runs go out together in the next message
(`narrator.plan_many`). Each caller still learns whether its own job reached the broker, so
a broker outage is still a 503 for exactly the jobs it hit.

With tracing on (core.tracing), each job's plan goes out in a message of its own, published
in its submitting request's trace, so that a job is one trace: one message for many jobs
could carry only one of their traces.
"""

import asyncio

import anyio
from celery import Celery

from core import tracing
from core.queues import BATCH, PLAN, PLAN_MANY

MAX_BATCH = 500


class Planner:
    """Publishes plan tasks for submitted jobs, batching those that arrive together."""

    def __init__(self, celery: Celery) -> None:
        self._celery = celery
        self._waiting: list[tuple[str, asyncio.Future[None], object]] = []
        self._busy = False

    async def plan(self, job_id: str) -> None:
        """Return once the job's plan task is on the broker; raise what publishing raised."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((job_id, done, tracing.current()))
        if not self._busy:
            self._busy = True
            asyncio.get_running_loop().create_task(self._drain())
        await done

    async def plan_all(self, job_ids: list[str]) -> None:
        """Publish the plan tasks of many jobs at once (a batch submit): MAX_BATCH per
        message, in one thread; raise what publishing raised."""
        def publish() -> None:
            for start in range(0, len(job_ids), MAX_BATCH):
                self._publish(job_ids[start:start + MAX_BATCH])

        await anyio.to_thread.run_sync(publish)

    async def _drain(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
                ids = [job_id for job_id, _, _ in batch]
                try:
                    if tracing.enabled():
                        await anyio.to_thread.run_sync(self._publish_traced, batch)
                    else:
                        await anyio.to_thread.run_sync(self._publish, ids)
                except Exception as exc:
                    for _, done, _ in batch:
                        if not done.done():
                            done.set_exception(exc)
                else:
                    for _, done, _ in batch:
                        if not done.done():
                            done.set_result(None)
        finally:
            self._busy = False

    def _publish_traced(self, batch: list[tuple[str, asyncio.Future[None], object]]) -> None:
        for job_id, _, trace in batch:
            with tracing.within(trace):
                self._publish([job_id])

    def _publish(self, ids: list[str]) -> None:
        if len(ids) == 1:
            self._celery.send_task(PLAN, args=[ids[0]], queue=BATCH)
        else:
            self._celery.send_task(PLAN_MANY, args=[ids], queue=BATCH)
