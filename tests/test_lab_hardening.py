"""The lab path under hostile input (issue 43 defect 3): bounded inflation of job-log data blocks, the API
token kept to the server's origin and off plain http, STORE/.lab through the store's no-follow helpers with
owner-only modes, a receiver with a bounded number of handler threads, and no ssh host key in the ramdisk
the receiver serves. Real sockets, real files, busybox for the device side; no LAVA server needed."""

from __future__ import annotations

import base64
import gzip
import json
import os
import shutil
import socket
import stat
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from abtest.collectors.lab import guest_script as gs
from abtest.collectors.lab.backends import JobStatus, LabError, LavaServer
from abtest.collectors.lab.collect import collect_lab
from abtest.collectors.lab.config import LabConfigError, parse_lab
from abtest.collectors.lab.harvest import AttemptFailed, HarvestContext, harvest
from abtest.collectors.lab.journal import Attempt, Journal
from abtest.collectors.lab.receiver import ArtifactReceiver
from abtest.collectors.plan import CollectConfig, CollectError, LabelSpec
from abtest.collectors.workloads import make_workload
from abtest.safe_io import UnsafePathError
from abtest.store.writer import IterationWriter
from abtest.targets.config import parse_target

STATUS = JobStatus(
    7, "Finished", "Complete", "dev1", "2026-11-26T00:00:00Z", "2026-11-26T00:00:02Z", "2026-11-26T00:00:20Z"
)


def _bomb_log(key: str, inflated: int) -> str:
    """A lava-run log whose script reports a data block of `inflated` zero bytes (gzip'ed: ~1/1000 of it)."""
    blob = base64.b64encode(gzip.compress(bytes(inflated), compresslevel=9)).decode()
    lines = [
        f"ABTEST-BEGIN key={key}",
        f"ABTEST-FILE {gs.STDOUT_FILE} {inflated} {'0' * 64}",
        f"ABTEST-DATA-BEGIN {gs.STDOUT_FILE}",
        *[blob[i : i + 16384] for i in range(0, len(blob), 16384)],
        f"ABTEST-DATA-END {gs.STDOUT_FILE}",
        "ABTEST-RESULT rc=0",
        "ABTEST-END status=ok",
    ]
    return "".join(json.dumps({"dt": "t", "lvl": "target", "msg": line}) + "\n" for line in lines)


def _ctx(**kw) -> HarvestContext:
    args = {
        "lab": {},
        "job_url": None,
        "worker": None,
        "target_name": "t",
        "target_file": None,
        "emulated": False,
        "label_name": "A",
        "boot": None,
        "expect_release": "",
        "workload": make_workload("shell:cmd=true"),
        "events_requested": [],
        "analyses": None,
        "power": None,
        "platform": None,
        "definition": "",
        "script": "",
        "failed_attempts": [],
    }
    return HarvestContext(**{**args, **kw})


# -- inflation ------------------------------------------------------------------------------------------------
def test_a_data_block_is_inflated_within_a_declared_bound(tmp_path):
    """A 2.8 MB job log inflated to 2 GiB (4.1 GB RSS, MemoryError); now the block stops at the bound."""
    log = _bomb_log("k1", 256 << 20)  # 256 MiB of zeros, ~350 KB of log
    writer = IterationWriter(tmp_path / "store", "A", "w", 1)
    tracemalloc.start()
    try:
        with pytest.raises(AttemptFailed, match="inflates beyond") as e:
            harvest(
                writer,
                _ctx(max_log_data_bytes=1 << 20),
                STATUS,
                log,
                {},
                key="k1",
                iteration=1,
                attempt=1,
                buffer_size_kb=1024,
                clock="boot",
            )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        writer.discard()
    assert peak < 32 << 20, f"peak {peak} bytes"
    assert "1048576" in e.value.reason


