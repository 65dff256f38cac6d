"""Markdown rendering of a comparison (pipe tables, ready to paste into a mail or a PR)."""
from __future__ import annotations

from abtest.compare.comparison import Comparison
from abtest.compare.tables import TEXT, Table, format_value, seed_tables
from abtest.report.header import header_rows


def _esc(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def table_markdown(t: Table) -> str:
    """One table as a GitHub-flavoured pipe table (numbers right-aligned)."""
    head = "| " + " | ".join(_esc(c) for c, _ in t.columns) + " |"
    align = "|" + "|".join(":---" if k == TEXT else "---:" for _, k in t.columns) + "|"
    lines = [f"### {t.title}", "", head, align]
    for row in t.rows:
        lines.append("| " + " | ".join(_esc(format_value(v, k)) for v, (_, k) in zip(row, t.columns)) + " |")
    lines += [""] + [f"- {n}" for n in t.notes]
    return "\n".join(lines).rstrip() + "\n"


def comparison_markdown(c: Comparison, tables: list[Table] | None = None) -> str:
    tables = tables if tables is not None else seed_tables(c)
    out = [f"## abtest compare: {c.label_b} vs {c.label_a} (baseline)", ""]
    for w in c.workloads:
        out += [f"#### Test conditions: {w.workload}", "", f"| field | {_esc(c.label_a)} | {_esc(c.label_b)} |",
                "|:---|:---|:---|"]
        out += [f"| {_esc(k)} | {_esc(a)} | {_esc(b)} |" for k, a, b in header_rows(c, w)]
        out.append("")
    out += [table_markdown(t) for t in tables]
    notes = _notes(c)
    if notes:
        out += ["### Notes", ""] + [f"- {_esc(n)}" for n in notes]
    out.append(f"\nVerdicts: alpha = {c.policy.alpha}, minimum effect = {c.policy.min_effect_pct} % "
               "(Welch's t and Mann-Whitney U must agree; see docs/compare.md).")
    return "\n".join(out) + "\n"


def _notes(c: Comparison) -> list[str]:
    out = []
    if c.workloads_only_in_a:
        out.append(f"workloads only in {c.label_a} (not compared): {', '.join(c.workloads_only_in_a)}")
    if c.workloads_only_in_b:
        out.append(f"workloads only in {c.label_b} (not compared): {', '.join(c.workloads_only_in_b)}")
    for w in c.workloads:
        out += [f"{w.workload}: excluded {e['path']}: {e['reason']}" for e in w.excluded]
        out += [f"{w.workload}: {n}" for n in w.notes]
        if w.only_in_a or w.only_in_b:
            out.append(f"{w.workload}: metrics only in {c.label_a}: {', '.join(w.only_in_a) or 'none'}; "
                       f"only in {c.label_b}: {', '.join(w.only_in_b) or 'none'}")
    return out


comparison_notes = _notes
