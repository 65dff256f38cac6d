"""The lab collector's parts, fast, against real things: the iteration script run by a real shell (busybox
sh, as on the device) with a sysfs-shaped power tree in a temporary directory; the upload receiver fed by
busybox wget (the client the device uses); a real LAVA 2023.01 server job log (tests/data/lava); job
definitions checked by LAVA's own validator (`lava-run --validate`); process-tree cleanup of real
processes. The whole path with real LAVA, QEMU and kernels is tests/test_lab_lava.py."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from abtest.collectors.lab import guest_script as gs
from abtest.collectors.lab.backends import JobStatus, render_device_dictionary, stop_process_tree
from abtest.collectors.lab.collect import collect_lab, lab_plan
from abtest.collectors.lab.config import LabConfig, LabConfigError, load_token, parse_lab
from abtest.collectors.lab.harvest import AttemptFailed, HarvestContext, harvest
from abtest.collectors.lab.job import job_definition, qemu_actions, redact
from abtest.collectors.lab.journal import Attempt, Journal
from abtest.collectors.lab.lava_log import (
    action_durations,
    parse_log,
    read_guest_report,
    sha256_bytes,
    strip_data_blocks,
    target_lines,
)
from abtest.collectors.lab.receiver import ArtifactReceiver
from abtest.collectors.meta import parse_meta_output
from abtest.collectors.plan import CollectConfig, CollectError, LabelSpec
from abtest.collectors.workloads import make_workload
from abtest.store.writer import IterationWriter
from abtest.targets.config import parse_target

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "lava"
SERVER_LOG = DATA / "server-job-6.1-hackbench.yaml"
SERVER_LOG_KEY = "kernelA-hackbench-1-a1-fb84f528"
BUSYBOX = shutil.which("busybox")
needs_busybox = pytest.mark.skipif(BUSYBOX is None, reason="busybox-static (make setup) is missing")


# -- config ------------------------------------------------------------------------------------------------
def test_lab_table_is_checked_and_the_token_stays_out_of_describe(tmp_path):
    with pytest.raises(LabConfigError, match="unknown keys"):
        parse_lab({"url": "http://x/", "tokn": "a"})
    with pytest.raises(LabConfigError, match="neither http"):
        parse_lab(None, "ftp://lava/")
    with pytest.raises(LabConfigError, match="no lab URL"):
        parse_lab({})
    with pytest.raises(LabConfigError, match="artifacts"):
        parse_lab({"url": "http://x/", "artifacts": "scp"})
    with pytest.raises(LabConfigError, match="deploy"):
        parse_lab({"url": "http://x/", "actions": {"kernelA": {"boot": {}}}})
    cfg = parse_lab({"url": "http://x/", "token_env": "MY_TOKEN"}, "https://lava.example.org/")
    assert cfg.url == "https://lava.example.org/" and not cfg.server_is_local and cfg.image_transport == "http"
    assert load_token(cfg, {"MY_TOKEN": "s3cret"}) == "s3cret"
    tok = tmp_path / "tok"
    tok.write_text("from-file\n")
    cfg2 = parse_lab({"url": "http://127.0.0.1:8000/", "token_file": str(tok)})
    assert load_token(cfg2, {}) == "from-file" and cfg2.image_transport == "file"
    assert "s3cret" not in json.dumps(cfg.describe()) and "from-file" not in json.dumps(cfg2.describe())
    assert parse_lab(None, "lava-run:/dev/null").is_lava_run


def test_labels_on_disjoint_devices_are_flagged():
    from abtest.collectors.lab.collect import device_confounding

    assert "confounded" in device_confounding({"A": {"qemu02": 2}, "B": {"qemu01": 2}})[0]
    assert device_confounding({"A": {"qemu02": 1, "qemu01": 1}, "B": {"qemu01": 2}}) == []
    assert device_confounding({"A": {"board": 2}, "B": {"board": 2}}) == []


def test_plan_alternates_the_label_order_every_round():
    plan = lab_plan(["A", "B"], ["w"], 4)
    assert [p.label for p in plan] == ["A", "B", "B", "A", "A", "B", "B", "A"]
    assert [p.iteration for p in plan] == [1, 1, 2, 2, 3, 3, 4, 4]
    assert [p.label for p in lab_plan(["A", "B"], ["w"], 2, "blocked")] == ["A", "A", "B", "B"]


# -- the iteration script, run by a real shell -------------------------------------------------------------
def _fake_hwmon(root: Path) -> Path:
    """A sysfs-shaped tree with one hwmon device reporting 2.5 W (power1_input, uW)."""
    d = root / "class" / "hwmon" / "hwmon0"
    d.mkdir(parents=True)
    (d / "name").write_text("fakepm\n")
    (d / "power1_input").write_text("2500000\n")
    return root


def _run_script(tmp_path: Path, command: str, key: str = "k-test-1", power: dict | None = None) -> tuple[str, str]:
    spec = gs.GuestSpec(
        key=key,
        tag="label=A workload=shell iteration=1",
        command=command,
        events=[],
        power=power,
        transport="log",
        workdir=str(tmp_path / "guest"),
        quiet_console=False,
    )
    script = gs.build_script(spec)
    r = subprocess.run([BUSYBOX, "sh", "-c", script, "sh", ""], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return script, r.stdout


def _as_lava_run_log(console: str) -> str:
    """Console text -> lava-run's log format: one {"dt", "lvl": "target", "msg"} mapping per line."""
    return "".join(
        json.dumps({"dt": "2026-11-26T00:00:00", "lvl": "target", "msg": line}) + "\n" for line in console.splitlines()
    )


