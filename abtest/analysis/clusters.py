"""CPU clusters (frequency domains) and their names, shared by the analyses that group per cluster.

A cluster is a frequency domain: from the platform when known, else inferred from the trace (CPUs whose
cpu_frequency value sequences are identical share a domain), else one cluster of every CPU. Clusters are
named by their CPUs, so names compare across runs and read without the platform file: ``cpu0-3``,
``cpu4-5``, ``cpu0,3-5`` (Juno's little CPUs), ``cpu7``.
"""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from abtest.analysis.platform import cpu_list_name

__all__ = ["cpus_label", "df_domains_from_frequency", "df_clusters", "trace_clusters"]


def cpus_label(cpus: Iterable[int]) -> str:
    """``cpu`` + the sorted CPU numbers with consecutive runs collapsed: [0, 3, 4, 5] -> "cpu0,3-5"
    (abtest.analysis.platform.cpu_list_name; the energy model names its domains the same way)."""
    cs = list(cpus)
    if not cs:
        raise ValueError("a cluster has at least one CPU")
    return cpu_list_name(cs)


def df_domains_from_frequency(cpu_frequency: pl.DataFrame) -> pl.DataFrame:
    """``cpu, domain`` (Int32) inferred from a cpu_frequency stream: CPUs whose value sequences are identical
    share a domain, named by its smallest CPU. Events: cpu_frequency."""
    seqs = (
        cpu_frequency.select(pl.col("cpu").cast(pl.Int32), "ts", "frequency_khz")
        .sort("ts", "cpu")
        .group_by("cpu", maintain_order=True)
        .agg(pl.col("frequency_khz").alias("_seq"))
    )
    return (
        seqs.with_columns(pl.col("cpu").min().over("_seq").alias("domain"))
        .select(pl.col("cpu").cast(pl.Int32), pl.col("domain").cast(pl.Int32))
        .sort("cpu")
    )


def df_clusters(
    platform: dict | None = None, *, cpu_frequency: pl.DataFrame | None = None, cpus_count: int | None = None
) -> pl.DataFrame:
    """``cpu`` (Int32), ``cluster`` (Utf8, cpus_label of the domain), ``source`` ("platform" | "cpu_frequency"
    | "all CPUs"): the platform's domains, else domains inferred from cpu_frequency, else one cluster of CPUs
    0..cpus_count-1. CPUs the trace has but the inference does not see join the "all CPUs" fallback never:
    they are simply absent (no made-up cluster)."""
    if platform and platform.get("cpus"):
        doms = pl.DataFrame(
            [(c["cpu"], c["domain"]) for c in platform["cpus"]],
            schema={"cpu": pl.Int32, "domain": pl.Int32},
            orient="row",
        )
        src = "platform"
    elif cpu_frequency is not None and not cpu_frequency.is_empty():
        doms = df_domains_from_frequency(cpu_frequency)
        src = "cpu_frequency"
    elif cpus_count:
        return pl.DataFrame(
            {
                "cpu": list(range(cpus_count)),
                "cluster": [cpus_label(range(cpus_count))] * cpus_count,
                "source": ["all CPUs"] * cpus_count,
            },
            schema={"cpu": pl.Int32, "cluster": pl.Utf8, "source": pl.Utf8},
        )
    else:
        return pl.DataFrame(schema={"cpu": pl.Int32, "cluster": pl.Utf8, "source": pl.Utf8})
    names = doms.group_by("domain").agg(pl.col("cpu").sort().alias("_cpus"))
    names = names.with_columns(pl.col("_cpus").map_elements(cpus_label, return_dtype=pl.Utf8).alias("cluster"))
    return (
        doms.join(names.select("domain", "cluster"), on="domain")
        .select("cpu", "cluster", pl.lit(src).alias("source"))
        .sort("cpu")
    )


def trace_clusters(trace) -> pl.DataFrame:
    """df_clusters for a Trace: its platform, else its cpu_frequency events (kernel or marker-carried), else
    all of its CPUs in one cluster."""
    from abtest.analysis.platform import trace_platform

    plat = trace_platform(trace)
    freq = None
    if not (plat and plat.get("cpus")):
        if "cpu_frequency" in trace.tables:
            freq = trace.df("cpu_frequency", windowed=False)
        elif "marker" in trace.tables:
            from abtest.analysis.meta_events import meta_cpu_frequency

            freq = meta_cpu_frequency(trace.df("marker", windowed=False))
    return df_clusters(plat, cpu_frequency=freq, cpus_count=trace.cpus or None)
