"""Per-key request rates (429 + Retry-After); the job caps are api/quota.py.

The request rate is counted in Redis when the broker is Redis, so every API process and
replica shares one count per key (a fixed one-minute window: INCR, then EXPIRE); in embedded
mode, in this process.
"""

import time
from typing import Any

from api.errors import ApiError

WINDOW_SECONDS = 60


def too_many(message: str, code: str, retry_after: int) -> ApiError:
    """Return a 429 in the OpenAI error shape with a Retry-After header."""
    return ApiError(429, message, type="rate_limit_error", code=code,
                    headers={"Retry-After": str(max(1, retry_after))})


class RateLimiter:
    """Counts each key's requests per minute window."""

    def __init__(self, per_minute: int, redis_url: str = "", prefix: str = "narrator:rate",
                 what: str = "requests per minute for this key") -> None:
        self.per_minute, self.prefix, self.what = per_minute, prefix, what
        self._redis: Any = None
        if per_minute and redis_url.startswith(("redis://", "rediss://")):
            import redis.asyncio

            self._redis = redis.asyncio.Redis.from_url(redis_url)
        self._local: dict[tuple[str, int], int] = {}

    async def hit(self, owner: str, count: int = 1) -> None:
        """Count `count` requests for `owner` (0: only check); raise a 429 past the limit."""
        if not self.per_minute:
            return
        now = time.time()
        window = int(now // WINDOW_SECONDS)
        if self._redis is not None:
            key = f"{self.prefix}:{owner or 'open'}:{window}"
            async with self._redis.pipeline(transaction=True) as pipe:
                total, _ = await pipe.incrby(key, count).expire(key, WINDOW_SECONDS * 2).execute()
        else:
            if len(self._local) > 10_000:
                self._local = {k: v for k, v in self._local.items() if k[1] == window}
            total = self._local[(owner, window)] = self._local.get((owner, window), 0) + count
        if total > self.per_minute or (not count and total >= self.per_minute):
            raise too_many(f"rate limit: {self.per_minute} {self.what}",
                           "rate_limit_exceeded", int((window + 1) * WINDOW_SECONDS - now) + 1)

    async def close(self) -> None:
        """Close the Redis connection, if any."""
        if self._redis is not None:
            await self._redis.aclose()