def _ctx(wl, script: str, power=None, expect="") -> HarvestContext:
    return HarvestContext(
        lab={"url": "lava-run:x", "transport": "log"},
        job_url=None,
        worker="w1",
        target_name="t",
        target_file=None,
        emulated=False,
        label_name="A",
        boot=None,
        expect_release=expect,
        workload=wl,
        events_requested=[],
        analyses=None,
        power=power,
        platform=None,
        definition="job: x\n",
        script=script,
        failed_attempts=[],
    )


STATUS = JobStatus(
    7, "Finished", "Complete", "dev1", "2026-11-26T00:00:00Z", "2026-11-26T00:00:02Z", "2026-11-26T00:00:20Z"
)


@needs_busybox
def test_script_output_through_the_log_becomes_an_iteration_with_power(tmp_path):
    sysfs = _fake_hwmon(tmp_path / "sys")
    power = {"sampler": "hwmon", "period_s": 0.05, "sysfs": str(sysfs)}
    wl = make_workload("shell:cmd='sleep 0.4; echo hello; echo oops >&2'")
    script, console = _run_script(tmp_path, wl.command(gs.GUEST_DIR), power=power)
    rep = read_guest_report(target_lines(parse_log(_as_lava_run_log(console))), "k-test-1")
    assert rep.status == "ok" and rep.rc == 0 and not rep.problems.counts
    assert {gs.META_FILE, gs.STDOUT_FILE, gs.STDERR_FILE, gs.WALL_FILE, gs.POWER_FILE} <= set(rep.data)
    for name, (size, sha) in rep.manifest.items():
        assert len(rep.data[name]) == size and sha256_bytes(rep.data[name]) == sha
    meta = parse_meta_output(rep.data[gs.META_FILE].decode())
    assert meta["kernel"]["release"] == os.uname().release
    writer = IterationWriter(tmp_path / "store", "A", "shell", 1)
    out = harvest(
        writer,
        _ctx(wl, script, power),
        STATUS,
        _as_lava_run_log(console),
        {},
        key="k-test-1",
        iteration=1,
        attempt=1,
        buffer_size_kb=1024,
        clock="boot",
    )
    assert (out / ".complete").is_file()
    metrics = json.loads((out / "metrics.json").read_text())["metrics"]
    assert 0.35 < metrics["duration_s"]["value"] < 5
    assert "hello" in (out / "workload.log").read_text() and "oops" in (out / "workload.log").read_text()
    import polars as pl

    p = pl.read_csv(out / "power.csv")
    assert set(p["rail"]) == {"fakepm_power1"} and p.height >= 3
    # 2.5 W for the sampled span: energy grows at 2.5e6 uJ/s
    span_s = (p["ts_ns"].max() - p["ts_ns"].min()) / 1e9
    assert p["energy_uj"].max() == pytest.approx(2.5e6 * span_s, rel=1e-6)
    m = json.loads((out / "meta.json").read_text())
    assert m["lab"]["job_id"] == 7 and m["lab"]["device"] == "dev1" and m["lab"]["worker"] == "w1"
    assert m["lab"]["files"][gs.POWER_FILE]["via"] == "log" and m["timings"]["job_s"] == 18.0
    assert m["target"]["kind"] == "lava" and m["power"]["sampler"] == "hwmon"


