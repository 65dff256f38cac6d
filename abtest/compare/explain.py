"""Explain the delta: attribute an A -> B power change to clusters, OPPs, idle states and tasks.

For a power channel (power.CPU-Big, power.CPU, power.Total ...) the per-iteration mean change splits exactly:

    delta(measured) = sum over terms of delta(term) + delta(residual)

* terms come from the energy model (abtest.analysis.attribution.df_power_terms): active time at each OPP
  priced at that OPP's power (and split per task), idle-state residency priced at idle power, the domain's
  static power while busy. Each term's delta is mean over B's iterations minus mean over A's (an iteration
  without a term counts 0), so the terms add up to the model's delta exactly;
* residual = measured - model, per iteration: "power at equal time" (a change the residencies do not explain:
  voltage, temperature, the rails the model does not cover, model error). Shown, never hidden.
With no measured power the model's own delta is explained (its residual is 0 by definition); with no model, the
time shifts are shown unpriced and the whole measured delta is residual — and the explanation says so.

Each contribution carries a 95 % confidence interval (Welch, from the iterations) and its share of the delta.
Channels map to model domains by size (attribution.domain_channels): CPU-Little / CPU-Mid / CPU-Big, CPU = all
CPU domains; Total = all CPU domains, its residual holding every non-CPU rail.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from abtest.analysis.attribution import df_power_terms, domain_channels
from abtest.analysis.platform import load_platform, trace_platform
from abtest.analysis.power import POWER_CHANNEL
from abtest.compare import stats
from abtest.compare.comparison import Comparison, WorkloadComparison
from abtest.compare.verdict import IMPROVEMENT, REGRESSION
from abtest.store.model import Iteration
from abtest.store.reader import Label

SIGNAL_ANALYSES = ("load_tracking", "placement", "idle", "frequency", "latency", "overutilized")


@dataclass
class Contribution:
    """One term of a channel's delta. kind: active / idle / static / residual / task; delta_mw = mean(B) - mean(A)
    (mW); share_pct of the channel's delta; ci95_mw: Welch 95 % CI of delta_mw (None with < 2 iterations a side);
    dtime_ms_per_s: change of the time the term covers (ms per s of window)."""

    kind: str
    domain: str | None
    opp_khz: int | None
    state: int | None
    task: str | None
    a_mw: float
    b_mw: float
    delta_mw: float
    share_pct: float | None
    ci95_mw: tuple | None
    dtime_ms_per_s: float | None
    top_opps_khz: tuple = ()  # tasks: the OPPs where the task's time changed most in the change's direction
    a_ms_per_s: float | None = None  # time the term covers, mean over A's iterations (ms per s of window)
    b_ms_per_s: float | None = None

    @property
    def label(self) -> str:
        where = f" {self.domain}" if self.domain else ""
        if self.kind == "residual":
            return "residual: measured - model (power at equal time, unmodelled rails)"
        if self.kind == "unmodelled":
            return "measured change (no energy model to attribute it)"
        if self.kind == "idle":
            st = f" state {self.state}" if self.state is not None else ""
            return f"idle{where}{st}" + (f" @ {_mhz(self.opp_khz)}" if self.opp_khz else "")
        if self.kind == "task":
            return f"task {self.task}{where}"
        if self.opp_khz is None:
            return f"{self.kind}{where}"
        return f"{self.kind}{where} @ {_mhz(self.opp_khz)}"

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "domain": self.domain,
            "opp_khz": self.opp_khz,
            "state": self.state,
            "task": self.task,
            "a_mw": self.a_mw,
            "b_mw": self.b_mw,
            "delta_mw": self.delta_mw,
            "share_pct": self.share_pct,
            "ci95_mw": list(self.ci95_mw) if self.ci95_mw else None,
            "dtime_ms_per_s": self.dtime_ms_per_s,
            "a_ms_per_s": self.a_ms_per_s,
            "b_ms_per_s": self.b_ms_per_s,
            "top_opps_khz": list(self.top_opps_khz),
            "label": self.label,
        }


@dataclass
class ChannelExplanation:
    """The decomposition of one channel. source: what the delta is ("measured: <source>" or "energy model:
    <source>"); delta_mw = b_mw - a_mw (means over iterations); contributions ranked by |delta_mw| — they sum to
    delta_mw exactly; tasks: per task and domain, ranked; model_source; limits: what the reader must know."""

    channel: str
    source: str
    a_mw: float
    b_mw: float
    delta_mw: float
    verdict: str
    contributions: list
    tasks: list
    model_source: str | None
    limits: list = field(default_factory=list)
    domains: list = field(default_factory=list)  # per (kind, domain): the level above `contributions`

    @property
    def delta_pct(self) -> float | None:
        return 100.0 * self.delta_mw / abs(self.a_mw) if self.a_mw else None

    def to_json(self) -> dict:
        return {
            "channel": self.channel,
            "source": self.source,
            "a_mw": self.a_mw,
            "b_mw": self.b_mw,
            "delta_mw": self.delta_mw,
            "delta_pct": self.delta_pct,
            "verdict": self.verdict,
            "model_source": self.model_source,
            "limits": self.limits,
            "domains": [c.to_json() for c in self.domains],
            "contributions": [c.to_json() for c in self.contributions],
            "tasks": [c.to_json() for c in self.tasks],
        }


@dataclass
class Explanation:
    label_a: str
    label_b: str
    workload: str
    channels: list
    signals: list
    narrative: list
    notes: list

    def to_json(self) -> dict:
        return {
            "schema": "abtest.explain/1",
            "label_a": self.label_a,
            "label_b": self.label_b,
            "workload": self.workload,
            "channels": [c.to_json() for c in self.channels],
            "signals": self.signals,
            "narrative": self.narrative,
            "notes": self.notes,
        }

    def df_contributions(self) -> pl.DataFrame:
        """Every channel's ranked contributions as one frame (channel, kind, domain, opp_khz, state, task,
        a_mw, b_mw, delta_mw, share_pct, ci_low_mw, ci_high_mw, dtime_ms_per_s)."""
        rows = [
            {
                "channel": ch.channel,
                **{k: v for k, v in c.to_json().items() if k not in ("ci95_mw", "label")},
                "ci_low_mw": c.ci95_mw[0] if c.ci95_mw else None,
                "ci_high_mw": c.ci95_mw[1] if c.ci95_mw else None,
            }
            for ch in self.channels
            for c in ch.contributions
        ]
        return pl.DataFrame(rows, infer_schema_length=None)

    def df_tasks(self) -> pl.DataFrame:
        rows = [
            {"channel": ch.channel, **{k: v for k, v in c.to_json().items() if k not in ("ci95_mw", "label")}}
            for ch in self.channels
            for c in ch.tasks
        ]
        return pl.DataFrame(rows, infer_schema_length=None)


def _mhz(khz) -> str:
    return f"{khz / 1000:g} MHz" if khz is not None else "unknown OPP"


def _platform_for(it: Iteration, platform) -> dict | None:
    if platform is not None:
        return platform if isinstance(platform, dict) else load_platform(platform)
    if it.platform_path is not None:
        return load_platform(it.platform_path)
    return None


def iteration_terms(it: Iteration, platform=None) -> tuple[pl.DataFrame | None, dict | None, str | None]:
    """(power terms, platform, why not) of one iteration's trace: terms is None when the trace, its events or an
    energy model are missing (the reason is the third value)."""
    from abtest.session import Trace
    from abtest.trace.errors import MissingEventsError, TraceFormatError

    if it.trace_path is None:
        return None, None, "no trace"
    try:
        trace = Trace(it.trace_path, platform=_platform_for(it, platform))
        plat = trace_platform(trace)
        if not (plat and plat.get("energy_model_source")):
            return None, plat, "no energy model (platform.yml with an energy model beside the trace, or --platform)"
        return df_power_terms(trace, plat), plat, None
    except MissingEventsError as e:
        return None, None, f"the trace lacks {', '.join(e.missing)}"
    except (TraceFormatError, ValueError, OSError) as e:
        return None, None, str(e)


def _delta(a: list[float], b: list[float]) -> tuple[float, float, float, tuple | None]:
    """(mean A, mean B, mean B - mean A, Welch 95 % CI of the difference or None)."""
    ma, mb = float(np.mean(a)), float(np.mean(b))
    ci = stats.welch_diff_ci(a, b, 0.95) if len(a) >= 2 and len(b) >= 2 else None
    return ma, mb, mb - ma, ci


def _matrix(frames: list[pl.DataFrame], keys: list[str], combos: pl.DataFrame, value: str) -> np.ndarray:
    """(len(combos), len(frames)) matrix of `value` summed per key combination and iteration; an absent term
    is 0."""
    parts = [
        f.group_by(keys).agg(pl.col(value).sum()).with_columns(pl.lit(i, pl.Int64).alias("_i"))
        for i, f in enumerate(frames)
    ]
    long = pl.concat(parts, how="vertical_relaxed") if parts else pl.DataFrame()
    idx = combos.with_row_index("_row")
    m = np.zeros((combos.height, len(frames)))
    if long.height:
        j = long.join(idx, on=keys, how="inner", nulls_equal=True)
        m[j["_row"].to_numpy(), j["_i"].to_numpy()] = j[value].to_numpy()
    return m


def _term_deltas(ta: list[pl.DataFrame], tb: list[pl.DataFrame], keys: list[str], total: float) -> list[dict]:
    """One dict per key combination (every term present in an iteration of A or B): a/b means, delta, Welch CI,
    share of `total`, dtime (ms/s). Vectorised over terms: matrices terms x iterations."""
    frames = [f.select(keys) for f in ta + tb]
    if not frames:
        return []
    combos = pl.concat(frames, how="vertical_relaxed").unique(maintain_order=True)
    pa, pb = _matrix(ta, keys, combos, "power_mw"), _matrix(tb, keys, combos, "power_mw")
    wa, wb = _matrix(ta, keys, combos, "time_ms_per_s"), _matrix(tb, keys, combos, "time_ms_per_s")
    out = []
    for k, combo in enumerate(combos.iter_rows(named=True)):  # one per term (domain x OPP x ...), not per event
        ma, mb, d, ci = _delta(list(pa[k]), list(pb[k]))
        out.append(
            {
                **combo,
                "a": ma,
                "b": mb,
                "d": d,
                "ci": ci,
                "share": 100.0 * d / total if total else None,
                "dtime": float(wb[k].mean() - wa[k].mean()),
                "ta": float(wa[k].mean()),
                "tb": float(wb[k].mean()),
            }
        )
    return out


def _term_contribution(r: dict) -> Contribution:
    """A Contribution from one row of _term_deltas (per domain, or per domain and OPP / idle state)."""
    return Contribution(
        r["kind"], r["domain"], r.get("opp_khz"), r.get("state"), None, r["a"], r["b"], r["d"], r["share"],
        r["ci"], r["dtime"], (), r["ta"], r["tb"],
    )  # fmt: skip


def explain_channel(
    channel: str,
    its_a: list[Iteration],
    its_b: list[Iteration],
    measured_a: list[float | None],
    measured_b: list[float | None],
    verdict: str,
    source: str,
    platform=None,
    top_tasks: int = 8,
) -> ChannelExplanation:
    """Decompose one channel (module docstring). measured_*: the channel's measured power per iteration (None:
    not measured, then the model's own total is explained)."""
    terms_a, terms_b, limits, model_source, plat = [], [], [], None, None
    for its, out in ((its_a, terms_a), (its_b, terms_b)):
        for it in its:
            t, p, why = iteration_terms(it, platform)
            if t is None:
                limits.append(f"{it.label}/{it.workload}/{it.name}: no attribution ({why})")
                out.append(None)
            else:
                plat = plat or p
                model_source = model_source or p.get("energy_model_source")
                out.append(t)
    domains = None
    if plat is not None:
        chans = domain_channels(plat)
        if channel in ("CPU", "Total") or channel.startswith("estimate"):
            domains = list(chans) if chans else None
        else:
            domains = [d for d, ch in chans.items() if ch == channel] or None
        if domains is None:
            limits.append(
                f"no energy-model domain corresponds to channel {channel} (domains: "
                f"{', '.join(f'{d} = {c}' for d, c in chans.items()) or 'unknown'})"
            )
    have_model = domains is not None and all(t is not None for t in terms_a + terms_b)
    measured = all(v is not None for v in measured_a + measured_b)
    if have_model:
        sel = [t.filter(pl.col("domain").is_in(domains)) for t in terms_a + terms_b]
        ta, tb = sel[: len(terms_a)], sel[len(terms_a) :]
        model_a = [float(t["power_mw"].sum()) for t in ta]
        model_b = [float(t["power_mw"].sum()) for t in tb]
    else:
        ta = tb = None
        model_a = model_b = None
    if measured:
        va, vb = [float(v) for v in measured_a], [float(v) for v in measured_b]
    elif have_model:
        va, vb = model_a, model_b
        source = f"energy model: {model_source} (no measured power)"
    else:
        raise ValueError(f"channel {channel}: neither measured power nor an energy model in these iterations")
    ma, mb, total, _ = _delta(va, vb)
    contributions: list[Contribution] = []
    tasks: list[Contribution] = []
    level1: list[Contribution] = []
    if have_model:
        for r in _term_deltas(ta, tb, ["kind", "domain"], total):
            level1.append(_term_contribution(r))
        for keys in (["kind", "domain", "opp_khz"], ["kind", "domain", "state", "opp_khz"]):
            kinds = ("active", "static") if "state" not in keys else ("idle",)
            for r in _term_deltas(
                [t.filter(pl.col("kind").is_in(kinds)) for t in ta],
                [t.filter(pl.col("kind").is_in(kinds)) for t in tb],
                keys,
                total,
            ):
                contributions.append(_term_contribution(r))
        if measured:
            res_a = [m - x for m, x in zip(va, model_a)]
            res_b = [m - x for m, x in zip(vb, model_b)]
            a_, b_, d, ci = _delta(res_a, res_b)
            residual = Contribution(
                "residual", None, None, None, None, a_, b_, d, 100.0 * d / total if total else None, ci, None
            )
            contributions.append(residual)
            level1.append(residual)
        for r in _term_deltas(
            [t.filter(pl.col("kind") == "active") for t in ta],
            [t.filter(pl.col("kind") == "active") for t in tb],
            ["task", "domain"],
            total,
        ):
            tasks.append(
                Contribution(
                    "task",
                    r["domain"],
                    None,
                    None,
                    r["task"],
                    r["a"],
                    r["b"],
                    r["d"],
                    r["share"],
                    r["ci"],
                    r["dtime"],
                    (),
                    r["ta"],
                    r["tb"],
                )
            )
        tasks.sort(key=lambda c: -abs(c.delta_mw))
        tasks = tasks[:top_tasks]
        # per task, the OPPs where its time grew most (for the narrative)
        opp_rows = _term_deltas(
            [t.filter(pl.col("kind") == "active") for t in ta],
            [t.filter(pl.col("kind") == "active") for t in tb],
            ["task", "domain", "opp_khz"],
            total,
        )
        for c in tasks:
            mine = sorted(
                (r for r in opp_rows if r["task"] == c.task and r["domain"] == c.domain),
                key=lambda r: -(r["d"] if c.delta_mw >= 0 else -r["d"]),
            )
            c.top_opps_khz = tuple(r["opp_khz"] for r in mine[:2] if r["opp_khz"] is not None)
    else:
        contributions.append(
            Contribution(
                "unmodelled", None, None, None, None, ma, mb, total, 100.0 if total else None, _delta(va, vb)[3], None
            )
        )
        limits.append(
            "no energy model: the change cannot be split into residency terms; pass --platform (a "
            "platform file with an energy model) or put platform.yml beside each trace"
        )
    contributions.sort(key=lambda c: -abs(c.delta_mw))
    level1.sort(key=lambda c: -abs(c.delta_mw))
    n = min(len(its_a), len(its_b))
    if n < 3:
        limits.append(f"only {len(its_a)} vs {len(its_b)} iterations: the confidence intervals are wide or undefined")
    return ChannelExplanation(
        channel,
        source,
        ma,
        mb,
        total,
        verdict,
        contributions,
        tasks,
        model_source,
        limits,
        level1 or list(contributions),
    )


