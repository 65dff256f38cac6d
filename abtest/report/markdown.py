"""Markdown rendering of a comparison (pipe tables, ready to paste into a mail or a PR)."""

from __future__ import annotations

from abtest.compare.comparison import Comparison
from abtest.compare.outliers import outlier_lines
from abtest.compare.summary import headlines, table_summary
from abtest.compare.tables import Table, seed_tables
from abtest.report.fit import grid_of
from abtest.report.header import differing_rows, header_rows, identity_rows
from abtest.report.notes import comparison_notes


def _esc(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def table_markdown(t: Table) -> str:
    """One table as a GitHub-flavoured pipe table (numbers right-aligned; a one-workload column folded into
    the title)."""
    g = grid_of(t)
    head = "| " + " | ".join(_esc(c) for c in g.headers) + " |"
    align = "|" + "|".join("---:" if right else ":---" for right in g.right) + "|"
    lines = [f"### {g.title}", "", head, align]
    for row in g.rows:
        lines.append("| " + " | ".join(_esc(v) for v in row) + " |")
    lines += [""] + [f"- {n}" for n in g.notes]
    return "\n".join(lines).rstrip() + "\n"


def comparison_markdown(c: Comparison, tables: list[Table] | None = None, *, conditions: bool = False) -> str:
    """Headlines, the summary table, test conditions (identity and what differs; all with `conditions`), the
    seed-style tables (`tables`, default: without "All metrics"), notes."""
    tables = tables if tables is not None else seed_tables(c, with_all=False)
    out = [f"## abtest compare: {c.label_b} vs {c.label_a} (baseline)", ""]
    out += [f"- {_esc(h)}" for h in headlines(c)] + [""]
    out.append(table_markdown(table_summary(c)))
    for w in c.workloads:
        rows = identity_rows(c, w) + (header_rows(c, w) if conditions else differing_rows(c, w))
        out += [
            f"#### Test conditions: {w.workload}" + ("" if conditions else " (identity, and what differs)"),
            "",
            f"| field | {_esc(c.label_a)} | {_esc(c.label_b)} |",
            "|:---|:---|:---|",
        ]
        out += [f"| {_esc(k)} | {_esc(a)} | {_esc(b)} |" for k, a, b in rows]
        out.append("")
    out += [table_markdown(t) for t in tables if t.key != "summary"]
    notes = comparison_notes(c)
    if notes:
        out += ["### Notes", ""] + [f"- {_esc(n)}" for n in notes]
    flagged = outlier_lines(c)
    if flagged:
        out += ["", "### Outlier iterations", ""] + [f"- {_esc(n)}" for n in flagged]
    out.append(
        f"\nVerdicts: alpha = {c.policy.alpha}, minimum effect = {c.policy.min_effect_pct} % "
        f"({_esc(c.rule_text())}; see docs/compare.md)."
    )
    return "\n".join(out) + "\n"
