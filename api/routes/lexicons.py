"""Pronunciation lexicons: create, list, get, replace, delete; jobs and sync speech name them."""

from typing import Any

from fastapi import APIRouter
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from api.errors import ApiError, not_found
from api.owned import lexicon_where
from api.schemas import LexiconBody
from api.state import OwnerDep, SessionDep
from core import ids
from models import Lexicon, utcnow, uuid7

router = APIRouter()


def _object(row: Lexicon, entries: bool = True) -> dict[str, Any]:
    return {"id": ids.lexicon_id(row.id), "object": "audio.lexicon", "name": row.name,
            "entry_count": len(row.entries), "created_at": int(row.created_at.timestamp()),
            "updated_at": int(row.updated_at.timestamp())} | (
        {"entries": row.entries} if entries else {})


def _entries(body: LexiconBody) -> list[dict[str, Any]]:
    return [e.model_dump(exclude_none=True, exclude_defaults=True) | {"text": e.text}
            for e in body.entries]


async def _one(session: SessionDep, ref: str, owner: str) -> Lexicon:
    row = await session.scalar(select(Lexicon).where(lexicon_where(ref, owner)))
    if row is None:
        raise not_found(f"lexicon '{ref}' not found", "lexicon_id")
    return row


def _taken(name: str) -> ApiError:
    return ApiError(409, f"name: a lexicon named '{name}' exists; replace it with PUT "
                    "/v1/audio/lexicons/{id}", param="name", code="lexicon_exists")


@router.post("/v1/audio/lexicons", status_code=201)
async def create_lexicon(body: LexiconBody, session: SessionDep,
                         owner: OwnerDep) -> dict[str, Any]:
    """Create a lexicon; its name is unique per key."""
    now = utcnow()
    row = Lexicon(id=uuid7(), owner=owner, name=body.name, entries=_entries(body),
                  created_at=now, updated_at=now)
    session.add(row)
    try:
        await session.commit()
    except IntegrityError:
        raise _taken(body.name) from None
    return _object(row)


@router.get("/v1/audio/lexicons")
async def list_lexicons(session: SessionDep, owner: OwnerDep) -> dict[str, Any]:
    """List the key's lexicons by name, without their entries."""
    rows = await session.scalars(select(Lexicon).where(Lexicon.owner == owner)
                                 .order_by(Lexicon.name))
    return {"object": "list", "data": [_object(r, entries=False) for r in rows]}


@router.get("/v1/audio/lexicons/{lexicon_id}")
async def get_lexicon(lexicon_id: str, session: SessionDep, owner: OwnerDep) -> dict[str, Any]:
    """Return one lexicon (by id or name) with its entries."""
    return _object(await _one(session, lexicon_id, owner))


@router.put("/v1/audio/lexicons/{lexicon_id}")
async def replace_lexicon(lexicon_id: str, body: LexiconBody, session: SessionDep,
                          owner: OwnerDep) -> dict[str, Any]:
    """Replace a lexicon's name and entries; jobs already submitted keep their copy."""
    row = await _one(session, lexicon_id, owner)
    row.name, row.entries, row.updated_at = body.name, _entries(body), utcnow()
    try:
        await session.commit()
    except IntegrityError:
        raise _taken(body.name) from None
    return _object(row)


@router.delete("/v1/audio/lexicons/{lexicon_id}")
async def delete_lexicon(lexicon_id: str, session: SessionDep,
                         owner: OwnerDep) -> dict[str, Any]:
    """Delete a lexicon; jobs already submitted keep their copy."""
    gone = (await session.execute(delete(Lexicon).where(lexicon_where(lexicon_id, owner))
                                  .returning(Lexicon.id))).first()
    if gone is None:
        raise not_found(f"lexicon '{lexicon_id}' not found", "lexicon_id")
    await session.commit()
    return {"id": ids.lexicon_id(gone[0]), "object": "audio.lexicon.deleted", "deleted": True}


