"""`abtest history detect`: change points of every selected series, written to the database.

A change point is keyed by its series and the first build after the step; re-detection updates its numbers,
marks the ones no longer found inactive, and never touches the triage state (new / acknowledged / invalid)
a person gave it."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from sqlalchemy import Engine, and_, insert, select, update

from abtest.history import schema as S
from abtest.history.changepoint import DEFAULTS, Settings, Step, change_points
from abtest.history.identity import now
from abtest.history.series import Point, SeriesKey, list_series, points

REGRESSION, IMPROVEMENT, CHANGE = "regression", "improvement", "change"


def kind_of(direction: str, delta_pct: float) -> str:
    """regression / improvement from the metric's declared direction; change when it declares none."""
    if direction == "lower":
        return REGRESSION if delta_pct > 0 else IMPROVEMENT
    if direction == "higher":
        return REGRESSION if delta_pct < 0 else IMPROVEMENT
    return CHANGE


@dataclass(frozen=True)
class Found:
    """A change point of one series: the step, the builds on both sides, its kind and database row."""

    key: SeriesKey
    step: Step
    before: Point
    after: Point
    kind: str
    id: int = 0
    triage: str = "new"

    def to_json(self) -> dict:
        return {
            "id": self.id,
            **self.key.to_json(),
            "kind": self.kind,
            "triage": self.triage,
            "delta_pct": self.step.delta_pct,
            "p_value": self.step.p,
            "mean_before": self.step.mean_before,
            "mean_after": self.step.mean_after,
            "index": self.step.index,
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "commands": commands(self.key, self.before, self.after),
        }


def label_path(p: Point) -> str:
    from pathlib import Path

    return str(Path(p.store) / p.label)


def commands(key: SeriesKey, before: Point, after: Point) -> dict:
    """The next commands for a change point: compare / explain between the builds on both sides, and the
    bisect of its revision range (when both builds know their git revision)."""
    a, b = shlex.quote(label_path(before)), shlex.quote(label_path(after))
    wl = shlex.quote(key.workload)
    out = {"compare": f"abtest compare {a} {b} --workload {wl}", "explain": f"abtest explain {a} {b} --workload {wl}"}
    if before.git_revision and after.git_revision:
        out["bisect"] = (
            f"abtest bisect start --good {before.git_revision} --bad {after.git_revision} "
            f"--metric {shlex.quote(key.metric)} --workload {wl} --repo KERNEL_TREE "
            "--build BUILD_CMD --target TARGET && abtest bisect run"
        )
    else:
        out["bisect"] = (
            "(no git revision recorded for these builds: record git.revision in meta.json to bisect "
            f"between {before.label} and {after.label})"
        )
    return out


def detect_series(
    engine: Engine, key: SeriesKey, settings: Settings = DEFAULTS, *, up_to_build: int | None = None
) -> list[Found]:
    """Change points of one series (not written). up_to_build: the series as it was when that build was
    the newest."""
    pts = points(engine, key, up_to_build=up_to_build)
    if len(pts) < settings.min_segment + settings.min_tail:
        return []
    steps = change_points([p.value for p in pts], settings)
    return [Found(key, st, pts[st.index - 1], pts[st.index], kind_of(key.direction, st.delta_pct)) for st in steps]


def save(conn, key: SeriesKey, found: list[Found]) -> list[Found]:
    cp = S.change_points
    where = and_(cp.c.device == key.device, cp.c.workload == key.workload, cp.c.metric_id == key.metric_id)
    existing = {
        r.build_after_id: r for r in conn.execute(select(cp.c.id, cp.c.build_after_id, cp.c.triage).where(where))
    }
    conn.execute(update(cp).where(where).values(active=False))
    out = []
    stamp = now()
    for f in found:
        vals = {
            "build_before_id": f.before.build_id,
            "kind": f.kind,
            "delta_pct": f.step.delta_pct,
            "p_value": f.step.p,
            "mean_before": f.step.mean_before,
            "mean_after": f.step.mean_after,
            "active": True,
            "detected": stamp,
        }
        row = existing.get(f.after.build_id)
        if row is not None:
            conn.execute(update(cp).where(cp.c.id == row.id).values(**vals))
            out.append(Found(f.key, f.step, f.before, f.after, f.kind, row.id, row.triage))
        else:
            new_id = conn.execute(
                insert(cp).values(
                    device=key.device,
                    workload=key.workload,
                    metric_id=key.metric_id,
                    build_after_id=f.after.build_id,
                    triage="new",
                    note="",
                    **vals,
                )
            ).inserted_primary_key[0]
            out.append(Found(f.key, f.step, f.before, f.after, f.kind, new_id, "new"))
    return out


