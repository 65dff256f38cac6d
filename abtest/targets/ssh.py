"""SshTarget: a Linux machine over ssh (paramiko), with host-key verification on by default.

Host keys: a pinned key from the target file (`host_key = "ssh-ed25519 AAAA..."`) or a known_hosts
file (`known_hosts`, default ~/.ssh/known_hosts); an unknown or mismatching key is refused
(`paramiko.RejectPolicy`) unless the target file says `insecure_accept_any_host_key = true`.
Authentication: `key_file` (private key), else the ssh agent and ~/.ssh/id_* keys.
Files move over SFTP (OpenSSH's internal-sftp, or /usr/lib/sftp-server under dropbear).
"""

from __future__ import annotations

import base64
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from abtest.targets.base import RunResult, Target, TargetConnectionError, TargetTimeout

_KEY_TYPES = {
    "ssh-ed25519": paramiko.Ed25519Key,
    "ssh-rsa": paramiko.RSAKey,
    "ecdsa-sha2-nistp256": paramiko.ECDSAKey,
    "ecdsa-sha2-nistp384": paramiko.ECDSAKey,
    "ecdsa-sha2-nistp521": paramiko.ECDSAKey,
}

_DROPPED = (paramiko.SSHException, EOFError, OSError, socket.error)


def parse_public_key(line: str) -> paramiko.PKey:
    """A paramiko key from an OpenSSH public key line `TYPE BASE64 [comment]`."""
    parts = line.split()
    if len(parts) < 2 or parts[0] not in _KEY_TYPES:
        raise ValueError(f"not an OpenSSH public key line (expected 'ssh-ed25519 AAAA...'): {line[:60]!r}")
    return _KEY_TYPES[parts[0]](data=base64.b64decode(parts[1]))


@dataclass
class SshTarget(Target):
    """A target reached over ssh.

    Attributes:
        host, port, user: where to connect.
        key_file: private key path (None: agent and default keys).
        host_key: pinned host public key line (verification against it only).
        known_hosts: known_hosts file used when no key is pinned.
        insecure_accept_any_host_key: skip verification (never the default).
        connect_timeout_s: TCP + handshake timeout in seconds.
    """

    name: str = "ssh"
    host: str = "127.0.0.1"
    port: int = 22
    user: str = "root"
    key_file: str | None = None
    host_key: str | None = None
    known_hosts: str | None = None
    insecure_accept_any_host_key: bool = False
    connect_timeout_s: float = 15.0
    _client: paramiko.SSHClient | None = field(default=None, repr=False)
    _sftp: paramiko.SFTPClient | None = field(default=None, repr=False)

    # -- connection ----------------------------------------------------------------------------
    def connect(self) -> paramiko.SSHClient:
        if (
            self._client is not None
            and self._client.get_transport() is not None
            and self._client.get_transport().is_active()
        ):
            return self._client
        self.close()
        client = paramiko.SSHClient()
        if self.host_key:
            key = parse_public_key(self.host_key)
            hk = f"[{self.host}]:{self.port}" if self.port != 22 else self.host
            client.get_host_keys().add(hk, key.get_name(), key)
        elif not self.insecure_accept_any_host_key:
            kh = Path(self.known_hosts or "~/.ssh/known_hosts").expanduser()
            if kh.exists():
                client.load_host_keys(str(kh))
        client.set_missing_host_key_policy(
            paramiko.AutoAddPolicy() if self.insecure_accept_any_host_key else paramiko.RejectPolicy()
        )
        try:
            client.connect(
                self.host,
                port=self.port,
                username=self.user,
                key_filename=os.path.expanduser(self.key_file) if self.key_file else None,
                timeout=self.connect_timeout_s,
                banner_timeout=self.connect_timeout_s,
                auth_timeout=self.connect_timeout_s,
                allow_agent=self.key_file is None,
                look_for_keys=self.key_file is None,
            )
        except paramiko.BadHostKeyException as e:
            client.close()
            raise TargetConnectionError(
                f"{self.name}: host key of {self.host}:{self.port} does not match the pinned/known key ({e})"
            ) from e
        except paramiko.SSHException as e:
            client.close()
            msg = str(e)
            if "not found in known_hosts" in msg:
                msg += ' (pin it with host_key = "..." in the target file, or add it to known_hosts)'
            raise TargetConnectionError(f"{self.name}: ssh to {self.user}@{self.host}:{self.port} failed: {msg}") from e
        except (OSError, EOFError) as e:
            client.close()
            raise TargetConnectionError(f"{self.name}: cannot reach {self.host}:{self.port}: {e}") from e
        client.get_transport().set_keepalive(5)
        self._client = client
        return client

    def reconnect(self) -> None:
        self.close()
        self.connect()

    def close(self) -> None:
        if self._sftp is not None:
            try:
                self._sftp.close()
            except Exception:
                pass
            self._sftp = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def _sftp_client(self) -> paramiko.SFTPClient:
        self.connect()
        if self._sftp is None:
            try:
                self._sftp = self._client.open_sftp()
            except _DROPPED as e:
                raise TargetConnectionError(f"{self.name}: SFTP unavailable: {e}") from e
        return self._sftp

    # -- protocol ------------------------------------------------------------------------------
    def _run(self, shell_cmd: str, timeout: float | None) -> RunResult:
        client = self.connect()
        t0 = time.monotonic()
        try:
            chan = client.get_transport().open_session(timeout=self.connect_timeout_s)
            chan.exec_command(shell_cmd)
            out, err = bytearray(), bytearray()
            while True:
                if chan.recv_ready():
                    out += chan.recv(65536)
                elif chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                elif chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                elif chan.closed or not client.get_transport().is_active():
                    break
                else:
                    if timeout is not None and time.monotonic() - t0 > timeout:
                        chan.close()
                        raise TargetTimeout(f"{self.name}: `{shell_cmd[:200]}` did not finish within {timeout} s")
                    chan.status_event.wait(0.01)
            while chan.recv_ready():
                out += chan.recv(65536)
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
            # paramiko marks a channel closed by a dead transport "exit status ready" with status -1
            code = chan.recv_exit_status() if chan.exit_status_ready() else -1
            if code == -1:
                self.close()
                raise TargetConnectionError(f"{self.name}: connection dropped while running `{shell_cmd[:200]}`")
            chan.close()
        except TargetTimeout:
            raise
        except _DROPPED as e:
            self.close()
            raise TargetConnectionError(
                f"{self.name}: connection dropped while running `{shell_cmd[:200]}`: {e!r}"
            ) from e
        return RunResult(code, out.decode(errors="replace"), err.decode(errors="replace"), time.monotonic() - t0)

    def push(self, local: str | Path, remote: str) -> None:
        try:
            self._sftp_client().put(str(local), remote)
        except _DROPPED as e:
            self.close()
            raise TargetConnectionError(f"{self.name}: push {local} -> {remote} failed: {e!r}") from e

    def pull(self, remote: str, local: str | Path) -> None:
        try:
            self._sftp_client().get(remote, str(local))
        except FileNotFoundError:
            raise
        except _DROPPED as e:
            self.close()
            raise TargetConnectionError(f"{self.name}: pull {remote} -> {local} failed: {e!r}") from e

    def is_up(self) -> bool:
        try:
            return self._run("true", 15).exit_code == 0
        except (TargetConnectionError, TargetTimeout):
            return False
