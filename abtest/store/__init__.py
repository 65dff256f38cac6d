"""The run store: iterations of workloads run on kernels, as collectors leave them on disk.

  layout   the directory contract, file names, where the trace / power files are
  reader   load_store / load_label / load_iteration -> Store, Label, Iteration, Metric (metrics.json)
  writer   IterationWriter: one iteration written atomically, `.complete` last
  power    power.csv (ts_ns, rail, subsystem, energy_uj) read/write, and every power source of an iteration
  config   STORE/abtest.toml (per-workload default tasks, rail -> channel mapping)
  wa       Workload Automation 3 output directories read as iterations

Everything here is plain data loading and writing: no statistics, no trace analysis.
"""