def detect(
    engine: Engine,
    settings: Settings = DEFAULTS,
    *,
    metrics: tuple[str, ...] = (),
    devices: tuple[str, ...] = (),
    workloads: tuple[str, ...] = (),
    per_metric: dict | None = None,
) -> list[Found]:
    """Detect and record change points of every selected series. per_metric: metric key -> Settings that
    replace `settings` for that metric (history gate: the thresholds' max_regression_pct)."""
    out = []
    for key in list_series(engine, metrics=metrics, devices=devices, workloads=workloads):
        found = detect_series(engine, key, (per_metric or {}).get(key.metric, settings))
        with engine.begin() as conn:
            out += save(conn, key, found)
    return out


def set_triage(engine: Engine, cp_id: int, state: str, note: str | None = None) -> None:
    """Set a change point's triage state (new / acknowledged / invalid); KeyError for an unknown id."""
    if state not in S.TRIAGE_STATES:
        raise ValueError(f"triage state must be one of {', '.join(S.TRIAGE_STATES)}, not {state!r}")
    vals = {"triage": state} | ({"note": note} if note is not None else {})
    with engine.begin() as conn:
        if conn.execute(update(S.change_points).where(S.change_points.c.id == cp_id).values(**vals)).rowcount == 0:
            raise KeyError(f"no change point with id {cp_id}")


def stored(
    engine: Engine,
    *,
    active_only: bool = True,
    cp_id: int | None = None,
    metrics: tuple[str, ...] = (),
    devices: tuple[str, ...] = (),
    workloads: tuple[str, ...] = (),
) -> list[dict]:
    """Change points in the database as JSON-ready dicts (with builds and next commands)."""
    cp, m = S.change_points, S.metrics
    b1, b2 = S.builds.alias("b1"), S.builds.alias("b2")
    q = (
        select(
            cp,
            m.c.key,
            m.c.unit,
            m.c.direction,
            m.c.aggregation,
            b1.c.label.label("before_label"),
            b1.c.store.label("before_store"),
            b1.c.git_revision.label("before_rev"),
            b1.c.date.label("before_date"),
            b2.c.label.label("after_label"),
            b2.c.store.label("after_store"),
            b2.c.git_revision.label("after_rev"),
            b2.c.date.label("after_date"),
        )
        .select_from(
            cp.join(m, cp.c.metric_id == m.c.id)
            .join(b1, cp.c.build_before_id == b1.c.id)
            .join(b2, cp.c.build_after_id == b2.c.id)
        )
        .order_by(cp.c.device, cp.c.workload, m.c.key, b2.c.date)
    )
    if active_only:
        q = q.where(cp.c.active.is_(True))
    if cp_id is not None:
        q = q.where(cp.c.id == cp_id)
    if devices:
        q = q.where(cp.c.device.in_(devices))
    if workloads:
        q = q.where(cp.c.workload.in_(workloads))
    with engine.connect() as conn:
        rows = conn.execute(q).mappings().all()
    from fnmatch import fnmatchcase

    out = []
    for r in rows:
        if metrics and not any(fnmatchcase(r["key"], p) for p in metrics):
            continue
        key = SeriesKey(
            r["device"], r["workload"], r["key"], r["unit"], r["direction"], r["aggregation"], r["metric_id"]
        )
        before = Point(
            r["build_before_id"],
            r["before_label"],
            r["before_store"],
            r["before_date"],
            r["before_rev"],
            "",
            r["mean_before"],
            None,
            None,
            0,
        )
        after = Point(
            r["build_after_id"],
            r["after_label"],
            r["after_store"],
            r["after_date"],
            r["after_rev"],
            "",
            r["mean_after"],
            None,
            None,
            0,
        )
        out.append(
            {
                "id": r["id"],
                **key.to_json(),
                "kind": r["kind"],
                "triage": r["triage"],
                "note": r["note"],
                "active": bool(r["active"]),
                "delta_pct": r["delta_pct"],
                "p_value": r["p_value"],
                "mean_before": r["mean_before"],
                "mean_after": r["mean_after"],
                "detected": r["detected"],
                "before": before.to_json(),
                "after": after.to_json(),
                "commands": commands(key, before, after),
            }
        )
    return out
