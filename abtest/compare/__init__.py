"""A/B comparison: run store -> per-iteration metrics -> statistics -> verdicts -> seed-style tables.

Submodules:
  store       the run store model (STORE/<label>/<workload>/<iteration>/) and its loader
  metrics     per-iteration metrics from metrics.json, power.csv and the trace (cached per iteration)
  stats       descriptive statistics, bootstrap CI of the delta, Mann-Whitney U, Welch's t
  verdict     regression / improvement / no change / inconclusive (the rule is documented there)
  comparison  compare_labels(A, B): per workload and metric statistics and verdicts; JSON form
  tables      seed-shaped comparison tables (rows as plain data; rendered by abtest.report)
  gate        thresholds (TOML) -> pass / fail / error per check, exit code, JUnit XML
  simulate    `python -m abtest.compare.simulate`: false-positive rate and power of the verdict rule
"""
