"""The real OpenSSH sshd on 127.0.0.1 for tests (NOT a stand-in: /usr/sbin/sshd from openssh-server).

Generates an ed25519 host key and client key in a temp dir, writes a minimal sshd_config (key-only,
random free port, internal-sftp), starts `sshd -D -e` as a child and waits until it accepts TCP.
`stop()` kills that child by PID. `serving_children()` lists the per-connection sshd processes
(children of the listener), so a test can kill one to drop a connection.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalSshd:
    def __init__(self, workdir: Path, user: str = "root"):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.user = user
        self.port = free_port()
        self.host_key = self.dir / "ssh_host_ed25519_key"
        self.client_key = self.dir / "id_ed25519"
        self.proc: subprocess.Popen | None = None

    @property
    def host_pubkey(self) -> str:
        """`ssh-ed25519 AAAA...` line of the server's host key (pin it in the target file)."""
        return " ".join(self.host_key.with_suffix(".pub").read_text().split()[:2])

    def start(self, timeout_s: float = 10.0) -> LocalSshd:
        for key in (self.host_key, self.client_key):
            if not key.exists():
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        auth = self.dir / "authorized_keys"
        auth.write_text(self.client_key.with_suffix(".pub").read_text())
        os.chmod(auth, 0o600)
        cfg = self.dir / "sshd_config"
        cfg.write_text(
            f"ListenAddress 127.0.0.1\nPort {self.port}\nHostKey {self.host_key}\n"
            f"PidFile {self.dir / 'sshd.pid'}\nAuthorizedKeysFile {auth}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "UsePAM no\nStrictModes no\nSubsystem sftp internal-sftp\nMaxStartups 50\nMaxSessions 50\n"
            "ClientAliveInterval 5\n"
        )
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        self.log = open(self.dir / "sshd.log", "w")
        self.proc = subprocess.Popen(
            ["/usr/sbin/sshd", "-D", "-e", "-f", str(cfg)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited {self.proc.returncode}: {(self.dir / 'sshd.log').read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sshd not accepting on 127.0.0.1:{self.port} after {timeout_s} s")

    def serving_children(self) -> list[int]:
        """PIDs of the sshd processes serving connections: every `sshd` descendant of the listener we
        started (privileged monitor and its unprivileged session child, which holds the socket)."""
        if self.proc is None:
            return []
        out = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,comm="], capture_output=True, text=True).stdout
        rows = [line.split(None, 2) for line in out.splitlines() if len(line.split(None, 2)) == 3]
        found, frontier = [], {self.proc.pid}
        while frontier:
            kids = [(int(p), c) for p, pp, c in rows if int(pp) in frontier]
            frontier = {p for p, c in kids if c.strip() == "sshd"}
            found += sorted(frontier)
        return found

    def target_toml(self, name: str = "ssh-localhost", extra: str = "") -> str:
        return (
            f'name = "{name}"\nkind = "ssh"\n\n[connection]\nhost = "127.0.0.1"\nport = {self.port}\n'
            f'user = "{self.user}"\nkey_file = "{self.client_key}"\nhost_key = "{self.host_pubkey}"\n\n{extra}'
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            for child in self.serving_children():
                try:
                    os.kill(child, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
