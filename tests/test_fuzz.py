"""Schemathesis against the live API's /openapi.json: no input makes a server error.

A 503 is allowed: with no worker here, a valid sync speech request is answered "no worker
available" after NARRATOR_SYNC_TIMEOUT_SECONDS, which is the designed answer, not a crash.
"""

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.core.result import Ok

from tests.conftest import base_env
from tests.support import Stack, start_stack

EXAMPLES = 25  # per operation: bounded, so CI stays quick


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """An API on its own database, without a worker: sync speech times out fast (503)."""
    from migrations import upgrade
    from tests.conftest import drop_database, make_database

    name = f"narrator_fuzz_{uuid.uuid4().hex[:8]}"
    url = make_database(name)
    upgrade(url)
    tmp = tmp_path_factory.mktemp("fuzz")
    env = base_env(tmp, url, 10) | {"NARRATOR_SYNC_TIMEOUT_SECONDS": "0.5"}
    stack = start_stack(tmp, env, worker=False)
    yield stack
    stack.stop()
    drop_database(name)


def test_no_input_makes_a_server_error(fuzzed: Stack) -> None:
    schema = schemathesis.openapi.from_url(f"{fuzzed.url}/openapi.json")
    results = list(schema.get_all_operations())
    operations = [result.ok() for result in results if isinstance(result, Ok)]
    assert len(operations) == len(results)  # the schema itself is valid OpenAPI
    assert len(operations) >= 10
    errors: list[str] = []
    statuses: list[int] = []
    for operation in operations:

        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def run(case: Any) -> None:
            response = case.call(timeout=30)
            statuses.append(response.status_code)
            if response.status_code >= 500 and response.status_code != 503:
                errors.append(f"{case.method} {case.formatted_path} -> "
                              f"{response.status_code}: {response.text[:300]}")

        run()
    assert errors == []
    assert len(statuses) >= 5 * len(operations)  # the examples really ran
    assert any(200 <= code < 300 for code in statuses)  # not only rejections
