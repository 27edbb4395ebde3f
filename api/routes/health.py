"""`/healthz` (process up) and `/readyz` (database, broker and storage reachable)."""

from typing import Any

import anyio
from fastapi import APIRouter
from sqlalchemy import text

from api.errors import Json
from api.state import StateDep

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Say the process is up."""
    return {"status": "ok"}


def _broker_ok(state: Any) -> None:
    with state.celery.connection_for_write() as connection:
        connection.ensure_connection(max_retries=1, timeout=2)


@router.get("/readyz")
async def readyz(state: StateDep) -> Json:
    """Check every dependency; 503 with Retry-After when one is down."""
    checks: dict[str, str] = {}
    try:
        with anyio.fail_after(3):
            async with state.engine.connect() as connection:
                await connection.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {exc.__class__.__name__}: {exc}"[:300]
    for name, probe in (("broker", lambda: _broker_ok(state)), ("storage", state.store.check)):
        try:
            with anyio.fail_after(5):
                await anyio.to_thread.run_sync(probe)
            checks[name] = "ok"
        except Exception as exc:
            checks[name] = f"error: {exc.__class__.__name__}: {exc}"[:300]
    failing = [k for k, v in checks.items() if v != "ok"]
    workers = await state.catalogue.workers() if "broker" not in failing else []
    # Workers are reported, not required: jobs queue up until one is ready.
    summary: dict[str, Any] = {
        "ready": sum(w.state == "ready" for w in workers),
        "warming": sum(w.state == "warming" for w in workers),
        "failed": [{"worker": w.id, "reason": w.reason} for w in workers if w.state == "failed"],
        # Realtime partitions: a second engine per GPU worker for sync and streamed speech.
        "realtime": {state: sum(w.realtime.split(":")[0] == state for w in workers)
                     for state in ("ready", "starting", "failed")},
    }
    if not failing:
        return Json({"status": "ok", "checks": checks, "workers": summary})
    return Json({"error": {"message": f"not ready: {', '.join(failing)} unreachable",
                           "type": "service_unavailable", "param": None,
                           "code": "dependency_unavailable"}, "checks": checks,
                 "workers": summary},
                status_code=503, headers={"Retry-After": "5"})
