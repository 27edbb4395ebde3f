"""The Grafana dashboard (deploy/grafana/narrator.json) and the alerting rules
(deploy/prometheus/alerts.yml): every metric they read is exported by a live /metrics, and
Prometheus's own promtool accepts the rules and every dashboard query."""

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support import embedded

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "narrator.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
METRIC = re.compile(r"\bnarrator_[a-z_]+\b")
SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


def base(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def dashboard_queries() -> list[str]:
    model = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in model["panels"] for t in p["targets"]]


def alert_rules() -> list[dict[str, object]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def used() -> set[str]:
    exprs = dashboard_queries() + [str(r["expr"]) for r in alert_rules()]
    return {base(m) for expr in exprs for m in METRIC.findall(expr)}


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Metric names on a live /metrics after a sync answer and a completed job."""
    with embedded(tmp_path_factory.mktemp("dashboard")) as (url, _), \
            httpx.Client(base_url=url, timeout=120) as http:
        http.post("/v1/audio/speech", json={"input": "Hello.", "response_format": "wav",
                                            "stream_format": "audio"}).raise_for_status()
        job = http.post("/v1/audio/jobs", json={"input": "A short job."}).json()
        deadline = time.monotonic() + 120
        while http.get(f"/v1/audio/jobs/{job['id']}").json()["status"] != "completed":
            assert time.monotonic() < deadline, "the job did not complete"
            time.sleep(0.2)
        time.sleep(6)  # the busy meter publishes every 5 s
        text = http.get("/metrics").text
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            names.add(base(line.split()[2]))
        elif line and not line.startswith("#"):
            names.add(base(re.split(r"[{ ]", line, maxsplit=1)[0]))
    return names


def test_the_dashboard_has_a_panel_for_each_question() -> None:
    titles = " | ".join(p["title"] for p in json.loads(DASHBOARD.read_text())["panels"]).lower()
    for topic in ("queue depth", "jobs by status", "audio-seconds per second",
                  "real-time factor", "first audio", "retakes, failures", "busy fraction",
                  "latency by route", "workers by state"):
        assert topic in titles


def test_every_alert_is_complete() -> None:
    names = {str(r["alert"]) for r in alert_rules()}
    assert {"NarratorWorkWaitingNothingSynthesised", "NarratorNoReadyWorker",
            "NarratorSegmentFailureRate", "NarratorFirstAudioSlow",
            "NarratorReaperRequeuing"} <= names
    for rule in alert_rules():
        labels, notes = rule["labels"], rule["annotations"]
        assert isinstance(labels, dict)
        assert labels["severity"] in ("critical", "warning")
        assert isinstance(notes, dict)
        assert notes["summary"]


def test_every_metric_they_read_is_exported(scraped: set[str]) -> None:
    wanted = used()
    assert len(wanted) >= 10
    assert wanted - scraped == set()


def test_promtool_accepts_the_rules_and_the_dashboard_queries(tmp_path: Path) -> None:
    """The test command fetches promtool from Debian's prometheus package
    (scripts/test.sh); elsewhere the test is skipped, and the parsing above still runs."""
    promtool = shutil.which("promtool") or str(
        ROOT / ".test-services" / "promtool" / "usr" / "bin" / "promtool")
    if not Path(promtool).exists():
        pytest.skip("no promtool (scripts/test.sh fetches it)")
    checked = subprocess.run([promtool, "check", "rules", str(ALERTS)], capture_output=True,
                             text=True, timeout=60, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # Each dashboard query as a recording rule: promtool parses its PromQL.
    queries = tmp_path / "dashboard_rules.yml"
    queries.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": [
        {"record": f"narrator:panel_query_{n}", "expr": expr.replace("$__rate_interval", "5m")}
        for n, expr in enumerate(dashboard_queries())]}]}))
    checked = subprocess.run([promtool, "check", "rules", str(queries)], capture_output=True,
                             text=True, timeout=60, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