@needs_busybox
def test_an_attempt_that_does_not_check_out_is_rejected_with_its_reason(tmp_path):
    wl = make_workload("shell:cmd='echo hello'")
    script, console = _run_script(tmp_path, wl.command(gs.GUEST_DIR))
    log = _as_lava_run_log(console)

    def attempt(text=log, status=STATUS, key="k-test-1", expect="", workload=wl):
        writer = IterationWriter(tmp_path / "store", "A", "shell", 1)
        try:
            with pytest.raises(AttemptFailed) as e:
                harvest(
                    writer,
                    _ctx(workload, script, expect=expect),
                    status,
                    text,
                    {},
                    key=key,
                    iteration=1,
                    attempt=1,
                    buffer_size_kb=1024,
                    clock="boot",
                )
        finally:
            writer.discard()
        return e.value.reason

    # a data line altered in transit (still valid base64): the manifest's sha256 catches it
    lines = console.splitlines()
    i = lines.index(f"ABTEST-DATA-BEGIN {gs.STDOUT_FILE}") + 1
    raw = bytearray(gzip.decompress(base64.b64decode(lines[i])))
    raw[0] ^= 1
    lines[i] = base64.b64encode(gzip.compress(bytes(raw))).decode()
    assert "through the job log" in attempt(_as_lava_run_log("\n".join(lines)))
    assert "never started" in attempt(key="another-attempt")
    incomplete = JobStatus(7, "Finished", "Incomplete", "dev1", failure_comment="boot timed out")
    assert "incomplete: boot timed out" in attempt(status=incomplete)
    assert "expects '0.0.*'" in attempt(expect="0.0.*")
    failing = make_workload("shell:cmd='echo broken >&2; exit 3'")
    script2, console2 = _run_script(tmp_path, failing.command(gs.GUEST_DIR))
    assert "exited 3: broken" in attempt(_as_lava_run_log(console2), workload=failing)
    assert not any((tmp_path / "store" / "A" / "shell").glob("1"))  # nothing of it reached the store


def test_delivery_commands_fit_the_console_and_decode_back():
    script = gs.build_script(gs.GuestSpec(key="k", tag="t", command="hackbench -g 1", events=["sched_switch"]))
    cmds = gs.delivery_commands(script, "http://10.0.2.2:1234/upload/" + "ab" * 16)
    assert all(len(c) < 1024 for c in cmds)  # busybox line editing limit
    assert not any("ABTEST-END" in c for c in cmds)  # the console echo must not match LAVA's patterns
    cfg = LabConfig(url="http://127.0.0.1:8000/")
    definition = job_definition(
        cfg,
        label="A",
        workload="w",
        iteration=1,
        attempt=1,
        key="k",
        deploy={"to": "tmpfs"},
        boot={"method": "qemu"},
        commands=cmds,
        test_timeout_min=5,
        qemu_context=True,
    )
    assert gs.script_from_definition(definition) == script
    assert "ab" * 16 in definition and "ab" * 16 not in redact(definition) and "/upload/<token>" in redact(definition)


# -- LAVA's own logs and validator ---------------------------------------------------------------------------
def test_a_real_lava_server_job_log_is_read_whole():
    text = SERVER_LOG.read_text()
    records = parse_log(text)
    assert len(records) == len(text.splitlines())  # every line is a record, none unparsed
    assert any(
        r.lvl == "results" and isinstance(r.msg, dict) and r.msg.get("case") == "http-download" for r in records
    )  # the lines with YAML tags (`"size": ! "..."`) too
    rep = read_guest_report(target_lines(records), SERVER_LOG_KEY)
    assert (rep.status, rep.rc, rep.uploaded, rep.errors) == ("ok", 0, ["trace.dat"], [])
    assert rep.manifest["trace.dat"][0] > 100_000
    for name, data in rep.data.items():
        assert (len(data), sha256_bytes(data)) == rep.manifest[name], name
    assert parse_meta_output(rep.data["meta.txt"].decode())["kernel"]["release"] == "6.1.0-56-amd64"
    assert b"Time:" in rep.data["workload.stdout"]
    assert {"deployimages", "boot-image-retry", "lava-test-interactive-retry"} <= set(action_durations(records))
    kept = strip_data_blocks(text)
    assert "base64 data for meta.txt left out" in kept and len(kept) < len(text)
    assert len(parse_log(kept + "not: [a record\n")) == len(parse_log(kept))


def test_unparseable_log_lines_are_counted_not_dropped_silently():
    from abtest.collectors.lab.lava_log import LogProblems

    problems = LogProblems()
    recs = parse_log('- {"dt": "t", "lvl": "target", "msg": "ok"}\n- {broken\n[1, 2]\n', problems)
    assert [r.msg for r in recs] == ["ok"]
    assert problems.counts == {"unparseable log line": 1, "log line without a level": 1}
    assert problems.examples["unparseable log line"][0] == (2, "- {broken")


