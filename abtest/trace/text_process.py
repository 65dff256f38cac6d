"""`ps` listings inside trace text (systrace PROCESS DUMP blocks, `atrace ...; ps -t` output) -> table `process`.

Recognised listings (a header line, then its rows up to the next header, event line or unrelated line):

legacy toolbox ``ps`` / ``ps -t`` (Android <= 7)::

    USER      PID   PPID  VSIZE  RSS   WCHAN            PC  NAME
    root      1     0     1324   856   SyS_epoll_ 00070cd8 S /init

  a state letter precedes NAME although the header has no column for it, and WCHAN may be blank. With
  ``-t`` every process row is followed by its threads, the main thread first: a thread row shows the
  thread id under PID and the process id (thread group) under PPID. A row is a process row when the next
  row repeats its PID in both PID and PPID (its main thread); every other row of a listing that holds such
  pairs is a thread row of the process under its PPID.
toybox ``ps -A -o USER,PID,PPID,VSZ,RSS,WCHAN,ADDR,S,NAME,COMM`` (systrace on Android >= 7)::

    USER           PID  PPID     VSZ    RSS WCHAN            PC S NAME                        COMM
    root             1     0   32904   4580 SyS_epoll_wait      0 S init                 init
toybox thread listing ``ps -AT -o USER,PID,TID,CMD`` (and any header with PID and TID columns)::

    USER           PID   TID CMD
    u0_a41       32710 32753 Profile Saver

Table ``process`` (one row per thread seen; for a thread listed twice each column keeps its last known value):
    pid (Int32: the thread id), tgid (Int32: its process, = pid for a process's main thread),
    ppid (Int32: parent process of the thread group, null where the listing does not give it),
    name (Utf8: the thread's name; the process name for process rows), user (Utf8).
Task names are filled from it where an event line has none (``<...>``), and ``common_tgid`` where the text
had no TGID column or printed ``(-----)``: see `fill_from_process_table`.
"""

from __future__ import annotations

import polars as pl

# header lines: "USER PID PPID ..." / "USER PID TID ..." / "PID TID ..." (toybox prints no USER with some -o)
PS_HEADER_RE = r"^\s*(?:USER\s+)?PID\s+(?:PPID|TID)\b"
PROCESS_DUMP_RE = r"^\s*PROCESS DUMP\s*$"
# a row starts with the user (or a number) and two integers
_ROW_START_RE = r"^\s*\S+\s+[0-9]+\s+[0-9]+(?:\s|$)"
_LEGACY_ROW_RE = (
    r"^\s*(\S+)\s+([0-9]+)\s+([0-9]+)\s+[0-9]+\s+[0-9]+\s+(?:\S+\s+)??[0-9a-fA-F]+\s+"
    r"[A-Za-z]\s+(.*?)\s*$"
)

PROCESS_SCHEMA = {"pid": pl.Int32, "tgid": pl.Int32, "ppid": pl.Int32, "name": pl.Utf8, "user": pl.Utf8}


def mark_listings(lines: pl.DataFrame, is_event: pl.Expr) -> pl.DataFrame:
    """+ column ``_ps`` on every line: "header" (a ps header), "row" (a row of the listing above it),
    "dump" (a ``PROCESS DUMP`` title) or null. A listing ends at an event line or at the first line
    that is not a row."""
    text = pl.col("text")
    kind = (
        pl.when(is_event)
        .then(pl.lit("event"))
        .when(text.str.contains(PS_HEADER_RE))
        .then(pl.lit("header"))
        .when(text.str.contains(PROCESS_DUMP_RE))
        .then(pl.lit("dump"))
        .when(text.str.contains(_ROW_START_RE))
        .then(pl.lit("rowlike"))
        .otherwise(pl.lit("other"))
    )
    df = lines.with_columns(kind.alias("_ps_kind"))
    # a listing = a header and the run of row-like lines right after it
    run = (pl.col("_ps_kind") != "rowlike").cum_sum()
    df = df.with_columns(run.alias("_run"))
    df = df.with_columns(
        pl.col("_ps_kind").first().over("_run").alias("_run_head"),
        pl.col("_line").first().over("_run").alias("_listing"),
    )
    return df.with_columns(
        pl.when(pl.col("_ps_kind") == "header")
        .then(pl.lit("header"))
        .when(pl.col("_ps_kind") == "dump")
        .then(pl.lit("dump"))
        .when((pl.col("_ps_kind") == "rowlike") & (pl.col("_run_head") == "header"))
        .then(pl.lit("row"))
        .alias("_ps")
    ).drop("_ps_kind", "_run", "_run_head")


