"""Operating characteristics of the verdict rule by seeded simulation.

    python -m abtest.compare.simulate [--reps 4000] [--seed 7]

prints, for normal data at a given CV, the rate of regression/improvement verdicts when A and B come from
the same distribution (false positives) and when B is shifted (detection power), per iterations per side.
Useful to choose how many iterations to run. Vectorised: thousands of comparisons take milliseconds.
"""

from __future__ import annotations

import argparse

import numpy as np

from abtest.compare import stats
from abtest.compare.verdict import Policy, directional_batch


def verdict_rate(n: int, shift: float, cv: float, reps: int, seed: int, policy: Policy = Policy()) -> float:
    """Fraction of `reps` simulated comparisons (n per side, normal, mean 100, CV `cv`) that give a
    regression or improvement verdict with B shifted by `shift` (fraction of the mean)."""
    rng = np.random.default_rng(seed)
    a = rng.normal(100.0, 100.0 * cv, (reps, n))
    b = rng.normal(100.0 * (1 + shift), 100.0 * cv, (reps, n))
    return float(np.mean(directional_batch(a, b, lower_is_better=True, policy=policy) != 0))


def bootstrap_as_test_rate(n: int, cv: float, reps: int, seed: int) -> float:
    """A/A rate of 'the 95 % bootstrap CI of the delta excludes 0' (why the bootstrap CI does not decide)."""
    rng = np.random.default_rng(seed)
    hits = 0
    for i in range(reps):
        a, b = rng.normal(100, 100 * cv, n), rng.normal(100, 100 * cv, n)
        lo, hi = stats.bootstrap_delta_ci_pct(a, b, seed=i)
        hits += lo > 0 or hi < 0
    return hits / reps


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--cv", type=float, default=0.02, help="coefficient of variation (fraction)")
    ap.add_argument("--shift", type=float, default=0.05, help="B shift for the power column (fraction)")
    args = ap.parse_args(argv)
    print(f"normal data, CV {args.cv:.1%}, alpha 0.05, min effect 1 %, {args.reps} comparisons each")
    print(f"{'n/side':>6} {'A/A false positives':>20} {'detected ' + format(args.shift, '.0%') + ' shift':>20}")
    for n in (3, 4, 5, 6, 8, 10):
        fp = verdict_rate(n, 0.0, args.cv, args.reps, args.seed + n)
        pw = verdict_rate(n, args.shift, args.cv, args.reps, args.seed + 100 + n)
        print(f"{n:>6} {fp:>20.1%} {pw:>20.1%}")
    rng = np.random.default_rng(args.seed)
    a = rng.normal(100, 100 * args.cv, (args.reps, 5))
    b = rng.normal(100 * (1 + args.shift), 100 * args.cv, (args.reps, 5))
    print(
        f"n = 5, {args.shift:.0%} shift, each test alone at p < 0.05: Welch's t "
        f"{np.mean(stats.welch_p(a, b) < 0.05):.1%}, Mann-Whitney U {np.mean(stats.mannwhitney_p(a, b) < 0.05):.1%}"
    )
    print(
        f"bootstrap CI as the test, A/A, n = 5: {bootstrap_as_test_rate(5, args.cv, 1000, args.seed):.1%} "
        "false positives (1000 comparisons)"
    )


if __name__ == "__main__":
    main()
