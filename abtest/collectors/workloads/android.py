"""Android workloads: YouTube playback, a game, Jankbench, Geekbench, PCMark.

They need a real device to run (none exists here). Orchestration is the `am`/`dumpsys`/pull sequence
below; result parsing is done by abtest.results (benchmarks, frames_text; written and tested on
real-format files there), imported, not duplicated. Metric conversion from those parsers' dicts is
`metrics_from_result`, tested here.
"""

from __future__ import annotations

import re
import shlex
import zipfile
from pathlib import Path
from xml.etree import ElementTree

from abtest.collectors.workloads.base import Workload, WorkloadError, metrics
from abtest.results import specs
from abtest.targets.base import Target
from abtest.targets.shell import quote

# parser key -> the declared metric it is (abtest.results.specs); the first key present wins per metric
_METRIC_KEYS = {
    "fps": specs.FPS,
    "jank_pct": specs.JANK_PCT,
    "missed_vsync_pct": specs.JANK_PCT,
    "mean_frame_ms": specs.MEAN_FRAME_MS,
    "mean_frame_interval_ms": specs.MEAN_FRAME_MS,
    "p95_frame_ms": specs.P95_FRAME_MS,
    "single_core_score": specs.GEEKBENCH_SINGLE,
    "multi_core_score": specs.GEEKBENCH_MULTI,
}


def metrics_from_result(result: dict) -> dict:
    """A parser dict from abtest.results (benchmarks, frames_text) -> metrics.json entries (None values
    skipped)."""
    out = {}
    for key, spec in _METRIC_KEYS.items():
        val = result.get(key)
        if val is not None and spec.key not in out:
            out.update(metrics((spec, val)))
    return out


def pull_result(target: Target, remote: str, local: Path) -> dict:
    """Pull the workload's result file (remote path) to `local` and read its metrics (abtest.results.benchmarks)."""
    from abtest.results.benchmarks import read_workload_metrics

    target.pull(remote, local)
    return metrics_from_result(read_workload_metrics(local))


_PACKAGE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")


def check_package(workload: Workload) -> None:
    """An Android `package` parameter must be a package name (it also becomes a path: /data/data/<package>)."""
    pkg = workload.params.get("package")
    if pkg and not _PACKAGE.match(pkg):
        raise WorkloadError(f"workload {workload.KIND!r}: package {pkg!r} is not an Android package name")


class _FramesWorkload(Workload):
    """Shared by YouTube and game: launch, play for duration_s, dump SurfaceFlinger --latency of the
    layer whose name contains `layer` (default: the package), stop the app."""

    TOOLS = ("am", "dumpsys")

    def __init__(self, **params):
        super().__init__(**params)
        check_package(self)

    def launch_command(self) -> str:  # pragma: no cover
        raise NotImplementedError

    def command(self, remote_dir: str) -> str:
        p = self.params
        layer = p.get("layer") or p["package"]
        out = quote(f"{remote_dir}/abtest-sf-latency.txt")
        return (
            f"{self.launch_command()} >/dev/null && sleep {p['duration_s']:g} && "
            f"L=$(dumpsys SurfaceFlinger --list | grep -F {quote(layer)} | grep -i surfaceview | head -1); "
            f'[ -n "$L" ] || L=$(dumpsys SurfaceFlinger --list | grep -F {quote(layer)} | head -1); '
            f'dumpsys SurfaceFlinger --latency "$L" > {out}; am force-stop {quote(p["package"])}'
        )

    def collect(self, target: Target, outdir: Path, remote_dir: str) -> dict:
        return pull_result(target, f"{remote_dir}/abtest-sf-latency.txt", outdir / "sf-latency.dump")


class YouTubeWorkload(_FramesWorkload):
    """Play `url` in the YouTube app for duration_s; metrics fps, jank_pct (missed vsyncs), mean_frame_ms."""

    KIND = "youtube"
    DEFAULTS = {
        "url": "https://www.youtube.com/watch?v=aqz-KE-bpKQ",
        "duration_s": 60.0,
        "package": "com.google.android.youtube",
        "layer": "",
    }

    def launch_command(self) -> str:
        p = self.params
        return f"am start -W -a android.intent.action.VIEW -d {quote(p['url'])} {quote(p['package'])}"


class GameWorkload(_FramesWorkload):
    """Launch the game `package` and let it run duration_s; metrics fps, jank_pct, mean_frame_ms."""

    KIND = "game"
    DEFAULTS = {"package": "", "duration_s": 60.0, "layer": ""}

    def __init__(self, **params):
        super().__init__(**params)
        if not self.params["package"]:
            raise WorkloadError("workload 'game' needs package=<android package name>")

    def launch_command(self) -> str:
        return f"monkey -p {quote(self.params['package'])} -c android.intent.category.LAUNCHER 1"


