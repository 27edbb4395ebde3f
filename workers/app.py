"""The worker's Celery app (the tasks are in workers.tasks); the API only publishes."""

from typing import Any

from celery import bootsteps

from core.broker import make_app
from workers.settings import get_settings

celery_app = make_app(get_settings(), worker=True)


class RestartOnCeleryError(bootsteps.StartStopStep):
    """Celery closes every step of its worker first when it stops; a stop with a failing
    exit status and no signal is its "Unrecoverable error" (WorkerProcess.celery_failed).
    Added here, with the app: the worker's blueprint is built before the tasks import."""

    def close(self, parent: Any) -> None:
        if parent.exitcode:
            from workers.tasks import worker

            worker.celery_failed(parent.exitcode)


celery_app.steps["worker"].add(RestartOnCeleryError)
