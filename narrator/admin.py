"""Server-side administration: the database schema, and API keys kept in the database."""

import uuid
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


PRIORITIES = ("high", "normal", "low")
Weight = Annotated[int | None, typer.Option(
    min=1, max=1000, help="its share of the engines against other keys' (default 1: equal)")]
Priorities = Annotated[str | None, typer.Option(
    help="the job priorities it may ask for, comma-separated (default: JOB_PRIORITIES)")]


def _priorities(value: str | None) -> str | None:
    """Check a --priorities value; '' goes back to the server's JOB_PRIORITIES."""
    if not value:
        return None
    wanted = [p.strip() for p in value.split(",") if p.strip()]
    if unknown := [p for p in wanted if p not in PRIORITIES]:
        raise typer.BadParameter(f"unknown priority {unknown[0]!r}: use {', '.join(PRIORITIES)}")
    return ",".join(p for p in PRIORITIES if p in wanted)


def _key_id(key_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(key_id)
    except ValueError:
        raise typer.BadParameter(f"not a key id: {key_id}") from None


@keys.command("create")
def keys_create(name: Annotated[str, typer.Option(help="who or what the key is for")],
                weight: Weight = None, priorities: Priorities = None) -> None:
    """Create a key and print it once: only its SHA-256 is stored."""
    from models import ApiKey
    from models.api_key import digest, new_key
    from models.db import session_scope

    key = new_key()
    with session_scope() as session:
        row = ApiKey(name=name, hint=key[:10], digest=digest(key), weight=weight or 1,
                     priorities=_priorities(priorities))
        session.add(row)
        session.flush()
        key_id = row.id
    typer.echo(f"{key_id}  {name}\n{key}\n(store it now: it cannot be shown again)")


@keys.command("list")
def keys_list() -> None:
    """List keys: id, name, first characters, weight, priorities, created, revoked."""
    from sqlalchemy import select

    from models import ApiKey
    from models.db import session_scope

    with session_scope() as session:
        for row in session.scalars(select(ApiKey).order_by(ApiKey.created_at)):
            revoked = f"revoked {row.revoked_at:%Y-%m-%d %H:%M}" if row.revoked_at else "active"
            typer.echo(f"{row.id}  {row.name}  {row.hint}...  weight {row.weight}  "
                       f"priorities {row.priorities or 'default'}  "
                       f"created {row.created_at:%Y-%m-%d %H:%M}  {revoked}")


@keys.command("set")
def keys_set(key_id: Annotated[str, typer.Argument(help="the id from `narrator keys list`")],
             weight: Weight = None, priorities: Priorities = None) -> None:
    """Change a key's weight or allowed priorities (the API applies it within seconds; jobs
    already submitted keep the weight they had)."""
    from sqlalchemy import update

    from models import ApiKey
    from models.db import session_scope

    values: dict[str, object] = {}
    if weight is not None:
        values["weight"] = weight
    if priorities is not None:
        values["priorities"] = _priorities(priorities)
    if not values:
        raise typer.BadParameter("nothing to change: give --weight or --priorities")
    with session_scope() as session:
        found = session.execute(update(ApiKey).where(ApiKey.id == _key_id(key_id))
                                .values(**values).returning(ApiKey.id)).first()
    if found is None:
        typer.echo(f"no key {key_id}", err=True)
        raise typer.Exit(1)
    typer.echo(f"changed {key_id}")


@keys.command("revoke")
def keys_revoke(key_id: Annotated[str, typer.Argument(help="the id from `narrator keys list`")]
                ) -> None:
    """Revoke a key (the API refuses it within seconds); its jobs stay in place."""
    from sqlalchemy import update

    from models import ApiKey, utcnow
    from models.db import session_scope

    with session_scope() as session:
        found = session.execute(update(ApiKey).where(ApiKey.id == _key_id(key_id),
                                                     ApiKey.revoked_at.is_(None))
                                .values(revoked_at=utcnow()).returning(ApiKey.id)).first()
    if found is None:
        typer.echo(f"no active key {key_id}", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {key_id}")
