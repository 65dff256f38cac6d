"""Change-point detection: precision and recall of abtest.history.changepoint against Apache Otava on synthetic
series with known steps, measured in the same run.

Series (seeded): 100 builds, one value per build (a build's aggregate), noise CV 1, 2 or 5 %, one step of 1, 2,
4, 6 or 10 % at a random build in [25, 75), or no step and one single-build spike of +20 %. A detection within
+-2 builds of the true step is a true positive; any other detection is a false positive.
Otava runs in its own virtualenv (OTAVA_PY, default /tmp/otava-venv/bin/python: `python3 -m venv
/tmp/otava-venv && /tmp/otava-venv/bin/pip install apache-otava`) with its defaults (window 50, p 0.001,
min_magnitude 0) through otava.analysis.compute_change_points. Run: .venv/bin/python bench/changepoint.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from abtest.history.changepoint import change_points

OTAVA_PY = os.environ.get("OTAVA_PY", "/tmp/otava-venv/bin/python")
N, REPS, TOL = 100, 20, 2
STEPS = (0.01, 0.02, 0.04, 0.06, 0.10)
CVS = (0.01, 0.02, 0.05)
OTAVA_SCRIPT = """
import json, sys
from otava.analysis import compute_change_points
out = []
for s in json.load(sys.stdin):
    cps, _ = compute_change_points(s, window_len=50, max_pvalue=0.001)
    out.append([int(c.index) for c in cps])
print(json.dumps(out))
"""


def make_series(seed: int = 41):
    """[(kind, step, cv, true index or None, values)]"""
    rng = np.random.default_rng(seed)
    out = []
    for cv in CVS:
        for step in STEPS:
            for _ in range(REPS):
                x = 1000 * (1 + cv * rng.standard_normal(N))
                at = int(rng.integers(25, 75))
                x[at:] *= 1 + step
                out.append(("step", step, cv, at, x))
        for _ in range(REPS):
            x = 1000 * (1 + cv * rng.standard_normal(N))
            x[int(rng.integers(10, 90))] *= 1.2
            out.append(("spike", 0.0, cv, None, x))
    return out


def run_otava(series) -> list[list[int]] | None:
    if not Path(OTAVA_PY).exists():
        return None
    doc = json.dumps([list(map(float, s[4])) for s in series])
    r = subprocess.run([OTAVA_PY, "-c", OTAVA_SCRIPT], input=doc, capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def score(series, found) -> dict:
    """{(kind, step, cv): (tp, fp, fn)}"""
    out: dict = {}
    for (kind, step, cv, at, _), idx in zip(series, found):
        tp = int(at is not None and any(abs(i - at) <= TOL for i in idx))
        fp = len(idx) - tp
        fn = int(at is not None) - tp
        t = out.setdefault((kind, step, cv), [0, 0, 0])
        t[0] += tp
        t[1] += fp
        t[2] += fn
    return out


def _pr(t) -> str:
    tp, fp, fn = t
    p = tp / (tp + fp) if tp + fp else float("nan")
    r = tp / (tp + fn) if tp + fn else float("nan")
    return f"P {p:4.2f} R {r:4.2f} FP {fp:3d}"


def main() -> None:
    series = make_series()
    t0 = time.perf_counter()
    ours = [[s.index for s in change_points(x)] for *_, x in series]
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    otava = run_otava(series)
    t_otava = time.perf_counter() - t0
    so, sv = score(series, ours), (score(series, otava) if otava is not None else None)
    print(
        f"{len(series)} series of {N} builds, {REPS} per cell; abtest {t_ours:.2f} s, "
        + (f"otava {t_otava:.2f} s (incl. start-up)" if otava is not None else f"otava not found at {OTAVA_PY}")
    )
    print(f"{'kind':6} {'step':>5} {'cv':>4}   {'abtest (p 0.001, 2 %, seg 3)':30} otava (window 50, p 0.001)")
    for key in so:
        kind, step, cv = key
        print(f"{kind:6} {step * 100:4.0f}% {cv * 100:3.0f}%   {_pr(so[key]):30} {_pr(sv[key]) if sv else '-'}")
    for name, s in (("abtest", so), ("otava", sv)):
        if s is None:
            continue
        tot = np.sum([v for k, v in s.items() if k[0] == "step" and k[1] >= 0.02], axis=0)
        spikes = sum(v[1] for k, v in s.items() if k[0] == "spike")
        print(f"{name}: steps >= 2 %: {_pr(tot)}; false positives on {REPS * len(CVS)} spike-only series: {spikes}")


if __name__ == "__main__":
    main()
