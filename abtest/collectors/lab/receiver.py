"""The HTTP receiver a collection runs: devices upload artifacts to it and LAVA workers fetch images.

    POST /upload/<token>/<name>     body = base64(gzip(file)); headers X-Abtest-Sha256 (hex) and
                                    X-Abtest-Size (bytes, decoded). 200 "stored <sha256>" when the
                                    decoded bytes have that size and hash; 4xx with the reason otherwise
    GET  /images/<sha256>/<name>    a boot image registered with `register_image` (read-only)

Tokens are random (128 bit), one per job attempt, and only valid while the collection runs; a name is
`[A-Za-z0-9][A-Za-z0-9._-]*` (no paths). Limits: `max_file_bytes` per decoded file (the encoded body may
be at most 4/3 of it plus slack, refused from its Content-Length before reading), `max_job_bytes` per
token, a 60 s socket timeout per request, and at most `max_connections` requests handled at once (one
thread each; a connection beyond that waits up to 10 s for a free handler, then is closed unanswered). Files land in
`staging/<attempt key>/` (0700 directories made
without following symlinks; each file written 0600 to a hidden temporary name, renamed after the hash check); the
harvester checks them again against the
manifest in the job log.

For QEMU devices on the worker's own machine the device reaches the receiver at 10.0.2.2 (QEMU user
networking maps it to the host's 127.0.0.1), so the default bind address is 127.0.0.1. A lab whose
devices sit elsewhere binds 0.0.0.0 (or a lab-facing address) and sets `upload_url` to what devices
can reach; real labs may point `upload_url` at their own storage server speaking the same protocol.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import secrets
import shutil
import threading
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from abtest.safe_io import ensure_private_dir

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SHA_RE = re.compile(r"^[0-9a-f]{64}$")


class UploadRejected(Exception):
    def __init__(self, code: int, reason: str):
        super().__init__(reason)
        self.code, self.reason = code, reason


class _CappedServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with at most `cap` handler threads: a connection beyond them waits `wait_s` for a
    free handler (in the accept loop, so later ones queue in the listen backlog), then is closed."""

    daemon_threads = True

    def __init__(self, address, handler, cap: int, wait_s: float = 10.0):
        super().__init__(address, handler)
        self.slots = threading.BoundedSemaphore(max(1, int(cap)))
        self.wait_s = wait_s
        self.turned_away = 0

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(timeout=self.wait_s):
            self.turned_away += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class _Slot:
    """One attempt's upload area."""

    def __init__(self, key: str, directory: Path):
        self.key, self.dir = key, directory
        self.bytes = 0
        self.files: dict[str, dict] = {}  # name -> {"size", "sha256", "path"}
        self.lock = threading.Lock()


