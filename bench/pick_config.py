"""Pick the deploy config that bench/gpu_run.sh (PICK=1) runs the product and the test under.

    python -m bench.pick_config LOGS/raws      # prints the picked config's path

`raws` holds one line per raw run, `raw NAME rc=N config=PATH`, each with its log
`raw_NAME.log` beside it (bench.gpu_engine's RESULT lines). Among the runs that finished and
made at least THROUGHPUT of the best run's audio-s/s, the one whose slowest streamed first
audio under load was lowest wins; a tie (within 10 %) goes to the run listed first, the
current default. Exits 1 when no run finished.
"""

import json
import sys
from pathlib import Path

THROUGHPUT = 0.95


def results(log: Path) -> dict[str, dict[str, object]]:
    """Return a bench.gpu_engine log's RESULT rows by tag (the last of each)."""
    rows: dict[str, dict[str, object]] = {}
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("RESULT "):
            row = json.loads(line[len("RESULT "):])
            rows[str(row.get("tag"))] = row
    return rows


def pick(raws: Path) -> str | None:
    """Return the config to run under, or None."""
    runs = []
    for line in raws.read_text().splitlines():
        fields = dict(part.split("=", 1) for part in line.split()[2:] if "=" in part)
        if not line.startswith("raw ") or fields.get("rc") != "0":
            continue
        rows = results(raws.parent / f"raw_{line.split()[1]}.log")
        if "raw" in rows and "ttfa" in rows:
            rate = float(str(rows["raw"]["audio_s_per_wall_s"]))
            under_load = rows["ttfa"]["under_load_ms"]
            slowest = max(float(v) for v in under_load) if isinstance(under_load, list) else 0.0
            runs.append((fields["config"], rate, slowest))
            print(f"{fields['config']}: {rate:.1f} audio-s/s, slowest first audio under "
                  f"load {slowest:.0f} ms", file=sys.stderr)
    if not runs:
        return None
    best = max(rate for _, rate, _ in runs)
    fast = [run for run in runs if run[1] >= THROUGHPUT * best]
    lowest = min(slowest for _, _, slowest in fast)
    return next(config for config, _, slowest in fast if slowest <= 1.1 * lowest)


if __name__ == "__main__":
    chosen = pick(Path(sys.argv[1]))
    if chosen is None:
        sys.exit(1)
    print(chosen)
