"""TraceData: what every reader returns (canonical tables + JSON-serialisable metadata)."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl


@dataclass
class TraceData:
    """Decoded trace.

    tables: canonical table name -> polars DataFrame (see abtest.trace.schema).
    meta: JSON-serialisable dict. Keys every reader fills (None when unknown):
        format (str: "trace.dat", "ftrace-text", "atrace", "atrace-z", "systrace-html", "perfetto"),
        format_version (str|None), wrapper (None | "gzip" | "zip"),
        clock (str|None), cpus (int: number of CPUs in the trace),
        lost_events (int: total events lost in the ring buffer, 0 when none were reported),
        lost_events_per_cpu ({cpu number as a string: count}, as meta.json gives it back),
        kernel ({"release", "version", "cmdline", "arch", "long_size", "endian"}),
        platform (dict|None: cpu capacities, freq domains, OPPs, idle states, energy model),
        event_aliases ({canonical name: raw kernel name} where a variant was renamed),
        warnings (list[str]),
        undecoded_bytes_per_cpu (trace.dat v7 only, when some: {cpu as a string: declared ring-buffer bytes
            no compressed chunk covers, not decoded}),
        import_errors / non_event_content ({kind: {"count", "examples"}}: what could not be parsed / what
            was recognised as not being events; abtest.trace.import_log, docs/ingest-policy.md),
        inferred_gaps ({cpu: sched_switch chain breaks}), cpus_with_data (list[int]), cpus_header (int|None)
            (abtest.trace.quality).
    """

    tables: dict[str, pl.DataFrame]
    meta: dict = field(default_factory=dict)