def _signals(w: WorkloadComparison) -> list[str]:
    """Significant changes of the scheduler signals that can explain a power shift, largest first."""
    sig = [
        m
        for m in w.metrics
        if m.analysis in SIGNAL_ANALYSES and m.verdict.verdict in (REGRESSION, IMPROVEMENT, "changed")
    ]
    sig.sort(key=lambda m: -abs(m.delta_pct or 0.0))
    return [
        f"{m.name}: {m.value_a:.4g} -> {m.value_b:.4g} {m.unit} ({m.delta_pct:+.1f} %, {m.verdict.text})"
        for m in sig[:10]
        if m.value_a is not None and m.value_b is not None and m.delta_pct is not None
    ]


def narrative(ex: ChannelExplanation, label_a: str, label_b: str) -> list[str]:
    """Plain sentences with numbers, ready for a commit message or a mailing-list reply."""
    d = ex.delta_pct
    out = [
        f"{ex.channel} went from {ex.a_mw:.1f} to {ex.b_mw:.1f} mW ({ex.delta_mw:+.1f} mW"
        + (f", {d:+.1f} %" if d is not None else "")
        + f") from {label_a} to {label_b}; {ex.source}; "
        f"verdict: {ex.verdict}."
    ]
    for dom in [c for c in ex.domains if c.kind not in ("residual", "unmodelled") and abs(c.delta_mw) > 1e-9][:2]:
        share = f" ({dom.share_pct:.0f} % of the change)" if dom.share_pct is not None else ""
        line = f"{dom.kind.capitalize()} power on {dom.domain}: {dom.delta_mw:+.1f} mW{share}"
        opps = sorted(
            (c for c in ex.contributions if c.kind == dom.kind and c.domain == dom.domain and c.dtime_ms_per_s),
            key=lambda c: -abs(c.dtime_ms_per_s),
        )[:2]
        if len(opps) == 2 and opps[0].dtime_ms_per_s * opps[1].dtime_ms_per_s < 0:
            gain, loss = (opps[0], opps[1]) if opps[0].dtime_ms_per_s > 0 else (opps[1], opps[0])
            line += (
                f": {abs(loss.dtime_ms_per_s):.1f} ms/s of {dom.kind} time moved from {_mhz(loss.opp_khz)} to "
                f"{_mhz(gain.opp_khz)}"
            )
        elif opps:
            line += ": " + ", ".join(f"{c.dtime_ms_per_s:+.1f} ms/s at {_mhz(c.opp_khz)}" for c in opps)
        out.append(line + ".")
    for c in [t for t in ex.tasks if t.task != "<unknown>"][:2]:
        if abs(c.delta_mw) < 0.05 * max(abs(ex.delta_mw), 1e-9):
            continue
        opps = " and ".join(_mhz(k) for k in c.top_opps_khz)
        if abs(c.dtime_ms_per_s or 0) >= 0.05:
            out.append(
                f"{c.task} spent {c.dtime_ms_per_s:+.1f} ms/s on {c.domain}"
                + (f", mostly at {opps}" if opps else "")
                + f" ({c.delta_mw:+.1f} mW priced by the model)."
            )
        else:
            out.append(
                f"{c.task} ran as long on {c.domain} but its work cost {c.delta_mw:+.1f} mW"
                + (f" (at {opps})" if opps else "")
                + "."
            )
    res = next((c for c in ex.contributions if c.kind == "residual"), None)
    if res is not None and ex.delta_mw:
        out.append(
            f"Not explained by residency (measured - model, i.e. power at equal time or rails the model "
            f"does not cover): {res.delta_mw:+.1f} mW ({res.share_pct:.0f} % of the change)."
        )
    return out


