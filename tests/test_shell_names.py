"""Names that reach a shell (issue 43 defect 2): event names, labels, workload names and lab attempt keys are
checked against their alphabets (abtest.targets.shell) before anything runs, quoted through one helper, and
the collectors build no shell string another way. Injections are tried against a real /bin/sh and busybox sh;
no tracefs is touched (the ftrace scripts run in a plain directory standing in for it)."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from abtest.collectors.ftrace import FtraceCollector, enable_line
from abtest.collectors.lab import guest_script as gs
from abtest.collectors.lab.collect import attempt_key, collect_lab
from abtest.collectors.lab.config import parse_lab
from abtest.collectors.lab.lava_log import read_guest_report
from abtest.collectors.lab.receiver import ArtifactReceiver
from abtest.collectors.orchestrate import (
    CollectConfig,
    CollectError,
    LabelSpec,
    collect,
)
from abtest.collectors.workloads import make_workload
from abtest.targets.base import RunResult, Target
from abtest.targets.config import parse_target
from abtest.targets.shell import ShellNameError, check_event, check_label

ROOT = Path(__file__).resolve().parent.parent
BUSYBOX = shutil.which("busybox")


class DirTarget(Target):
    """A target whose 'tracefs' is a plain directory and whose shell is /bin/sh (root_wrap '': no sudo)."""

    def __init__(self, tracefs: Path):
        super().__init__(name="dir", root_wrap="")
        self._tracefs = tracefs
        self.scripts: list[str] = []

    def _run(self, shell_cmd: str, timeout):
        self.scripts.append(shell_cmd)
        r = subprocess.run(
            ["/bin/sh", "-c", shell_cmd],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self._tracefs,
            check=False,
        )
        return RunResult(r.returncode, r.stdout, r.stderr)

    def tracefs_path(self) -> str:
        return str(self._tracefs)


def _evil(tmp_path: Path, name: str = "PWNED") -> tuple[str, Path]:
    return f"nosuch$(touch${{IFS}}{tmp_path / name})", tmp_path / name


def test_an_event_name_with_shell_syntax_is_refused_before_anything_runs(tmp_path):
    """`abtest collect --event 'nosuch$(touch${IFS}FILE)'` created FILE as root on the target."""
    tracefs = tmp_path / "tracefs"
    tracefs.mkdir()
    (tracefs / "set_event").write_text("")
    evil, pwned = _evil(tmp_path)
    target = DirTarget(tracefs)
    with pytest.raises(ShellNameError, match="ftrace event"):
        FtraceCollector(target, ["sched_switch", evil]).start()
    assert not pwned.exists() and target.scripts == []
    cc = CollectConfig(
        target_cfg=parse_target({"name": "t", "kind": "local"}),
        labels=[LabelSpec("A")],
        workloads=[make_workload("shell:cmd=true")],
        extra_events=[evil],
        store=tmp_path / "store",
        progress=False,
    )
    with pytest.raises(CollectError, match="outside its alphabet"):
        collect(cc)
    assert not pwned.exists() and not (tmp_path / "store").exists()


def test_the_enable_line_quotes_every_name_it_prints(tmp_path):
    """Even a name that got past the alphabet would reach `echo ABTEST_ON/ABTEST_MISSING` quoted: the line is
    run by /bin/sh with names holding glob and quote characters that the alphabet allows (`*`)."""
    (tmp_path / "set_event").write_text("")
    line = enable_line("sched_*", ("sched:*",))
    r = subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, cwd=tmp_path, timeout=30, check=False)
    assert r.stdout.split() == ["ABTEST_ON", "sched_*", "sched:*"]  # not expanded against the directory
    with pytest.raises(ShellNameError):
        enable_line("x;reboot", ("x",))


def test_the_cli_refuses_the_event_with_a_clear_error(tmp_path):
    evil, pwned = _evil(tmp_path)
    r = subprocess.run(
        [
            str(ROOT / ".venv/bin/abtest"),
            "collect",
            "--target",
            "localhost",
            "--event",
            evil,
            "--workload",
            "shell:cmd=true",
            "-n",
            "1",
            "--store",
            str(tmp_path / "store"),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert r.returncode != 0 and "ftrace event" in r.stderr and "alphabet" in r.stderr, r.stderr[-2000:]
    assert not pwned.exists()


@pytest.mark.parametrize("good", ["kernelA", "6.1.0-56-amd64", "kernel A", "teo+util", "uclamp_max=512", "A b+c"])
def test_labels_with_spaces_and_plus_fit_the_alphabet(good):
    assert check_label(good) == good


@pytest.mark.parametrize(
    "bad",
    [
        "A$(touch${IFS}PWNED)",
        "a`id`",
        "a;b",
        "a|b",
        "a'b",
        'a"b',
        "a\\b",
        "a b ",
        " a",
        "-a",
        "a\nb",
        "é",
        "a>b",
        "a/b",
        "",
    ],
)
def test_labels_outside_the_alphabet_are_refused(bad):
    with pytest.raises(ShellNameError, match="label"):
        check_label(bad)


@pytest.mark.parametrize("bad", ["nosuch$(touch${IFS}X)", "a b", "a;b", "sched:sched_switch'", ":x", "a\nb"])
def test_event_names_outside_the_alphabet_are_refused(bad):
    with pytest.raises(ShellNameError, match="ftrace event"):
        check_event(bad)


def _lab_cc(tmp_path, labels, artifacts="log") -> CollectConfig:
    cfg = parse_target({"name": "t", "kind": "qemu"})
    acts = {label: {"deploy": {"to": "tmpfs"}, "boot": {"method": "qemu"}} for label in labels}
    return CollectConfig(
        lab=parse_lab({"url": "lava-run:/dev/null", "artifacts": artifacts, "actions": acts}),
        target_cfg=cfg,
        labels=[LabelSpec(x) for x in labels],
        workloads=[make_workload("shell:cmd=true")],
        iterations=1,
        store=tmp_path / "store",
        progress=False,
    )


def test_a_lab_label_with_shell_syntax_is_refused_before_a_job_exists(tmp_path):
    """`A$(touch${IFS}PWNED)` reached the device shell unquoted in `echo ABTEST-BEGIN key=...`."""
    with pytest.raises(CollectError, match="label .* outside its alphabet"):
        collect_lab(_lab_cc(tmp_path, ["A$(touch${IFS}PWNED)"]), backend=object())
    assert not (tmp_path / "store").exists()
    evil_key = "A$(touch${IFS}" + str(tmp_path / "PWNED") + ")-w-1-a1-ab"
    with pytest.raises(ShellNameError, match="attempt key"):
        gs.build_script(gs.GuestSpec(key=evil_key, tag="t", command="true"))


@pytest.mark.skipif(BUSYBOX is None, reason="busybox-static (make setup) is missing")
def test_a_label_with_a_space_or_plus_goes_through_a_lab_attempt(tmp_path):
    """A label `kernel A+teo` aborted an upload collection (its attempt key was refused by the receiver);
    now the key is derived through slug(), the receiver opens its slot, and busybox sh runs the iteration
    script (markers included, so the tag reaches trace_marker quoted) and prints the key the log reader matches."""
    label = "kernel A+teo"
    key = attempt_key(label, "my load", 1, 1)
    assert re.fullmatch(r"kernel_A_teo-my_load-1-a1-[0-9a-f]{8}", key)
    with ArtifactReceiver(tmp_path / "staging") as rcv:
        assert "/upload/" in rcv.open_slot(key)
    evil_tag = f"label={label} workload=$(touch {tmp_path / 'PWNED'}) iteration=1"
    spec = gs.GuestSpec(
        key=key, tag=evil_tag, command="echo hi", transport="log", workdir=str(tmp_path / "g"), quiet_console=False
    )
    r = subprocess.run(
        [BUSYBOX, "sh", "-c", gs.build_script(spec), "sh", ""], capture_output=True, text=True, timeout=60, check=False
    )
    rep = read_guest_report(list(enumerate(r.stdout.splitlines())), key)
    assert rep.key == key and rep.rc == 0 and rep.status == "ok", r.stdout[-2000:]
    # with tracing, the tag reaches trace_marker quoted: run the script's marker lines against a plain file
    traced = gs.build_script(gs.GuestSpec(key=key, tag=evil_tag, command="true", events=["sched_switch"]))
    marks = [line.strip() for line in traced.splitlines() if line.strip().startswith("echo 'abtest_workload_")]
    assert len(marks) == 2
    subprocess.run([BUSYBOX, "sh", "-c", "\n".join(marks)], env={"T": str(tmp_path)}, check=True, timeout=30)
    assert (tmp_path / "trace_marker").read_text() == f"abtest_workload_end {evil_tag}\n"
    assert not (tmp_path / "PWNED").exists()


# -- the collectors build no shell string without the helper -----------------------------------------------------
SHELL_SYNTAX = re.compile(
    r"(^|[;&|({]\s*|\b(then|do|if)\s+)(echo|cd|rm|chmod|chown|mkdir|cat|printf|kill|mount|"
    r"trace-cmd|command -v|sh -c|for \w+ in)\b|>>?\s*/dev/null|\$\(|\s(&&|\|\|)\s"
)
SAFE_CALLS = {"quote", "quote_glob", "join", "int", "float", "len", "round"}  # the helper, and numbers


def _safe_value(expr: ast.expr, local_funcs: set[str]) -> bool:
    """An interpolated value is safe in a shell string when it is quoted through the helper, a number, a
    module constant (UPPER_CASE), a shell fragment held in a `*_sh` name, or a call of a function of the same
    module (whose own shell strings are checked the same way)."""
    if isinstance(expr, ast.Constant):
        return True
    if isinstance(expr, ast.Call):
        f = expr.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        upper_const = isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id.isupper()
        return name in SAFE_CALLS or name in local_funcs or upper_const
    if isinstance(expr, ast.Name):
        return expr.id.isupper() or expr.id.endswith("_sh")
    if isinstance(expr, ast.Attribute):
        return expr.attr.isupper() or expr.attr.endswith("_sh")
    return False


def unquoted_shell_values(path: Path) -> list[str]:
    """`file:line: {expr}` for every value put into a shell-looking f-string without the quoting helper."""
    tree = ast.parse(path.read_text(), str(path))
    local_funcs = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.JoinedStr):
            continue
        literal = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
        if not SHELL_SYNTAX.search(literal):
            continue
        out += [
            f"{path.relative_to(ROOT)}:{node.lineno}: {{{ast.unparse(v.value)}}}"
            for v in node.values
            if isinstance(v, ast.FormattedValue) and not _safe_value(v.value, local_funcs)
        ]
    return out


# Files whose shell strings are held to the rule (issue 43's files); the others of abtest/collectors and
# abtest/targets are listed with what they still interpolate, so that the list only shrinks.
CHECKED = [
    "abtest/collectors/ftrace.py",
    "abtest/collectors/orchestrate.py",
    "abtest/collectors/plan.py",
    "abtest/collectors/provider.py",
    "abtest/collectors/cooldown.py",
    "abtest/collectors/target_state.py",
    "abtest/collectors/iteration.py",
    "abtest/collectors/power.py",
    "abtest/collectors/lab",
    "abtest/targets/base.py",
    "abtest/targets/shell.py",
]


def test_the_checker_catches_an_unquoted_value(tmp_path):
    probe = ROOT / "tests" / "data" / "shell_check_probe.py"
    probe.parent.mkdir(exist_ok=True)
    try:
        probe.write_text('def f(name, n):\n    return [f"echo ABTEST_ON {name}", f"echo {quote(name)} {int(n)}"]\n')
        assert unquoted_shell_values(probe) == ["tests/data/shell_check_probe.py:2: {name}"]
    finally:
        probe.unlink()


def test_quote_glob_keeps_the_pattern_and_quotes_the_rest(tmp_path):
    from abtest.targets.shell import quote_glob

    for name in ("zone0", "zone1", "$(touch PWNED)x"):
        (tmp_path / name).write_text(name)
    pattern = f"{tmp_path}/zone[0-9]"
    evil = quote_glob(str(tmp_path) + "/$(touch PWNED)*")
    r = subprocess.run(
        ["/bin/sh", "-c", f"cat {quote_glob(pattern)}; cat {evil}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=30,
        check=True,
    )
    assert r.stdout == "zone0zone1$(touch PWNED)x" and not (tmp_path / "PWNED").exists()


def test_shlex_quote_lives_in_the_helper_only():
    hits = []
    for base in ("abtest/collectors", "abtest/targets"):
        for p in sorted((ROOT / base).rglob("*.py")):
            if p.name == "shell.py" and p.parent.name == "targets":
                continue
            hits += [
                f"{p.relative_to(ROOT)}:{i}"
                for i, line in enumerate(p.read_text().splitlines(), 1)
                if re.search(r"shlex\.quote|pipes\.quote|from shlex import", line)
            ]
    assert hits == [], "quote through abtest.targets.shell.quote: " + ", ".join(hits)


def test_checked_collectors_put_no_value_into_a_shell_string_unquoted():
    files = []
    for item in CHECKED:
        p = ROOT / item
        files += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    hits = [h for f in files for h in unquoted_shell_values(f)]
    assert hits == [], "\n".join(hits)
