"""`/metrics`: Prometheus text format, for this host's processes and the platform's state."""

from collections.abc import Iterable

import anyio
from fastapi import APIRouter, Depends, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry
from sqlalchemy import func, select

from api.state import StateDep, metrics_access
from core import metrics
from core.broker import queue_depths
from core.queues import model_queues
from models import Job, JobStatus
from models import segments as segment_state

router = APIRouter()


class _Snapshot(Collector):
    def __init__(self, families: list[GaugeMetricFamily]) -> None:
        self.families = families

    def collect(self) -> Iterable[GaugeMetricFamily]:
        return self.families


@router.get("/metrics", include_in_schema=False, dependencies=[Depends(metrics_access)])
async def prometheus(state: StateDep) -> Response:
    """Counters and histograms of every process on this host, job counts and queue depths."""
    families = []
    jobs = GaugeMetricFamily("narrator_jobs", "Jobs by status (deleted ones left out)",
                             labels=["status"])
    async with state.sessions() as session:
        counts = dict((await session.execute(
            select(Job.status, func.count()).where(Job.deleted_at.is_(None))
            .group_by(Job.status))).tuples().all())
    for status in JobStatus:
        jobs.add_metric([status.value], counts.get(status, 0))
    families.append(jobs)
    async with state.sessions() as session:
        waiting = (await session.execute(segment_state.waiting_counts())).tuples().all()
    held = GaugeMetricFamily("narrator_segments_waiting", "Segments of jobs in progress "
                             "waiting for dispatch, by model, key and priority",
                             labels=["model", "key", "priority"])
    by_queue: dict[str, int] = {}
    for model, owner, priority, count in waiting:
        held.add_metric([model, owner[:8], priority], count)
        queue = model_queues(model)[1]
        by_queue[queue] = by_queue.get(queue, 0) + count
    families.append(held)
    depth = GaugeMetricFamily("narrator_queue_depth", "Work waiting in each queue: its "
                              "messages, and for a model's batch queue the segments waiting "
                              "for dispatch (what autoscaling should see)", labels=["queue"])
    depths = await anyio.to_thread.run_sync(queue_depths, state.settings)
    for queue in sorted(set(depths) | set(by_queue)):
        depth.add_metric([queue], depths.get(queue, 0) + by_queue.get(queue, 0))
    families.append(depth)
    workers = GaugeMetricFamily("narrator_workers", "Live workers by model and state "
                                "(warming, ready: warm and taking work, failed)",
                                labels=["model", "state"])
    live: dict[tuple[str, str], int] = {}
    for record in await state.catalogue.workers():
        for served in record.models or ():
            live[(served.id, record.state)] = live.get((served.id, record.state), 0) + 1
    for (model_id, worker_state), count in sorted(live.items()):
        workers.add_metric([model_id, worker_state], count)
    families.append(workers)
    registry = CollectorRegistry()
    registry.register(_Snapshot(families))
    body = await anyio.to_thread.run_sync(metrics.exposition)
    return Response(body + generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