def explain_workload(
    c: Comparison, label_a: Label, label_b: Label, workload: str, *, channels: tuple[str, ...] = (), platform=None
) -> Explanation:
    """The explanation of one compared workload: every power channel that changed significantly (or those
    named), each decomposed; the scheduler signals that moved; a narrative."""
    w = c.workload(workload)
    notes: list[str] = []
    chans = [m for m in w.grouped(POWER_CHANNEL)]
    if channels:
        chosen = [m for m in chans if m.group in channels]
        missing = [ch for ch in channels if ch not in {m.group for m in chans}]
        if missing:
            notes.append(
                f"channel(s) {', '.join(missing)} not measured in {workload} "
                f"(channels: {', '.join(m.group for m in chans) or 'none'})"
            )
    else:
        chosen = [m for m in chans if m.verdict.verdict in (REGRESSION, IMPROVEMENT) and m.group != "Total"]
        chosen = sorted(chosen, key=lambda m: -abs(m.delta_pct or 0.0))
        tot = next((m for m in chans if m.group == "Total"), None)
        if tot is not None and tot.verdict.verdict in (REGRESSION, IMPROVEMENT):
            chosen.insert(0, tot)
        if chans and not chosen:
            big = max(chans, key=lambda m: abs(m.delta_pct or 0.0))
            notes.append(
                f"no power channel changed significantly (largest: {big.name} {big.delta_pct:+.2f} %, "
                f"{big.verdict.text}); name one with --channel to decompose it anyway"
            )
    its_a, its_b = label_a.complete(workload), label_b.complete(workload)
    out_channels = []
    # the values compare computed (with the store's rail mapping and task options), never recomputed here
    measured = {"a": w.measured_a, "b": w.measured_b}
    for m in chosen:
        va = [x.get(m.name).value if x.get(m.name) else None for x in measured["a"]]
        vb = [x.get(m.name).value if x.get(m.name) else None for x in measured["b"]]
        try:
            out_channels.append(
                explain_channel(m.group, its_a, its_b, va, vb, m.verdict.text, f"measured: {m.source}", platform)
            )
        except ValueError as e:
            notes.append(str(e))
    if not chans:
        est = [m for m in w.metrics if m.spec.key == "power.estimate.{domain}" and m.group == "all"]
        if est:
            m = est[0]
            try:
                out_channels.append(
                    explain_channel(
                        "estimate",
                        its_a,
                        its_b,
                        [None] * len(its_a),
                        [None] * len(its_b),
                        m.verdict.text,
                        "energy model",
                        platform,
                    )
                )
                out_channels[-1].channel = "CPU (energy model estimate)"
            except ValueError as e:
                notes.append(str(e))
        else:
            notes.append(
                "no power was measured (no power.csv, trace rails or BattOr log) and no energy model is "
                "available (platform.yml beside the traces, or --platform): power cannot be attributed. "
                "The scheduler signals that moved are listed below."
            )
    text = []
    for ch in out_channels:
        text += narrative(ch, c.label_a, c.label_b)
    sig = _signals(w)
    if not out_channels:
        text += latency_narrative(w, c.label_a, c.label_b)
    return Explanation(c.label_a, c.label_b, workload, out_channels, sig, text, notes)


