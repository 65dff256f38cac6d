"""Power: samplers that run on the target and importers for external meters, all writing power.csv.

power.csv (the run-store contract): columns `ts_ns` (Int64, ns on the trace clock), `rail` (Utf8),
`subsystem` (Utf8, may be empty), `energy_uj` (Float64, cumulative energy counter per rail, uJ).

Sources and their clocks:
- Pixel ODPM (`/sys/bus/iio/devices/iio:deviceN/energy_value`): `t=<ms>` then
  `CH<n>(T=<ms>)[<RAIL>], <energy uWs>` (uWs == uJ); T is CLOCK_BOOTTIME ms. `enabled_rails` maps
  rails to subsystems (`CH<n>[<RAIL>]:<subsystem>`).
- hwmon `energy*_input` (uJ, cumulative) and `power*_input` (uW, integrated here, trapezoids).
- powercap RAPL `energy_uj` wraps to 0 after `max_energy_range_uj`: unwrapped here (+max+1 per wrap).
- Monsoon CSV (`Time(ms)` column actually in seconds, `<Chan>(mA)` / `<Chan> Voltage(V)`, trailing
  comma on every row): power = mA x V = mW, integrated; time 0 is put at `start_ts_ns`.
- generic CSV: `ts_ns` or `ts_s`, `rail`, optional `subsystem`, and `energy_uj` or `power_mw`/`power_uw`.

Time alignment: the ftrace collector uses trace_clock "boot" (CLOCK_BOOTTIME) by default; the target
samplers stamp samples with CLOCK_BOOTTIME (ODPM's own T=, /proc/uptime for hwmon/RAPL, 10 ms
resolution), so ts_ns is directly on the trace clock. When the trace clock had to fall back (no "boot"
clock), meta.json says so (`power.aligned = false`). Host-side meters (Monsoon) are aligned by the
caller with `start_ts_ns` (e.g. the trace timestamp of the workload-start marker when the meter was
started with the workload).
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import polars as pl

from abtest.store.power import POWER_SCHEMA, write_power_csv  # noqa: F401 (write_power_csv re-exported for the collectors)
from abtest.targets.base import Target, TargetError
from abtest.targets.shell import quote
from abtest.trace.errors import TraceFormatError

_ODPM_LINE = re.compile(r"^CH(\d+)\(T=(\d+)\)\[([^\]]+)\],\s*(\d+)\s*$")
_RAILS_LINE = re.compile(r"^CH(\d+)\[([^\]]+)\]:\s*(\S*)\s*$")


def empty_power() -> pl.DataFrame:
    return pl.DataFrame(schema=POWER_SCHEMA)


def parse_odpm_enabled_rails(text: str, path: str = "enabled_rails") -> dict[str, str]:
    """`enabled_rails` text -> {rail: subsystem}. Raises TraceFormatError naming the bad line."""
    rails = {}
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _RAILS_LINE.match(line.strip())
        if not m:
            raise TraceFormatError(
                path, f"bad enabled_rails line {line!r}", line=i, expected="CH<n>[<RAIL>]:<subsystem>"
            )
        rails[m.group(2)] = m.group(3)
    return rails


def parse_odpm_energy(text: str, rails: dict[str, str] | None = None, path: str = "energy_value") -> pl.DataFrame:
    """ODPM `energy_value` dumps (one or many, concatenated) -> power frame.

    ts_ns = T (ms, CLOCK_BOOTTIME) x 1e6 per channel line; `t=` lines are sample headers. Raises
    TraceFormatError on a line that is neither.
    """
    ts, names, energy = [], [], []
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("t="):
            continue
        m = _ODPM_LINE.match(s)
        if not m:
            raise TraceFormatError(
                path, f"bad energy_value line {s!r}", line=i, expected="t=<ms> or CH<n>(T=<ms>)[<RAIL>], <uWs>"
            )
        ts.append(int(m.group(2)) * 1_000_000)
        names.append(m.group(3))
        energy.append(float(m.group(4)))
    rails = rails or {}
    df = pl.DataFrame(
        {"ts_ns": ts, "rail": names, "energy_uj": energy},
        schema={"ts_ns": pl.Int64, "rail": pl.Utf8, "energy_uj": pl.Float64},
    )
    sub = pl.DataFrame(
        {"rail": list(rails), "subsystem": list(rails.values())}, schema={"rail": pl.Utf8, "subsystem": pl.Utf8}
    )
    return (
        df.join(sub, on="rail", how="left")
        .with_columns(pl.col("subsystem").fill_null(""))
        .select(list(POWER_SCHEMA))
        .unique(["ts_ns", "rail"], keep="first", maintain_order=True)
        .sort("rail", "ts_ns")
    )


def unwrap_counter(df: pl.DataFrame, max_range_uj: dict[str, float] | float) -> pl.DataFrame:
    """Cumulative `energy_uj` that wraps to 0 after max_range (RAPL) -> monotonic counter per rail.

    A negative step means one wrap: add max_range + 1. (At most one wrap between samples: sample at least
    every max_range / max power, ~60 s for a 262 kJ range at 4 kW.)
    """
    if isinstance(max_range_uj, dict):
        rng = pl.col("rail").replace_strict(max_range_uj, default=None, return_dtype=pl.Float64)
    else:
        rng = pl.lit(float(max_range_uj))
    step = pl.col("energy_uj").diff().over("rail")
    wrapped = (step < 0).fill_null(False)
    offset = pl.when(wrapped).then(rng + 1).otherwise(0.0).cum_sum().over("rail")
    return df.sort("rail", "ts_ns").with_columns((pl.col("energy_uj") + offset).alias("energy_uj"))


def integrate_power(df: pl.DataFrame, power_col: str, scale_to_uw: float) -> pl.DataFrame:
    """Instantaneous power samples (column `power_col`, x scale_to_uw = uW) -> cumulative energy_uj per
    rail by trapezoids over ts_ns (starts at 0 at each rail's first sample)."""
    p = pl.col(power_col).cast(pl.Float64) * scale_to_uw
    dt_s = pl.col("ts_ns").diff().over("rail").cast(pl.Float64) / 1e9
    piece = ((p + p.shift(1).over("rail")) / 2 * dt_s).fill_null(0.0)
    out = df.sort("rail", "ts_ns").with_columns(piece.cum_sum().over("rail").alias("energy_uj"))
    if "subsystem" not in out.columns:
        out = out.with_columns(pl.lit("").alias("subsystem"))
    return out.select(list(POWER_SCHEMA))


def parse_monsoon_csv(path: str | Path, start_ts_ns: int = 0) -> pl.DataFrame:
    """Monsoon power-tool CSV -> power frame (rails Main, USB, Aux: those with both mA and V columns).

    The `Time(ms)` column holds seconds (a known quirk of the tool); rows end with a trailing comma.
    """
    path = Path(path)
    text = path.read_text()
    df = pl.read_csv(io.StringIO(text), has_header=True, truncate_ragged_lines=True)
    df = df.select([c for c in df.columns if c.strip() and not c.startswith("_duplicated")])
    tcol = next((c for c in df.columns if c.strip().lower().startswith("time")), None)
    if tcol is None:
        raise TraceFormatError(
            path, f"no Time column (columns {df.columns})", line=1, expected="Time(ms),Main(mA),Main Voltage(V),..."
        )
    frames = []
    for c in df.columns:
        m = re.fullmatch(r"\s*(\w+)\(mA\)\s*", c)
        if not m:
            continue
        chan = m.group(1)
        vcol = next((v for v in df.columns if v.strip() == f"{chan} Voltage(V)"), None)
        if vcol is None:
            continue
        frames.append(
            df.select(
                (pl.col(tcol).cast(pl.Float64) * 1e9).round().cast(pl.Int64).add(start_ts_ns).alias("ts_ns"),
                pl.lit(chan).alias("rail"),
                (pl.col(c).cast(pl.Float64) * pl.col(vcol).cast(pl.Float64)).alias("power_mw"),
            )
        )
    if not frames:
        raise TraceFormatError(
            path,
            f"no <channel>(mA) column with a matching '<channel> Voltage(V)' (columns {df.columns})",
            line=1,
            expected="Main(mA) and Main Voltage(V)",
        )
    return integrate_power(pl.concat(frames), "power_mw", 1000.0)


def parse_generic_csv(path: str | Path) -> pl.DataFrame:
    """Long-format CSV (ts_ns|ts_s, rail, [subsystem], energy_uj|power_mw|power_uw) -> power frame."""
    path = Path(path)
    df = pl.read_csv(path)
    if "ts_ns" in df.columns:
        df = df.with_columns(pl.col("ts_ns").cast(pl.Int64))
    elif "ts_s" in df.columns:
        df = df.with_columns((pl.col("ts_s").cast(pl.Float64) * 1e9).round().cast(pl.Int64).alias("ts_ns"))
    else:
        raise TraceFormatError(
            path,
            f"no ts_ns or ts_s column (columns {df.columns})",
            line=1,
            expected="ts_ns or ts_s, rail, energy_uj or power_mw/power_uw",
        )
    if "rail" not in df.columns:
        raise TraceFormatError(path, "no rail column", line=1, expected="a rail column")
    df = df.with_columns(pl.col("rail").cast(pl.Utf8))
    if "subsystem" not in df.columns:
        df = df.with_columns(pl.lit("").alias("subsystem"))
    df = df.with_columns(pl.col("subsystem").cast(pl.Utf8).fill_null(""))
    if "energy_uj" in df.columns:
        return df.with_columns(pl.col("energy_uj").cast(pl.Float64)).select(list(POWER_SCHEMA)).sort("rail", "ts_ns")
    for col, scale in (("power_mw", 1000.0), ("power_uw", 1.0)):
        if col in df.columns:
            return integrate_power(df, col, scale)
    raise TraceFormatError(
        path,
        f"no energy_uj, power_mw or power_uw column (columns {df.columns})",
        line=1,
        expected="energy_uj (cumulative uJ) or power_mw / power_uw",
    )


def parse_sysfs_samples(text: str, path: str = "samples") -> pl.DataFrame:
    """Output of the hwmon/RAPL sampler loop -> long frame (ts_ns, file, value).

    Lines: `@ <uptime s>` starts a sample (CLOCK_BOOTTIME), then `<sysfs path> <integer>`.
    """
    ts, files, vals = [], [], []
    cur = None
    for i, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "@" and len(parts) == 2:
            cur = round(float(parts[1]) * 1e9)
        elif len(parts) == 2 and cur is not None and re.fullmatch(r"-?\d+", parts[1]):
            ts.append(cur)
            files.append(parts[0])
            vals.append(int(parts[1]))
        else:
            raise TraceFormatError(
                path, f"bad sampler line {line!r}", line=i, expected="'@ <uptime s>' or '<path> <integer>'"
            )
    return pl.DataFrame(
        {"ts_ns": ts, "file": files, "value": vals}, schema={"ts_ns": pl.Int64, "file": pl.Utf8, "value": pl.Int64}
    )


def rapl_from_samples(samples: pl.DataFrame, names: dict[str, str], max_range: dict[str, float]) -> pl.DataFrame:
    """RAPL sampler frame -> power frame. names: energy_uj path -> domain name (e.g. package-0);
    max_range: domain -> max_energy_range_uj."""
    df = samples.with_columns(
        pl.col("file").replace_strict(names, default=None).alias("rail"),
        pl.col("value").cast(pl.Float64).alias("energy_uj"),
        pl.lit("").alias("subsystem"),
    ).drop_nulls("rail")
    return unwrap_counter(df.select(list(POWER_SCHEMA)), max_range)


def hwmon_from_samples(samples: pl.DataFrame, names: dict[str, str]) -> pl.DataFrame:
    """hwmon sampler frame -> power frame; energy*_input taken as uJ, power*_input (uW) integrated."""
    df = samples.with_columns(pl.col("file").replace_strict(names, default=None).alias("rail")).drop_nulls("rail")
    energy = df.filter(pl.col("file").str.contains(r"/energy\d+_input$")).select(
        "ts_ns", "rail", pl.lit("").alias("subsystem"), pl.col("value").cast(pl.Float64).alias("energy_uj")
    )
    power = df.filter(pl.col("file").str.contains(r"/power\d+_input$"))
    parts = [energy.select(list(POWER_SCHEMA))]
    if power.height:
        parts.append(integrate_power(power, "value", 1.0))
    return pl.concat(parts).sort("rail", "ts_ns")


# -- sampling on the target ---------------------------------------------------------------------------
SAMPLERS = ("odpm", "hwmon", "rapl")


def discover_script(kind: str, sysfs: str = "/sys") -> str:
    """Shell printing the counters a sampler of `kind` reads under the sysfs mount `sysfs`: odpm the
    `enabled_rails` lines; rapl `<energy_uj file> <name> <max_energy_range_uj>`; hwmon `<file> <name>_<channel>`
    (read_discovery). For PowerSampler and the lab's iteration script alike."""
    sysfs_sh = quote(str(sysfs).rstrip("/"))
    if kind == "odpm":
        return f"cat {sysfs_sh}/bus/iio/devices/iio:device*/enabled_rails 2>/dev/null"
    if kind == "rapl":
        return (
            f"for d in {sysfs_sh}/class/powercap/intel-rapl:*; do [ -r $d/energy_uj ] && "
            "echo $d/energy_uj $(cat $d/name) $(cat $d/max_energy_range_uj); done"
        )
    if kind == "hwmon":
        return (
            f"for f in {sysfs_sh}/class/hwmon/hwmon*/energy*_input "
            f"{sysfs_sh}/class/hwmon/hwmon*/power*_input; do "
            "[ -r $f ] && echo $f $(cat ${f%/*}/name)_$(basename ${f%_input}); done"
        )
    raise ValueError(f"unknown power sampler {kind!r} (odpm, hwmon, rapl)")


def loop_script(kind: str, sysfs: str, period_s: float, files_sh: str) -> str:
    """Shell loop writing a sample of the counters every period_s: odpm the energy_value files, else
    `@ <uptime s>` then `<file> <value>` for each file of `files_sh` (shell words: quoted names or "$PFILES")."""
    if kind == "odpm":
        body_sh = f"cat {quote(str(sysfs).rstrip('/'))}/bus/iio/devices/iio:device*/energy_value"
    else:
        body_sh = (
            f'echo @ $(cut -d" " -f1 /proc/uptime); for f in {files_sh}; do '
            'v=$(cat $f 2>/dev/null) && [ -n "$v" ] && echo $f $v; done'
        )
    return f"while :; do {body_sh}; sleep {float(period_s):g}; done"


def read_discovery(kind: str, text: str, path: str = "enabled_rails") -> tuple[dict, dict, dict]:
    """discover_script output -> (names: counter file -> rail, max_range: RAPL domain -> max_energy_range_uj,
    rails: ODPM rail -> subsystem). Lines of another shape are passed over (ODPM: TraceFormatError)."""
    if kind == "odpm":
        return {}, {}, parse_odpm_enabled_rails(text, path)
    rows = [line.split() for line in text.splitlines()]
    if kind == "hwmon":
        return {r[0]: r[1] for r in rows if len(r) == 2}, {}, {}
    names, max_range = {}, {}
    for f, name, rng in (r for r in rows if len(r) == 3 and "intel-rapl:" in r[0]):
        domain = f"{name}:{f.split('intel-rapl:')[1].split('/')[0]}"
        names[f], max_range[domain] = domain, float(rng)
    return names, max_range, {}


def sampled_power(kind: str, text: str, names: dict, max_range: dict, rails: dict, path: str) -> pl.DataFrame:
    """The sampling loop's output -> power frame (counters as read_discovery found them)."""
    if kind == "odpm":
        return parse_odpm_energy(text, rails, path)
    samples = parse_sysfs_samples(text, path)
    if kind == "rapl":
        return rapl_from_samples(samples, names, max_range)
    return hwmon_from_samples(samples, names)


class PowerSampler:
    """Samples a target's power counters in a background shell loop during the workload.

    kind: "odpm", "hwmon" or "rapl". period_s: seconds between samples. The loop's output file lives in
    remote_dir; `stop()` kills it, pulls it and returns the power frame.
    """

    def __init__(
        self, target: Target, kind: str, *, period_s: float = 0.5, remote_dir: str = "/tmp", sysfs: str = "/sys"
    ):
        if kind not in SAMPLERS:
            raise ValueError(f"unknown power sampler {kind!r} (odpm, hwmon, rapl)")
        self.target, self.kind, self.period_s, self.remote_dir = target, kind, period_s, remote_dir
        self.sysfs = sysfs.rstrip("/")  # sysfs mount point on the target (another root for tests)
        self.remote_out = f"{remote_dir}/abtest-power.txt"
        self.pid: str | None = None
        self.names: dict[str, str] = {}
        self.max_range: dict[str, float] = {}
        self.rails: dict[str, str] = {}

    def discover(self) -> None:
        """Find the counter files (raises TargetError when the target has none)."""
        t = self.target
        out = t.run(discover_script(self.kind, self.sysfs), 30, as_root=self.kind != "hwmon").stdout
        self.names, self.max_range, self.rails = read_discovery(self.kind, out)
        if not (self.rails or self.names):
            where = {
                "odpm": f"ODPM rails under {self.sysfs}/bus/iio/devices/iio:device*/enabled_rails",
                "rapl": f"readable {self.sysfs}/class/powercap/intel-rapl:*/energy_uj",
                "hwmon": "hwmon energy*_input / power*_input files",
            }[self.kind]
            raise TargetError(f"{t.name}: no {where}")

    def loop_script(self) -> str:
        return loop_script(self.kind, self.sysfs, self.period_s, " ".join(quote(f) for f in self.names))

    def start(self) -> None:
        """discover() the counters, then launch() the sampling loop."""
        self.discover()
        self.launch()

    def launch(self) -> None:
        """Start the background loop over the counters found (or set) in names/rails."""
        script = f"nohup sh -c {quote(self.loop_script())} > {quote(self.remote_out)} 2>/dev/null </dev/null & echo $!"
        self.pid = self.target.run(script, 30, as_root=True, check=True).stdout.strip().splitlines()[-1]

    def stop(self, local_raw: Path) -> pl.DataFrame:
        """Stop the loop, pull its output to local_raw, return the power frame."""
        if self.pid:
            self.target.run(f"kill {int(self.pid)} 2>/dev/null; sleep 0.1", 30, as_root=True)
        self.target.pull(self.remote_out, local_raw)
        return sampled_power(
            self.kind, Path(local_raw).read_text(), self.names, self.max_range, self.rails, str(local_raw)
        )
