"""Structured logs: JSON lines in production, readable lines on a terminal."""

import logging
import sys

import structlog


def configure(level: str = "INFO", json: bool | None = None) -> None:
    """Route structlog and the standard library through one renderer."""
    json = not sys.stderr.isatty() if json is None else json
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    )
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        # One write per line (message and newline together): PrintLogger writes them apart, so
        # a line from the standard library, logged by another thread between the two, ran
        # into it (219 of 40,000 lines from two threads in a test; merged lines in the worker
        # logs of the H100 runs).
        logger_factory=structlog.WriteLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        foreign_pre_chain=shared))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # kombu warns on every connection of the filesystem transport that it has no hostname.
    logging.getLogger("kombu.connection").setLevel(logging.ERROR)
    # One line per HTTP request made (webhooks, S3, the CLI's calls) is noise: callers log.
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)
