"""Task keys: the name a per-task metric is keyed by (the TASK grouping: latency.task.*, placement.task.*,
tasks.task.*, uclamp.task.*), declared once here.

Without process information a task key is the thread's name at the event (comm), as the kernel printed it.
Where the trace has a `process` table (perfetto ProcessTree packets; the ps listings of systrace / atrace
text: abtest.trace.text_process) the key of a thread is ``PROCESS/THREAD``: PROCESS is the basename of its
process's name (``/vendor/bin/hw/android.hardware.power-service`` -> ``android.hardware.power-service``),
THREAD the comm at the event; a process's main thread (pid = tgid), or a thread named like its process (also
cut to the kernel's 15 characters: a thread that kept its process's comm), is just ``PROCESS``. Only a path
is cut to its basename: an app's package name or a kernel thread's name (``kworker/0:1``) stays whole. So
HALs whose threads all print the comm ``android.hardwar`` stay apart, and a key holds no pid: the same task
has the same key in runs with other pids. A thread the table does not list (it started after the listing),
or a process without a name, keeps its comm.

`keyed(trace)` is the trace as the per-task analyses read it: every comm column paired with a pid column
(comm/pid, prev_comm/prev_pid, next_comm/next_pid) holds task keys instead. `matches(key, name)` is how a task
name given by the user (``--task``, a store's task list) selects keys: the full key, its thread part (after
the first ``/``), or, for a name of 15 characters (a comm the kernel cut to TASK_COMM_LEN), the process keys
(no thread part) of the processes whose name starts with it: what ``--task android.hardwar`` chose before.
"""

from __future__ import annotations

import polars as pl

# (name column, pid column) pairs of the canonical tables that name a task
_PAIRS = (("comm", "pid"), ("prev_comm", "prev_pid"), ("next_comm", "next_pid"))
# the kernel keeps comm in TASK_COMM_LEN = 16 bytes, NUL included
COMM_LEN = 15


def process_names(process: pl.DataFrame) -> pl.DataFrame:
    """pid (Int32) -> ``_proc`` (basename of the name of its process), ``_main`` (the process's main thread)
    for the threads of `process` (pid, tgid, name) whose process has a name; the last row of a pid wins."""
    if process.is_empty() or not {"pid", "tgid", "name"} <= set(process.columns):
        return pl.DataFrame(schema={"pid": pl.Int32, "_proc": pl.Utf8, "_main": pl.Boolean})
    name = pl.col("name").cast(pl.Utf8).str.strip_chars()
    # a path (argv[0] of a native binary) -> its basename; other names as they are (an app's package name;
    # a kernel thread's comm, which perfetto gives as its cmdline: kworker/0:1 stays kworker/0:1)
    base = (
        pl.when(name.str.starts_with("/"))
        .then(name.str.strip_chars_end("/").str.split("/").list.last())
        .otherwise(name)
    )
    procs = (
        process.filter(pl.col("pid") == pl.col("tgid"))
        .select(pl.col("tgid").cast(pl.Int32), base.alias("_proc"))
        .filter(pl.col("_proc").is_not_null() & (pl.col("_proc") != ""))
        .unique("tgid", keep="last", maintain_order=True)
    )
    threads = process.select(
        pl.col("pid").cast(pl.Int32), pl.coalesce("tgid", "pid").cast(pl.Int32).alias("tgid")
    ).unique("pid", keep="last", maintain_order=True)
    return threads.join(procs, on="tgid", how="inner").select(
        "pid", "_proc", (pl.col("pid") == pl.col("tgid")).alias("_main")
    )


def _cut_name_of(comm: pl.Expr, proc: pl.Expr) -> pl.Expr:
    """comm is `proc` cut to COMM_LEN bytes (a thread that kept the comm its process started with)."""
    return (comm.str.len_bytes() == COMM_LEN) & proc.str.starts_with(comm)


def with_task_keys(df: pl.DataFrame, names: pl.DataFrame) -> pl.DataFrame:
    """`df` with every comm column that has its pid column (comm/pid, prev_comm/prev_pid, next_comm/next_pid)
    holding task keys (see the module doc); `names`: process_names(). Other columns and the row order stay."""
    if names.is_empty():
        return df
    for comm, pid in _PAIRS:
        if comm not in df.columns or pid not in df.columns:
            continue
        c = pl.col(comm).cast(pl.Utf8)
        key = (
            pl.when(pl.col("_proc").is_null() | c.is_null())
            .then(c)
            .when(pl.col("_main") | (c == pl.col("_proc")) | _cut_name_of(c, pl.col("_proc")))
            .then(pl.col("_proc"))
            .otherwise(pl.col("_proc") + "/" + c)
        )
        dtype = df.schema[comm]
        df = (
            df.join(
                names.with_columns(pl.col("pid").cast(df.schema[pid])).rename({"pid": pid}),
                on=pid,
                how="left",
                maintain_order="left",
            )
            .with_columns(key.cast(dtype).alias(comm))
            .drop("_proc", "_main")
        )
    return df


def matches(key: str, name: str) -> bool:
    """A task name given by the user selects this key: the key itself, its thread part, or (a comm cut to 15
    characters: what a process's main thread printed) a key naming a process whose name it begins."""
    if key == name:
        return True
    proc, sep, thread = key.partition("/")
    if sep and thread == name:
        return True
    return not sep and len(name.encode()) == COMM_LEN and proc.startswith(name)


def select(keys, names) -> list[str]:
    """The keys among `keys` that the task names `names` select (`matches`), in the order of `keys`."""
    names = [n for n in names if n]
    return [k for k in keys if k is not None and any(matches(k, n) for n in names)]


class TaskKeyed:
    """A trace whose tables name tasks by task key (`keyed`); everything else is the trace's."""

    def __init__(self, trace, names: pl.DataFrame):
        self._trace = trace
        self._names = names
        self._keyed: dict[tuple[str, bool], pl.DataFrame] = {}

    def __getattr__(self, attr):
        return getattr(self._trace, attr)

    def df(self, name: str, *, windowed: bool = True) -> pl.DataFrame:
        k = (name, windowed)
        if k not in self._keyed:
            self._keyed[k] = with_task_keys(self._trace.df(name, windowed=windowed), self._names)
        return self._keyed[k]


def keyed(trace):
    """`trace` as the per-task analyses read it: comm columns hold task keys where the trace has a process
    table with named processes; otherwise the trace itself (keys = comm, as printed)."""
    if isinstance(trace, TaskKeyed) or "process" not in trace.tables:
        return trace
    names = process_names(trace.df("process", windowed=False))
    return trace if names.is_empty() else TaskKeyed(trace, names)
