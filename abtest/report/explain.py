"""`abtest explain` rendered: per channel a ranked table (frequency domain and kind, then its OPPs / idle states,
then the residual), a per-task table, the scheduler signals that moved, and the narrative — as Tables that the
terminal, text, markdown and HTML renderers print like every other table."""

from __future__ import annotations

import json

import click

from abtest.compare.explain import ChannelExplanation, Explanation
from abtest.compare.tables import INTERVAL, NUM, SIGNED, TEXT, Table

MAX_SUB_ROWS = 4  # OPP / state rows under each domain row


def channel_table(ex: Explanation, ch: ChannelExplanation) -> Table:
    d = f" ({ch.delta_pct:+.1f} %)" if ch.delta_pct is not None else ""
    t = Table(
        "explain",
        f"Where {ch.channel} went: {ch.a_mw:.1f} -> {ch.b_mw:.1f} mW, {ch.delta_mw:+.2f} mW{d}",
        [
            ("contributor", TEXT),
            (f"{ex.label_a} (mW)", NUM),
            (f"{ex.label_b} (mW)", NUM),
            ("delta (mW)", SIGNED),
            ("share (%)", SIGNED),
            ("95% CI (mW)", INTERVAL),
            ("time (ms/s)", SIGNED),
        ],
    )
    floor = 1e-3 * max(abs(ch.delta_mw), 1e-9)  # rows that move less than 0.1 % of the delta are summarised
    quiet = [c for c in ch.domains if abs(c.delta_mw) <= floor]
    for top in [c for c in ch.domains if abs(c.delta_mw) > floor]:
        t.rows.append(
            [
                top.label,
                top.a_mw,
                top.b_mw,
                top.delta_mw,
                top.share_pct,
                top.ci95_mw,
                top.dtime_ms_per_s if top.kind not in ("static", "residual") else None,
            ]
        )
        subs = [
            c
            for c in ch.contributions
            if c.kind == top.kind and c.domain == top.domain and c.kind != "residual" and abs(c.delta_mw) > floor
        ]
        for c in subs[:MAX_SUB_ROWS]:
            where = f"@ {c.opp_khz / 1000:g} MHz" if c.opp_khz is not None else ""
            if c.kind == "idle" and c.state is not None:
                where = f"state {c.state} {where}".strip()
            t.rows.append(
                [
                    f"  {where}",
                    c.a_mw,
                    c.b_mw,
                    c.delta_mw,
                    c.share_pct,
                    c.ci95_mw,
                    c.dtime_ms_per_s if c.kind != "static" else None,
                ]
            )
        if len(subs) > MAX_SUB_ROWS:
            t.rows.append([f"  ({len(subs) - MAX_SUB_ROWS} more: --format json)", None, None, None, None, None, None])
    if quiet:
        t.notes.append(f"unchanged (|delta| <= 0.1 % of the change): {', '.join(c.label for c in quiet)}")
    model = "" if (ch.model_source or "") in ch.source else f"; energy model: {ch.model_source or 'none'}"
    t.notes.append(
        f"{ch.source}{model}; the domain rows (and, within each, the OPP rows) add up to the delta "
        f"exactly (sum {sum(c.delta_mw for c in ch.domains):+.4f} mW)"
    )
    t.notes += ch.limits
    return t


def task_table(ex: Explanation, ch: ChannelExplanation) -> Table | None:
    if not ch.tasks:
        return None
    t = Table(
        "explain_tasks",
        f"Per task (active power on {ch.channel}'s domains, priced by the model)",
        [
            ("task", TEXT),
            ("domain", TEXT),
            ("delta (mW)", SIGNED),
            ("share (%)", SIGNED),
            ("CPU time (ms/s)", SIGNED),
            ("at OPPs (MHz)", TEXT),
        ],
    )
    for c in ch.tasks:
        t.rows.append(
            [
                c.task,
                c.domain,
                c.delta_mw,
                c.share_pct,
                c.dtime_ms_per_s,
                ", ".join(f"{k / 1000:g}" for k in c.top_opps_khz),
            ]
        )
    return t


def explanation_tables(ex: Explanation) -> list[Table]:
    out = []
    for ch in ex.channels:
        out.append(channel_table(ex, ch))
        tt = task_table(ex, ch)
        if tt is not None:
            out.append(tt)
    if ex.signals:
        out.append(
            Table(
                "explain_signals",
                "Scheduler signals that changed significantly",
                [("signal", TEXT)],
                [[s] for s in ex.signals],
            )
        )
    return out


def explanation_text_lines(ex: Explanation) -> list[str]:
    """The narrative and notes as plain lines (headed by the workload)."""
    lines = [f"Explanation: {ex.workload} ({ex.label_b} vs {ex.label_a})"]
    lines += [f"  {x}" for x in ex.narrative] or ["  (nothing to attribute)"]
    lines += [f"  note: {n}" for n in ex.notes]
    return lines


def print_explanations(exs, fmt: str, width: int | None = None) -> None:
    """Explanations on stdout as table (rich), text (ASCII, <= width), markdown or json."""
    if fmt == "json":
        click.echo(
            json.dumps(
                {"schema": "abtest.explain/1", "workloads": [e.to_json() for e in exs]},
                indent=1,
                allow_nan=False,
                default=lambda x: None,
            )
        )
        return
    if fmt == "markdown":
        from abtest.report.markdown import table_markdown

        for e in exs:
            click.echo("\n".join(f"> {x}" if i else f"### {x}" for i, x in enumerate(explanation_text_lines(e))))
            click.echo("")
            for t in explanation_tables(e):
                click.echo(table_markdown(t))
        return
    if fmt == "text":
        import textwrap

        from abtest.report.text import table_text

        w = width or 80
        for e in exs:
            for line in explanation_text_lines(e):
                click.echo(textwrap.fill(line, w, subsequent_indent="    ", break_long_words=False))
            click.echo("")
            for t in explanation_tables(e):
                click.echo(table_text(t, w))
        return
    from abtest.report.terminal import console_for_output

    con = console_for_output(width)
    for e in exs:
        print_explanation(con, e)


def print_explanation(console, ex: Explanation) -> None:
    """An abtest.compare.explain.Explanation: narrative first, then its tables."""
    from abtest.report.terminal import print_table, wrap_line

    lines = explanation_text_lines(ex)
    console.print(lines[0], style="bold", markup=False, highlight=False)
    for line in lines[1:]:
        console.print(wrap_line(line.strip(), console.width, "  "), markup=False, highlight=False)
    for t in explanation_tables(ex):
        print_table(console, t)
