"""Celery workers: tasks, the job pipeline, engines, text and audio processing."""