def _fmt_change(m) -> str:
    d = f"{m.delta_pct:+.1f} %" if m.delta_pct is not None else "n/a"
    return (
        f"{m.name} {m.value_a:.4g} -> {m.value_b:.4g} {m.unit} ({d}, {m.verdict.verdict})"
        if m.value_a is not None and m.value_b is not None
        else f"{m.name} ({m.verdict.text})"
    )


def latency_narrative(w: WorkloadComparison, label_a: str, label_b: str) -> list[str]:
    """Without power: a significant wakeup-latency change read against the idle residency and misses that can
    explain it (deeper idle states cost exit latency), and the per-task latencies behind it."""
    lat = [
        m
        for m in w.metrics
        if m.analysis == "latency" and m.group is None and m.verdict.verdict in (REGRESSION, IMPROVEMENT)
    ]
    if not lat:
        return ["No power to attribute and no significant wakeup-latency change: nothing to explain here."]
    m = next((x for x in lat if x.spec.key == "latency.gmean_us"), lat[0])
    out = [f"Wakeup latency: {_fmt_change(m)}."]
    idle = [x for x in w.metrics if x.analysis == "idle" and x.value_a is not None and x.value_b is not None]
    idle.sort(key=lambda x: (x.verdict.verdict not in (REGRESSION, IMPROVEMENT, "changed"), -abs(x.delta_pct or 0.0)))
    if idle:
        out.append(
            "Idle behaviour beside it (residency per state, misses, wakeups; a shift to deeper states costs "
            "exit latency): " + "; ".join(_fmt_change(x) for x in idle[:5]) + "."
        )
    else:
        out.append("The traces have no cpu_idle events, so idle residency and misses cannot be read against it.")
    tasks = [x for x in w.metrics if x.spec.key == "latency.task.{task}.gmean_us" and x.delta_pct is not None]
    tasks.sort(key=lambda x: -abs(x.delta_pct))
    if tasks:
        out.append(
            "Per task: " + "; ".join(f"{x.group} {x.delta_pct:+.1f} % ({x.verdict.verdict})" for x in tasks[:4]) + "."
        )
    return out


