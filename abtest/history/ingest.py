"""`abtest history add STORE [LABEL...]`: every usable iteration of the labels, with its declared metric values,
into the results database. Idempotent: an iteration already recorded (same resolved path) is skipped before
it is evaluated, and a build (store, label) is created once.

`add_compared` records what `abtest compare` / `gate --history` already computed (the comparison's per-iteration
values), with the same builds, identity and idempotence, without analysing an iteration a second time."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine, insert, select

from abtest.compare.metrics import options_for
from abtest.history import schema as S
from abtest.history.distributed import evaluate_all
from abtest.history.evaluate import Evaluated, values_of
from abtest.history.identity import build_identity, device, iteration_date, now
from abtest.store.config import load_store_config
from abtest.store.model import Iteration, StoreError
from abtest.store.reader import Label, load_label


@dataclass
class AddResult:
    """What `add` did: builds / iterations / values written, iterations already present, and notes
    (iterations that could not be evaluated, labels that do not exist); pids: the processes that evaluated."""

    builds: int = 0
    iterations: int = 0
    skipped: int = 0
    values: int = 0
    notes: list = field(default_factory=list)
    pids: set = field(default_factory=set)


def _labels(store: Path, names: tuple[str, ...]) -> list[str]:
    if names:
        return list(names)
    return sorted(p.name for p in store.iterdir() if p.is_dir() and not p.name.startswith("."))


def _work(engine: Engine, store: Path, names: tuple[str, ...], res: AddResult):
    """(build id, iteration, options) for each usable iteration not yet recorded; creates missing builds."""
    config = load_store_config(store)
    out = []
    with engine.begin() as conn:
        known = set(conn.execute(select(S.iterations.c.path)).scalars())
        for name in _labels(store, names):
            path = store / name
            if not path.is_dir():
                raise StoreError(f"label {name!r} not found in store {store}")
            label = load_label(path)
            usable = [it for w in sorted(label.workloads) for it in label.complete(w)]
            if not usable:
                res.notes.append(f"{name}: no complete iteration (nothing recorded)")
                continue
            build_id = _build(conn, store, name, usable, res)
            for it in usable:
                if str(it.path.resolve()) in known:
                    res.skipped += 1
                else:
                    out.append((build_id, it, options_for(config, it.workload)))
    return out


def _build(conn, store: Path, name: str, usable: list[Iteration], res: AddResult) -> int:
    row = conn.execute(select(S.builds.c.id).where(S.builds.c.store == str(store), S.builds.c.label == name)).first()
    if row is not None:
        return row[0]
    ident = build_identity(next((it.meta for it in usable if it.meta), {}), name)
    date = min(iteration_date(it) for it in usable)
    res.builds += 1
    return conn.execute(
        insert(S.builds).values(
            store=str(store),
            label=name,
            kernel_release=ident.kernel_release,
            kernel_version=ident.kernel_version,
            git_revision=ident.git_revision,
            config_hash=ident.config_hash,
            date=date,
        )
    ).inserted_primary_key[0]


class _Metrics:
    """metric key -> id, inserting keys the database does not know yet."""

    def __init__(self, conn):
        self.ids = {k: i for i, k in conn.execute(select(S.metrics.c.id, S.metrics.c.key))}

    def id(self, conn, v) -> int:
        if v.key not in self.ids:
            self.ids[v.key] = conn.execute(
                insert(S.metrics).values(
                    key=v.key, unit=v.unit, direction=v.direction, aggregation=v.aggregation, declared=v.declared
                )
            ).inserted_primary_key[0]
        return self.ids[v.key]


def _record(conn, metrics: _Metrics, build_id: int, it: Iteration, ev: Evaluated, res: AddResult) -> None:
    iid = conn.execute(
        insert(S.iterations).values(
            build_id=build_id,
            path=str(it.path.resolve()),
            device=device(it.meta),
            workload=it.workload,
            name=it.name,
            date=iteration_date(it),
            added=now(),
        )
    ).inserted_primary_key[0]
    rows = [{"iteration_id": iid, "metric_id": metrics.id(conn, v), "value": v.value} for v in ev.values]
    if rows:
        conn.execute(insert(S.metric_values), rows)
    res.iterations += 1
    res.values += len(rows)


def add(
    engine: Engine,
    stores: list[str | Path],
    labels: tuple[str, ...] = (),
    *,
    with_trace: bool = True,
    use_cache: bool = True,
    workers: int = 1,
    scheduler: str | None = None,
    progress: bool = False,
) -> AddResult:
    """Record the labels (all labels when none is named) of each store. workers / scheduler: where the
    per-iteration metrics are computed (abtest.history.distributed). An iteration whose analysis failed is
    recorded with the values it has and its notes are returned."""
    res = AddResult()
    work = []
    for store in stores:
        root = Path(store).resolve()
        if not root.is_dir():
            raise StoreError(f"store {store} does not exist or is not a directory")
        work += _work(engine, root, labels, res)
    by_path = {str(it.path): (build_id, it) for build_id, it, _ in work}
    with engine.begin() as conn:
        metrics = _Metrics(conn)
        for ev in evaluate_all(
            [(it, o) for _, it, o in work],
            with_trace=with_trace,
            use_cache=use_cache,
            workers=workers,
            scheduler=scheduler,
            progress=progress,
        ):
            build_id, it = by_path[ev.path]
            res.pids.add(ev.pid)
            res.notes += [f"{it.label}/{it.workload}/{it.name}: {n}" for n in ev.notes]
            _record(conn, metrics, build_id, it, ev, res)
    return res


def build_of(label: Label) -> tuple[Path, str]:
    """(store root, label name) of a label directory, as `history add STORE LABEL` names its build."""
    root = Path(os.path.abspath(label.path))
    return root.parent.resolve(), root.name


def add_compared(engine: Engine, comparisons: list, labels: list[Label]) -> AddResult:
    """Record the usable iterations a comparison read, with the values it computed (no second analysis).

    comparisons: abtest.compare.comparison.Comparison objects (one, or the pairs of an N-way compare); each
    WorkloadComparison's measured_a / measured_b hold, per usable iteration (order of paths_a / paths_b), its
    {full key: Measured}. labels: the Label objects compared (for the iterations' meta.json). An iteration
    already recorded (same resolved path, by `history add` or an earlier compare) is skipped."""
    res = AddResult()
    by_path = {str(lab.path): lab for lab in labels}
    its = {str(it.path): it for lab in labels for ws in lab.workloads.values() for it in ws}
    seen: set[str] = set()  # an N-way compare holds the baseline's iterations once per pair
    with engine.begin() as conn:
        known = set(conn.execute(select(S.iterations.c.path)).scalars())
        metrics = _Metrics(conn)
        for c in comparisons:
            for w in c.workloads:
                for label_path, paths, measured in (
                    (c.path_a, w.paths_a, w.measured_a),
                    (c.path_b, w.paths_b, w.measured_b),
                ):
                    # a plain folder of traces compared with a store label takes the other's workload name
                    usable = [
                        its[p] if its[p].workload == w.workload else dataclasses.replace(its[p], workload=w.workload)
                        for p in paths
                    ]
                    fresh = [(it, m) for it, m in zip(usable, measured) if str(it.path.resolve()) not in seen]
                    seen.update(str(it.path.resolve()) for it, _ in fresh)
                    todo = [(it, m) for it, m in fresh if str(it.path.resolve()) not in known]
                    res.skipped += len(fresh) - len(todo)
                    if not todo:
                        continue
                    store, label_name = build_of(by_path[label_path])
                    build_id = _build(conn, store, label_name, usable, res)
                    for it, m in todo:
                        _record(conn, metrics, build_id, it, Evaluated(str(it.path), values_of(m)), res)
                        known.add(str(it.path.resolve()))
    return res
