"""API keys: required when configured, and a job is visible only to the key that made it."""

from collections.abc import Iterator

import pytest

from tests.conftest import base_env, error_of
from tests.support import Stack, start_stack


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("keyed")
    env = base_env(tmp, database_url, 13) | {"NARRATOR_API_KEYS": "key-one,key-two"}
    stack = start_stack(tmp, env, worker=False)
    yield stack
    stack.stop()


def test_missing_or_wrong_key_is_401(keyed: Stack) -> None:
    with keyed.client() as http:
        missing = http.get("/v1/models")
        wrong = http.get("/v1/models", headers={"Authorization": "Bearer nope"})
        assert http.get("/healthz").status_code == 200
    assert missing.status_code == 401
    assert error_of(missing)["code"] == "missing_api_key"
    assert wrong.status_code == 401
    assert error_of(wrong)["type"] == "authentication_error"


def test_another_keys_job_is_404(keyed: Stack) -> None:
    one = keyed.client(headers={"Authorization": "Bearer key-one"})
    two = keyed.client(headers={"Authorization": "Bearer key-two"})
    with one, two:
        job = one.post("/v1/audio/jobs", json={"input": "Mine."}).json()
        assert one.get(f"/v1/audio/jobs/{job['id']}").status_code == 200
        for response in (two.get(f"/v1/audio/jobs/{job['id']}"),
                         two.post(f"/v1/audio/jobs/{job['id']}/cancel"),
                         two.delete(f"/v1/audio/jobs/{job['id']}")):
            assert response.status_code == 404
        assert job["id"] not in {j["id"] for j in two.get("/v1/audio/jobs").json()["data"]}
        assert one.post(f"/v1/audio/jobs/{job['id']}/cancel").json()["status"] == "cancelled"
