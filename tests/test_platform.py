"""abtest.analysis.platform on the real platform files in ../shared (values checked against the files' text)."""

from __future__ import annotations

import re
import textwrap

import pytest

from abtest.analysis.platform import (
    PlatformFormatError,
    df_cpus,
    df_idle_states,
    df_opps,
    load_platform,
    platform_from_meta,
)


def test_lisa_plat_info_juno_without_executing_tags(traces, platforms):
    text = (traces / "lisa" / "sched_load-plat_info.yml").read_text()
    assert "!!python/object" in text
    p = load_platform(traces / "lisa" / "sched_load-plat_info.yml")
    assert p["name"] == "juno"
    assert p["energy_model_source"] == "LISA plat_info.yml (juno)"
    caps = dict(df_cpus(p).select("cpu", "capacity").iter_rows())
    assert caps == {0: 446.0, 1: 1024.0, 2: 1024.0, 3: 446.0, 4: 446.0, 5: 446.0}
    doms = {tuple(d["cpus"]): d for d in p["domains"]}
    assert set(doms) == {(0, 3, 4, 5), (1, 2)}
    # the file states: 1100000 kHz -> ActiveState(1024.0, 583); 450000 kHz little -> (236.117..., 42)
    big = {o["frequency_khz"]: o for o in doms[(1, 2)]["opps"]}
    assert big[1100000]["capacity"] == 1024.0 and big[1100000]["power_mw"] == 583.0
    little = {o["frequency_khz"]: o for o in doms[(0, 3, 4, 5)]["opps"]}
    assert list(little) == [450000, 575000, 700000, 775000, 850000]
    assert little[450000]["power_mw"] == 42.0
    assert little[450000]["capacity"] == pytest.approx(236.11764705882354)
    # every OPP power in the file is found in the parsed model
    file_powers = sorted(int(m) for m in re.findall(r"ActiveState\n\s+- [\d.]+\n\s+- (\d+)", text))
    assert len(file_powers) == 30 and set(df_opps(p)["power_mw"].cast(int)) == set(file_powers)
    idle = df_idle_states(p).filter(cpu=0)
    assert idle["name"].to_list() == ["WFI", "cpu-sleep-0", "cluster-sleep-0"]
    assert idle["target_residency_us"].null_count() == 3  # the file does not say: unknown, not 0
    # the copy under platforms/ is the same file
    assert load_platform(platforms / "lisa" / "tests-assets-sched_load" / "plat_info.yml")["domains"] == p["domains"]


def test_lisa_plat_info_without_energy_model(platforms):
    p = load_platform(platforms / "lisa" / "tests-assets-sched_load_avg" / "plat_info.yml")
    assert p["energy_model_source"] is None
    assert [d["cpus"] for d in p["domains"]] == [[0, 1], [2, 3]]
    assert p["domains"][0]["opps"][0]["frequency_khz"] == 307200
    assert p["domains"][1]["opps"][-1]["frequency_khz"] == 2150400
    assert any("freqs key 1" in n for n in p["notes"])


def test_lisa_legacy_json_with_comments_and_trailing_commas(platforms):
    pj = platforms / "lisa" / "platforms-json"
    assert "," in (pj / "pixel.json").read_text().split("}")[0]  # trailing comma present in the file
    pixel = load_platform(pj / "pixel.json")
    assert dict(df_cpus(pixel).select("cpu", "capacity").iter_rows()) == {0: 763.0, 1: 763.0, 2: 1024.0, 3: 1024.0}
    juno = load_platform(pj / "juno.json")
    opps = df_opps(juno).filter(is_max=True).sort("frequency_khz")
    # nrg_max / cap_max at f_max as in the file
    assert opps.select("frequency_khz", "capacity", "power_mw", "static_mw").rows() == [
        (850000, 447.0, 93.0, 57.0),
        (1100000, 1024.0, 616.0, 64.0),
    ]
    assert "(f/f_max)^3" in juno["energy_model_source"]
    hikey = load_platform(pj / "hikey960.json")  # clusters "0"/"1", nrg_model big/little
    assert dict(df_cpus(hikey).select("cpu", "capacity").iter_rows())[4] == 1024.0
    with pytest.raises(PlatformFormatError, match="tc2.json.*cannot tell which CPUs"):
        load_platform(pj / "tc2.json")


def test_wattson_cpu_1d(platforms):
    path = platforms / "perfetto-wattson" / "Tensor" / "cpu_1d.csv"
    p = load_platform(path, cpus_count=8)
    assert p["energy_model_source"] == "Wattson Tensor cpu_1d.csv"
    assert [(d["id"], d["cpus"]) for d in p["domains"]] == [(4, [4, 5]), (6, [6, 7])]
    first = path.read_text().splitlines()[1].split(",")  # Tensor,4,400000,0,28.51,5.24,0
    o = p["domains"][0]["opps"][0]
    assert (o["frequency_khz"], o["power_mw"], o["static_mw"], o["idle_power_mw"]) == (
        int(first[2]),
        float(first[4]),
        float(first[3]),
        [float(first[5]), float(first[6])],
    )
    g6 = load_platform(platforms / "perfetto-wattson" / "Tensor_G6" / "cpu_1d.csv", cpus_count=8)
    assert [d["id"] for d in g6["domains"]] == [0, 2, 6]  # 255 = DSU skipped, with a note
    assert any("255" in n for n in g6["notes"])