class ArtifactReceiver:
    """Start with `start()`, stop with `stop()` (or use as a context manager).

    staging: directory for uploads (one sub-directory per attempt key). bind/port: listen address
    (port 0 = any free port). public_url: base URL devices use (default http://10.0.2.2:<port>).
    max_connections: requests handled at once. log: callback for one-line notices (rejections).
    """

    def __init__(
        self,
        staging: Path,
        *,
        bind: str = "127.0.0.1",
        port: int = 0,
        public_url: str = "",
        max_file_bytes: int = 256 << 20,
        max_job_bytes: int = 1 << 30,
        max_connections: int = 16,
        log: Callable[[str], None] = lambda m: None,
    ):
        self.staging = Path(staging)
        self.bind, self.port = bind, port
        self._public = public_url.rstrip("/")
        self.max_file_bytes, self.max_job_bytes = int(max_file_bytes), int(max_job_bytes)
        self.max_connections = int(max_connections)
        self.log = log
        self._slots: dict[str, _Slot] = {}
        self._images: dict[str, Path] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.stats = {"uploads": 0, "rejected": 0, "bytes": 0, "image_requests": 0}

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> ArtifactReceiver:
        self.staging.parent.mkdir(parents=True, exist_ok=True)
        ensure_private_dir(self.staging.parent, self.staging.name)
        handler = type("Handler", (_Handler,), {"receiver": self})
        self._server = _CappedServer((self.bind, self.port), handler, self.max_connections)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="abtest-receiver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> ArtifactReceiver:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def public_url(self) -> str:
        """Base URL devices use: `public_url` as given (`{port}` is replaced by the bound port), else
        http://10.0.2.2:<port> (QEMU user networking)."""
        if self._public:
            return self._public.replace("{port}", str(self.port))
        return f"http://10.0.2.2:{self.port}"

    @property
    def local_url(self) -> str:
        """Base URL from this machine (what a local LAVA worker uses for images)."""
        host = "127.0.0.1" if self.bind in ("0.0.0.0", "", "127.0.0.1") else self.bind
        return f"http://{host}:{self.port}"

    # -- slots and images ----------------------------------------------------------------------------------
    def open_slot(self, key: str) -> str:
        """A new upload token for attempt `key`; returns the device-facing upload base URL."""
        if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*", key):
            raise ValueError(f"attempt key {key!r} is not a safe directory name")
        token = secrets.token_hex(16)
        d = ensure_private_dir(self.staging, key)
        self._slots[token] = _Slot(key, d)
        return f"{self.public_url}/upload/{token}"

    def close_slot(self, upload_url: str) -> None:
        """Stop accepting uploads for this token (after the job finished)."""
        self._slots.pop(upload_url.rstrip("/").rsplit("/", 1)[-1], None)

    def received(self, key: str) -> dict[str, dict]:
        """{name: {"size", "sha256", "path"}} stored for attempt `key` (by this receiver run, or found
        in its staging directory from an earlier run: those are re-hashed)."""
        for slot in self._slots.values():
            if slot.key == key:
                with slot.lock:
                    return dict(slot.files)
        out = {}
        d = self.staging / key
        if d.is_dir():
            for p in sorted(d.iterdir()):
                if p.is_file() and NAME_RE.match(p.name):
                    out[p.name] = {"size": p.stat().st_size, "sha256": sha256_file(p), "path": p}
        return out

    def register_image(self, path: Path, sha256: str) -> str:
        """Serve `path` at /images/<sha256>/<name>; returns the URL from this machine."""
        self._images[f"{sha256}/{Path(path).name}"] = Path(path)
        return f"{self.local_url}/images/{sha256}/{Path(path).name}"

    # -- request handling (called from the handler threads) --------------------------------------------
    def _store(self, token: str, name: str, headers, rfile) -> str:
        slot = self._slots.get(token)
        if slot is None:
            raise UploadRejected(404, "unknown or closed upload token")
        if not NAME_RE.match(name):
            raise UploadRejected(400, f"bad file name {name!r}")
        sha = (headers.get("X-Abtest-Sha256") or "").strip().lower()
        if not SHA_RE.match(sha):
            raise UploadRejected(400, "missing or malformed X-Abtest-Sha256")
        try:
            size = int(headers.get("X-Abtest-Size", ""))
            length = int(headers.get("Content-Length", ""))
        except ValueError:
            raise UploadRejected(411, "X-Abtest-Size and Content-Length are required") from None
        if size < 0 or size > self.max_file_bytes:
            raise UploadRejected(413, f"{name}: {size} bytes exceeds the limit of {self.max_file_bytes}")
        # base64 of gzip: gzip may grow incompressible data by a little; base64 adds 4/3 and newlines
        if length < 0 or length > (size + 1024) * 4 // 3 + size // 57 + 4096:
            raise UploadRejected(413, f"{name}: body of {length} bytes is too large for {size} decoded bytes")
        with slot.lock:
            if slot.bytes + size > self.max_job_bytes:
                raise UploadRejected(413, f"job upload budget of {self.max_job_bytes} bytes exceeded")
            slot.bytes += size
        part = slot.dir / f".part-{name}-{threading.get_ident()}"
        try:
            got_size, got_sha = _decode_to(rfile, length, part, self.max_file_bytes)
            if got_size != size or got_sha != sha:
                raise UploadRejected(
                    422, f"{name}: received {got_size} bytes sha256 {got_sha}, announced {size} bytes sha256 {sha}"
                )
            os.replace(part, slot.dir / name)
        except BaseException:
            with slot.lock:
                slot.bytes -= size
            part.unlink(missing_ok=True)
            raise
        with slot.lock:
            slot.files[name] = {"size": size, "sha256": sha, "path": slot.dir / name}
        self.stats["uploads"] += 1
        self.stats["bytes"] += size
        return sha