def _columns(header: str) -> list[str]:
    """The header's column names, upper case, made unique (a damaged header can repeat a word)."""
    out: list[str] = []
    for c in header.split():
        c = c.upper()
        out.append(c if c not in out else f"{c}_{len(out)}")
    return out


def _legacy(rows: pl.DataFrame) -> pl.DataFrame:
    g = pl.col("text").str.extract_groups(_LEGACY_ROW_RE)
    df = (
        rows.select("_line", "_listing", g.alias("g"))
        .unnest("g")
        .rename({"1": "user", "2": "pid", "3": "ppid", "4": "name"})
    )
    df = df.with_columns(pl.col("pid", "ppid").cast(pl.Int64, strict=False))
    nxt_pid, nxt_ppid = pl.col("pid").shift(-1).over("_listing"), pl.col("ppid").shift(-1).over("_listing")
    main_thread = (nxt_pid == pl.col("pid")) & (nxt_ppid == pl.col("pid"))
    has_threads = ((pl.col("pid") == pl.col("ppid")) & (pl.col("pid") > 0)).any().over("_listing")
    process_row = main_thread.fill_null(False) | ~has_threads
    return df.with_columns(
        pl.when(process_row).then(pl.col("pid")).otherwise(pl.col("ppid")).alias("tgid"),
        pl.when(process_row).then(pl.col("ppid")).alias("ppid"),
        process_row.alias("_process_row"),
    )


