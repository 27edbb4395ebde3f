"""The schema comes from Alembic, and it is exactly what the models describe."""

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, inspect

from migrations import upgrade
from models import Base
from models.db import sql_engine_for
from tests.conftest import drop_database, make_database


def test_upgrade_head_on_postgres_matches_the_models(db: Engine) -> None:
    with db.connect() as connection:
        diff = compare_metadata(
            MigrationContext.configure(connection, opts={"compare_type": True}), Base.metadata)
    assert diff == []


def test_migrations_downgrade_to_base_and_upgrade_again() -> None:
    url = make_database("narrator_test_roundtrip")
    try:
        upgrade(url)
        from alembic import command

        from migrations import config

        command.downgrade(config(url), "base")
        engine = sql_engine_for(url)
        assert set(inspect(engine).get_table_names()) == {"alembic_version"}
        engine.dispose()
        upgrade(url)
        engine = sql_engine_for(url)
        assert {"jobs", "segments", "job_events"} <= set(inspect(engine).get_table_names())
        engine.dispose()
    finally:
        drop_database("narrator_test_roundtrip")


def test_embedded_sqlite_schema_matches_the_models(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/narrator.db"
    upgrade(url)
    engine = sql_engine_for(url)
    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    engine.dispose()
    assert diff == []
