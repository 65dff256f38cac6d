"""Text and JSON views of a bisection: the result (culprit, probability, confirmation, runs per revision, the
commands that compare and explain culprit vs parent) and the status of one under way."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from abtest.bisect import state as S
from abtest.bisect.posterior import Evidence, posterior
from abtest.store.reader import load_label


def result_text(res: dict, store: Path) -> str:
    c = res["confirmation"] or {}
    lines = [
        f"culprit: {res['culprit'][:12]} {res['subject']}",
        f"  P(culprit) = {res['probability']:.3f} ({res['mode']} search"
        f"{', run budget exhausted' if res['exhausted'] else ''})",
    ]
    if len(res["candidates"]) > 1:
        lines.append("  one of (the others did not build/boot): " + " ".join(r[:12] for r in res["candidates"]))
    if c:
        d = c.get("delta_pct")
        lines.append(
            f"  vs parent {res['parent'][:12]}: {c['text']}"
            + (f", {d:+.2f} % ({c['runs'][0]} vs {c['runs'][1]} runs{_new(c)})" if d is not None else "")
            + ("" if c.get("confirmed") else "  -- NOT CONFIRMED")
        )
    lines.append(f"runs: {res['runs_total']} in total, {res['revisions_built']} revisions built")
    lines.append("  " + ", ".join(f"{k} {v}" for k, v in res["runs_per_revision"].items()))
    for sha, why in res["untestable"].items():
        lines.append(f"  skipped {sha}: {why[:120]}")
    a, b = res["labels"]["parent"], res["labels"]["culprit"]
    lines.append(f"next: abtest compare {a} {b} --store {store}")
    lines.append(f"      abtest explain {a} {b} --store {store}")
    return "\n".join(lines)


def _new(c: dict) -> str:
    """ ", of them 1 + 2 new" (the runs the confirmation took; results before the sequential confirmation have
    none recorded)."""
    new = c.get("new_runs")
    return f", of them {new[0]} + {new[1]} new" if new else ""


def _counts(store: Path, st: S.BisectState) -> list[int]:
    """Complete iterations per revision (any workload), from the store."""
    out = []
    for i in range(st.n):
        p = Path(store) / st.label(i)
        out.append(sum(len(load_label(p).complete(w)) for w in load_label(p).workloads) if p.is_dir() else 0)
    return out


def status_doc(store: Path, st: S.BisectState, values=None) -> dict:
    """The status as a dict. values: position -> list of metric values (None: runs counted, no posterior)."""
    doc = {
        "good": st.revisions[0],
        "bad": st.revisions[-1],
        "revisions": st.n,
        "metric": st.config.metric,
        "mode": st.config.mode,
        "runs": dict(zip((r[:12] for r in st.revisions), _counts(store, st))),
        "untestable": {r[:12]: w for r, w in st.why.items()},
        "done": st.result is not None,
        "result": st.result,
    }
    if values is not None:
        ev = Evidence.from_runs(values, [s == S.UNTESTABLE for s in st.status])
        if ev.n[0] and ev.n[-1]:
            post = posterior(ev)
            j = int(post.culprit)
            doc["posterior"] = {
                "culprit": st.revisions[j],
                "probability": float(post.confidence),
                "top": [
                    {"revision": st.revisions[int(k)][:12], "p": float(post.block[k])}
                    for k in np.argsort(post.block)[::-1][:5]
                    if post.block[k] > 0.001
                ],
            }
    return doc


def status_text(doc: dict) -> str:
    lines = [
        f"bisecting {doc['metric']} over {doc['revisions'] - 2} commits: {doc['good'][:12]} (good) .. "
        f"{doc['bad'][:12]} (bad), {doc['mode']} search"
    ]
    runs = {k: v for k, v in doc["runs"].items() if v}
    lines.append(
        f"runs: {sum(runs.values())} over {len(runs)} revisions: " + ", ".join(f"{k} {v}" for k, v in runs.items())
    )
    for sha, why in doc["untestable"].items():
        lines.append(f"  skipped {sha}: {why[:120]}")
    if "posterior" in doc:
        p = doc["posterior"]
        lines.append(
            f"culprit so far: {p['culprit'][:12]} (P = {p['probability']:.3f}); "
            + ", ".join(f"{t['revision']} {t['p']:.3f}" for t in p["top"])
        )
    if doc["done"]:
        r = doc["result"]
        lines.append(f"done: culprit {r['culprit'][:12]} {r['subject']} (P = {r['probability']:.3f})")
    else:
        lines.append("under way or stopped: `abtest bisect run` continues")
    return "\n".join(lines)