def _by_header(rows: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
    """Rows split on whitespace into the header's columns, the last column taking the rest of the line;
    for toybox process listings (a NAME and a COMM column) NAME is one token and COMM the rest."""
    n = len(cols)
    parts = pl.col("text").str.strip_chars().str.replace_all(r"\s+", " ").str.splitn(" ", n)
    df = rows.select("_line", "_listing", parts.alias("p")).unnest("p")
    df.columns = ["_line", "_listing"] + cols[: len(df.columns) - 2]

    def col(name: str) -> pl.Expr:
        return pl.col(name) if name in df.columns else pl.lit(None, pl.Utf8)

    tid = col("TID").cast(pl.Int64, strict=False)
    pid = col("PID").cast(pl.Int64, strict=False)
    name = pl.coalesce(col("COMM"), col("CMD"), col("NAME"), col("ARGS"), col("COMMAND"))
    if "TID" in df.columns:  # thread listing: PID is the thread group
        return df.select(
            "_line",
            "_listing",
            col("USER").alias("user"),
            tid.alias("pid"),
            pid.alias("tgid"),
            col("PPID").cast(pl.Int64, strict=False).alias("ppid"),
            name.alias("name"),
            (tid == pid).alias("_process_row"),
        )
    return df.select(
        "_line",
        "_listing",
        col("USER").alias("user"),
        pid.alias("pid"),
        pid.alias("tgid"),
        col("PPID").cast(pl.Int64, strict=False).alias("ppid"),
        pl.coalesce(col("NAME"), name).alias("name"),
        pl.lit(True).alias("_process_row"),
    )


def process_table(marked: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Lines marked by `mark_listings` -> (table ``process``, the listing rows that did not parse)."""
    headers = marked.filter(pl.col("_ps") == "header").select(pl.col("_line").alias("_listing"), "text")
    rows = marked.filter(pl.col("_ps") == "row").select("_line", "_listing", "text")
    parts, bad = [], []
    for listing, header in headers.iter_rows():  # one iteration per listing (a handful per file)
        mine = rows.filter(pl.col("_listing") == listing)
        if mine.is_empty():
            continue
        cols = _columns(header)
        legacy = "PC" in cols and "S" not in cols and "TID" not in cols
        df = _legacy(mine) if legacy else _by_header(mine, cols)
        ok = df["pid"].is_not_null() & df["tgid"].is_not_null() & df["name"].is_not_null()
        bad.append(mine.filter(~ok.to_numpy()))
        parts.append(df.filter(ok))
    if not parts:
        return pl.DataFrame(schema=PROCESS_SCHEMA), pl.concat(bad) if bad else rows.clear()
    table = pl.concat([p.select("_line", "pid", "tgid", "ppid", "name", "user") for p in parts], how="vertical_relaxed")
    in_range = pl.col("pid").is_between(0, 2**31 - 1) & pl.col("tgid").is_between(0, 2**31 - 1)
    bad.append(rows.join(table.filter(~in_range).select("_line"), on="_line", how="semi"))
    table = merge_listings(table.filter(in_range).sort("_line").drop("_line"))
    return table, pl.concat(bad).sort("_line") if bad else rows.clear()


def merge_listings(rows: pl.DataFrame) -> pl.DataFrame:
    """Rows of several listings (in file order) -> one row per thread: each column's last known value (a
    thread listing gives the thread's name and group, the process listing its parent); threads take the
    parent of their thread group's process."""
    merged = (
        rows.group_by("pid", maintain_order=True)
        .agg(pl.all().drop_nulls().last())
        .select(
            pl.col("pid").cast(pl.Int32),
            pl.col("tgid").cast(pl.Int32),
            pl.col("ppid").cast(pl.Int32, strict=False),
            pl.col("name").str.strip_chars(),
            "user",
        )
    )
    parents = merged.filter(pl.col("pid") == pl.col("tgid")).select(
        pl.col("pid").alias("tgid"), pl.col("ppid").alias("_pp")
    )
    return (
        merged.join(parents, on="tgid", how="left", maintain_order="left")
        .with_columns(pl.coalesce("ppid", "_pp").alias("ppid"))
        .drop("_pp")
        .sort("pid")
    )


def fill_from_process_table(tables: dict[str, pl.DataFrame], process: pl.DataFrame, meta: dict) -> None:
    """Task names where the event line had none (``<...>``) and thread groups where the text had no TGID
    (no column, or ``(-----)``), from the `process` table; counts in meta["process_table"]."""
    if process.is_empty():
        return
    names = process.select(
        pl.col("pid").alias("common_pid"), pl.col("name").alias("_pname"), pl.col("tgid").alias("_ptgid")
    )
    filled_comm = filled_tgid = 0
    for name, df in list(tables.items()):
        if "common_pid" not in df.columns or "common_comm" not in df.columns:
            continue
        j = df.join(names, on="common_pid", how="left", maintain_order="left")
        unknown = (pl.col("common_comm") == "<...>") & pl.col("_pname").is_not_null()
        filled_comm += int(j.select(unknown.sum()).item())
        j = j.with_columns(
            pl.when(unknown).then(pl.col("_pname")).otherwise(pl.col("common_comm")).alias("common_comm")
        )
        if "common_tgid" in j.columns:
            missing = pl.col("common_tgid").is_null() & pl.col("_ptgid").is_not_null()
            filled_tgid += int(j.select(missing.sum()).item())
            j = j.with_columns(pl.coalesce("common_tgid", "_ptgid").alias("common_tgid"))
        else:
            filled_tgid += int(j["_ptgid"].is_not_null().sum())
            cols = j.columns
            j = j.rename({"_ptgid": "common_tgid"}).select(
                [c for c in cols[: cols.index("common_comm") + 1]]
                + ["common_tgid"]
                + [c for c in cols[cols.index("common_comm") + 1 :] if c not in ("_ptgid", "_pname")]
            )
        tables[name] = j.drop("_pname", "_ptgid", strict=False)
    meta["process_table"] = {
        "threads": process.height,
        "processes": int(process["tgid"].n_unique()),
        "filled_comms": filled_comm,
        "filled_tgids": filled_tgid,
    }