def sha256_file(path: Path) -> str:
    """sha256 hex digest of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _decode_to(rfile, length: int, out: Path, max_bytes: int) -> tuple[int, str]:
    """Read `length` body bytes (base64 of gzip, newlines allowed), write the decoded bytes to `out`;
    returns (size, sha256). Refuses output beyond max_bytes (a gzip bomb stops there)."""
    h = hashlib.sha256()
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = b""
    size = 0
    left = length
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:

        def emit(raw: bytes) -> None:
            nonlocal size
            while raw:
                data = inflate.decompress(raw, max_bytes + 1 - size)
                raw = inflate.unconsumed_tail
                size += len(data)
                if size > max_bytes:
                    raise UploadRejected(413, f"decoded data exceeds {max_bytes} bytes")
                h.update(data)
                f.write(data)
                if not data and raw:
                    break

        while left > 0:
            chunk = rfile.read(min(1 << 16, left))
            if not chunk:
                raise UploadRejected(400, f"body ended {left} bytes early")
            left -= len(chunk)
            pending += chunk.translate(None, b"\r\n \t")
            usable = len(pending) - len(pending) % 4
            try:
                emit(base64.b64decode(pending[:usable], validate=True))
            except (binascii.Error, zlib.error) as e:
                raise UploadRejected(400, f"body is not base64 of gzip data: {e}") from None
            pending = pending[usable:]
        if pending:
            raise UploadRejected(400, "base64 body has a truncated last group")
        try:
            tail = inflate.flush()
        except zlib.error as e:
            raise UploadRejected(400, f"gzip stream: {e}") from None
        if tail:
            size += len(tail)
            if size > max_bytes:
                raise UploadRejected(413, f"decoded data exceeds {max_bytes} bytes")
            h.update(tail)
            f.write(tail)
        if not inflate.eof:
            raise UploadRejected(400, "gzip stream is truncated")
    return size, h.hexdigest()


DRAIN_BYTES = 16 << 20


class _CountingReader:
    """The request body stream, counting what was read."""

    def __init__(self, raw):
        self.raw, self.consumed = raw, 0

    def read(self, n: int) -> bytes:
        data = self.raw.read(n)
        self.consumed += len(data)
        return data


class _Handler(BaseHTTPRequestHandler):
    receiver: ArtifactReceiver
    timeout = 60
    protocol_version = "HTTP/1.0"

    def log_message(self, fmt, *args) -> None:  # no per-request stderr noise
        pass

    def _reply(self, code: int, text: str) -> None:
        body = (text + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_POST(self) -> None:
        parts = self.path.split("?")[0].strip("/").split("/")
        body = _CountingReader(self.rfile)
        try:
            if len(parts) != 3 or parts[0] != "upload":
                raise UploadRejected(404, "not found")
            sha = self.receiver._store(parts[1], parts[2], self.headers, body)
        except UploadRejected as e:
            self.receiver.stats["rejected"] += 1
            self.receiver.log(f"upload to {self.path.split('/')[-1]!r} rejected: {e.reason}")
            # read the rest of a modest body, so that the client (busybox wget) gets to see the reason
            try:
                left = int(self.headers.get("Content-Length", "0")) - body.consumed
            except ValueError:
                left = 0
            if 0 < left <= DRAIN_BYTES:
                try:
                    while left > 0 and (chunk := self.rfile.read(min(1 << 16, left))):
                        left -= len(chunk)
                except OSError:
                    pass
            self.close_connection = True
            self._reply(e.code, f"rejected {e.reason}")
            return
        except OSError as e:
            self.receiver.stats["rejected"] += 1
            self._reply(500, f"rejected {e}")
            return
        self._reply(200, f"stored {sha}")

    def _image(self) -> Path | None:
        parts = self.path.split("?")[0].strip("/").split("/")
        path = self.receiver._images.get("/".join(parts[1:])) if len(parts) == 3 and parts[0] == "images" else None
        if path is None or not path.is_file():
            self._reply(404, "not found")
            return None
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(path.stat().st_size))
        self.end_headers()
        return path

    def do_HEAD(self) -> None:
        self._image()

    def do_GET(self) -> None:
        path = self._image()
        if path is None:
            return
        self.receiver.stats["image_requests"] += 1
        try:
            with open(path, "rb") as f:
                shutil.copyfileobj(f, self.wfile, 1 << 20)
        except (ConnectionResetError, BrokenPipeError):
            pass  # a client that only wanted to know the image exists (LAVA's validate step) hung up

    def do_PUT(self) -> None:
        self._reply(405, "use POST")
