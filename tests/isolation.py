"""Fixtures that give a test module a database of its own, in place of the session's.

Import both into a module whose rows must not meet the session stacks' workers: their
reapers act on every job in their database, with their own media store.
"""

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from models.db import sql_engine_for
from tests.conftest import fresh_database


@pytest.fixture(scope="module", name="database_url")
def isolated_database_url() -> Iterator[str]:
    """This module's own migrated database."""
    with fresh_database() as url:
        yield url


@pytest.fixture(scope="module", name="db")
def isolated_db(database_url: str) -> Iterator[Engine]:
    """An engine on this module's own database."""
    engine = sql_engine_for(database_url)
    yield engine
    engine.dispose()
