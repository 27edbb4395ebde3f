"""`GET /v1/models` and `GET /v1/audio/voices`."""

from typing import Any

from fastapi import APIRouter

from api.errors import not_found
from api.owned import uploaded_voices
from api.state import OwnerDep, SessionDep, StateDep
from core.catalog import ModelInfo

router = APIRouter()


def _model(model: ModelInfo) -> dict[str, Any]:
    return {"id": model.id, "object": "model", "created": 0, "owned_by": "narrator",
            "engine": model.engine, "task_type": model.task_type,
            "languages": list(model.languages), "sample_rate": model.sample_rate,
            "voices": [v.id for v in model.voices]}


@router.get("/v1/models")
async def list_models(state: StateDep, _: OwnerDep) -> dict[str, Any]:
    """List the configured models in OpenAI's list shape."""
    return {"object": "list", "data": [_model(m) for m in await state.catalogue.models()]}


@router.get("/v1/models/{model_id}")
async def get_model(model_id: str, state: StateDep, _: OwnerDep) -> dict[str, Any]:
    """Describe one model."""
    for model in await state.catalogue.models():
        if model.id == model_id:
            return _model(model)
    raise not_found(f"model '{model_id}' not found", "model")


@router.get("/v1/audio/voices")
async def list_voices(state: StateDep, session: SessionDep, owner: OwnerDep) -> dict[str, Any]:
    """List every voice of every model, the caller's uploaded voices included."""
    models = await state.catalogue.models()
    voices = [v for m in models for v in m.voices]
    voices += await uploaded_voices(session, owner, models)
    return {"voices": [{"id": v.id, "name": v.name, "model": v.model,
                        "languages": list(v.languages), "kind": v.kind}
                       | ({"disabled": v.disabled} if v.kind == "uploaded" else {})
                       for v in voices]}
