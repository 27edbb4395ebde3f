"""The Celery app factory and the broker: Redis in production, a folder when embedded.

The API builds a publisher (`make_app()`: it only sends tasks, by name) when it starts; the
worker builds its app with `worker=True`, which also loads the tasks. Nothing is created at
import time.
"""

from typing import Any

from celery import Celery
from kombu import Queue

from core import embedded_broker
from core.queues import ASSEMBLY, BATCH, REALTIME
from core.settings import CoreSettings


def broker_options(settings: CoreSettings) -> tuple[str, dict[str, Any]]:
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


def queue_depths(settings: CoreSettings) -> dict[str, int]:
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


def make_app(settings: CoreSettings, *, worker: bool = False) -> Celery:
    """Create the Celery app: a publisher, or with `worker` the app that runs the tasks."""
    url, options = broker_options(settings)
    app = Celery("narrator", broker=url, include=["workers.tasks"] if worker else [])
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
