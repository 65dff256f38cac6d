"""`abtest analyze` as tables: each analysis' summary (the `--json` object, docs/analyze.md) -> titled
tables (abtest.commands.text_grid.Grid) with units in the headers.

Dedicated renderers for the summaries whose keys docs/analyze.md documents (power, idle, latency,
frequency, load_tracking, placement, energy_model, frames); any other analysis of the registry gets the
generic renderer (`generic_blocks`), which turns nested dicts into tables, never into dotted keys, and takes
the unit of a value from the unit suffix that summary keys carry by convention (`UNIT_SUFFIXES`:
``mean_us`` -> "mean (us)", ``*_khz`` printed in MHz). `perfetto_blocks` renders the object of
`--engine perfetto` with the same table builders.

A block is a Grid or a line of text. Nothing is cut silently: a table that shows part of a summary says
what it left out and where to find it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from abtest.commands.text_grid import Column, Grid, fmt

Block = Grid | str
TEXT = False  # Column(numeric=TEXT): a left-aligned text column


@dataclass(frozen=True)
class Context:
    """What the summaries do not carry: duration_s: the analysed window (s); cpu_domains: {cpu: domain}
    (frequency domains, from the platform or inferred), None when unknown."""

    duration_s: float | None = None
    cpu_domains: dict[int, int] | None = None


# -- units (summary keys end with their unit; docs/analyze.md) -----------------------------------------------
# suffix -> (unit printed, factor applied to the value). Longest suffix first.
UNIT_SUFFIXES: tuple[tuple[str, str, float], ...] = (
    ("_per_s", "1/s", 1.0),
    ("_pct", "%", 1.0),
    ("_khz", "MHz", 1e-3),
    ("_mhz", "MHz", 1.0),
    ("_hz", "Hz", 1.0),
    ("_mw", "mW", 1.0),
    ("_uw", "uW", 1.0),
    ("_uws", "J", 1e-6),
    ("_uj", "J", 1e-6),
    ("_mj", "mJ", 1.0),
    ("_j", "J", 1.0),
    ("_ns", "s", 1e-9),
    ("_us", "us", 1.0),
    ("_ms", "ms", 1.0),
    ("_s", "s", 1.0),
    ("_mc", "°C", 1e-3),
    ("_celsius", "°C", 1.0),
    ("_c", "°C", 1.0),
    ("_kb", "KiB", 1.0),
    ("_bytes", "B", 1.0),
)
_ABBREV = {
    "cpu": "CPU",
    "cpus": "CPUs",
    "opp": "OPP",
    "pid": "pid",
    "tgid": "tgid",
    "gpu": "GPU",
    "em": "EM",
    "mae": "MAE",
    "fps": "FPS",
}


def split_unit(key: str) -> tuple[str, str, float]:
    """(human name, unit, factor) of a summary key: "too_deep_pct" -> ("too deep", "%", 1.0),
    "time_weighted_khz" -> ("time weighted", "MHz", 0.001), "wakeups" -> ("wakeups", "", 1.0)."""
    k = str(key)
    for suffix, unit, factor in UNIT_SUFFIXES:
        if k.lower().endswith(suffix) and len(k) > len(suffix):
            return humanize(k[: -len(suffix)]), unit, factor
    return humanize(k), "", 1.0


def humanize(key: str) -> str:
    """snake_case key -> words ("runnable_util_ratio" -> "runnable util ratio", "per_cpu" -> "per CPU")."""
    return " ".join(_ABBREV.get(w.lower(), w) for w in str(key).split("_") if w)


def _scaled(v, factor: float):
    if isinstance(v, bool) or v is None or factor == 1.0 or not isinstance(v, (int, float)):
        return v
    return v * factor


def _mhz(khz) -> str:
    """An OPP / frequency key in kHz as MHz ("450000" -> "450", "719130.8" -> "719.1")."""
    try:
        v = float(khz) / 1e3
    except (TypeError, ValueError):
        return str(khz)
    return f"{v:,.0f}" if v == int(v) else f"{v:,.1f}"


def _cpu_sort(keys) -> list:
    return sorted(keys, key=lambda k: (0, int(k), "") if str(k).lstrip("-").isdigit() else (1, 0, str(k)))


def _cpu_label(cpus: list) -> str:
    """[0, 1, 2, 3] -> "CPUs 0-3"; [4] -> "CPU 4"; [0, 3, 4] -> "CPUs 0, 3, 4"."""
    ints = [int(c) for c in cpus]
    if len(ints) == 1:
        return f"CPU {ints[0]}"
    if ints == list(range(ints[0], ints[0] + len(ints))):
        return f"CPUs {ints[0]}-{ints[-1]}"
    return "CPUs " + ", ".join(map(str, ints))


def _split_task(key: str) -> tuple[str, str]:
    """ "comm:pid" -> (comm, pid); the comm may itself contain ':'."""
    comm, sep, pid = str(key).rpartition(":")
    return (comm, pid) if sep and pid.lstrip("-").isdigit() else (str(key), "")


# -- shared table builders (native summaries and the perfetto engine) ---------------------------------------
def idle_residency_grid(res: dict[str, dict[str, tuple[float | None, float | None]]], *, pct_of: str) -> Grid:
    """CPU x idle state residency: res {cpu: {state: (seconds, pct)}}; one row per CPU, per state the
    columns "(s)" and "(%)"; alternative layout (when narrower): one row per state, per CPU "(s)", "(%)"."""
    states: list[str] = []
    for per in res.values():
        for s in per:
            if s not in states:
                states.append(s)
    order = {"active": 0, "idle-unknown": 2, "unknown": 3}
    first = {s: i for i, s in enumerate(states)}
    states.sort(key=lambda s: (order.get(s, 1), first[s]))
    cpus = _cpu_sort(res)
    title = f"Idle state residency per CPU (time in each state, s, and % of {pct_of})"
    cols = [Column("CPU", numeric=TEXT)]
    for s in states:
        cols += [Column(s, "s", group=s), Column(s, "%", group=s)]
    g = Grid(title, cols)
    for cpu in cpus:
        row = [str(cpu)]
        for s in states:
            sec, pct = res[cpu].get(s, (None, None))
            row += [fmt(sec, "s"), fmt(pct, "%")]
        g.add(*row)
    tcols = [Column("state", numeric=TEXT)]
    for cpu in cpus:
        tcols += [Column(f"CPU {cpu}", "s", group=str(cpu)), Column(f"CPU {cpu}", "%", group=str(cpu))]
    t = Grid(title, tcols)
    for s in states:
        row = [s]
        for cpu in cpus:
            sec, pct = res[cpu].get(s, (None, None))
            row += [fmt(sec, "s"), fmt(pct, "%")]
        t.add(*row)
    meaning = {
        "active": "not idle",
        "idle-unknown": "idle before the CPU's first cpu_idle event, state not known",
        "unknown": "no cpu_idle event on that CPU",
    }
    said = [f"{s} = {meaning[s]}" for s in states if s in meaning]
    if said:
        g.notes.append("; ".join(said))
        t.notes.append("; ".join(said))
    g.alternatives.append(t)
    return g


def opp_residency_grids(
    res: dict[str, dict[str, tuple[float | None, float | None]]],
    *,
    pct_of: str,
    domains: dict[int, int] | None,
    title: str = "OPP residency",
    unknown_label: str | None = "unknown",
) -> list[Grid]:
    """CPU x OPP matrices in MHz: res {cpu: {khz: (seconds, pct)}}. One table per frequency domain
    (`domains` {cpu: domain}, else consecutive CPUs that visited the same OPPs): rows = OPP (MHz), columns per CPU
    "(s)" and "(%)". A row for the time not covered (100 % - sum) when unknown_label and any."""
    cpus = _cpu_sort(res)
    groups: list[list[str]] = []
    if domains and all(int(c) in domains for c in cpus):
        by_domain: dict[int, list[str]] = {}
        for c in cpus:
            by_domain.setdefault(domains[int(c)], []).append(c)
        groups = sorted(by_domain.values(), key=lambda g: int(g[0]))
    else:  # consecutive CPUs that visited the same OPPs
        for c in cpus:
            if groups and set(res[c]) == set(res[groups[-1][-1]]):
                groups[-1].append(c)
            else:
                groups.append([c])
    out = []
    for grp in groups:
        khz = sorted({k for c in grp for k in res[c]}, key=lambda k: float(k))
        cols = [Column("OPP", "MHz")]
        for c in grp:
            cols += [Column(f"CPU {c}", "s", group=f"cpu{c}"), Column(f"CPU {c}", "%", group=f"cpu{c}")]
        g = Grid(f"{title}, {_cpu_label(grp)} (time at each OPP, s, and % of {pct_of})", cols)
        for k in khz:
            row = [_mhz(k)]
            for c in grp:
                sec, pct = res[c].get(k, (None, None))
                row += [fmt(sec, "s"), fmt(pct, "%")]
            g.add(*row)
        if unknown_label:
            gaps = {c: 100.0 - sum(p for _, p in res[c].values() if p is not None) for c in grp}
            if any(v > 0.005 for v in gaps.values()):
                row = [unknown_label]
                for c in grp:
                    secs = [s for s, _ in res[c].values() if s is not None]
                    total = sum(secs) / (1 - gaps[c] / 100) if secs and gaps[c] < 100 else None
                    row += [fmt(total - sum(secs), "s") if total is not None else "-", fmt(gaps[c], "%")]
                g.add(*row)
                g.notes.append(f"{unknown_label}: before the CPU's first cpu_frequency event")
        out.append(g)
    return out


def rails_grid(rails: dict[str, dict], *, coverage_key: str = "coverage_pct", over: str = "the window") -> Grid:
    """Power per rail, highest first; rails at 0 mW are folded into a note naming them.
    rails {rail: {avg_power_mw, energy_j, coverage_pct (or the key given)}}."""
    cov_name, cov_unit, _ = split_unit(coverage_key)
    g = Grid(
        f"Power per rail (average over {over})",
        [Column("rail", numeric=TEXT), Column("power", "mW"), Column("energy", "J"), Column(cov_name, cov_unit)],
    )
    zero = []
    for name, r in sorted(rails.items(), key=lambda kv: -(kv[1].get("avg_power_mw") or 0.0)):
        p = r.get("avg_power_mw")
        if p == 0 and not r.get("energy_j"):
            zero.append(name)
            continue
        g.add(name, fmt(p, "mW"), fmt(r.get("energy_j"), "J"), fmt(r.get(coverage_key), cov_unit))
    if zero:
        g.notes.append(f"{len(zero)} rail{'s' if len(zero) > 1 else ''} at 0 mW not shown: {', '.join(sorted(zero))}")
    return g


# -- native summaries (docs/analyze.md) -----------------------------------------------------------------------
def power_blocks(s: dict, ctx: Context) -> list[Block]:
    out: list[Block] = []
    ch = s.get("channels") or {}
    if ch:
        g = Grid(
            "Power per channel (average over the window)", [Column("channel", numeric=TEXT), Column("power", "mW")]
        )
        for name, mw in ch.items():
            g.add(str(name), fmt(mw, "mW"))
        if s.get("channel_mapping"):
            g.notes.append(f"rails -> channels: {s['channel_mapping']}; Total = every rail")
        out.append(g)
    if s.get("rails"):
        out.append(rails_grid(s["rails"]))
    return out


def idle_blocks(s: dict, ctx: Context) -> list[Block]:
    win = s.get("window_s") or ctx.duration_s
    res = {
        cpu: {st: (None if win is None or p is None else p * win / 100, p) for st, p in states.items()}
        for cpu, states in (s.get("residency_pct") or {}).items()
    }
    out: list[Block] = [
        f"{fmt(s.get('wakeups_total'))} wakeups from idle ({fmt(s.get('wakeups_per_s'))}/s) in {fmt(win, 's')} s"
    ]
    m = s.get("misses")
    idle_pct, wakeups = s.get("idle_pct") or {}, s.get("wakeups") or {}
    cols = [Column("CPU", numeric=TEXT), Column("idle", "%"), Column("wakeups")]
    if m:
        cols += [
            Column("too deep", group="deep"),
            Column("too deep", "%", group="deep"),
            Column("too shallow", group="shallow"),
            Column("too shallow", "%", group="shallow"),
        ]
        title = f"Idle time, wakeups and idle misses per CPU (misses from {m.get('source')}, % of wakeups)"
    else:
        title = "Idle time and wakeups from idle per CPU"
    g = Grid(title, cols)
    per_miss = (m or {}).get("per_cpu") or {}
    for cpu in _cpu_sort(set(res) | set(idle_pct) | set(wakeups)):
        row = [str(cpu), fmt(idle_pct.get(cpu), "%"), fmt(wakeups.get(cpu))]
        if m:
            r = per_miss.get(cpu) or {}
            row += [
                fmt(r.get("too_deep_count")),
                fmt(r.get("too_deep_pct"), "%"),
                fmt(r.get("too_shallow_count")),
                fmt(r.get("too_shallow_pct"), "%"),
            ]
        g.add(*row)
    if m:
        g.add(
            "all",
            "",
            fmt(m.get("wakeups")),
            fmt(m.get("too_deep_count")),
            fmt(m.get("too_deep_pct"), "%"),
            fmt(m.get("too_shallow_count")),
            fmt(m.get("too_shallow_pct"), "%"),
        )
        g.notes.append(
            "too deep: the sleep was shorter than the state's target residency; too shallow: a "
            "deeper state would have fitted"
        )
    out.append(g)
    out.append(idle_residency_grid(res, pct_of="the window"))
    cl = s.get("cluster_residency_pct") or {}
    if cl:
        states = list(dict.fromkeys(st for per in cl.values() for st in per))
        g = Grid(
            "Idle state residency per cluster (% of the cluster's CPU time)",
            [Column("cluster", numeric=TEXT), Column("all CPUs idle", "%")] + [Column(st, "%") for st in states],
        )
        for c in _cpu_sort(cl):
            g.add(
                str(c),
                fmt((s.get("cluster_all_cpus_idle_pct") or {}).get(c), "%"),
                *(fmt(cl[c].get(st), "%") for st in states),
            )
        out.append(g)
    return out


_LAT_COLS = (
    ("wakeups", ""),
    ("mean_us", "us"),
    ("p50_us", "us"),
    ("p95_us", "us"),
    ("p99_us", "us"),
    ("max_us", "us"),
    ("gmean_us", "us"),
)


def latency_blocks(s: dict, ctx: Context) -> list[Block]:
    tasks = s.get("tasks") or {}  # keyed by task name (comm): threads sharing a name are pooled
    cols = [Column("task", numeric=TEXT)]
    for k, _ in _LAT_COLS:
        name, unit, _f = split_unit(k)
        cols.append(Column(name, unit))
    g = Grid(f"Wakeup latency ({s.get('wakeup_event')} -> the task's next sched_switch in), us", cols, keys=1)
    g.add("all tasks", fmt(s.get("matched_wakeups")), *(fmt(s.get(k), "us") for k, _ in _LAT_COLS[1:]))
    for name, r in tasks.items():
        g.add(name, *(fmt(r.get(k), u) for k, u in _LAT_COLS))
    if tasks:
        g.notes.append(
            f"the {len(tasks)} most woken tasks; every task: Trace(FILE).latency.df_task_stats() (docs/analyze.md)"
        )
    line = (
        f"{fmt(s.get('wakeups'))} wakeups in the window: {fmt(s.get('matched_wakeups'))} matched to a switch-in, "
        f"{fmt(s.get('unmatched_wakeups'))} not (no switch-in followed, or the task was running)"
    )
    return [line, g]


def frequency_blocks(s: dict, ctx: Context) -> list[Block]:
    per = s.get("per_cpu") or {}
    if not per:
        return []
    g = Grid(
        "CPU frequency per CPU (time-weighted means)",
        [
            Column("CPU", numeric=TEXT),
            Column("mean", "MHz"),
            Column("mean when active", "MHz"),
            Column("transitions"),
            Column("transitions", "1/s"),
            Column("oscillations"),
        ],
    )
    for c in _cpu_sort(per):
        r = per[c]
        g.add(
            str(c),
            fmt(_scaled(r.get("time_weighted_khz"), 1e-3)),
            fmt(_scaled(r.get("active_time_weighted_khz"), 1e-3)),
            fmt(r.get("transitions")),
            fmt(r.get("transitions_per_s")),
            fmt(r.get("oscillations")),
        )
    g.notes.append("oscillations: swings over half the OPP range that come back within 20 ms")
    win = ctx.duration_s
    res = {
        c: {
            k: (None if win is None or p is None else p * win / 100, p)
            for k, p in (per[c].get("opp_residency_pct") or {}).items()
        }
        for c in per
    }
    out: list[Block] = [g, *opp_residency_grids(res, pct_of="the window", domains=ctx.cpu_domains)]
    act = {c: {k: (None, p) for k, p in (per[c].get("opp_active_residency_pct") or {}).items()} for c in per}
    if any(act.values()):
        for grid in opp_residency_grids(
            act,
            pct_of="the CPU's active (non-idle) time",
            domains=ctx.cpu_domains,
            title="OPP residency while active",
            unknown_label=None,
        ):
            keep = [0] + [i for i, col in enumerate(grid.columns) if col.unit == "%"]
            grid.columns = [grid.columns[i] for i in keep]
            grid.rows = [[r[i] for i in keep] for r in grid.rows]
            grid.title = grid.title.replace("time at each OPP, s, and % of", "% of")
            out.append(grid)
    return out


def load_tracking_blocks(s: dict, ctx: Context) -> list[Block]:
    out: list[Block] = []
    per = s.get("per_cpu") or {}
    src = s.get("signal_source")
    how = {"kernel": "the kernel's PELT events", "simulated": "abtest's PELT simulation from sched_switch"}.get(
        src, src
    )
    g = Grid(
        f"Load tracking per CPU ({how}; util and runnable in capacity units, 1024 = biggest CPU at its top OPP)",
        [
            Column("CPU", numeric=TEXT),
            Column("mean util"),
            Column("mean runnable"),
            Column("contended", "%"),
            Column("runnable / util"),
        ],
    )
    for c in _cpu_sort(per):
        r = per[c]
        g.add(
            str(c),
            fmt(r.get("mean_util")),
            fmt(r.get("mean_runnable")),
            fmt(r.get("contended_pct"), "%"),
            fmt(r.get("runnable_util_ratio")),
        )
    g.notes.append("contended: time where runnable exceeds util by more than 1 unit")
    if per:
        out.append(g)
    else:
        srcs = s.get("sources") or {}
        out.append(
            "no CPU has both util and runnable in the window (util: "
            f"{srcs.get('util') or 'none'}, runnable: {srcs.get('runnable') or 'none'}), so no per-CPU "
            "contention"
        )
    clusters = s.get("per_cluster") or {}
    if clusters:
        c = Grid(
            "Root cfs_rq PELT per cluster (mean over the cluster's CPUs, capacity units)",
            [Column("cluster", numeric=TEXT), Column("mean util"), Column("mean runnable"), Column("mean load")],
        )
        for name, r in clusters.items():
            c.add(str(name), fmt(r.get("mean_util")), fmt(r.get("mean_runnable")), fmt(r.get("mean_load")))
        out.append(c)
    mae = s.get("pelt_sim_mae_util") or {}
    if mae:
        m = Grid(
            "PELT simulation vs the kernel's PELT events (mean absolute error of util)",
            [Column("signal", numeric=TEXT), Column("MAE of util")],
        )
        for k, v in mae.items():
            m.add(str(k), fmt(v))
        out.append(m)
    return out


def placement_blocks(s: dict, ctx: Context) -> list[Block]:
    mig = s.get("migrate_events")
    out: list[Block] = [
        f"{fmt(s.get('tasks'))} tasks ran; sched_migrate_task events: "
        f"{'n/a (event not recorded)' if mig is None else fmt(mig)}; observed CPU changes: "
        f"{fmt(s.get('observed_cpu_changes'))}"
    ]
    cl = s.get("clusters") or {}
    if cl:
        g = Grid(
            f"Placement balance (tasks running >= {fmt(s.get('min_runtime_pct'))} % of the window, each counted "
            "on the CPU where it ran longest)",
            [
                Column("cluster", numeric=TEXT),
                Column("CPU", numeric=TEXT),
                Column("tasks"),
                Column("expected N/M"),
                Column("runtime share", "%"),
                Column("balance index"),
            ],
            keys=2,
        )
        empty = False
        for name in _cpu_sort(cl):
            c = cl[name]
            for i, cpu in enumerate(c.get("cpus") or []):
                share = (c.get("runtime_share_pct") or {}).get(str(cpu))
                empty |= share is None
                g.add(
                    str(name) if i == 0 else "",
                    str(cpu),
                    fmt((c.get("tasks_per_cpu") or {}).get(str(cpu))),
                    fmt(c.get("expected_tasks_per_cpu")) if i == 0 else "",
                    fmt(share, "%"),
                    fmt(c.get("balance_index")) if i == 0 else "",
                )
        g.notes.append("balance index: 1 = runtime spread evenly over the cluster's CPUs, 0 = all on one CPU")
        if empty:
            g.notes.append("- : no task of that cluster ran long enough to count")
        out.append(g)
    top = s.get("top_tasks") or {}
    if top:
        cpus = _cpu_sort({c for r in top.values() for c in (r.get("cpu_pct") or {})})
        g = Grid(
            "CPU time of the busiest tasks (% of each task's run time per CPU)",
            [Column("task", numeric=TEXT), Column("pid", numeric=TEXT), Column("runtime", "s")]
            + [Column(f"CPU {c}", "%") for c in cpus],
            keys=2,
        )
        for key, r in top.items():
            comm, pid = _split_task(key)
            pct = r.get("cpu_pct") or {}
            g.add(comm, pid, fmt(r.get("runtime_s"), "s"), *(fmt(pct.get(c), "%") if c in pct else "" for c in cpus))
        g.notes.append(f"the {len(top)} tasks with most CPU time; every task: Trace(FILE).placement.df_residency()")
        out.append(g)
    return out


def energy_model_blocks(s: dict, ctx: Context) -> list[Block]:
    g = Grid(
        f"Energy-model estimate per frequency domain (energy model: {s.get('source')})",
        [Column("domain", numeric=TEXT), Column("energy", "J"), Column("power", "mW"), Column("unmodelled", "s")],
    )
    for d, r in (s.get("domains") or {}).items():
        un = r.get("unmodelled_ns")
        g.add(
            str(d),
            fmt(r.get("energy_j"), "J"),
            fmt(r.get("avg_power_mw"), "mW"),
            fmt(None if un is None else un / 1e9, "s"),
        )
    g.add(
        "all",
        fmt(s.get("total_energy_j"), "J"),
        fmt(s["total_energy_j"] / ctx.duration_s * 1e3, "mW")
        if ctx.duration_s and s.get("total_energy_j") is not None
        else "-",
        "",
    )
    g.notes.append("unmodelled: time at frequencies or states the energy model does not describe")
    return [g]


def frames_blocks(s: dict, ctx: Context) -> list[Block]:
    out: list[Block] = [f"frames from: {s.get('source')}"]
    proc = s.get("processes") or {}
    if proc:
        g = Grid(
            "Frames per process (atrace Choreographer#doFrame slices)",
            [
                Column("tgid", numeric=TEXT),
                Column("frames"),
                Column("FPS"),
                Column("mean frame", "ms"),
                Column("p95 frame", "ms"),
            ],
        )
        for tgid, r in proc.items():
            g.add(
                str(tgid),
                fmt(r.get("frames")),
                fmt(r.get("fps")),
                fmt(r.get("mean_frame_ms"), "ms"),
                fmt(r.get("p95_frame_ms"), "ms"),
            )
        out.append(g)
    layers = s.get("layers") or {}
    if layers:
        g = Grid(
            "Frames per layer (perfetto frame timeline, layers with most frames)",
            [
                Column("pid", numeric=TEXT),
                Column("layer", numeric=TEXT),
                Column("frames"),
                Column("FPS"),
                Column("mean frame", "ms"),
                Column("janky frames"),
                Column("jank", "%"),
                Column("app deadline missed"),
            ],
            keys=2,
        )
        alt = Grid(g.title, [Column("#", numeric=TEXT)] + [c for c in g.columns if c.name != "layer"], keys=2)
        alt.legend = Grid("Layers", [Column("#", numeric=TEXT), Column("layer", numeric=TEXT)])
        for n, (key, r) in enumerate(layers.items(), 1):
            pid, _, layer = str(key).partition(":")
            nums = [
                fmt(r.get("frames")),
                fmt(r.get("fps")),
                fmt(r.get("mean_frame_ms"), "ms"),
                fmt(r.get("janky_frames")),
                fmt(r.get("jank_pct"), "%"),
                fmt(r.get("app_deadline_missed")),
            ]
            g.add(pid, layer, *nums)
            alt.add(f"L{n}", pid, *nums)
            alt.legend.add(f"L{n}", layer)
        g.alternatives.append(alt)
        out.append(g)
    return out


RENDERERS: dict[str, Callable[[dict, Context], list[Block]]] = {
    "power": power_blocks,
    "idle": idle_blocks,
    "latency": latency_blocks,
    "frequency": frequency_blocks,
    "load_tracking": load_tracking_blocks,
    "placement": placement_blocks,
    "energy_model": energy_model_blocks,
    "frames": frames_blocks,
}


# -- any other summary ---------------------------------------------------------------------------------------
GENERIC_MAX_ROWS = 50


def _is_scalar(v) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


def _value_cell(key: str, v) -> tuple[str, str]:
    """(formatted value, unit) of a scalar under `key`."""
    _, unit, factor = split_unit(key)
    if isinstance(v, list):
        return (", ".join(fmt(x) for x in v) if all(_is_scalar(x) for x in v) else f"{len(v)} items"), ""
    return fmt(_scaled(v, factor), unit), unit


def generic_blocks(summary, title: str = "", *, path: str = "") -> list[Block]:
    """Tables for any JSON-like summary, without dotted keys:
    scalars -> one "quantity | value | unit" table; {key: scalar} -> a two-column table titled by the
    key; {key: {field: scalar}} -> rows = keys, columns = fields (with units); {key: {field: {k: v}}} ->
    one matrix per field (rows = k, columns = key); lists of dicts -> one row per item. Tables longer than
    GENERIC_MAX_ROWS say how many rows they leave out (all of them: --json)."""
    out: list[Block] = []
    if isinstance(summary, list):
        return _list_blocks(summary, title or "values", path)
    if not isinstance(summary, dict):
        return [f"{title}: {fmt(summary)}"] if title else [fmt(summary)]
    scalars = {
        k: v for k, v in summary.items() if _is_scalar(v) or (isinstance(v, list) and all(_is_scalar(x) for x in v))
    }
    if scalars:
        g = Grid(
            title or "Values",
            [Column("quantity", numeric=TEXT), Column("value", numeric=TEXT), Column("unit", numeric=TEXT)],
        )
        for k, v in scalars.items():
            cell, unit = _value_cell(k, v)
            g.add(split_unit(k)[0], cell, unit)
        out.append(g)
    for k, v in summary.items():
        if k in scalars:
            continue
        sub_title = f"{title}: {humanize(k)}" if title else humanize(k)
        if isinstance(v, dict):
            out += _dict_blocks(k, v, sub_title, f"{path}.{k}" if path else str(k))
        elif isinstance(v, list):
            out += _list_blocks(v, sub_title, f"{path}.{k}" if path else str(k))
    return out


def _cap(g: Grid, path: str) -> Grid:
    if len(g.rows) > GENERIC_MAX_ROWS:
        n = len(g.rows) - GENERIC_MAX_ROWS
        g.rows = g.rows[:GENERIC_MAX_ROWS]
        g.notes.append(f"{n} more rows not shown (all of them: --json, key {path})")
    return g


def _dict_blocks(key: str, d: dict, title: str, path: str) -> list[Block]:
    if not d:
        return [f"{title}: none"]
    name, unit, factor = split_unit(key)
    if all(_is_scalar(v) for v in d.values()):
        g = Grid(
            title,
            [
                Column("key", numeric=TEXT),
                Column(name, unit, numeric=all(isinstance(v, (int, float)) or v is None for v in d.values())),
            ],
        )
        for k in _cpu_sort(d) if all(str(x).isdigit() for x in d) else d:
            g.add(str(k), fmt(_scaled(d[k], factor), unit))
        return [_cap(g, path)]
    if all(isinstance(v, dict) for v in d.values()):
        row_key = _row_noun(name)
        fields = list(dict.fromkeys(f for v in d.values() for f in v))
        flat = [f for f in fields if all(_is_scalar(v.get(f)) or isinstance(v.get(f), list) for v in d.values())]
        nested = [f for f in fields if f not in flat]
        out: list[Block] = []
        if flat:
            cols = [Column(row_key, numeric=TEXT)]
            for f in flat:
                fname, funit, _ = split_unit(f)
                numeric = all(isinstance(v.get(f), (int, float)) or v.get(f) is None for v in d.values())
                cols.append(Column(fname, funit, numeric=numeric))
            g = Grid(title, cols)
            for k, v in d.items():
                g.add(str(k), *(_value_cell(f, v.get(f))[0] for f in flat))
            out.append(_cap(g, path))
        for f in nested:
            vals = {k: v.get(f) for k, v in d.items()}
            fname, funit, ffac = split_unit(f)
            if all(
                isinstance(x, dict) and all(_is_scalar(y) for y in x.values()) for x in vals.values() if x is not None
            ):
                out.append(
                    _cap(
                        _matrix(
                            vals,
                            f"{title}: {fname}" + (f" ({funit})" if funit else ""),
                            row_key,
                            fname.split()[0] if " " in fname else "key",
                            funit,
                            ffac,
                        ),
                        f"{path}.*.{f}",
                    )
                )
            else:
                for k, x in vals.items():
                    out += generic_blocks({f: x}, f"{title} {k}", path=f"{path}.{k}")
        return out
    return generic_blocks(d, title, path=path)


def _matrix(vals: dict, title: str, outer: str, inner: str, unit: str, factor: float) -> Grid:
    """{outer key: {inner key: value}} as a table: one row per outer key and a column per inner key, or the
    transpose when there are fewer inner keys than outer ones (the long side down, so the table stays narrow).
    outer / inner: the nouns of the two kinds of keys ("task", "cluster"), which head the row column and prefix
    the value columns."""
    inner_keys = list(dict.fromkeys(r for x in vals.values() if x for r in x))

    def cell(o, i):
        v = (vals[o] or {}).get(i)
        return fmt(_scaled(v, factor), unit) if v is not None else "-"

    if len(inner_keys) < len(vals):
        g = Grid(title, [Column(outer, numeric=TEXT)] + [Column(f"{inner} {i}", unit) for i in inner_keys])
        for o in vals:
            g.add(str(o), *(cell(o, i) for i in inner_keys))
        return g
    g = Grid(title, [Column(inner, numeric=TEXT)] + [Column(f"{outer} {o}", unit) for o in vals])
    for i in inner_keys:
        g.add(str(i), *(cell(o, i) for o in vals))
    return g


def _row_noun(name: str) -> str:
    """The header of a table's first column, from the humanized key of the dict whose keys are its rows:
    "per CPU" -> "CPU", "tasks" -> "task", anything else -> "key"."""
    if name.lower().startswith("per "):
        return name[4:]
    if " " not in name and name.endswith("s") and not name.endswith("ss") and len(name) > 3:
        return name[:-1]
    return "key"


def _list_blocks(items: list, title: str, path: str) -> list[Block]:
    if all(_is_scalar(x) for x in items):
        return [f"{title}: {', '.join(fmt(x) for x in items) or 'none'}"]
    if all(isinstance(x, dict) for x in items):
        fields = list(dict.fromkeys(f for x in items for f in x))
        cols = []
        for f in fields:
            fname, funit, _ = split_unit(f)
            numeric = all(isinstance(x.get(f), (int, float)) or x.get(f) is None for x in items)
            cols.append(Column(fname, funit, numeric=numeric))
        g = Grid(title, cols)
        for x in items:
            g.add(
                *(
                    _value_cell(f, x.get(f))[0]
                    if _is_scalar(x.get(f)) or isinstance(x.get(f), list)
                    else "(nested: --json)"
                    for f in fields
                )
            )
        return [_cap(g, path)]
    return [f"{title}: {len(items)} items (see --json, key {path})"]


def blocks_for(name: str, summary: dict, ctx: Context) -> list[Block]:
    """The blocks of one analysis' summary: its dedicated renderer, else the generic one."""
    r = RENDERERS.get(name)
    return r(summary, ctx) if r else generic_blocks(summary, path=name)


