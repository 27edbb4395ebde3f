"""docker-compose.yml: the production services and how they are wired."""

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def test_every_production_service_is_there(compose: dict[str, Any]) -> None:
    assert {"postgres", "redis", "minio", "migrate", "api", "worker-cpu", "worker-gpu"} <= set(
        compose["services"])


def test_narrator_services_share_one_configuration(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("migrate", "api", "worker-cpu", "worker-gpu", "worker-assembly"):
        env = services[name]["environment"]
        assert env["NARRATOR_DATABASE_URL"].startswith("postgresql://"), name
        assert "@postgres:5432/" in env["NARRATOR_DATABASE_URL"], name
        if name != "migrate":
            assert env["NARRATOR_BROKER_URL"] == "redis://redis:6379/0", name
            assert env["NARRATOR_STORAGE_URL"].startswith("s3://"), name
            assert env["NARRATOR_S3_ENDPOINT_URL"] == "http://minio:9000", name


def test_migration_runs_once_before_api_and_workers(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["migrate"]["command"] == ["migrate"]
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("api", "worker-cpu", "worker-gpu"):
        assert services[name]["depends_on"]["migrate"]["condition"] == \
            "service_completed_successfully", name


def test_api_and_workers_run_the_right_commands(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["api"]["command"][:1] == ["api"]
    assert "8000:8000" in services["api"]["ports"]
    assert services["worker-cpu"]["command"][:1] == ["worker"]
    assert services["worker-cpu"]["environment"]["NARRATOR_ENGINE"] == "piper"
    kokoro = services["worker-kokoro"]  # the second CPU engine: its model's queues only
    assert kokoro["environment"]["NARRATOR_ENGINE"] == "kokoro"
    assert kokoro["command"] == ["worker", "--queues", "realtime.kokoro,batch.kokoro"]
    assert "profiles" not in kokoro
    # Beside GPU workers, an assembly worker: no model queue, so no engine and a threads pool.
    assembler = services["worker-assembly"]
    assert assembler["command"] == ["worker", "--queues", "assembly"]
    assert assembler["profiles"] == ["gpu"]


def test_gpu_worker_reserves_a_gpu_and_mounts_models_and_caches(
        compose: dict[str, Any]) -> None:
    gpu = compose["services"]["worker-gpu"]
    assert gpu["build"]["dockerfile"] == "docker/Dockerfile.gpu"
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia"
    assert "gpu" in devices[0]["capabilities"]
    mounts = " ".join(gpu["volumes"])
    assert ":/models" in mounts
    assert ":/cache" in mounts
    assert gpu["environment"]["NARRATOR_ENGINE"] == "vllm-omni"


def test_every_dockerfile_named_exists(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        if "build" in service:
            assert (ROOT / service["build"]["dockerfile"]).is_file(), name


def test_a_host_of_two_gpus_runs_one_gpu_worker_on_each(compose: dict[str, Any]) -> None:
    services = compose["services"]
    first, second = services["worker-gpu"], services["worker-gpu-1"]
    devices = [s["deploy"]["resources"]["reservations"]["devices"][0] for s in (first, second)]
    assert [d["device_ids"] for d in devices] == [["0"], ["1"]]
    assert all("count" not in d for d in devices)  # compose allows count or device_ids
    assert second["profiles"] == ["gpu-2"]
    # Everything else is the first worker's: the same image, command, settings and caches.
    for key in ("image", "command", "environment", "volumes", "depends_on"):
        assert second[key] == first[key], key


def test_a_real_compose_implementation_accepts_the_file_and_refuses_a_broken_one(
        tmp_path: Path) -> None:
    """Docker Compose itself (Debian's docker-compose 1.29, which the test command installs;
    Compose v2 is not packaged in Debian 12) parses and validates the file with every profile,
    without a Docker engine; a copy with a misspelt key is refused."""
    import shutil
    import subprocess

    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("no docker-compose (scripts/test.sh installs Debian's)")

    def config(path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([binary, "-f", str(path), "--project-directory", str(ROOT),
                               "--profile", "gpu", "--profile", "gpu-2", "config", "-q"],
                              capture_output=True, text=True, timeout=120, check=False)

    checked = config(ROOT / "docker-compose.yml")
    assert checked.returncode == 0, checked.stderr
    broken = tmp_path / "docker-compose.yml"
    broken.write_text((ROOT / "docker-compose.yml").read_text().replace(
        "    restart: ", "    restartt: ", 1))
    refused = config(broken)
    assert refused.returncode != 0
    assert "Unsupported config option" in refused.stderr


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.gpu"])
def test_an_image_holds_every_package_it_installs(dockerfile: str) -> None:
    """`pip install .` in the image builds what was copied in: a package left out is missing
    from the image (core/ once was), and no engine here builds the image to notice."""
    import tomllib

    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {name.rstrip("*") for name in found["packages"]["find"]["include"]}
    copied = {line.split()[1] for line in (ROOT / "docker" / dockerfile).read_text().splitlines()
              if line.startswith("COPY ")}
    assert packages <= copied
    text = (ROOT / "docker" / dockerfile).read_text()
    assert "pip install -c constraints.txt" in text  # the versions the suite runs with
    assert "constraints.txt" in " ".join(line for line in text.splitlines()
                                         if line.startswith("COPY "))


def test_every_worker_is_healthy_only_while_it_consumes_with_its_engine_warm(
        compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("worker-cpu", "worker-kokoro", "worker-assembly", "worker-gpu", "worker-gpu-1"):
        service = services[name]
        ready = service["environment"]["NARRATOR_READY_FILE"]
        assert service["healthcheck"]["test"] == ["CMD", "test", "-f", ready], name
    assert services["worker-gpu"]["healthcheck"]["start_period"] == "600s"  # a cold start


def test_the_build_context_leaves_out_what_the_images_do_not_copy() -> None:
    """Docker sends the whole context to its engine on every build: the checkout's virtual
    environment alone was 2 GB (scripts/compose-check.sh builds the images for real)."""
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", ".test-services", "narrator-data"} <= set(ignored)
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert "ARG BASE=python:3.11-slim-bookworm\nFROM ${BASE}" in dockerfile
