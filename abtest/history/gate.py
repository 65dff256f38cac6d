"""`abtest history gate`: CI's question on a nightly build — did this build open a regression change point?

For every metric of the thresholds file (the same TOML as `abtest gate`, abtest.compare.gate) and every
device/workload series of it that has the newest build, change points are detected twice: on the series up to
the build before the newest, and up to the newest. The check FAILS when the second finds a regression change
point (the metric's declared direction, or the file's lower_is_better) that the first did not, with
max_regression_pct as its minimum magnitude, unless a person already triaged that change point as
acknowledged or invalid. A series without the newest build is skipped. Exit code as `gate`: 1 on a failure,
2 on an error, else 0. The detection of the newest build is written to the database (the dashboard shows it).
"""

from __future__ import annotations

import dataclasses

from sqlalchemy import Engine, and_, select

from abtest.compare.gate import ERROR, FAIL, PASS, SKIP, Check, GateResult, Thresholds
from abtest.history import schema as S
from abtest.history.changepoint import DEFAULTS, Settings
from abtest.history.detect import REGRESSION, Found, detect_series, save
from abtest.history.series import list_series, newest_build, points


def _build_label(engine: Engine, build_id: int) -> str:
    with engine.connect() as conn:
        return conn.execute(select(S.builds.c.label).where(S.builds.c.id == build_id)).scalar_one()


def _triage(engine: Engine, f: Found) -> str:
    cp = S.change_points
    with engine.connect() as conn:
        row = conn.execute(
            select(cp.c.triage).where(
                and_(
                    cp.c.device == f.key.device,
                    cp.c.workload == f.key.workload,
                    cp.c.metric_id == f.key.metric_id,
                    cp.c.build_after_id == f.after.build_id,
                )
            )
        ).first()
    return row[0] if row else "new"


def _near(f: Found, earlier: list[Found], slack: int) -> bool:
    return any(abs(e.step.index - f.step.index) <= slack and e.kind == f.kind for e in earlier)


def history_gate(
    engine: Engine,
    th: Thresholds,
    settings: Settings = DEFAULTS,
    *,
    build_id: int | None = None,
    devices: tuple[str, ...] = (),
    workloads: tuple[str, ...] = (),
) -> tuple[GateResult, list[Found]]:
    """The gate's checks for `build_id` (default: the newest build) and the regression change points it
    opened."""
    build_id = build_id if build_id is not None else newest_build(engine)
    if build_id is None:
        res = GateResult("", "")
        res.errors.append("the history database holds no build (run `abtest history add STORE` first)")
        return res, []
    res = GateResult("previous build", _build_label(engine, build_id))
    opened: list[Found] = []
    for t in th.metrics:
        keys = [
            k
            for k in list_series(engine, metrics=(t.name,), devices=devices, workloads=workloads)
            if k.metric == t.name and (not t.workloads or k.workload in t.workloads)
        ]
        if not keys and t.required:
            res.errors.append(f"gated metric {t.name} has no series in the history database")
        s = dataclasses.replace(settings, min_change_pct=t.max_regression_pct)
        for key in keys:
            if t.lower_is_better is not None:
                key = dataclasses.replace(key, direction="lower" if t.lower_is_better else "higher")
            where = f"{key.device}/{key.workload}"
            pts = points(engine, key, up_to_build=build_id)
            if not pts or pts[-1].build_id != build_id:
                res.checks.append(Check(where, t.name, SKIP, f"{t.name}: the build is not in this series"))
                continue
            if key.direction == "none":
                res.checks.append(
                    Check(
                        where,
                        t.name,
                        ERROR,
                        f"metric {t.name} has no direction; set lower_is_better in the thresholds file",
                    )
                )
                continue
            res.label_a = pts[-2].label if len(pts) > 1 else "(none)"
            now_found = detect_series(engine, key, s, up_to_build=build_id)
            before = detect_series(engine, key, s, up_to_build=pts[-2].build_id) if len(pts) > 1 else []
            with engine.begin() as conn:
                now_found = save(conn, key, now_found)
            new = [
                f for f in now_found if f.kind == REGRESSION and not _near(f, before, 1) and _triage(engine, f) == "new"
            ]
            opened += new
            res.checks.append(_check(where, t.name, key, pts, new, now_found))
    return res, opened


def _check(where: str, metric: str, key, pts, new: list[Found], found: list[Found]) -> Check:
    n = len(pts)
    if new:
        f = new[-1]
        return Check(
            where,
            metric,
            FAIL,
            f"regression change point opened: {metric} {f.step.delta_pct:+.2f} % from build "
            f"{f.before.label} to {f.after.label} (p {f.step.p:.2g}, {n} builds); next: "
            f"abtest compare {f.before.label} {f.after.label} / abtest history serve",
            delta_pct=f.step.delta_pct,
            n_a=f.step.index,
            n_b=n - f.step.index,
        )
    last = (
        f"; last change point {found[-1].kind} {found[-1].step.delta_pct:+.2f} % at build {found[-1].after.label}"
        if found
        else ""
    )
    return Check(where, metric, PASS, f"no new regression change point over {n} builds{last}", n_a=n)
