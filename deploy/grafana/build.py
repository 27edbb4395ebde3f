"""Write deploy/grafana/narrator.json, Narrator's Grafana dashboard, from the panels below.

    python deploy/grafana/build.py

Every query reads metrics that /metrics exports (tests/test_dashboard.py scrapes a live one).
The dashboard takes its Prometheus data source as the variable `datasource`.
"""

import json
from pathlib import Path

SOURCE = {"type": "prometheus", "uid": "${datasource}"}

# (title, unit, [(PromQL, legend)], width)
PANELS: list[tuple[str, str, list[tuple[str, str]], int]] = [
    ("Queue depth", "short", [("narrator_queue_depth", "{{queue}}")], 12),
    ("Jobs by status", "short", [("narrator_jobs", "{{status}}")], 12),
    ("Audio-seconds per second", "short", [
        ("sum by (kind) (rate(narrator_audio_seconds_produced_total[1m]))", "{{kind}}")], 8),
    ("Engine real-time factor (engine s per audio s)", "short", [
        ("histogram_quantile(0.5, sum by (le, model) "
         "(rate(narrator_engine_real_time_factor_bucket[5m])))", "p50 {{model}}"),
        ("histogram_quantile(0.9, sum by (le, model) "
         "(rate(narrator_engine_real_time_factor_bucket[5m])))", "p90 {{model}}")], 8),
    ("Time to first audio, sync speech", "s", [
        ("histogram_quantile(0.5, sum by (le, streamed) "
         "(rate(narrator_speech_first_chunk_seconds_bucket[5m])))", "p50 streamed={{streamed}}"),
        ("histogram_quantile(0.99, sum by (le, streamed) "
         "(rate(narrator_speech_first_chunk_seconds_bucket[5m])))",
         "p99 streamed={{streamed}}")], 8),
    ("Segment retakes, failures and the reaper", "short", [
        ("sum by (reason) (rate(narrator_segment_retakes_total[5m]))", "retake: {{reason}}"),
        ("sum by (model) (rate(narrator_segment_failures_total[5m]))", "failed: {{model}}"),
        ("sum by (sweep) (rate(narrator_reaper_actions_total[5m]))", "reaper: {{sweep}}")], 8),
    ("Worker busy fraction", "percentunit", [
        ("narrator_worker_busy_fraction", "{{worker}}")], 8),
    ("Workers by state (ready = warm and taking work)", "short", [
        ("sum by (model, state) (narrator_workers)", "{{model}} {{state}}")], 8),
    ("API latency by route, p99", "s", [
        ("histogram_quantile(0.99, sum by (le, route) "
         "(rate(narrator_http_request_duration_seconds_bucket[5m])))", "{{route}}")], 12),
    ("API requests by status", "reqps", [
        ("sum by (status) (rate(narrator_http_requests_total[1m]))", "{{status}}")], 12),
]


def dashboard() -> dict[str, object]:
    """Return the dashboard's JSON model."""
    panels, x, y = [], 0, 0
    for n, (title, unit, queries, width) in enumerate(PANELS, 1):
        if x + width > 24:
            x, y = 0, y + 8
        panels.append({
            "id": n, "type": "timeseries", "title": title, "datasource": SOURCE,
            "gridPos": {"h": 8, "w": width, "x": x, "y": y},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
            "targets": [{"refId": chr(65 + i), "datasource": SOURCE, "expr": expr,
                         "legendFormat": legend} for i, (expr, legend) in enumerate(queries)]})
        x += width
    return {
        "title": "Narrator", "uid": "narrator", "schemaVersion": 39, "version": 1,
        "tags": ["narrator", "tts"], "timezone": "browser", "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "type": "datasource",
                                 "query": "prometheus", "label": "Prometheus"}]},
        "panels": panels}


if __name__ == "__main__":
    out = Path(__file__).with_name("narrator.json")
    out.write_text(json.dumps(dashboard(), indent=1) + "\n")
    print(out)