class JankbenchWorkload(Workload):
    """Jankbench: run benchmark ids `benchmarks` (comma list in quotes) `runs` times, wait for the app to
    finish, pull its BenchmarkResults sqlite DB; metrics jank_pct, mean_frame_ms (abtest.results.benchmarks)."""

    KIND = "jankbench"
    DEFAULTS = {"benchmarks": "0", "runs": 1, "package": "com.android.benchmark", "wait_s": 600.0}
    TOOLS = ("am", "dumpsys")

    def __init__(self, **params):
        super().__init__(**params)
        check_package(self)

    def command(self, remote_dir: str) -> str:
        p = self.params
        pkg = quote(p["package"])
        db = f"/data/data/{p['package']}/databases/BenchmarkResults"
        return (
            f"rm -f {quote(db)}; am start -W -n {pkg}/.app.RunLocalBenchmarksActivity "
            f"--eia com.android.benchmark.EXTRA_ENABLED_BENCHMARK_IDS {quote(p['benchmarks'])} "
            f"--ei com.android.benchmark.EXTRA_RUN_COUNT {int(p['runs'])} >/dev/null; "
            f"t=0; while [ $t -lt {int(p['wait_s'])} ] && dumpsys window | grep -q RunLocalBenchmarks; do "
            f"sleep 2; t=$((t+2)); done; cp {quote(db)} {quote(remote_dir + '/abtest-jankbench.db')}"
        )

    def collect(self, target: Target, outdir: Path, remote_dir: str) -> dict:
        return pull_result(target, f"{remote_dir}/abtest-jankbench.db", outdir / "jankbench.db")


class GeekbenchWorkload(Workload):
    """Geekbench command-line edition (`binary`, e.g. geekbench6 on Linux/Android shells that have it):
    `--export-json`, pulled and parsed; metrics geekbench_single_core_score / multi_core_score (points).

    `extra_args` are more command-line arguments for geekbench, split the way a shell splits words (quotes
    group words: `extra_args='--cpu-workers 4'`) and passed as separate, quoted arguments: no shell syntax in
    them (`;`, `|`, `$(...)`, redirections) is ever run. Use the `shell` workload for a shell command line."""

    KIND = "geekbench"
    DEFAULTS = {"binary": "geekbench6", "extra_args": "--no-upload"}

    def __init__(self, **params):
        super().__init__(**params)
        try:
            self.extra_argv = shlex.split(self.params["extra_args"])
        except ValueError as e:
            raise WorkloadError(f"workload 'geekbench': extra_args {self.params['extra_args']!r}: {e}") from e

    def prepare(self, target: Target, remote_dir: str) -> None:
        if target.run(["sh", "-c", f"command -v {quote(self.params['binary'])}"], 30).exit_code:
            raise WorkloadError(f"{target.name}: {self.params['binary']} not found on the target")

    def command(self, remote_dir: str) -> str:
        argv = [self.params["binary"], *self.extra_argv, "--export-json", f"{remote_dir}/abtest-geekbench.json"]
        return " ".join(quote(a) for a in argv)

    def collect(self, target: Target, outdir: Path, remote_dir: str) -> dict:
        return pull_result(target, f"{remote_dir}/abtest-geekbench.json", outdir / "geekbench.json")


def pcmark_scores(path: str | Path) -> dict:
    """PCMark for Android result archive (.zip holding an XML result) -> {"<Name>Score": value}.

    Reads every XML element whose tag ends in "Score" and holds a number. Raises WorkloadError when
    the archive has no XML or no score element.
    """
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as zf:
            xml_names = [n for n in zf.namelist() if n.lower().endswith(".xml")]
            if not xml_names:
                raise WorkloadError(f"{path}: PCMark archive holds no XML result (members {zf.namelist()})")
            root = ElementTree.fromstring(zf.read(xml_names[0]))
    except zipfile.BadZipFile as e:
        raise WorkloadError(f"{path}: not a PCMark result archive ({e})") from e
    except ElementTree.ParseError as e:
        raise WorkloadError(f"{path}: malformed PCMark XML ({e})") from e
    scores = {}
    for el in root.iter():
        if el.tag.endswith("Score") and el.text:
            try:
                scores[el.tag] = float(el.text.strip())
            except ValueError:
                continue
    if not scores:
        raise WorkloadError(f"{path}: no *Score element in the PCMark result")
    return scores


class PCMarkWorkload(Workload):
    """PCMark for Android Work benchmark: start it, wait up to wait_s for a new result archive under
    `results_dir`, pull it; metrics pcmark_<name> (points, higher is better)."""

    KIND = "pcmark"
    DEFAULTS = {
        "package": "com.futuremark.pcmark.android.benchmark",
        "wait_s": 1800.0,
        "results_dir": "/sdcard/PCMark for Android",
    }
    TOOLS = ("am",)

    def __init__(self, **params):
        super().__init__(**params)
        check_package(self)

    def command(self, remote_dir: str) -> str:
        p = self.params
        rd = quote(p["results_dir"])
        return (
            f"before=$(ls -t {rd}/*.zip 2>/dev/null | head -1); "
            f"am start -W -n {quote(p['package'])}/com.futuremark.gypsum.activity.SplashPageActivity >/dev/null; "
            f"t=0; while [ $t -lt {int(p['wait_s'])} ]; do now=$(ls -t {rd}/*.zip 2>/dev/null | head -1); "
            f'[ -n "$now" ] && [ "$now" != "$before" ] && break; sleep 5; t=$((t+5)); done; '
            f'[ -n "$now" ] && cp "$now" {quote(remote_dir + "/abtest-pcmark.zip")}'
        )

    def collect(self, target: Target, outdir: Path, remote_dir: str) -> dict:
        local = outdir / "pcmark-result.pcmark"
        target.pull(f"{remote_dir}/abtest-pcmark.zip", local)
        return metrics(*((specs.PCMARK, v, k) for k, v in pcmark_scores(local).items()))
