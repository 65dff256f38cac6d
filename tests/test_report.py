"""The HTML report renders: parsed with the standard library's HTML parser (no browser on this machine),
checked for the header fields from meta.json, the seed tables and embedded PNG figures. The store is the
constructed seed store of test_seed_tables.py (values chosen by the test, not measured)."""

import base64
from html.parser import HTMLParser

import pytest
from click.testing import CliRunner
from test_seed_tables import build_seed_store

from abtest.cli import cli


class ReportParser(HTMLParser):
    """Collects tables (class, id, rows of cell text), images (src) and headings."""

    def __init__(self):
        super().__init__()
        self.tables, self.images, self.headings = [], [], []
        self._table = self._row = self._cell = None
        self._heading = None
        self.external = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._table = {"class": a.get("class"), "id": a.get("id"), "rows": []}
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = ""
        elif tag == "img":
            self.images.append(a)
        elif tag in ("h1", "h2", "h3"):
            self._heading = ""
        if tag in ("script", "link") or (tag == "img" and not a.get("src", "").startswith("data:")):
            self.external.append((tag, a))

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append(self._cell.strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self._table["rows"].append(self._row)
            self._row = None
        elif tag == "table" and self._table is not None:
            self.tables.append(self._table)
            self._table = None
        elif tag in ("h1", "h2", "h3") and self._heading is not None:
            self.headings.append(self._heading.strip())
            self._heading = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data
        if self._heading is not None:
            self._heading += data


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("rep")
    store = build_seed_store(root / "results")
    out = root / "report.html"
    r = CliRunner().invoke(cli, ["compare", "A", "B", "--store", str(store), "--html", str(out), "--no-trace"])
    assert r.exit_code == 0, r.output
    p = ReportParser()
    p.feed(out.read_text(encoding="utf-8"))
    return p, out


def test_header_states_kernel_hardware_workload_conditions(report):
    p, _ = report
    assert p.headings[0] == "abtest compare: B vs A"
    headers = [t for t in p.tables if t["class"] == "header"]
    assert len(headers) == 4  # one per workload
    rows = {r[0]: r[1:] for r in headers[0]["rows"]}
    assert rows["kernel.release"] == ["6.1.0-cpu-util-boost", "6.1.0-revert"]
    assert rows["kernel.version"][0] == "#1 SMP PREEMPT"
    assert rows["hardware.cpu_model"][0].startswith("Tensor G2")
    assert rows["governors.cpuidle"] == ["menu", "menu"]
    assert rows["thermal.skin.temp_c"] == ["31.0", "31.0"]
    assert rows["settings.brightness"] == ["50%", "50%"]
    assert rows["iterations used"] == ["5", "5"]
    workloads = {t["rows"][1][1] for t in headers}
    assert workloads == {"game_genshin", "game_pubg", "uclamp_mix", "youtube"}


def test_seed_tables_present(report):
    p, _ = report
    ids = {t["id"] for t in p.tables if t["class"] == "seed"}
    assert {"table-fps_power", "table-power_channels", "table-geekbench", "table-jank", "table-all_metrics"} <= ids
    fps = next(t for t in p.tables if t["id"] == "table-fps_power")
    assert fps["rows"][0][:3] == ["workload", "kernel", "FPS"]
    diffs = {r[0]: r[6] for r in fps["rows"][1:] if r[1] == "B"}
    # uclamp_mix's SoC power is the power.csv Total channel (960 -> 852 mW), noted
    assert diffs == {"youtube": "-21.15 %", "game_pubg": "-9.05 %", "game_genshin": "-8.37 %", "uclamp_mix": "-11.25 %"}
    ch = next(t for t in p.tables if t["id"] == "table-power_channels")
    uclamp = [r for r in ch["rows"][1:] if r[0] == "uclamp_mix"]
    assert [r[1] for r in uclamp][:12:2] == ["CPU", "CPU-Big", "CPU-Little", "CPU-Mid", "GPU", "Total"]


def test_figures_are_embedded_pngs(report):
    p, out = report
    assert p.external == []  # self-contained: no scripts, stylesheets or remote images
    srcs = [i["src"] for i in p.images]
    # per workload a dot plot and power per channel (power.Total from metrics.json, or power.csv's channels)
    assert len(srcs) == 8
    for s in srcs:
        assert s.startswith("data:image/png;base64,")
        png = base64.b64decode(s.split(",", 1)[1])
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    alts = [i["alt"] for i in p.images]
    assert "uclamp_mix: average power per channel" in alts
    assert "youtube: per-iteration values, mean and 95 % CI" in alts
    html = out.read_text()
    assert "no OPP residency figure" in html  # absent data is stated


def test_opp_residency_side_by_side(tmp_path):
    """OPP residency figure from the declared metric frequency.opp.{opp}.residency_pct (group
    cpu<domain>@<kHz>), written here into metrics.json with constructed values."""
    from abtest.store.writer import write_iteration

    res = {"A": {500000: 60.0, 1000000: 30.0, 1800000: 10.0}, "B": {500000: 45.0, 1000000: 35.0, 1800000: 20.0}}
    for label in ("A", "B"):
        for i, d in enumerate((-1.0, 0.0, 1.0)):
            write_iteration(
                tmp_path / label / "w" / str(i),
                {
                    f"frequency.opp.cpu{cpu}@{khz}.residency_pct": {
                        "value": pct + d,
                        "unit": "%",
                        "lower_is_better": None,
                    }
                    for cpu in (0, 4)
                    for khz, pct in res[label].items()
                },
            )
    out = tmp_path / "r.html"
    r = CliRunner().invoke(cli, ["compare", "A", "B", "--store", str(tmp_path), "--html", str(out), "--no-trace"])
    assert r.exit_code == 0, r.output
    p = ReportParser()
    p.feed(out.read_text())
    assert "w: OPP residency" in [i["alt"] for i in p.images]
    assert "no OPP residency figure" not in out.read_text()
    allm = next(t for t in p.tables if t["id"] == "table-all_metrics")
    verdicts = {r[1]: r[-1] for r in allm["rows"][1:]}
    assert verdicts["frequency.opp.cpu0@1800000.residency_pct"] == "changed (higher)"