# -- the perfetto engine (`--engine perfetto`, abtest.trace.perfetto_engine.analyze) --------------------------
def perfetto_blocks(d: dict) -> list[tuple[str, list[Block]]]:
    """Sections (title, blocks) of `abtest analyze --engine perfetto`: the same table builders over
    trace_processor's own results (its percentages are of each CPU's time known to trace_processor)."""
    sections: list[tuple[str, list[Block]]] = []
    span = d.get("span") or {}
    ev = d.get("event_counts") or []
    if ev:
        g = Grid("Events ingested by trace_processor", [Column("event", numeric=TEXT), Column("count")])
        for r in ev:
            g.add(str(r.get("event")), fmt(r.get("count")))
        sections.append(("Events", [g]))
    rails = d.get("power_rails") or []
    if rails:
        rr = {
            r.get("raw_rail") or r.get("rail"): {
                "avg_power_mw": r.get("average_power_mw"),
                "energy_j": None if r.get("energy_uws") is None else r["energy_uws"] / 1e6,
                "samples": r.get("samples"),
            }
            for r in rails
        }
        sections.append(
            (
                "Power rails (linux / android.power_rails)",
                [rails_grid(rr, coverage_key="samples", over="each rail's first to last sample")],
            )
        )
    idle = d.get("cpu_idle_residency") or []
    if idle:
        res: dict[str, dict] = {}
        entries: dict[str, int] = {}
        for r in idle:
            st = "active" if r.get("state") == -1 else f"state{r.get('state')}"
            res.setdefault(str(r["cpu"]), {})[st] = (
                r["time_ns"] / 1e9 if r.get("time_ns") is not None else None,
                r.get("percent"),
            )
            if r.get("state") != -1:
                entries[str(r["cpu"])] = entries.get(str(r["cpu"]), 0) + int(r.get("entries") or 0)
        e = Grid("Idle entries per CPU", [Column("CPU", numeric=TEXT), Column("idle entries")])
        for c in _cpu_sort(entries):
            e.add(str(c), fmt(entries[c]))
        sections.append(
            (
                "Idle residency (linux.cpu.idle)",
                [e, idle_residency_grid(res, pct_of="the CPU's time known to trace_processor")],
            )
        )
    freq = d.get("cpu_frequency_residency") or []
    if freq:
        res = {}
        for r in freq:
            res.setdefault(str(r["cpu"]), {})[str(r["frequency_khz"])] = (
                r["time_ns"] / 1e9 if r.get("time_ns") is not None else None,
                r.get("percent"),
            )
        sections.append(
            (
                "CPU frequency (linux.cpu.frequency)",
                opp_residency_grids(
                    res, pct_of="the CPU's time known to trace_processor", domains=None, unknown_label=None
                ),
            )
        )
    sched = d.get("sched") or []
    if sched:
        dur = ((span.get("end_ns") or 0) - (span.get("start_ns") or 0)) / 1e9 or None
        g = Grid(
            "Scheduling per CPU (sched slices)",
            [
                Column("CPU", numeric=TEXT),
                Column("slices"),
                Column("busy", "s"),
                Column("busy", "%"),
                Column("sched_switch"),
            ],
        )
        for r in sorted(sched, key=lambda r: r.get("cpu") if r.get("cpu") is not None else -1):
            busy = r.get("busy_ns")
            g.add(
                str(r.get("cpu")),
                fmt(r.get("slices")),
                fmt(None if busy is None else busy / 1e9, "s"),
                fmt(None if busy is None or not dur else 100 * busy / 1e9 / dur, "%"),
                fmt(r.get("sched_switch")),
            )
        if dur:
            g.notes.append(f"busy % of the trace span ({fmt(dur, 's')} s)")
        sections.append(("Scheduling", [g]))
    return sections
