"""Values that reach a config file or a shell (issue 27 item 18): perfetto's atrace_apps and the other config
strings, geekbench's extra_args. Checked with the real parsers: Perfetto's TraceConfig protobuf (the `perfetto`
package's generated classes, protobuf text format) and /bin/sh."""

from __future__ import annotations

import os
import subprocess

import pytest
from google.protobuf import text_format
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from abtest.collectors.perfetto_config import ConfigValueError, make_trace_config, proto_string
from abtest.collectors.workloads import WorkloadError, make_workload


def parse_config(text: str) -> pb.TraceConfig:
    cfg = pb.TraceConfig()
    text_format.Parse(text, cfg)
    return cfg


def ftrace_config(cfg: pb.TraceConfig):
    return next(ds.config.ftrace_config for ds in cfg.data_sources if ds.config.name == "linux.ftrace")


def test_atrace_apps_round_trip_through_perfetto_text_format():
    cfg = parse_config(make_trace_config(atrace_apps=("com.google.android.youtube", "com.foo:remote", "com.bar*")))
    assert list(ftrace_config(cfg).atrace_apps) == ["com.google.android.youtube", "com.foo:remote", "com.bar*"]
    assert [ds.config.name for ds in cfg.data_sources] == [
        "linux.ftrace",
        "linux.process_stats",
        "android.power",
        "android.surfaceflinger.frametimeline",
    ]
    assert list(ftrace_config(parse_config(make_trace_config())).atrace_apps) == ["*"]


@pytest.mark.parametrize(
    "evil",
    [
        'x" } } data_sources { config { name: "linux.process_stats',  # the injection issue 27 suspected
        'com.foo\natrace_apps: "*"',
        "com.foo\\",
        "",
        "com foo",
    ],
)
def test_a_config_fragment_is_refused_not_traced(evil):
    with pytest.raises(ConfigValueError):
        make_trace_config(atrace_apps=evil)


def test_other_config_strings_are_checked_too():
    with pytest.raises(ConfigValueError):
        make_trace_config(atrace_categories=('gfx" } x {',))
    with pytest.raises(ConfigValueError):
        make_trace_config(extra_ftrace_events=('ftrace/print"\n',))


def test_proto_string_escapes_what_text_format_reads_back():
    for value in ['a"b', "back\\slash", "new\nline", "é-ü", "\x00\x7f"]:
        cfg = parse_config(f"data_sources {{ config {{ name: {proto_string(value)} }} }}")
        assert cfg.data_sources[0].config.name == value


def test_geekbench_extra_args_never_reach_the_shell_as_syntax(tmp_path):
    """The command line is run by a real sh with a stand-in `geekbench6` on PATH that prints its arguments
    (the real binary does not exist here): shell syntax in extra_args arrives as literal arguments."""
    fake = tmp_path / "bin" / "geekbench6"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "[%s]\\n" "$a"; done\n')
    fake.chmod(0o755)
    pwned = tmp_path / "pwned"
    wl = make_workload(f"geekbench:extra_args=\"--no-upload; touch {pwned} $(touch {pwned}) 'two words'\"")
    res = subprocess.run(
        ["/bin/sh", "-c", wl.command(str(tmp_path))],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"},
        timeout=30,
    )
    assert res.returncode == 0, res.stderr
    assert not pwned.exists()
    assert res.stdout.splitlines() == [
        "[--no-upload;]",
        "[touch]",
        f"[{pwned}]",
        "[$(touch]",
        f"[{pwned})]",
        "[two words]",
        "[--export-json]",
        f"[{tmp_path}/abtest-geekbench.json]",
    ]


def test_geekbench_unbalanced_quotes_and_bad_packages_are_refused():
    with pytest.raises(WorkloadError):
        make_workload('geekbench:extra_args="--cpu \'oops"')
    with pytest.raises(WorkloadError):
        make_workload("jankbench:package=../../data/system")
    with pytest.raises(WorkloadError):
        make_workload("game:package=com.foo;reboot")
    assert make_workload("game:package=com.example.game").params["package"] == "com.example.game"
