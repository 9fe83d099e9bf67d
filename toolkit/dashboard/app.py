"""The dashboard's web app (Starlette) and its server (uvicorn): read-only JSON endpoints over the given folders,
one static page that polls them, and Plotly's JavaScript served from the ``plotly`` package (nothing from a CDN).

Endpoints (every ``path`` must lie inside a given folder; 403 otherwise):

* ``/api/runs``: every log's card; ``/api/run?path=LOG``: one run's charts (``version`` changes when it does);
* ``/api/compare?path=BENCH_JSON``, ``/api/benches``; ``/api/exports``, ``/api/export?path=FOLDER``;
* ``/api/boards``: the inventory, the tracker's queues and each provisioned board's health.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from importlib.resources import files
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from toolkit.dashboard import pages
from toolkit.dashboard.logview import LogView
from toolkit.dashboard.sources import OutsideError, Sources
from toolkit.errors import ConfigError, EdgetuneError

POLL_MS = 1000
"""How often a page asks for news; a record appended shows within about this."""
BOARD_HEALTH_S = 15.0
"""How long a board health check is reused (each one opens an SSH session per board)."""


class Dashboard:
    """The state behind the app: the sources, one :class:`LogView` per log, cached rooflines and board health."""

    def __init__(self, roots: list[Path]) -> None:
        self.sources = Sources(roots)
        self.views: dict[Path, LogView] = {}
        self.roofs: dict[str, dict[str, Any] | None] = {}
        self.lock = threading.Lock()
        self._health: tuple[float, list[dict[str, Any]]] | None = None

    def view(self, path: Path) -> LogView:
        """The log's view, brought up to date (waits while another request reads it)."""
        with self.lock:
            view = self.views.setdefault(path, LogView(path))
        with view.lock:
            view.refresh()
        return view

    def card(self, path: Path) -> dict[str, Any]:
        """The log's card; a log still being read for the first time says so instead of waiting."""
        with self.lock:
            view = self.views.setdefault(path, LogView(path))
        if not view.lock.acquire(blocking=False):
            return {"path": str(path), "board": "?", "network": None, "workloads": [], "tuners": [], "trials": 0,
                    "invalid": 0, "best_s": None, "state": "reading", "error": None, "truncated": False}
        try:
            view.refresh()
            return view.summary()
        finally:
            view.lock.release()

    def runs(self) -> list[dict[str, Any]]:
        self.sources.scan()
        return [self.card(p) for p in self.sources.logs]

    def prefetch(self) -> None:
        """Read every log once, in the background, so a run's page opens on a log already read."""
        self.sources.scan(force=True)
        for path in self.sources.logs:
            self.view(path)

    def roof(self, view: LogView) -> dict[str, Any] | None:
        """The roofline of the board a log was tuned on (``None``: not known)."""
        from toolkit.backends.registry import backend_for
        from toolkit.boards import load_profile

        task = view.header.task if view.header else {}
        first = (task.get("tasks") or [task])[0] if task else {}
        board_type, hw = first.get("board_type"), first.get("hw")
        key = json.dumps([board_type, hw], sort_keys=True)
        if key not in self.roofs:
            try:
                profile = load_profile(str(board_type))
                roof = backend_for(profile).roofline(profile, hw)
                if roof is None and profile.name == "local":   # this machine: measured here, once
                    from toolkit.dashboard.host_roofline import measured_roofline

                    roof = measured_roofline()
                self.roofs[key] = roof.to_json() if roof else None
            except EdgetuneError:
                self.roofs[key] = None
        return self.roofs[key]

    def boards(self) -> dict[str, Any]:
        from toolkit.boards import BUILTIN_BOARDS, Inventory
        from toolkit.rpc import service

        try:
            entries = Inventory(None).load()
            error = None
        except EdgetuneError as exc:
            entries, error = [], str(exc)
        try:
            tracker = service.status()
        except EdgetuneError as exc:
            tracker = {"running": False, "error": str(exc)}
        rows = [{"name": e.name, "type": e.type, "host": e.host, "port": e.port, "key": e.effective_rpc_key,
                 "tags": list(e.tags)} for e in entries]
        rows += [{"name": n, "type": n, "host": None, "port": None, "key": n, "tags": ["built-in"]}
                 for n in BUILTIN_BOARDS]
        return {"boards": rows, "inventory_error": error, "tracker": tracker, "health": self.health(entries)}

    def health(self, entries: list[Any]) -> list[dict[str, Any]]:
        """Each provisioned board's reachability, agent and registration (cached :data:`BOARD_HEALTH_S`)."""
        from toolkit.rpc.agent_control import board_state
        from toolkit.rpc.board_status import fleet_status

        if self._health and time.monotonic() - self._health[0] < BOARD_HEALTH_S:
            return self._health[1]
        provisioned = [e for e in entries if board_state(e.name)]
        rows = fleet_status(provisioned) if provisioned else []
        self._health = (time.monotonic(), rows)
        return rows


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def make_app(roots: list[Path]) -> Starlette:
    """The dashboard app serving ``roots`` (resolved folders and log files, see :func:`sources.check_roots`)."""
    dash = Dashboard(roots)
    static = files("toolkit.dashboard") / "static"

    def guarded(fn):  # noqa: ANN001, ANN202
        async def endpoint(request: Request) -> Response:
            try:
                return JSONResponse(await run_in_threadpool(fn, request))
            except OutsideError as exc:
                return _error(403, str(exc))
            except (EdgetuneError, ConfigError) as exc:
                return _error(422, str(exc))
        return endpoint

    def path_arg(request: Request) -> Path:
        raw = request.query_params.get("path")
        if not raw:
            raise ConfigError("give ?path=")
        return dash.sources.inside(raw)

    def run(request: Request) -> dict[str, Any]:
        path = path_arg(request)
        if path not in dash.sources.logs + dash.sources.export_logs:
            dash.sources.scan(force=True)
            if path not in dash.sources.logs + dash.sources.export_logs:
                raise ConfigError(f"{path} is not a tuning log")
        view = dash.view(path)
        with view.lock:
            if request.query_params.get("version") == view.version:
                return {"version": view.version, "unchanged": True}
            return pages.run_detail(view, dash.roof(view))

    def compare(request: Request) -> dict[str, Any]:
        path = path_arg(request)
        try:
            return {"path": str(path), **pages.compare(json.loads(path.read_text()))}
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path} is not a readable bench result ({exc})") from None

    def exports(request: Request) -> dict[str, Any]:
        dash.sources.scan()
        out = []
        for folder in dash.sources.exports:
            try:
                d = pages.export_detail(folder)
                out.append({k: d[k] for k in ("path", "kind", "board", "runs_on", "created", "schedules")}
                           | {"last_run": bool(d["last_run"]), "error": None})
            except EdgetuneError as exc:
                out.append({"path": str(folder), "error": str(exc)})
        return {"exports": out}

    def benches(request: Request) -> dict[str, Any]:
        dash.sources.scan()
        return {"benches": [str(p) for p in dash.sources.benches]}

    async def index(request: Request) -> Response:
        return FileResponse(str(static / "index.html"))

    async def plotly_js(request: Request) -> Response:
        return FileResponse(str(files("plotly") / "package_data" / "plotly.min.js"), media_type="text/javascript")

    routes = [
        Route("/", index),
        Route("/vendor/plotly.min.js", plotly_js),
        Route("/api/config", guarded(lambda r: {"poll_ms": POLL_MS, "roots": [str(p) for p in roots]})),
        Route("/api/runs", guarded(lambda r: {"runs": dash.runs()})),
        Route("/api/run", guarded(run)),
        Route("/api/benches", guarded(benches)),
        Route("/api/compare", guarded(compare)),
        Route("/api/exports", guarded(exports)),
        Route("/api/export", guarded(lambda r: pages.export_detail(path_arg(r)))),
        Route("/api/boards", guarded(lambda r: dash.boards())),
        Mount("/static", app=StaticFiles(directory=str(static)), name="static"),
    ]
    threading.Thread(target=dash.prefetch, name="dashboard-prefetch", daemon=True).start()
    return Starlette(routes=routes)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: any free one); :class:`ConfigError` when it is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); choose another --port "
                          "(0 picks a free one)") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(roots: list[Path], sock: socket.socket) -> None:
    """Serve the dashboard on the bound ``sock`` until Ctrl-C (uvicorn stops cleanly then)."""
    import uvicorn

    config = uvicorn.Config(make_app(roots), log_level="warning", lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])