class FakeLab:
    """A lab backend with one device whose every job finishes Complete with the given log."""

    def __init__(self, log_for_key):
        self.log_for_key, self.defs = log_for_key, {}

    def matching_devices(self, device_type, tags):
        return ["dev1"]

    def submit(self, definition):
        job_id = len(self.defs) + 1
        self.defs[job_id] = definition
        return job_id

    def status(self, job_id):
        return JobStatus(job_id, "Finished", "Complete", "dev1")

    def log(self, job_id):
        key = gs.script_from_definition(self.defs[job_id]).split("echo ABTEST-BEGIN key=")[1].split()[0]
        return self.log_for_key(key)

    def device_worker(self, device):
        return "w"

    def cancel(self, job_id):
        pass

    def close(self):
        pass


def _lab_cc(tmp_path, label="A", **lab) -> CollectConfig:
    acts = {label: {"deploy": {"to": "tmpfs"}, "boot": {"method": "qemu"}}}
    return CollectConfig(
        lab=parse_lab(
            {
                "url": "lava-run:/dev/null",
                "artifacts": "log",
                "retries": 0,
                "poll_s": 0.01,
                "log_max_mb": 1,
                "actions": acts,
                **lab,
            }
        ),
        target_cfg=parse_target({"name": "t", "kind": "qemu"}),
        labels=[LabelSpec(label)],
        workloads=[make_workload("shell:cmd=true")],
        iterations=1,
        store=tmp_path / "store",
        progress=False,
        trace=False,
    )


def test_a_bomb_fails_its_attempt_and_the_journal_says_so(tmp_path):
    """The MemoryError killed the collection and left the job "submitted"; now the attempt fails with the
    reason, the collection goes on, and a label with a space and `+` goes through the whole loop."""
    cc = _lab_cc(tmp_path, label="kernel A+teo")
    summary = collect_lab(cc, backend=FakeLab(lambda key: _bomb_log(key, 64 << 20)), log=lambda m: None)
    assert summary["done"] == 0 and len(summary["failed"]) == 1
    attempts = Journal(tmp_path / "store").load().attempts
    assert [a.state for a in attempts] == ["failed"] and "inflates beyond" in attempts[0].reason
    assert attempts[0].label == "kernel A+teo" and attempts[0].key.startswith("kernel_A_teo-shell-1-a1-")


