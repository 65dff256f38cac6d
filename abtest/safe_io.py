"""Filesystem writes that a hostile or careless tree cannot redirect.

abtest runs as root on lab machines and writes into run stores other users may have prepared. Three rules:

- `check_name(name, what)`: a label or workload name becomes one directory level of the store, so it must be a
  plain name: not empty, no path separator (`/`, `\\`), not `.`/`..` nor any leading dot (dot-entries are the
  store's own: `.tmp-*`, `.complete`, caches), no control character or NUL.
- `confined(path, root)`: the real path (symlinks resolved) of `path` lies inside the real path of `root`;
  raises UnsafePathError otherwise. Every store write goes through a directory checked this way.
- `write_file_no_follow(directory, name, data)`: writes `directory/name` atomically (a private temp file in the
  same directory, fsync, rename over `name`) without following a symlink at `directory` or at `name`: a planted
  `name -> /etc/shadow` is replaced by a regular file, never written through; a `directory` that is a symlink is
  refused.
- `ensure_private_dir(parent, name)`: `parent/name` made (or reused) as a 0700 directory of ours, never through a
  symlink at either level (the lab's STORE/.lab and its staging directories).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


class UnsafePathError(ValueError):
    """A name or path would make abtest write outside where it should (the message says which and why)."""


def check_name(name: str, what: str = "name") -> str:
    """Return `name` when it is a safe single path component (see the module docstring); else UnsafePathError."""
    if not isinstance(name, str) or not name:
        raise UnsafePathError(f"{what} must be a non-empty name, got {name!r}")
    if "/" in name or "\\" in name:
        raise UnsafePathError(f"{what} {name!r} contains a path separator")
    if name.startswith("."):
        raise UnsafePathError(f"{what} {name!r} starts with a dot (`.`, `..` and dot-names are reserved)")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise UnsafePathError(f"{what} {name!r} contains a control character")
    return name


def confined(path: str | os.PathLike, root: str | os.PathLike) -> Path:
    """The resolved `path`, after checking it is `root` or inside it (both resolved: symlinks followed, so a
    directory that is a symlink leading out of `root` is caught). Raises UnsafePathError."""
    real_root = Path(root).resolve()
    real = Path(path).resolve()
    if real != real_root and real_root not in real.parents:
        raise UnsafePathError(f"{path} resolves to {real}, outside {real_root}")
    return real


def _open_dir_no_follow(directory: str | os.PathLike, doing: str) -> int:
    """A descriptor of `directory`, never through a symlink: UnsafePathError naming what was being done (`doing`,
    e.g. "writing journal.json") when `directory` is one; OSError for other failures."""
    try:
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        if os.path.islink(directory):
            raise UnsafePathError(f"{directory} is a symlink: not {doing} through it") from e
        raise


def write_file_no_follow(directory: str | os.PathLike, name: str, data: bytes | str, *, mode: int = 0o644) -> Path:
    """Atomically write `data` to `directory/name` without following symlinks (see the module docstring).

    `name` must be a single component. `mode` is the new file's permission bits (before the umask).
    Raises UnsafePathError when `directory` is a symlink; OSError for other failures (nothing is left behind).
    """
    if "/" in name or name in ("", ".", ".."):
        raise UnsafePathError(f"{name!r} is not a single file name")
    payload = data.encode() if isinstance(data, str) else bytes(data)
    dfd = _open_dir_no_follow(directory, f"writing {name}")
    tmp = f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd)
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)  # replaces a symlink `name` itself
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise
    finally:
        os.close(dfd)
    return Path(directory) / name


def ensure_private_dir(parent: str | os.PathLike, name: str, *, mode: int = 0o700) -> Path:
    """`parent/name` as a directory of ours with `mode` (default 0700), made when missing, without following
    a symlink at `parent` or at `name`: a planted `name -> elsewhere` symlink, a non-directory, or a directory
    owned by another user is refused with UnsafePathError. Returns the path."""
    pfd = _open_dir_no_follow(parent, f"making {name}")
    try:
        try:
            os.mkdir(name, mode, dir_fd=pfd)
        except FileExistsError:
            pass
        try:
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
        except OSError as e:
            raise UnsafePathError(f"{Path(parent) / name} is a symlink or not a directory: refusing to use it") from e
        try:
            if os.fstat(fd).st_uid != os.geteuid():
                raise UnsafePathError(f"{Path(parent) / name} belongs to another user: refusing to use it")
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    finally:
        os.close(pfd)
    return Path(parent) / name


def make_private_dir(parent: str | os.PathLike, name: str) -> Path:
    """mkdir `parent/name` with mode 0700 (fails if it exists); `parent` must not be a symlink."""
    pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.mkdir(name, 0o700, dir_fd=pfd)
    finally:
        os.close(pfd)
    return Path(parent) / name
