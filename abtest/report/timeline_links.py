"""From the reports to the timeline: for a flagged outlier iteration (abtest.compare.outliers) and for the
iterations behind an explanation, the trace file, its time range and the `abtest timeline` command that opens it
in the Perfetto UI (abtest.timeline); the HTML report writes those timelines beside itself and links them.

Time ranges are seconds from the trace's first event (what `abtest timeline --window` takes).
"""

from __future__ import annotations

import shlex
import statistics
from dataclasses import dataclass
from pathlib import Path

from abtest.compare.outliers import outlier_iterations
from abtest.timeline.links import timeline_command, timeline_output

MAX_HTML_TIMELINES = 5  # timelines the HTML report writes (the first flagged iterations)


@dataclass(frozen=True)
class TimelineLink:
    """One flagged iteration: ``text`` (the outlier line), its ``trace`` file (None: the iteration has none),
    ``span_s`` (0, duration in s), the ``command`` that writes its timeline and where (``output``)."""

    text: str
    trace: Path | None
    span_s: tuple[float, float] | None
    command: str | None
    output: Path | None

    def line(self) -> str:
        if self.trace is None:
            return self.text
        span = f" {self.span_s[0]:.3f}-{self.span_s[1]:.3f} s" if self.span_s else ""
        return f"{self.text}; timeline: {self.trace}{span}: {self.command}"


def _trace_of(path: str, label: str, workload: str) -> Path | None:
    from abtest.store.reader import load_iteration

    p = Path(path)
    if p.is_file():  # a plain directory's iteration is the trace file itself
        return p
    if not p.is_dir():
        return None
    return load_iteration(p, label=label, workload=workload).trace_path


def _span_s(trace: Path) -> tuple[float, float] | None:
    """(0, duration s) of a trace (its metadata: from the parquet cache once compare has read it)."""
    from abtest.session import Trace

    try:
        t = Trace(trace)
    except (OSError, ValueError):
        return None
    if t.start_ns is None or t.end_ns is None:
        return None
    return 0.0, (t.end_ns - t.start_ns) / 1e9


def outlier_links(c) -> list[TimelineLink]:
    """A TimelineLink per flagged iteration of every workload of a Comparison, in outlier order."""
    out = []
    for w in c.workloads:
        for o in outlier_iterations(w, c.label_a, c.label_b):
            trace = _trace_of(o.path, o.label, o.workload)
            if trace is None:
                out.append(TimelineLink(o.text(), None, None, None, None))
                continue
            out.append(TimelineLink(o.text(), trace, _span_s(trace), timeline_command(trace), timeline_output(trace)))
    return out


def outlier_lines_with_timelines(c) -> list[str]:
    """The outlier notes, each naming its trace, time range and `abtest timeline` command."""
    return list(dict.fromkeys(x.line() for x in outlier_links(c)))


def write_outlier_timelines(c, directory: str | Path, limit: int = MAX_HTML_TIMELINES) -> dict[str, Path]:
    """Write the timelines of the first ``limit`` flagged iterations into ``directory``: {outlier line: file}."""
    from abtest.session import Trace
    from abtest.timeline.builder import write_timeline

    directory = Path(directory)
    out: dict[str, Path] = {}
    written: dict[Path, Path] = {}  # trace -> its timeline (an iteration flagged for several metrics: one file)
    for link in outlier_links(c):
        if link.trace is None:
            continue
        if link.trace not in written:
            if len(written) >= limit:
                continue
            directory.mkdir(parents=True, exist_ok=True)
            dest = directory / f"{len(written) + 1}-{link.trace.parent.name}-{link.trace.name}.perfetto-trace"
            write_timeline(Trace(link.trace), dest)
            written[link.trace] = dest
        out[link.line()] = written[link.trace]
    return out


def _median_name(names: list[str], measured: list[dict], metric: str) -> str | None:
    vals = [(n, m[metric].value) for n, m in zip(names, measured) if metric in m]
    if not vals:
        return None
    med = statistics.median(v for _, v in vals)
    return min(vals, key=lambda nv: abs(nv[1] - med))[0]


def explanation_timeline_lines(c, store: str | Path | None) -> list[str]:
    """Per workload of an explained comparison: the A and B iterations nearest their median of the deciding
    metric (trace file, time range) and the `abtest timeline --store` command that puts them side by side."""
    from abtest.compare.summary import deciding_metrics, metric_label

    lines = []
    for w in c.workloads:
        dec = deciding_metrics(w, limit=1)
        if not dec:
            continue
        m = dec[0]
        picks = []
        for label, names, paths, measured in (
            (c.label_a, w.iterations_a, w.paths_a, w.measured_a),
            (c.label_b, w.iterations_b, w.paths_b, w.measured_b),
        ):
            name = _median_name(names, measured, m.name)
            if name is None:
                continue
            path = paths[names.index(name)] if names.index(name) < len(paths) else None
            trace = _trace_of(path, label, w.workload) if path else None
            span = _span_s(trace) if trace else None
            where = f"{trace} {span[0]:.3f}-{span[1]:.3f} s" if trace and span else str(trace or path)
            picks.append(f"{label} iteration {name} ({where})")
        cmd = (
            ["abtest", "timeline"]
            + (["--store", str(store)] if store else [])
            + [c.label_a, c.label_b, "--workload", w.workload, "-o", f"{w.workload}-ab.perfetto-trace"]
        )
        lines.append(
            f"See {w.workload} on the timeline ({'; '.join(picks)}: nearest the median of "
            f"{metric_label(m)}): {shlex.join(cmd)}"
        )
    return lines
