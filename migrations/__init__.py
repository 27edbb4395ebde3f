"""Alembic migrations; `upgrade()` is what `narrator migrate` and the tests run."""

from pathlib import Path

from alembic import command
from alembic.config import Config

from models.settings import DatabaseSettings

HERE = Path(__file__).parent


def config(url: str | None = None) -> Config:
    """Return an Alembic config pointing at this package, for `url` or the configured DB."""
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    cfg.set_main_option("file_template", "%%(year)d-%%(month).2d-%%(day).2d_%%(slug)s")
    if url:  # with the driver workers use, whatever the scheme given
        url = DatabaseSettings(database_url=url).url()
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str | None = None, revision: str = "head") -> None:
    """Migrate the database to `revision`."""
    command.upgrade(config(url), revision)
