"""A/A false-positive rate and power of the verdict rule (abtest.compare.verdict.Policy), by seeded simulation.

    .venv/bin/python bench/decision_rule.py [--reps 20000] [--seed 38]

For n = 3, 5, 10 iterations per side and each small-n behaviour of the rule (Policy.small_n: "welch" = Welch's
t decides alone where Mann-Whitney U cannot reach alpha, the default; "none" = no verdict there), prints the
rule as the report footer states it at that n (Policy.describe), which tests decided, and the rate of
regression/improvement verdicts on A/A data (false positives; must be <= alpha) for normal data (CV 2 %),
lognormal data (CV ~30 %) and outlier-contaminated data (10 % of iterations x1.3), with the upper end of a 95 %
Wilson interval, and the detection rate of a 5 % shift (normal, CV 2 %). Same code path as every verdict
(verdict.directional_batch -> Policy.significant).
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from abtest.compare.verdict import NO_VERDICT, WELCH_ALONE, Policy, directional_batch

SIZES = (3, 5, 10)


def samples(kind: str, rng: np.random.Generator, reps: int, n: int, shift: float = 0.0) -> np.ndarray:
    """(reps, n) iteration values of one side: normal (mean 100, CV 2 %), lognormal (CV ~30 %) or normal with
    10 % of iterations x1.3 (a thermal throttle, a background job); `shift` multiplies the values by 1 + shift."""
    if kind == "normal":
        x = rng.normal(100.0, 2.0, (reps, n))
    elif kind == "lognormal":
        x = rng.lognormal(3.0, 0.3, (reps, n))
    else:
        x = rng.normal(100.0, 2.0, (reps, n)) * np.where(rng.random((reps, n)) < 0.1, 1.3, 1.0)
    return x * (1.0 + shift)


def verdict_rate(policy: Policy, kind: str, n: int, reps: int, seed: int, shift: float = 0.0) -> float:
    """Fraction of `reps` simulated n-vs-n comparisons that end in a regression or improvement verdict."""
    rng = np.random.default_rng(seed)
    a, b = samples(kind, rng, reps, n), samples(kind, rng, reps, n, shift)
    return float(np.mean(directional_batch(a, b, lower_is_better=True, policy=policy) != 0))


def wilson_upper(rate: float, reps: int, z: float = 1.96) -> float:
    """Upper end of the 95 % Wilson score interval of a binomial proportion."""
    centre = (rate + z * z / (2 * reps)) / (1 + z * z / reps)
    half = z * math.sqrt(rate * (1 - rate) / reps + z * z / (4 * reps * reps)) / (1 + z * z / reps)
    return centre + half


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=38)
    args = ap.parse_args(argv)
    print(f"{args.reps} seeded comparisons per cell; A/A cells: rate (95 % upper bound); alpha 0.05, min effect 1 %")
    print("| small n | n/side | decided by | A/A normal | A/A lognormal | A/A outliers | 5 % shift detected |")
    print("|---|---|---|---|---|---|---|")
    for small_n in (WELCH_ALONE, NO_VERDICT):
        policy = Policy(small_n=small_n)
        for n in SIZES:
            cells = []
            for k, kind in enumerate(("normal", "lognormal", "outliers")):
                r = verdict_rate(policy, kind, n, args.reps, args.seed + 10 * n + k)
                cells.append(f"{r:.2%} ({wilson_upper(r, args.reps):.2%})")
            power = verdict_rate(policy, "normal", n, args.reps, args.seed + 10 * n + 7, shift=0.05)
            print(f"| {small_n} | {n} | {policy.decision_test(n, n)} | " + " | ".join(cells) + f" | {power:.1%} |")
    print()
    for small_n in (WELCH_ALONE, NO_VERDICT):
        for n in SIZES:
            print(f"footer at {n} vs {n}, small_n={small_n}: {Policy(small_n=small_n).describe({(n, n)})}")


if __name__ == "__main__":
    main()
