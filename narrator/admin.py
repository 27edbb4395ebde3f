"""Server-side administration: the database schema, and API keys kept in the database."""

from typing import Annotated

import typer

from narrator.app import cli, private_data


@cli.command()
def migrate() -> None:
    """Create or upgrade the database schema."""
    private_data()
    from migrations import upgrade

    upgrade()
    typer.echo("database is at the latest migration")


keys = typer.Typer(help="API keys kept in the database (hashed); the API closes once one exists.",
                   no_args_is_help=True)
cli.add_typer(keys, name="keys")


@keys.command("create")
def keys_create(name: Annotated[str, typer.Option(help="who or what the key is for")]) -> None:
    """Create a key and print it once: only its SHA-256 is stored."""
    from models import ApiKey
    from models.api_key import digest, new_key
    from models.db import session_scope

    key = new_key()
    with session_scope() as session:
        row = ApiKey(name=name, hint=key[:10], digest=digest(key))
        session.add(row)
        session.flush()
        key_id = row.id
    typer.echo(f"{key_id}  {name}\n{key}\n(store it now: it cannot be shown again)")


@keys.command("list")
def keys_list() -> None:
    """List keys: id, name, first characters, created, revoked."""
    from sqlalchemy import select

    from models import ApiKey
    from models.db import session_scope

    with session_scope() as session:
        for row in session.scalars(select(ApiKey).order_by(ApiKey.created_at)):
            revoked = f"revoked {row.revoked_at:%Y-%m-%d %H:%M}" if row.revoked_at else "active"
            typer.echo(f"{row.id}  {row.name}  {row.hint}...  "
                       f"created {row.created_at:%Y-%m-%d %H:%M}  {revoked}")


@keys.command("revoke")
def keys_revoke(key_id: Annotated[str, typer.Argument(help="the id from `narrator keys list`")]
                ) -> None:
    """Revoke a key (the API refuses it within seconds); its jobs stay in place."""
    import uuid

    from sqlalchemy import update

    from models import ApiKey, utcnow
    from models.db import session_scope

    try:
        wanted = uuid.UUID(key_id)
    except ValueError:
        raise typer.BadParameter(f"not a key id: {key_id}") from None
    with session_scope() as session:
        found = session.execute(update(ApiKey).where(ApiKey.id == wanted,
                                                     ApiKey.revoked_at.is_(None))
                                .values(revoked_at=utcnow()).returning(ApiKey.id)).first()
    if found is None:
        typer.echo(f"no active key {key_id}", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {key_id}")