def test_own_yaml_toml_and_target_embedding(tmp_path):
    y = tmp_path / "plat.yaml"
    y.write_text(
        textwrap.dedent("""
        name: toy
        energy_model_source: "hand-written toy model"
        domains:
          - cpus: [0, 1]
            name: little
            capacity: 512
            opps: [[500000, 10.0], [1000000, 30.0]]
            idle_states:
              - {name: WFI, target_residency_us: 1, exit_latency_us: 1, power_mw: 2.0}
              - {name: cpu-off, target_residency_us: 1500, exit_latency_us: 500, power_mw: 0.1}
    """)
    )
    p = load_platform(y)
    assert [o["capacity"] for o in p["domains"][0]["opps"]] == [256.0, 512.0]  # capacity x f/f_max
    assert df_idle_states(p).filter(cpu=1, state=1)["target_residency_us"][0] == 1500.0
    t = tmp_path / "target.toml"
    t.write_text(
        textwrap.dedent("""
        [target]
        kind = "ssh"
        [platform]
        name = "toy"
        [[platform.domains]]
        cpus = [0]
        capacity = 1024
        opps = [{frequency_khz = 2000000, power_mw = 500.0}]
    """)
    )
    q = load_platform(t)
    assert q["cpus"][0]["capacity"] == 1024.0 and q["domains"][0]["opps"][0]["capacity"] == 1024.0
    assert q["energy_model_source"] == "platform file toy"
    assert load_platform(p) == p  # the schema is its own input format


def test_bad_files_give_clear_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    with pytest.raises(PlatformFormatError, match="bad.yaml: no 'domains'"):
        load_platform(bad)
    csvf = tmp_path / "cpu_1d.csv"
    csvf.write_text("device,policy,freq_khz,static,active,idle0,idle1\nX,0,abc,0,1,1,0\n")
    with pytest.raises(PlatformFormatError, match="line 2"):
        load_platform(csvf)
    with pytest.raises(PlatformFormatError, match="cannot read"):
        load_platform(tmp_path / "missing.yaml")


def test_platform_from_cpuinfo_meta():
    meta = {
        "cpu_info": [
            {"cpu": 0, "capacity": 160, "frequencies_khz": [300000, 600000]},
            {"cpu": 1, "capacity": 160, "frequencies_khz": [300000, 600000]},
            {"cpu": 2, "capacity": 1024, "frequencies_khz": [500000, 2000000]},
        ]
    }
    p = platform_from_meta(meta)
    assert [d["cpus"] for d in p["domains"]] == [[0, 1], [2]]
    assert p["domains"][1]["opps"][0]["capacity"] == 256.0
    assert platform_from_meta({}) is None


def test_a_platform_for_another_system_is_refused(traces):
    """LISA's 6-CPU Juno plat_info on a 2-CPU x86 trace used to be applied silently (its idle-state names
    relabelled the VM's states): refused now, naming the disagreement, by every analysis that uses it."""
    from abtest import Trace
    from abtest.analysis import registry
    from abtest.analysis.platform import PlatformMismatchError, trace_platform

    x86 = traces / "x86-vm" / "x86-menu-hackbench-cyclictest.dat"
    t = Trace(x86, platform=traces / "lisa" / "sched_load-plat_info.yml")
    with pytest.raises(PlatformMismatchError, match="juno describes 6 CPUs, the trace has 2"):
        trace_platform(t)
    with pytest.raises(PlatformMismatchError):
        registry.evaluate(registry.IDLE, t)
    # right CPU count, too few idle states: the VM enters state 1 (haltpoll) on both CPUs
    one_state = {
        "name": "one-state",
        "domains": [{"cpus": [0, 1], "opps": [{"frequency_khz": 1000000}], "idle_states": [{"name": "WFI"}]}],
    }
    with pytest.raises(PlatformMismatchError, match="CPU0 enters idle state 1 but one-state lists 1 idle states"):
        trace_platform(Trace(x86, platform=one_state))
    two_states = {
        "name": "two-states",
        "domains": [
            {
                "cpus": [0, 1],
                "opps": [{"frequency_khz": 1000000}],
                "idle_states": [{"name": "POLL"}, {"name": "haltpoll"}],
            }
        ],
    }
    assert trace_platform(Trace(x86, platform=two_states))["name"] == "two-states"


def test_frequencies_outside_the_platform_opps_warn(traces):
    """LISA's trace_txt test trace is from a Juno r2 (devlib's markers: 950 MHz little, 1.2 GHz big) while
    its plat_info is a Juno r0's OPP table: the analyses run, with a warning and a note naming the values."""
    from abtest import Trace
    from abtest.analysis.platform import PlatformMismatchWarning, trace_platform

    t = Trace(traces / "lisa" / "trace_txt-trace.txt", platform=traces / "lisa" / "trace_txt-plat_info.yml")
    with pytest.warns(PlatformMismatchWarning, match="CPU1 runs at 1200000 kHz, not OPPs of juno"):
        plat = trace_platform(t)
    notes = [n for n in plat["notes"] if "does not match the trace" in n]
    assert len(notes) == 6  # every CPU
    ok = Trace(traces / "lisa" / "sched_load-trace.dat", platform=traces / "lisa" / "sched_load-plat_info.yml")
    assert not any("does not match" in n for n in trace_platform(ok)["notes"])
