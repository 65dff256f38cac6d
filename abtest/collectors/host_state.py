"""What `abtest collect` keeps on the host about the targets it changes: locks and the state journal.

Locks (`TargetLock`): one collection at a time changes a target. For this very machine the lock is the tracefs
lock, `/run/abtest/tracefs.lock` (root; a private `abtest-<uid>` directory under $XDG_RUNTIME_DIR or /tmp
otherwise), which the test suite takes too; for another target, `target-<key>.lock` in the same directory. The
legacy `/tmp/abtest-tracefs.lock` of earlier abtest versions is taken as well for this machine, opened without
following a symlink and without truncating, and only when it belongs to this user (so an older abtest, or a
test of an older checkout, still waits for us, and no other user can plant it or hold it).

Journal (`StateJournal`): before the first change to a target, the original values (tracefs: tracing_on,
enabled events, buffer size, clock; every sysfs/procfs file a label setting writes) are written, atomically, to
`<state dir>/journal/<target key>.<pid>-<rand>.json`, beside a `.lock` file the collecting process holds
(flock) while it runs. A journal whose lock nobody holds belongs to a run that died (SIGKILL, power loss of the
host): the next `abtest collect` on that target, or `abtest collect --restore`, writes its originals back under
the target lock, then deletes it. A journal records the target's boot_id: after a reboot the target's state was
reset by the reboot itself and the journal is dropped. State dir: $ABTEST_STATE_DIR, else /var/lib/abtest (root)
or ~/.local/state/abtest.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import secrets
import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from abtest.safe_io import UnsafePathError, write_file_no_follow

LEGACY_TRACEFS_LOCK = "/tmp/abtest-tracefs.lock"
STATE_ENV = "ABTEST_STATE_DIR"
LOCK_DIR_ENV = "ABTEST_LOCK_DIR"  # tests only: another lock directory (a private one is still required)


def _private_dir(path: Path) -> Path:
    """`path` as a directory owned by this user, mode 0700, not a symlink (created if missing)."""
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != os.geteuid():
        raise UnsafePathError(f"{path} must be a directory owned by uid {os.geteuid()} (not a symlink)")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def lock_dir() -> Path:
    """The private directory of abtest's lock files on this host."""
    if os.environ.get(LOCK_DIR_ENV):
        return _private_dir(Path(os.environ[LOCK_DIR_ENV]))
    if os.geteuid() == 0:
        return _private_dir(Path("/run/abtest"))
    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    return _private_dir(Path(base) / f"abtest-{os.geteuid()}")


def state_dir() -> Path:
    """The private directory of the state journals on this host."""
    if os.environ.get(STATE_ENV):
        return _private_dir(Path(os.environ[STATE_ENV]) / "journal")
    if os.geteuid() == 0:
        return _private_dir(Path("/var/lib/abtest/journal"))
    return _private_dir(Path.home() / ".local/state/abtest/journal")


def target_key(kind: str, connection: dict, is_local_machine: bool) -> str:
    """A file-name-safe identity of a target: `local` for this machine (however it is reached), else the kind
    and its address (ssh user@host:port, adb serial, qemu target name)."""
    if is_local_machine:
        return "local"
    if kind in ("ssh", "qemu"):
        ident = f"{connection.get('user', 'root')}@{connection.get('host', '')}:{connection.get('port', 22)}"
    else:
        ident = str(connection.get("serial") or "default")
    return f"{kind}-" + re.sub(r"[^A-Za-z0-9_.@:-]", "_", ident).replace(":", "_")


