"""Resident memory of one `narrator api` process: idle, under submit load, under poll load.

The API runs alone on Postgres + Redis (no worker); bench.loadgen drives 64 clients of
`POST /v1/audio/jobs` and then of `GET /v1/audio/jobs/{id}` for --seconds each. The RSS is
sampled every 0.5 s. Target: < 150 MB at every sample.

    python -m bench.api_rss [--seconds 15]
"""

import argparse

from bench import poll, submit
from bench.common import platform_on_services, rss_mib, save, table


def main() -> None:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    phases: dict[str, list[float]] = {}
    with platform_on_services(worker=False) as platform:
        phases["idle after start"] = [rss_mib(platform.api.pid)]
        with submit.RssSampler([platform.api.pid]) as rss:
            submit.sweep(platform, [64], args.seconds)
        phases["64 clients submitting"] = rss.samples
        with submit.RssSampler([platform.api.pid]) as rss:
            poll.sweep(platform, [64], args.seconds, jobs=1000)
        phases["64 clients polling"] = rss.samples
        phases["idle after load"] = [rss_mib(platform.api.pid)]
    peak = max(max(v) for v in phases.values())
    print(table(["phase", "samples", "RSS max MB", "RSS last MB"],
                [[name, len(v), f"{max(v) * 1.048576:.0f}", f"{v[-1] * 1.048576:.0f}"]
                 for name, v in phases.items()]))
    print(f"\npeak {peak * 1.048576:.0f} MB (target < 150 MB)")
    save("api_rss", {"phases_mib": phases, "peak_mib": peak, "peak_mb": peak * 1.048576,
                     "target_mb": 150})


if __name__ == "__main__":
    main()
