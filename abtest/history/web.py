"""`abtest history serve`: the dashboard and its JSON API (Flask), on 127.0.0.1 by default.

GET  /                                   the dashboard (static/dashboard.html + dashboard.js)
GET  /static/plotly.min.js               plotly.js from the plotly wheel (no CDN)
GET  /api/series[?device=&workload=&metric=]      series: device, workload, metric, unit, direction
GET  /api/points?device=D&workload=W&metric=M     one series: points (per build: value, 95 % CI, n) and
                                                  its active change points
GET  /api/changepoints[?device=&workload=&metric=&all=1]   change points with builds and next commands
POST /api/changepoints/<id>/triage       JSON {"state": "new|acknowledged|invalid", "note": "..."}
GET  /report/<id>                        the compare/explain report between the builds of change point
                                         <id> (rendered by the `report` callable given to create_app)
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Self

from flask import Flask, Response, abort, jsonify, request, send_file
from sqlalchemy import Engine

from abtest.history.detect import set_triage, stored
from abtest.history.series import list_series, points, series_key

STATIC = Path(__file__).resolve().parent / "static"


def plotly_js() -> Path:
    """plotly.min.js as shipped inside the plotly Python package."""
    return Path(str(resources.files("plotly") / "package_data" / "plotly.min.js"))


def _filters() -> dict:
    return {
        "devices": tuple(request.args.getlist("device")),
        "workloads": tuple(request.args.getlist("workload")),
        "metrics": tuple(request.args.getlist("metric")),
    }


def default_report(cp: dict) -> str:
    """A page with the commands of a change point (used when no report renderer is given)."""
    from html import escape

    cmds = "".join(f"<li>{escape(k)}: <code>{escape(v)}</code></li>" for k, v in cp["commands"].items())
    return (
        f"<!doctype html><title>change point {cp['id']}</title><h1 id='report-title'>{escape(cp['metric'])}: "
        f"{escape(cp['before']['label'])} &rarr; {escape(cp['after']['label'])}</h1><ul>{cmds}</ul>"
    )


def create_app(engine: Engine, report: Callable[[dict], str] | None = None) -> Flask:
    """The Flask app over `engine`. report(change point dict) -> HTML of its compare/explain report."""
    app = Flask("abtest.history", static_folder=None)
    render = report or default_report

    @app.get("/")
    def index():
        return send_file(STATIC / "dashboard.html", mimetype="text/html")

    @app.get("/static/dashboard.js")
    def dashboard_js():
        return send_file(STATIC / "dashboard.js", mimetype="text/javascript")

    @app.get("/static/plotly.min.js")
    def plotly():
        return send_file(plotly_js(), mimetype="text/javascript", max_age=86400)

    @app.get("/api/series")
    def api_series():
        return jsonify([k.to_json() for k in list_series(engine, **_filters())])

    @app.get("/api/points")
    def api_points():
        dev, wl, met = (request.args.get(k) for k in ("device", "workload", "metric"))
        if not (dev and wl and met):
            abort(Response("device, workload and metric are required", status=400))
        key = series_key(engine, dev, wl, met)
        if key is None:
            abort(Response(f"no series {dev}/{wl}/{met}", status=404))
        cps = stored(engine, devices=(dev,), workloads=(wl,), metrics=(met,))
        cps = [c for c in cps if c["metric"] == met]
        return jsonify(
            {"series": key.to_json(), "points": [p.to_json() for p in points(engine, key)], "change_points": cps}
        )

    @app.get("/api/changepoints")
    def api_changepoints():
        return jsonify(stored(engine, active_only=request.args.get("all") != "1", **_filters()))

    @app.post("/api/changepoints/<int:cp_id>/triage")
    def api_triage(cp_id: int):
        doc = request.get_json(silent=True) or {}
        try:
            set_triage(engine, cp_id, str(doc.get("state", "")), doc.get("note"))
        except ValueError as e:
            abort(Response(str(e), status=400))
        except KeyError as e:
            abort(Response(str(e), status=404))
        return jsonify(stored(engine, active_only=False, cp_id=cp_id)[0])

    @app.get("/report/<int:cp_id>")
    def report_page(cp_id: int):
        found = stored(engine, active_only=False, cp_id=cp_id)
        if not found:
            abort(404)
        return Response(render(found[0]), mimetype="text/html")

    return app


class Server:
    """The app on a threaded WSGI server in a background thread (port 0: any free port). Use as a context
    manager, or start()/stop()."""

    def __init__(self, app: Flask, host: str = "127.0.0.1", port: int = 0):
        from werkzeug.serving import make_server

        self.httpd = make_server(host, port, app, threaded=True)
        self.host, self.port = host, self.httpd.server_port
        self.thread = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> Self:
        import threading

        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self.thread is not None:
            self.thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
