"""The gateway's web pages: the runs, a run's curves (live while it runs) and its
trajectories. Static HTML and JavaScript bundled with the package (no CDN: the pages work
offline and behind a firewall); they read the same JSON API as `etude runs`, with the
operator token the browser is given once (`/ui#token=…`, kept in its localStorage, sent as
the bearer). The pages themselves hold no data, so they are served to anyone."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

WEB_DIR = Path(__file__).parent / "web"


def add_pages(app: FastAPI) -> None:
    app.mount("/ui/static", StaticFiles(directory=WEB_DIR), name="ui-static")

    def page(name: str) -> FileResponse:
        return FileResponse(WEB_DIR / name, media_type="text/html")

    @app.get("/", include_in_schema=False)
    async def home() -> RedirectResponse:
        return RedirectResponse("/ui")

    @app.get("/ui", include_in_schema=False)
    async def runs_page() -> FileResponse:
        return page("index.html")

    @app.get("/ui/runs/{run_id}", include_in_schema=False)
    async def run_page(run_id: str) -> FileResponse:
        return page("run.html")

    @app.get("/ui/runs/{run_id}/trajectory", include_in_schema=False)
    async def trajectory_page(run_id: str) -> FileResponse:
        return page("trajectory.html")