@pytest.mark.skipif(
    shutil.which("lava-run") is None
    or not (Path("/usr/share/lava-server/device-types") / "qemu.jinja2").exists()
    or os.geteuid() != 0,
    reason="needs lava-run, lava-server's templates and root (make setup)",
)
def test_generated_job_passes_lavas_own_validation(tmp_path):
    from abtest.collectors.lab.images import BootImages
    from abtest.targets.qemu import KernelImage

    kernel, ramdisk = tmp_path / "vmlinuz-6.1.0-x", tmp_path / "ramdisk.cpio.gz"
    kernel.write_bytes(b"\0" * 64)
    ramdisk.write_bytes(gzip.compress(b"x"))
    img = BootImages(
        "A",
        KernelImage("linux-image-x", "6.1.0-x", kernel),
        kernel,
        ramdisk,
        "console=ttyS0,115200 rdinit=/abtest-lava-init",
        {},
    )
    cfg = parse_lab({"url": f"lava-run:{DATA / 'qemu-tcg.jinja2'}", "tags": []})
    deploy, boot = qemu_actions(img, f"file://{kernel}", f"file://{ramdisk}", cfg)
    script = gs.build_script(gs.GuestSpec(key="k", tag="t", command="hackbench", events=["sched_switch"]))
    job = tmp_path / "job.yaml"
    job.write_text(
        job_definition(
            cfg,
            label="A",
            workload="hackbench",
            iteration=1,
            attempt=1,
            key="k",
            deploy=deploy,
            boot=boot,
            commands=gs.delivery_commands(script, ""),
            test_timeout_min=5,
            qemu_context=True,
        )
    )
    device = render_device_dictionary(
        DATA / "qemu-tcg.jinja2", tmp_path / "device.yaml", {"arch": "amd64", "model": "model=e1000"}
    )
    prefix = f"abtest-validate-{os.getpid()}-"
    (tmp_path / "dispatcher.yaml").write_text(f"prefix: {prefix}\n")
    try:
        r = subprocess.run(
            [
                "lava-run",
                "--validate",
                "--job-id",
                "1",
                "--output-dir",
                str(tmp_path / "out"),
                "--device",
                str(device),
                "--dispatcher",
                str(tmp_path / "dispatcher.yaml"),
                str(job),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:  # the job directory lava-run made for this validation
        shutil.rmtree(f"/var/lib/lava/dispatcher/tmp/{prefix}1", ignore_errors=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "-net nic,model=e1000" in device.read_text()


# -- the upload receiver, fed by busybox wget ----------------------------------------------------------------
def _upload(path: Path, url: str, sha: str | None = None, size: int | None = None) -> str:
    """The device's upload (guest_script's abtest_send), with busybox: gzip | base64 | wget --post-file."""
    data = path.read_bytes()
    sha = sha or hashlib.sha256(data).hexdigest()
    size = len(data) if size is None else size
    sh = (
        f'gzip -c "$1" | base64 > "$1.b64"; wget -q -O - --header "X-Abtest-Sha256: {sha}" '
        f'--header "X-Abtest-Size: {size}" --post-file "$1.b64" "$2" 2>&1; rm -f "$1.b64"'
    )
    return subprocess.run(
        [BUSYBOX, "sh", "-c", sh, "sh", str(path), url], capture_output=True, text=True, timeout=60
    ).stdout.strip()


@needs_busybox
def test_receiver_stores_checked_uploads_and_refuses_the_rest(tmp_path):
    data = os.urandom(300_000) + bytes(200_000)  # binary, NUL bytes included
    f = tmp_path / "trace.dat"
    f.write_bytes(data)
    with ArtifactReceiver(tmp_path / "staging", max_file_bytes=600_000, public_url="http://127.0.0.1:{port}") as rcv:
        url = rcv.open_slot("A-w-1-a1-0001")
        assert _upload(f, f"{url}/trace.dat") == f"stored {hashlib.sha256(data).hexdigest()}"
        got = rcv.received("A-w-1-a1-0001")["trace.dat"]
        assert got["path"].read_bytes() == data and got["size"] == len(data)
        assert "422" in _upload(f, f"{url}/other.dat", sha="0" * 64)
        assert "other.dat" not in rcv.received("A-w-1-a1-0001")  # hash mismatch: not stored
        big = tmp_path / "big.dat"
        big.write_bytes(os.urandom(700_000))
        assert "413" in _upload(big, f"{url}/big.dat")  # refused from its headers
        assert "big.dat" not in rcv.received("A-w-1-a1-0001")  # over max_file_bytes
        bomb = tmp_path / "bomb.dat"  # 100 MB of zeros gzip to ~100 KB: announced small, refused while inflating
        with gzip.open(tmp_path / "bomb.gz", "wb") as g:
            g.write(bytes(100 << 20))
        subprocess.run(f"base64 {tmp_path / 'bomb.gz'} > {bomb}.b64", shell=True, check=True)
        r = subprocess.run(
            [
                BUSYBOX,
                "wget",
                "-q",
                "-O",
                "-",
                "--header",
                f"X-Abtest-Sha256: {'1' * 64}",
                "--header",
                "X-Abtest-Size: 500000",
                "--post-file",
                f"{bomb}.b64",
                f"{url}/bomb.dat",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode != 0 and "bomb.dat" not in rcv.received("A-w-1-a1-0001")
        assert "404" in _upload(f, f"{rcv.public_url}/upload/{'f' * 32}/trace.dat")
        assert "400" in _upload(f, f"{url}/.hidden")
        assert rcv.stats["rejected"] >= 3 and rcv.stats["uploads"] == 1
        assert not list((tmp_path / "staging" / "A-w-1-a1-0001").glob(".part-*"))
        # images are served read-only, nothing else is
        img = tmp_path / "vmlinuz"
        img.write_bytes(b"kernel bytes")
        iurl = rcv.register_image(img, "ab" * 32)
        assert subprocess.run([BUSYBOX, "wget", "-q", "-O", "-", iurl], capture_output=True).stdout == b"kernel bytes"
        assert (
            subprocess.run(
                [BUSYBOX, "wget", "-q", "-O", "-", f"{rcv.local_url}/images/{'ab' * 32}/../x"], capture_output=True
            ).returncode
            != 0
        )
        rcv.close_slot(url)
        assert "404" in _upload(f, f"{url}/again.dat")
        assert "again.dat" not in rcv.received("A-w-1-a1-0001")  # closed slot


# -- collection bookkeeping -------------------------------------------------------------------------------------
def _lab_cc(tmp_path, **kw) -> CollectConfig:
    cfg = parse_target({"name": "t", "kind": "qemu", "boot": {"A": {"package": "linux-image-6.1.0-*-amd64"}}})
    return CollectConfig(
        lab=parse_lab(None, "http://127.0.0.1:9/"),
        target_cfg=cfg,
        labels=kw.pop("labels", [LabelSpec("A", boot=cfg.boot["A"])]),
        workloads=kw.pop("workloads", [make_workload("hackbench")]),
        iterations=1,
        store=tmp_path / "store",
        progress=False,
        **kw,
    )


def test_what_a_lab_job_cannot_do_is_refused_before_anything_is_submitted(tmp_path):
    with pytest.raises(CollectError, match="settings labels"):
        collect_lab(_lab_cc(tmp_path, labels=[LabelSpec("menu", settings={"cpuidle_governor": "menu"})]))
    with pytest.raises(CollectError, match="pushes inputs or pulls result files"):
        collect_lab(_lab_cc(tmp_path, workloads=[make_workload("jankbench")]))
    j = Journal(tmp_path / "store")
    j.add(Attempt("A", "hackbench", 1, 1, "A-hackbench-1-a1-x", job_id=5))
    with pytest.raises(CollectError, match="--resume"):
        collect_lab(_lab_cc(tmp_path))
    assert Journal(tmp_path / "store").load().pending()[0].job_id == 5


def test_cli_refuses_a_bad_lab_url():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "abtest.cli",
            "collect",
            "--target",
            "lava-qemu",
            "--lab",
            "ftp://x/",
            "--kernel",
            "kernelA",
            "--workload",
            "hackbench",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 2 and "neither http(s)://SERVER/ nor lava-run:DEVICE_FILE" in r.stderr


def test_process_tree_is_stopped_by_pid(tmp_path):
    p = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300 & wait"], start_new_session=True)
    time.sleep(0.3)
    from abtest.collectors.lab.backends import descendants

    kids = [pid for pid, _ in descendants(p.pid)]
    assert len(kids) == 2
    stop_process_tree(p.pid, grace_s=5)
    time.sleep(0.1)
    assert not any(
        Path(f"/proc/{k}").exists() and "Z" not in Path(f"/proc/{k}/stat").read_text().split()[2]
        for k in kids + [p.pid]
    )
