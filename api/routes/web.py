"""The web console: `/` serves web/index.html, `/web/*` its script and style sheet."""

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse
from starlette.staticfiles import StaticFiles

import web

FOLDER = Path(web.__file__).resolve().parent
router = APIRouter()
assets = StaticFiles(directory=FOLDER)


@router.get("/", include_in_schema=False)
async def console() -> FileResponse:
    """The console's page."""
    return FileResponse(FOLDER / "index.html", headers={"Cache-Control": "no-cache"})
