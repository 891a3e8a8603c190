"""The gateway's web pages: the runs, a run's curves (live while it runs) and its
trajectories. Static HTML and JavaScript bundled with the package (no CDN: the pages work
offline and behind a firewall); they read the same JSON API as `etude runs`, with the
operator token the browser is given once (`/ui#token=…`, kept in its localStorage, sent as
the bearer). The pages themselves hold no data, so they are served to anyone."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

WEB_DIR = Path(__file__).parent / "web"


@cache
def _page(script: str) -> str:
    """The one HTML shell (page.html), running `<script>.js`, which fills it."""
    return (WEB_DIR / "page.html").read_text().replace("{page}", script)


def add_pages(app: FastAPI) -> None:
    app.mount("/ui/static", StaticFiles(directory=WEB_DIR), name="ui-static")

    @app.get("/", include_in_schema=False)
    async def home() -> RedirectResponse:
        return RedirectResponse("/ui")

    @app.get("/ui", include_in_schema=False)
    async def runs_page() -> HTMLResponse:
        return HTMLResponse(_page("runs"))

    @app.get("/ui/runs/{run_id}", include_in_schema=False)
    async def run_page(run_id: str) -> HTMLResponse:
        return HTMLResponse(_page("run"))

    @app.get("/ui/runs/{run_id}/trajectory", include_in_schema=False)
    async def trajectory_page(run_id: str) -> HTMLResponse:
        return HTMLResponse(_page("trajectory"))
