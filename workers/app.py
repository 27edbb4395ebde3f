"""The worker's Celery app (the tasks are in workers.tasks); the API only publishes."""

from core.broker import make_app
from workers.settings import get_settings

celery_app = make_app(get_settings(), worker=True)