def explain(
    label_a: Label,
    label_b: Label,
    *,
    workload: str | None = None,
    channels: tuple[str, ...] = (),
    platform=None,
    comparison: Comparison | None = None,
    **compare_kw,
) -> list[Explanation]:
    """Python API: explanations of every workload both labels have (or `workload`). `comparison`: an existing
    compare_labels result to reuse; `compare_kw` go to compare_labels otherwise."""
    from abtest.compare.comparison import compare_labels

    c = comparison or compare_labels(label_a, label_b, workload=workload, **compare_kw)
    return [
        explain_workload(c, label_a, label_b, w.workload, channels=channels, platform=platform)
        for w in c.workloads
        if workload is None or w.workload == workload
    ]


def explain_store(
    a, b, *, store=None, workload: str | None = None, channels: tuple[str, ...] = (), platform=None, **compare_kw
) -> list[Explanation]:
    """Where a power change came from, A -> B (exported as `abtest.explain`): a list of Explanation (one per
    workload), each with `.narrative`, `.df_contributions()`, `.df_tasks()` (polars) and `.to_json()`.

    a, b: label names in `store` (default ./results or $ABTEST_STORE) or paths to label directories.
    channels: power channels to decompose (default: those that changed significantly). platform: a platform
    file (or dict) with an energy model for traces without platform.yml beside them.
    """
    from pathlib import Path

    from abtest.store.layout import default_store_root
    from abtest.store.reader import load_label

    root = Path(store) if store is not None else default_store_root()
    la = load_label(root / a if (root / a).is_dir() else Path(a))
    lb = load_label(root / b if (root / b).is_dir() else Path(b))
    return explain(la, lb, workload=workload, channels=tuple(channels), platform=platform, **compare_kw)
