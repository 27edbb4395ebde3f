"""A load generator for the API benchmarks, run in its own process (aiohttp on uvloop).

Reads one JSON spec on stdin: {url, method, paths, concurrency, requests, duration, body,
headers}. `concurrency` clients each send a request, wait for the whole answer, and send the
next, over keep-alive connections, until `requests` were sent or `duration` seconds passed;
paths are taken in turn. Writes one JSON result on stdout: requests, errors, statuses,
requests per second and latency percentiles. Only loopback addresses are accepted.
"""

import asyncio
import ipaddress
import json
import sys
import time
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import aiohttp


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Drive the load described by `spec`; return what happened."""
    host = urlsplit(spec["url"]).hostname or ""
    if not ipaddress.ip_address(host).is_loopback:
        raise SystemExit(f"loadgen: {host} is not a loopback address")
    paths: list[str] = spec["paths"]
    body = spec["body"].encode() or None
    headers = spec["headers"] | ({"Content-Type": "application/json"} if body else {})
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    errors = 0
    sent = 0
    limit, deadline = spec["requests"], time.monotonic() + spec["duration"]
    connector = aiohttp.TCPConnector(limit=spec["concurrency"], force_close=False)
    async with aiohttp.ClientSession(spec["url"], connector=connector) as session:

        async def client() -> None:
            nonlocal sent, errors
            while sent < limit and time.monotonic() < deadline:
                path = paths[sent % len(paths)]
                sent += 1
                started = time.perf_counter()
                try:
                    async with session.request(spec["method"], path, data=body,
                                               headers=headers) as response:
                        await response.read()
                        statuses[response.status] += 1
                except aiohttp.ClientError:
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(spec["concurrency"])))
        wall = time.perf_counter() - started
    ordered = sorted(latencies)

    def quantile(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0

    return {"requests": len(latencies), "errors": errors, "wall_s": wall,
            "statuses": {str(k): v for k, v in statuses.items()},
            "rps": len(latencies) / wall if wall else 0.0,
            "p50_ms": 1000 * quantile(0.5), "p90_ms": 1000 * quantile(0.9),
            "p99_ms": 1000 * quantile(0.99), "max_ms": 1000 * (ordered[-1] if ordered else 0)}


def main() -> None:
    """Read the spec, run it, print the result."""
    import uvloop

    spec = json.loads(sys.stdin.read())
    print(json.dumps(uvloop.run(run(spec))))


if __name__ == "__main__":
    main()
