"""The `narrator` command line's app: logging for every command, and what commands share."""

from pathlib import Path
from typing import Annotated

import typer

cli = typer.Typer(help="Narrator: a self-hosted text-to-speech job platform.",
                  no_args_is_help=True, add_completion=False)


@cli.callback()
def _setup(log_level: Annotated[str | None, typer.Option(
               help="DEBUG, INFO, WARNING or ERROR [default: NARRATOR_LOG_LEVEL, INFO]")] = None,
           log_json: Annotated[bool | None, typer.Option(
               help="JSON lines [default: NARRATOR_LOG_JSON, else when not a terminal]")] = None,
           ) -> None:
    """Configure logging for every command."""
    from core.logs import configure
    from core.settings import LogSettings

    settings = LogSettings()
    configure((log_level or settings.log_level).upper(),
              settings.log_json if log_json is None else log_json)


UrlOpt = Annotated[str, typer.Option("--url", envvar="NARRATOR_URL", help="API base URL")]
KeyOpt = Annotated[str, typer.Option("--api-key", envvar="NARRATOR_API_KEY")]
DEFAULT_URL = "http://127.0.0.1:8000"
ROOT = Path(__file__).resolve().parent.parent


def upgrade_database() -> None:
    """Migrate the database, quietly (alembic announces every step at INFO)."""
    import logging

    logging.getLogger("alembic").setLevel(logging.WARNING)  # before: it logs on import too
    from migrations import upgrade

    upgrade()


def private_data() -> None:
    """Create DATA_DIR for the owner only before anything is written under it (server
    commands; client commands write nothing there)."""
    from models.db import private_data_dir
    from models.settings import get_settings

    private_data_dir(get_settings().data_dir)
