"""`narrator worker`, with SIGUSR2 raising Celery's consumer error of a Redis restart.

In CI, Redis restarted mid-job and kombu raised AttributeError ('NoneType' object has no
attribute 'hostname') from a channel closed while the consumer reconnected: Celery logged
"Unrecoverable error" and stopped its worker. That race cannot be provoked on demand; the
signal handler raises the same exception in the main thread, which runs the consumer's loop,
so it takes the same path out to Celery's handler. Run as `python -P this-file worker ...`.
"""

import signal
from types import FrameType


def _unrecoverable(_signum: int, _frame: FrameType | None) -> None:
    raise AttributeError("'NoneType' object has no attribute 'hostname'")


signal.signal(signal.SIGUSR2, _unrecoverable)

from narrator.cli import main  # noqa: E402  (the handler is set before the worker starts)

main()
