"""The Helm chart (deploy/helm/narrator), rendered by Helm and validated offline.

No cluster runs here. Helm renders the chart with its defaults and each example values file;
every Kubernetes object is validated against Kubernetes' own schemas by kubernetes-validate
(strict: an unknown field fails), at the oldest version the chart supports and the newest
the validator knows; every KEDA object against KEDA's CRD schemas (@kubernetes-models/keda,
under Node). scripts/test.sh fetches Helm and the KEDA schemas; under CI a missing tool fails.
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from core.queues import model_queues

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "narrator"
EXAMPLES = sorted((ROOT / "deploy" / "helm" / "examples").glob("*.yaml"))
TOOLS = ROOT / ".test-services"
NODE_MODULES = TOOLS / "k8s-models" / "node_modules"
KUBE_VERSIONS = ["1.25.0", "1.37.0"]  # the chart's kubeVersion floor; the newest schemas


def _tool(path: Path | str | None, what: str) -> str:
    if path is None or not Path(path).exists():
        if os.environ.get("CI"):
            pytest.fail(f"{what} is missing (scripts/test.sh fetches it)")
        pytest.skip(f"no {what} (scripts/test.sh fetches it)")
    return str(path)


def helm() -> str:
    return _tool(shutil.which("helm") or TOOLS / "helm" / "package" / "bin" / "helm", "helm")


def render(chart: Path, values: list[Path]) -> list[dict[str, Any]]:
    """Return the objects `helm template` renders; fail with Helm's message if it cannot."""
    args = [helm(), "template", "narrator", str(chart), "--kube-version", KUBE_VERSIONS[-1]]
    for path in values:
        args += ["-f", str(path)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def invalid(objects: list[dict[str, Any]]) -> list[str]:
    """Return why each object that its schema refuses is refused."""
    found = []
    keda = [o for o in objects if o["apiVersion"].startswith("keda.sh/")]
    for item in (o for o in objects if o not in keda):
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(item, version, strict=True)
            except Exception as error:  # schema errors, and kinds it has no schema for
                found.append(f"{item['kind']}/{item['metadata']['name']} ({version}): "
                             f"{str(error).splitlines()[0]}")
    if keda:
        node = _tool(shutil.which("node"), "node")
        _tool(NODE_MODULES / "@kubernetes-models" / "keda", "@kubernetes-models/keda")
        done = subprocess.run([node, str(CHART.parent / "validate" / "keda.mjs"),
                               str(NODE_MODULES)], input=json.dumps(keda),
                              capture_output=True, text=True, timeout=60)
        found += [line for line in done.stdout.splitlines() if line.startswith("invalid")]
        assert done.returncode in (0, 1), done.stderr
    return found


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


@pytest.mark.parametrize("values", [[], *[[path] for path in EXAMPLES]],
                         ids=["defaults", *[path.stem for path in EXAMPLES]])
def test_the_chart_renders_and_every_object_is_valid(values: list[Path]) -> None:
    objects = render(CHART, values)
    assert {"Deployment", "Service", "Job", "PodDisruptionBudget"} <= {o["kind"] for o in objects}
    assert invalid(objects) == []


def test_the_defaults_bundle_no_database_and_run_api_and_cpu_workers() -> None:
    objects = render(CHART, [])
    deployments = by_kind(objects, "Deployment")
    assert set(deployments) == {"narrator-api", "narrator-worker-cpu", "narrator-worker-kokoro"}
    kokoro = deployments["narrator-worker-kokoro"]["spec"]["template"]["spec"]["containers"][0]
    assert kokoro["args"] == ["worker", "--queues", "realtime.kokoro,batch.kokoro"]
    assert {"name": "NARRATOR_ENGINE", "value": "kokoro"} in kokoro["env"]
    assert not by_kind(objects, "StatefulSet")
    images = {c["image"] for d in by_kind(objects, "Deployment").values()
              for c in d["spec"]["template"]["spec"]["containers"]}
    assert all(image.startswith("narrator:") for image in images)


def test_migrations_run_as_a_hook_after_the_secret_they_read() -> None:
    objects = render(CHART, [])
    job = by_kind(objects, "Job")["narrator-migrate"]
    secret = by_kind(objects, "Secret")["narrator-secrets"]
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate"]
    assert "pre-install" in job["metadata"]["annotations"]["helm.sh/hook"]
    assert "pre-install" in secret["metadata"]["annotations"]["helm.sh/hook"]
    assert int(secret["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        job["metadata"]["annotations"]["helm.sh/hook-weight"])


def test_gpu_workers_scale_on_their_own_queues_and_finish_what_they_hold() -> None:
    """One GPU per pod, KEDA on the queues the worker really consumes (core.queues names
    them from the checkpoint folder), to zero; the pod's grace covers the worker's."""
    objects = render(CHART, [CHART.parent / "examples" / "gpu-autoscaled.yaml"])
    gpu = by_kind(objects, "Deployment")["narrator-worker-gpu"]
    pod = gpu["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["terminationGracePeriodSeconds"] > float(
        env["NARRATOR_WORKER_SHUTDOWN_GRACE_SECONDS"])
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 900  # a cold engine
    assert container["readinessProbe"]["exec"]["command"] == [
        "test", "-f", env["NARRATOR_READY_FILE"]]
    assert {"name": "cache", "mountPath": env["NARRATOR_CACHE_DIR"]} in container[
        "volumeMounts"]
    assert "replicas" not in gpu["spec"]  # KEDA owns it
    scaled = by_kind(objects, "ScaledObject")["narrator-worker-gpu"]["spec"]
    assert scaled["minReplicaCount"] == 0
    model = Path(env["NARRATOR_MODEL"]).name
    realtime = model_queues(model)[0]
    # Sync speech waits in Redis; a model's segments wait in Postgres until dispatch sends
    # them (workers/jobs/dispatch.py), so that is where KEDA counts them.
    assert _watched(scaled) == {("redis", realtime), ("postgresql", model)}
    cpu = by_kind(objects, "ScaledObject")["narrator-worker-cpu"]["spec"]
    assert cpu["minReplicaCount"] >= 1  # sync speech is never cold
    assert {("redis", "realtime.piper"), ("postgresql", "piper")} <= _watched(cpu)
    auth = by_kind(objects, "TriggerAuthentication")["narrator-postgres"]["spec"]
    assert auth["secretTargetRef"][0]["key"] == "NARRATOR_DATABASE_URL"


def _watched(scaled: dict[str, Any]) -> set[tuple[str, str]]:
    """What each trigger of a ScaledObject counts: a Redis list, or a model's segments."""
    found = set()
    for trigger in scaled["triggers"]:
        meta = trigger["metadata"]
        if trigger["type"] == "redis":
            found.add(("redis", meta["listName"]))
        else:
            found.add((trigger["type"], meta["query"].split("jobs.model = '")[1].split("'")[0]))
    return found


def test_a_broken_chart_fails(tmp_path: Path) -> None:
    """What CI would catch: a misspelt field in a template, and a template Helm cannot read."""
    chart = tmp_path / "narrator"
    shutil.copytree(CHART, chart)
    api = chart / "templates" / "api.yaml"
    api.write_text(api.read_text().replace("readinessProbe:", "readinesProbe:", 1))
    assert any("readinesProbe" in why for why in invalid(render(chart, [])))
    api.write_text(api.read_text().replace("{{ .Values.api.replicas }}",
                                           "{{ .Values.api.replicas }", 1))
    with pytest.raises(AssertionError, match=r"parse error|unexpected"):
        render(chart, [])


def test_every_setting_the_chart_sets_is_one_narrator_reads() -> None:
    """A misspelt NARRATOR_ name would be ignored without a word (the settings ignore
    unknown variables), so each one the chart sets must be a field of Narrator's settings."""
    from api.settings import ApiSettings
    from workers.settings import WorkerSettings

    fields = set(ApiSettings.model_fields) | set(WorkerSettings.model_fields)
    cli = set(re.findall(r'envvar="(NARRATOR_\w+)"', (ROOT / "narrator" / "cli.py").read_text()))
    values = [CHART.parent / "examples" / "gpu-autoscaled.yaml"]
    objects = render(CHART, values) + render(CHART, [])
    names = {key for o in objects if o["kind"] == "ConfigMap" for key in o["data"]}
    names |= {key for o in objects if o["kind"] == "Secret" for key in o["stringData"]}
    names |= {e["name"] for o in objects if o["kind"] == "Deployment"
              for c in o["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])}
    narrator = {name for name in names if name.startswith("NARRATOR_")}
    assert len(narrator) > 10
    assert {name for name in narrator - cli if name.removeprefix("NARRATOR_").lower()
            not in fields} == set()
