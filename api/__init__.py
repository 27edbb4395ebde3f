"""The HTTP API (FastAPI): validates, authenticates, writes job rows, enqueues by task name."""
