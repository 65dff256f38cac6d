"""SshTarget against the real OpenSSH sshd on 127.0.0.1 (generated keys, random port)."""

from __future__ import annotations

import pytest

from abtest.targets.base import TargetCommandError, TargetConnectionError, TargetTimeout
from abtest.targets.ssh import SshTarget
from tests.standins.local_sshd import LocalSshd


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    server = LocalSshd(tmp_path_factory.mktemp("sshd"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def target(sshd):
    t = SshTarget(
        name="sshd-test",
        host="127.0.0.1",
        port=sshd.port,
        user="root",
        key_file=str(sshd.client_key),
        host_key=sshd.host_pubkey,
    )
    try:
        yield t
    finally:
        t.close()


def test_run_exit_code_stdout_stderr(target):
    res = target.run("echo out; echo err >&2; exit 7")
    assert (res.exit_code, res.stdout, res.stderr) == (7, "out\n", "err\n")
    with pytest.raises(TargetCommandError, match="exited 7"):
        target.run("exit 7", check=True)


def test_argv_is_quoted_no_injection(target, tmp_path):
    evil = str(tmp_path / "a b'c\"; touch INJECTED $(id).txt")
    res = target.run(["sh", "-c", 'printf %s "$1" > "$1"', "sh", evil])
    assert res.ok, res.stderr
    assert (tmp_path / "a b'c\"; touch INJECTED $(id).txt").read_text() == evil
    assert not list(tmp_path.glob("INJECTED*"))
    assert target.read_file(evil) == evil


def test_push_pull_names_with_spaces_and_quotes(target, tmp_path):
    src = tmp_path / "local file 'q' \"dq\".bin"
    payload = bytes(range(256)) * 1000
    src.write_bytes(payload)
    remote = str(tmp_path / "remote dir 'x'" / 'copy of "it".bin')
    target.run(["mkdir", "-p", str(tmp_path / "remote dir 'x'")], check=True)
    target.push(src, remote)
    back = tmp_path / "back 'again'.bin"
    target.pull(remote, back)
    assert back.read_bytes() == payload
    target.write_file(remote + ".txt", 'it\'s "quoted" $HOME\n')
    assert target.read_file(remote + ".txt") == 'it\'s "quoted" $HOME\n'


def test_timeout(target):
    with pytest.raises(TargetTimeout):
        target.run("sleep 5", timeout=0.5)
    assert target.run("echo still-alive").stdout == "still-alive\n"


def test_host_key_verification_on_by_default(sshd, tmp_path):
    # pinned key of another server -> refused
    other = LocalSshd(tmp_path / "other")
    other.start()
    other.stop()
    bad = SshTarget(host="127.0.0.1", port=sshd.port, key_file=str(sshd.client_key), host_key=other.host_pubkey)
    with pytest.raises(TargetConnectionError, match="does not match"):
        bad.run("true")
    # no pinned key and an empty known_hosts -> refused (RejectPolicy)
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    unknown = SshTarget(host="127.0.0.1", port=sshd.port, key_file=str(sshd.client_key), known_hosts=str(empty))
    with pytest.raises(TargetConnectionError, match="known_hosts"):
        unknown.run("true")
    # known_hosts holding the right key -> accepted
    empty.write_text(f"[127.0.0.1]:{sshd.port} {sshd.host_pubkey}\n")
    assert (
        SshTarget(host="127.0.0.1", port=sshd.port, key_file=str(sshd.client_key), known_hosts=str(empty))
        .run("echo ok")
        .stdout
        == "ok\n"
    )


def test_tracefs_discovery_and_root(target):
    assert target.tracefs_path() in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
    assert target.ensure_root() == ""  # logged in as root
    assert target.is_local_machine  # same boot_id as this process


def test_dropped_connection_is_reported_and_reconnects(sshd, target):
    import os
    import signal
    import threading

    target.run("true")
    children = sshd.serving_children()
    assert children
    threading.Timer(0.5, lambda: [os.kill(p, signal.SIGKILL) for p in children]).start()
    with pytest.raises(TargetConnectionError):
        target.run("sleep 10", timeout=20)
    target.wait_until_back(timeout=10, poll_s=0.2)
    assert target.run("echo back").stdout == "back\n"
