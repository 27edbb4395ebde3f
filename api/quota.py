"""Per-key job caps, reserved atomically: jobs queued or running, and characters per 24 h.

A submit (one job, a batch, or a re-render) calls `reserve` in the transaction that inserts
its jobs: the key's lock row is taken first (models/usage.py), then the caps are checked and
the characters charged, and the caller inserts and commits. A concurrent submit of the same
key waits at the lock until then, and so sees those jobs and charges: ten submits at once
under a cap of one active job give one job, where the check-then-insert gave ten. Keys
without caps take no lock.
"""

from datetime import timedelta

from sqlalchemy import func, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from api.limits import too_many
from api.settings import ApiSettings
from models import ACTIVE, Charge, Job, KeyLock, utcnow


async def reserve(session: AsyncSession, owner: str, settings: ApiSettings, characters: int,
                  jobs: int = 1, counted: int = 0) -> None:
    """Hold the key's caps for `jobs` new active jobs of `characters` in all (429 past
    them); `counted`: how many of those are already counted as active (none for a submit).
    The caller inserts the jobs and commits the session's transaction."""
    most_active, most_chars = settings.max_active_jobs_per_key, settings.max_chars_per_day_per_key
    if not most_active and not most_chars:
        return
    await _lock(session, owner)
    if most_active:
        active = await session.scalar(select(func.count()).select_from(Job).where(
            Job.owner == owner, Job.status.in_(ACTIVE), Job.deleted_at.is_(None))) or 0
        if active - counted + jobs > most_active:
            raise too_many(f"this key already has {active} jobs queued or in progress "
                           f"(limit {most_active}); wait for one to finish",
                           "too_many_active_jobs", 30)
    if most_chars:
        since = utcnow() - timedelta(days=1)
        used = await session.scalar(select(func.coalesce(func.sum(Charge.characters), 0))
                                    .where(Charge.owner == owner, Charge.at > since)) or 0
        if used + characters > most_chars:
            raise too_many(f"daily character quota: {used} of {most_chars} characters "
                           f"used in the last 24 hours, this needs {characters}",
                           "daily_quota_exceeded", 3600)
        await session.execute(insert(Charge).values(owner=owner, characters=characters))


async def _lock(session: AsyncSession, owner: str) -> None:
    """Upsert the key's lock row: it stays locked until the transaction ends."""
    dialect = session.get_bind().dialect.name
    build = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = build(KeyLock).values(owner=owner)
    await session.execute(statement.on_conflict_do_update(index_elements=[KeyLock.owner],
                                                          set_={"owner": owner}))
