"""Alembic environment: one code path for Postgres and the embedded SQLite."""

from alembic import context
from sqlalchemy import create_engine, pool

from models import Base
from models.db import sql_engine
from models.settings import get_settings

target_metadata = Base.metadata
url = context.config.get_main_option("sqlalchemy.url")
engine = create_engine(url, poolclass=pool.NullPool) if url else sql_engine(get_settings())

with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
