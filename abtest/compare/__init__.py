"""A/B comparison: run store -> per-iteration metrics -> statistics -> verdicts -> seed-style tables.

Submodules:
  store    the run store model (STORE/<label>/<workload>/<iteration>/) and its loader
  metrics  per-iteration metrics from metrics.json, power.csv and the trace (cached per iteration)
  stats    descriptive statistics, bootstrap CI of the delta, Mann-Whitney U, Welch's t
  verdict  regression / improvement / no change / inconclusive
  tables   seed-shaped comparison tables (rows as plain dicts; rendered by abtest.report)
"""
