"""The Celery app: Redis in production, kombu's filesystem transport when embedded."""

import re
from typing import Any

from celery import Celery
from kombu import Queue

from workers import embedded_broker
from workers.settings import WorkerSettings, get_settings

REALTIME = "realtime"
BATCH = "batch"  # plans and webhooks: any worker (and assembly where no worker takes ASSEMBLY)
ASSEMBLY = "assembly"  # assembly: CPU workers, so a GPU worker never idles its GPU on it
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def model_queues(model_id: str) -> tuple[str, str]:
    """Return the realtime and batch queues of one model: only its workers consume them."""
    name = _UNSAFE.sub("_", model_id)
    return f"{REALTIME}.{name}", f"{BATCH}.{name}"


def worker_queues(model_ids: list[str], assembles: bool = True) -> list[str]:
    """Return the queues a worker serving `model_ids` consumes, realtime first."""
    pairs = [model_queues(m) for m in model_ids]
    return [q for q, _ in pairs] + [q for _, q in pairs] + [BATCH] + \
        ([ASSEMBLY] if assembles else [])


def split_queues(queues: list[str]) -> tuple[list[str], list[str]]:
    """Split a worker's queues into Celery's pool and the realtime lane (workers.realtime).

    A worker with only realtime queues has no batch work to starve them: its pool takes them.
    """
    lane = [q for q in queues if q.startswith(f"{REALTIME}.")]
    pooled = [q for q in queues if q not in lane]
    return (pooled, lane) if pooled else (lane, [])


def broker_options(settings: WorkerSettings) -> tuple[str, dict[str, Any]]:
    """Return the broker URL and its transport options."""
    if not settings.embedded_broker:
        # Longer than the longest segment, so a slow task is not redelivered while it runs.
        return settings.broker_url, {"visibility_timeout": 6 * 3600}
    root = settings.broker_dir
    for sub in ("queue", "processed", "control"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    return f"{embedded_broker.SCHEME}://", {
        "data_folder_in": str(root / "queue"),
        "data_folder_out": str(root / "queue"),
        "processed_folder": str(root / "processed"),
        "control_folder": str(root / "control"),
        "store_processed": False,
        # kombu's default of 1 s would add half a second to every sync request.
        "polling_interval": settings.broker_poll_seconds,
    }


def queue_depths(settings: WorkerSettings) -> dict[str, int]:
    """Return how many messages wait in each Narrator queue of the broker."""
    if settings.embedded_broker:  # one file per message: <ms>_<uuid>.<queue>.msg
        depths: dict[str, int] = {}
        folder = settings.broker_dir / "queue"
        for path in folder.glob("*.msg") if folder.is_dir() else ():
            queue = path.name.split(".", 1)[1].removesuffix(".msg")
            depths[queue] = depths.get(queue, 0) + 1
        return depths
    import redis

    client = redis.Redis.from_url(settings.broker_url, socket_timeout=2)
    try:
        names = sorted({key.decode() for pattern in (f"{REALTIME}.*", f"{BATCH}*", ASSEMBLY)
                        for key in client.scan_iter(match=pattern, _type="list")})
        pipe = client.pipeline()
        for name in names:
            pipe.llen(name)
        return dict(zip(names, pipe.execute(), strict=True))
    finally:
        client.close()


def make_app(settings: WorkerSettings | None = None) -> Celery:
    """Create the Celery app; tasks are sent by name, so the API never imports them."""
    settings = settings or get_settings()
    url, options = broker_options(settings)
    app = Celery("narrator", broker=url, include=["workers.tasks"])
    app.conf.update(
        broker_transport_options=options,
        broker_connection_retry_on_startup=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_ignore_result=True,
        task_default_queue=BATCH,
        task_queues=[Queue(BATCH)],
        task_create_missing_queues=True,  # the per-model queues
        task_serializer="json",
        accept_content=["json"],
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        worker_enable_remote_control=not settings.embedded_broker,
        worker_send_task_events=False,
        broker_heartbeat=0,
    )
    return app


celery_app = make_app()