# -- the token --------------------------------------------------------------------------------------------------
class _Recorder(BaseHTTPRequestHandler):
    seen: list

    def log_message(self, *a):
        pass

    def do_GET(self):
        self.seen.append((self.server.server_address[1], self.path, self.headers.get("Authorization")))
        target = getattr(self.server, "redirect_to", None)
        if target:
            self.send_response(302)
            self.send_header("Location", target + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b'{"version": "2024.01"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _server(seen, redirect_to=None) -> HTTPServer:
    handler = type("H", (_Recorder,), {"seen": seen})
    srv = HTTPServer(("127.0.0.1", 0), handler)
    srv.redirect_to = redirect_to
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_the_token_never_follows_a_redirect_to_another_origin():
    seen: list = []
    other = _server(seen)
    lab = _server(seen, redirect_to=f"http://127.0.0.1:{other.server_address[1]}")
    same = _server(seen)
    same.redirect_to = f"http://127.0.0.1:{same.server_address[1]}/moved"
    try:
        srv = LavaServer(parse_lab(None, f"http://127.0.0.1:{lab.server_address[1]}/"), "s3cret")
        with pytest.raises(LabError, match="another origin"):
            srv.version()
        assert [(p, a) for p, _, a in seen] == [(lab.server_address[1], "Token s3cret")]  # never at `other`
        seen.clear()
        same.redirect_to = None
        assert LavaServer(parse_lab(None, f"http://localhost:{same.server_address[1]}/"), "t").version() == "2024.01"
    finally:
        for s in (other, lab, same):
            s.shutdown()
            s.server_close()


def test_plain_http_to_a_remote_server_needs_an_explicit_flag():
    with pytest.raises(LabConfigError, match="allow_http"):
        parse_lab(None, "http://lava.example.org/")
    with pytest.raises(LabConfigError, match="allow_http"):
        parse_lab(None, "http://10.1.2.3:8000/")
    assert parse_lab({"allow_http": True}, "http://lava.example.org/").url == "http://lava.example.org/"
    for ok in (
        "https://lava.example.org/",
        "http://127.0.0.1:8000/",
        "http://localhost/",
        "http://[::1]:80/",
        "http://127.1.2.3/",
    ):
        parse_lab(None, ok)


# -- STORE/.lab -------------------------------------------------------------------------------------------------
def test_a_planted_journal_tmp_symlink_is_not_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    lab = tmp_path / "store" / ".lab"
    lab.mkdir(parents=True)
    for name in (f"journal.tmp-{os.getpid()}", "journal.json"):
        (lab / name).symlink_to(victim)
    j = Journal(tmp_path / "store")
    j.add(Attempt("A", "w", 1, 1, "A-w-1-a1-x", job_id=1))
    assert victim.read_text() == "precious\n"
    assert not (lab / "journal.json").is_symlink() and Journal(tmp_path / "store").load().attempts[0].job_id == 1
    assert stat.S_IMODE((lab / "journal.json").stat().st_mode) == 0o600
    assert stat.S_IMODE(lab.stat().st_mode) == 0o700


def test_a_lab_symlink_is_refused_before_anything_is_submitted(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / ".lab").symlink_to(outside)
    with pytest.raises(CollectError, match="symlink"):
        collect_lab(_lab_cc(tmp_path), backend=FakeLab(lambda key: ""), log=lambda m: None)
    assert list(outside.iterdir()) == []
    with pytest.raises(UnsafePathError):
        Journal(tmp_path / "store").add(Attempt("A", "w", 1, 1, "k"))
    assert list(outside.iterdir()) == []


@pytest.mark.skipif(shutil.which("busybox") is None, reason="busybox-static (make setup) is missing")
def test_staging_is_0700_and_uploads_0600_and_harvested_traces_0600(tmp_path):
    import hashlib
    import subprocess

    data = os.urandom(4096)
    f = tmp_path / "trace.dat"
    f.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    with ArtifactReceiver(tmp_path / "staging", public_url="http://127.0.0.1:{port}") as rcv:
        url = rcv.open_slot("A-w-1-a1-0001")
        sh = (
            f'gzip -c "$1" | base64 > "$1.b64"; wget -q -O - --header "X-Abtest-Sha256: {sha}" '
            f'--header "X-Abtest-Size: {len(data)}" --post-file "$1.b64" "$2" 2>&1; rm -f "$1.b64"'
        )
        out = subprocess.run(
            ["busybox", "sh", "-c", sh, "sh", str(f), f"{url}/trace.dat"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        ).stdout
        assert out.strip() == f"stored {sha}"
        got = rcv.received("A-w-1-a1-0001")["trace.dat"]["path"]
    assert stat.S_IMODE((tmp_path / "staging").stat().st_mode) == 0o700
    assert stat.S_IMODE(got.parent.stat().st_mode) == 0o700 and stat.S_IMODE(got.stat().st_mode) == 0o600
    # the harvested copy: an upload job whose trace arrived at the receiver
    (tmp_path / "empty").touch()
    console = [
        "ABTEST-BEGIN key=k1",
        f"ABTEST-FILE {gs.TRACE_FILE} {len(data)} {sha}",
        f"ABTEST-FILE {gs.META_FILE} 0 {hashlib.sha256(b'').hexdigest()}",
        "ABTEST-RESULT rc=0",
        "ABTEST-END status=ok",
    ]
    log = "".join(json.dumps({"dt": "t", "lvl": "target", "msg": m}) + "\n" for m in console)
    writer = IterationWriter(tmp_path / "store", "A", "w", 1)
    out = harvest(
        writer,
        _ctx(events_requested=["sched_switch"]),
        STATUS,
        log,
        {
            gs.TRACE_FILE: {"size": len(data), "sha256": sha, "path": got},
            gs.META_FILE: {"size": 0, "sha256": hashlib.sha256(b"").hexdigest(), "path": tmp_path / "empty"},
        },
        key="k1",
        iteration=1,
        attempt=1,
        buffer_size_kb=1024,
        clock="boot",
    )
    assert stat.S_IMODE((out / gs.TRACE_FILE).stat().st_mode) == 0o600


# -- the receiver's threads -------------------------------------------------------------------------------------
def test_the_receiver_handles_a_bounded_number_of_connections(tmp_path):
    """One thread per connection without a cap: N idle connections held N threads for 60 s each. With the cap,
    the 5th to 16th idle connection waits in the listen backlog (or is not accepted at all) instead."""
    import urllib.error
    import urllib.request

    with ArtifactReceiver(tmp_path / "staging", max_connections=4) as rcv:
        before = threading.active_count()
        socks = []
        try:
            for _ in range(16):
                try:
                    socks.append(socket.create_connection(("127.0.0.1", rcv.port), timeout=0.3))
                except OSError:
                    pass  # the backlog is full: refused or timed out, no thread spent on it
            time.sleep(1.0)
            assert len(socks) > 4 and threading.active_count() - before <= 4
        finally:
            for s in socks:
                s.close()
        # the idle ones gone, the receiver answers again
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{rcv.local_url}/images/{'a' * 64}/x", timeout=20)
        assert e.value.code == 404


# -- the served ramdisk -----------------------------------------------------------------------------------------
GUEST_BINARIES = (
    "/usr/sbin/dropbear",
    "/usr/bin/trace-cmd",
    "/bin/busybox",
    "/usr/bin/hackbench",
    "/usr/bin/cyclictest",
    "/usr/lib/sftp-server",
)


@pytest.mark.skipif(
    not all(Path(b).exists() for b in GUEST_BINARIES) or shutil.which("dropbearkey") is None,
    reason="the guest binaries (make setup) are missing",
)
def test_the_lab_ramdisk_holds_no_ssh_host_key(tmp_path, monkeypatch):
    """The receiver's unauthenticated /images served a ramdisk embedding the QEMU guest's ssh host private key."""
    from abtest.targets.qemu import KernelImage, build_initramfs, guest_keys

    monkeypatch.setenv("ABTEST_QEMU_CACHE", str(tmp_path / "cache"))
    kernel = KernelImage("linux-image-test", "0.0.0-test", tmp_path / "vmlinuz", [])
    host_key = guest_keys()[0]
    secret = host_key.read_bytes()
    lab = gzip.decompress(build_initramfs(kernel, ssh=False).read_bytes())
    names = _cpio_names(lab)
    assert "init" in names and "bin/busybox" in names
    assert "etc/dropbear/dropbear_ed25519_host_key" not in names and "root/.ssh/authorized_keys" not in names
    assert secret not in lab
    assert b": > /run/abtest-net.ready" in lab
    ssh = gzip.decompress(build_initramfs(kernel).read_bytes())
    assert secret in ssh and "etc/dropbear/dropbear_ed25519_host_key" in _cpio_names(ssh)  # the qemu target's own


def _cpio_names(archive: bytes) -> list[str]:
    """Entry names of a newc cpio archive (walking its headers: 110 ASCII bytes, name, data, 4-byte padding)."""
    names, off = [], 0
    while archive[off : off + 6] == b"070701":
        namesize, filesize = int(archive[off + 94 : off + 102], 16), int(archive[off + 54 : off + 62], 16)
        name = archive[off + 110 : off + 110 + namesize - 1].decode()
        if name == "TRAILER!!!":
            break
        names.append(name)
        off = (off + 110 + namesize + 3) // 4 * 4
        off = (off + filesize + 3) // 4 * 4
    return names