def _open_lock(path: Path, *, only_if_ours: bool = False) -> int | None:
    """An fd to lock at `path`, opened without following a symlink or truncating; None when `only_if_ours` and
    the file belongs to another user (or is not a regular file)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as e:
        if only_if_ours and e.errno in (errno.ELOOP, errno.EACCES, errno.EPERM):
            return None
        raise
    st = os.fstat(fd)
    if only_if_ours and (st.st_uid != os.geteuid() or not (st.st_mode & 0o170000 == 0o100000)):
        os.close(fd)
        return None
    return fd


class TargetLock:
    """Exclusive lock on a target for the duration of a `with` block (blocking).

    `TargetLock.tracefs()` is this machine's tracefs lock (what the tests' `tracefs_lock` fixture takes);
    `TargetLock.for_target(key)` the lock of another target. `needed=False` makes it a no-op.
    """

    def __init__(self, path: Path, *, legacy: str | None = None, needed: bool = True):
        self.path, self.legacy, self.needed = Path(path), legacy, needed
        self._fds: list[int] = []

    @classmethod
    def tracefs(cls, needed: bool = True) -> TargetLock:
        return cls(lock_dir() / "tracefs.lock", legacy=LEGACY_TRACEFS_LOCK, needed=needed)

    @classmethod
    def for_target(cls, key: str, needed: bool = True) -> TargetLock:
        if key == "local":
            return cls.tracefs(needed)
        return cls(lock_dir() / f"target-{key}.lock", needed=needed)

    def __enter__(self) -> TargetLock:
        if not self.needed:
            return self
        try:
            fd = _open_lock(self.path)
            self._fds.append(fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
            if self.legacy:
                lfd = _open_lock(Path(self.legacy), only_if_ours=True)
                if lfd is not None:
                    self._fds.append(lfd)
                    fcntl.flock(lfd, fcntl.LOCK_EX)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        while self._fds:
            fd = self._fds.pop()
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


# -- the journal ---------------------------------------------------------------------------------------------
@dataclass
class StateJournal:
    """This run's journal for one target (see the module docstring). Create with `StateJournal.open`."""

    path: Path
    doc: dict
    _lock_fd: int | None = field(default=None, repr=False)

    @classmethod
    def open(cls, key: str, target: dict, boot_id: str, directory: Path | None = None) -> StateJournal:
        directory = directory or state_dir()
        stem = f"{key}.{os.getpid()}-{secrets.token_hex(4)}"
        fd = _open_lock(directory / f"{stem}.lock")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held until close(): "this run is alive"
        doc = {
            "version": 1,
            "target_key": key,
            "target": target,
            "boot_id": boot_id,
            "host": socket.gethostname(),
            "host_pid": os.getpid(),
            "created_utc": datetime.now(UTC).isoformat(),
            "tracefs": None,
            "settings": {},
            "remote_dirs": [],
        }
        return cls(directory / f"{stem}.json", doc, fd)

    def _write(self) -> None:
        write_file_no_follow(self.path.parent, self.path.name, json.dumps(self.doc, indent=1) + "\n", mode=0o600)

    def record_tracefs(self, original: dict) -> None:
        """Tracefs values as found (before this run changes them); written before returning."""
        self.doc["tracefs"] = original
        self._write()

    def record_setting(self, path: str, value: str) -> None:
        if path not in self.doc["settings"]:
            self.doc["settings"][path] = value
            self._write()

    def record_remote_dir(self, path: str) -> None:
        self.doc["remote_dirs"].append(path)
        self._write()

    def close(self) -> None:
        """The run ended and put everything back: delete the journal, release its lock."""
        self.path.unlink(missing_ok=True)
        if self._lock_fd is not None:
            self.path.with_suffix(".lock").unlink(missing_ok=True)
            os.close(self._lock_fd)
            self._lock_fd = None


@dataclass
class StaleJournal:
    """A journal left by a run that is no longer alive."""

    path: Path
    doc: dict
    lock_fd: int

    def drop(self) -> None:
        self.path.unlink(missing_ok=True)
        self.path.with_suffix(".lock").unlink(missing_ok=True)
        os.close(self.lock_fd)

    def release(self) -> None:
        os.close(self.lock_fd)


def stale_journals(key: str, directory: Path | None = None) -> tuple[list[StaleJournal], list[dict]]:
    """(journals of `key` whose run died -- their lock now held by the caller --, docs of live runs' journals)."""
    directory = directory or state_dir()
    stale, live = [], []
    for path in sorted(directory.glob(f"{glob_escape(key)}.*.json")):
        if path.is_symlink():
            continue
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            doc = None
        fd = _open_lock(path.with_suffix(".lock"))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if doc:
                live.append(doc)
            continue
        if doc is None:  # unreadable: a run died while creating it (before any change)
            StaleJournal(path, {}, fd).drop()
            continue
        stale.append(StaleJournal(path, doc, fd))
    return stale, live


def glob_escape(s: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", s)
