"""STAND-IN, NOT ANDROID: a protocol-level ADB device for tests.

No Android device or adbd exists on this machine, so the tests talk to this small device written
against the ADB wire protocol. The stock `adb` client (`adb connect 127.0.0.1:PORT`) cannot tell it
from a device reached over TCP: it answers CNXN (no AUTH), serves OPEN streams with WRTE/OKAY/CLSE,
runs `shell,v2` commands on THIS machine with `/bin/sh -c` (stdout, stderr and the exit code travel as
shell-v2 packets), and serves the sync protocol (STAT, RECV, SEND, QUIT) for `adb pull/push`.
`root:` answers "already running as root"; everything else is refused with CLSE.

Use a port outside 5555-5585 (the adb server probes those as emulators). Run standalone:
    python tests/standins/adb_device.py PORT
"""

from __future__ import annotations

import asyncio
import os
import stat
import struct
import sys

A_CNXN, A_OPEN, A_OKAY, A_CLSE, A_WRTE = (0x4E584E43, 0x4E45504F, 0x59414B4F, 0x45534C43, 0x45545257)
A_VERSION = 0x01000001
MAX_PAYLOAD = 256 * 1024
BANNER = (
    b"device::ro.product.name=abtest_standin;ro.product.model=abtest_standin;"
    b"ro.product.device=standin;features=shell_v2,cmd"
)
# shell v2 packet ids
SH_STDIN, SH_STDOUT, SH_STDERR, SH_EXIT, SH_CLOSE_STDIN = 0, 1, 2, 3, 4


def pack(cmd: int, arg0: int, arg1: int, data: bytes = b"") -> bytes:
    """One ADB message: 24-byte little-endian header + payload."""
    return struct.pack("<6I", cmd, arg0, arg1, len(data), sum(data) & 0xFFFFFFFF, cmd ^ 0xFFFFFFFF) + data


class Stream:
    """One OPENed service: outgoing WRTEs wait for the host's OKAY (ADB flow control)."""

    def __init__(self, conn: Connection, local_id: int, remote_id: int):
        self.conn, self.local_id, self.remote_id = conn, local_id, remote_id
        self.acked = asyncio.Event()
        self.acked.set()
        self.inbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.closed = False

    async def write(self, data: bytes) -> None:
        for i in range(0, len(data), self.conn.max_payload):
            await self.acked.wait()
            if self.closed:
                return
            self.acked.clear()
            self.conn.send(A_WRTE, self.local_id, self.remote_id, data[i : i + self.conn.max_payload])

    async def close(self) -> None:
        if not self.closed:
            await asyncio.wait_for(self.acked.wait(), 10)
            self.closed = True
            self.conn.send(A_CLSE, self.local_id, self.remote_id)


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.streams: dict[int, Stream] = {}
        self.next_id = 1
        self.max_payload = 4096
        self.tasks: set[asyncio.Task] = set()

    def send(self, cmd: int, a0: int, a1: int, data: bytes = b"") -> None:
        self.writer.write(pack(cmd, a0, a1, data))

    async def serve(self) -> None:
        try:
            while True:
                hdr = await self.reader.readexactly(24)
                cmd, a0, a1, n, _crc, _magic = struct.unpack("<6I", hdr)
                data = await self.reader.readexactly(n) if n else b""
                await self.handle(cmd, a0, a1, data)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for t in self.tasks:
                t.cancel()
            self.writer.close()

    async def handle(self, cmd: int, a0: int, a1: int, data: bytes) -> None:
        if cmd == A_CNXN:
            self.max_payload = min(a1, MAX_PAYLOAD)
            self.send(A_CNXN, A_VERSION, MAX_PAYLOAD, BANNER)
        elif cmd == A_OPEN:
            service = data.rstrip(b"\0").decode(errors="replace")
            sid = self.next_id
            self.next_id += 1
            st = Stream(self, sid, a0)
            self.streams[sid] = st
            self.send(A_OKAY, sid, a0)
            task = asyncio.create_task(self.run_service(st, service))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        elif cmd == A_OKAY:
            st = self.streams.get(a1)
            if st:
                st.acked.set()
        elif cmd == A_WRTE:
            st = self.streams.get(a1)
            if st:
                self.send(A_OKAY, a1, a0)
                st.inbox.put_nowait(data)
        elif cmd == A_CLSE:
            st = self.streams.pop(a1, None)
            if st:
                st.closed = True
                st.acked.set()
                st.inbox.put_nowait(None)

    async def run_service(self, st: Stream, service: str) -> None:
        try:
            if service.startswith("shell"):
                opts, _, command = service.partition(":")
                await shell(st, command, v2="v2" in opts.split(","))
            elif service.startswith("sync:"):
                await sync(st)
            elif service.startswith("root:"):
                await st.write(b"adbd is already running as root\n")
            else:
                st.conn.send(A_CLSE, 0, st.remote_id)
                st.closed = True
                return
            await st.close()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            self.streams.pop(st.local_id, None)


async def shell(st: Stream, command: str, v2: bool) -> None:
    """Run `command` here with /bin/sh -c; stream its output as shell v2 packets and send its exit code."""
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        command or "true",
        cwd="/",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )

    async def pump(src: asyncio.StreamReader, ident: int) -> None:
        while chunk := await src.read(65536):
            await st.write(struct.pack("<BI", ident, len(chunk)) + chunk if v2 else chunk)

    async def feed_stdin() -> None:
        buf = b""
        while (data := await st.inbox.get()) is not None:
            buf += data
            while len(buf) >= 5:
                ident, n = struct.unpack("<BI", buf[:5])
                if len(buf) < 5 + n:
                    break
                payload, buf = buf[5 : 5 + n], buf[5 + n :]
                if ident == SH_STDIN and proc.stdin:
                    proc.stdin.write(payload)
                elif ident == SH_CLOSE_STDIN and proc.stdin:
                    proc.stdin.close()

    stdin_task = asyncio.create_task(feed_stdin())
    await asyncio.gather(pump(proc.stdout, SH_STDOUT), pump(proc.stderr, SH_STDERR))
    code = await proc.wait()
    stdin_task.cancel()
    if v2:
        await st.write(struct.pack("<BIB", SH_EXIT, 1, code & 0xFF))


async def sync(st: Stream) -> None:
    """The sync protocol subset adb push/pull use: STAT, RECV, SEND (DATA/DONE), QUIT."""
    buf = b""

    async def need(n: int) -> bytes:
        nonlocal buf
        while len(buf) < n:
            data = await st.inbox.get()
            if data is None:
                raise ConnectionError("stream closed")
            buf += data
        out, buf = buf[:n], buf[n:]
        return out

    def status(ident: bytes, msg: bytes = b"") -> bytes:
        return ident + struct.pack("<I", len(msg)) + msg

    while True:
        ident, n = struct.unpack("<4sI", await need(8))
        if ident == b"QUIT":
            return
        arg = await need(n)
        if ident == b"STAT":
            try:
                s = os.stat(arg.decode())
                await st.write(b"STAT" + struct.pack("<III", s.st_mode, s.st_size & 0xFFFFFFFF, int(s.st_mtime)))
            except OSError:
                await st.write(b"STAT" + struct.pack("<III", 0, 0, 0))
        elif ident == b"RECV":
            try:
                with open(arg.decode(), "rb") as f:
                    while chunk := f.read(64 * 1024):
                        await st.write(status(b"DATA", chunk))
                await st.write(status(b"DONE"))
            except OSError as e:
                await st.write(status(b"FAIL", f"{e.strerror}".encode()))
        elif ident == b"SEND":
            path, _, mode = arg.decode().rpartition(",")
            chunks = []
            while True:
                cid, cn = struct.unpack("<4sI", await need(8))
                if cid == b"DONE":
                    break
                chunks.append(await need(cn))
            try:
                with open(path, "wb") as f:
                    f.write(b"".join(chunks))
                os.chmod(path, stat.S_IMODE(int(mode)) if mode else 0o644)
                await st.write(status(b"OKAY"))
            except OSError as e:
                await st.write(status(b"FAIL", f"{e.strerror}".encode()))
        else:
            await st.write(status(b"FAIL", b"unsupported sync request " + ident))
            return


async def serve(port: int, ready: asyncio.Event | None = None) -> asyncio.base_events.Server:
    server = await asyncio.start_server(lambda r, w: Connection(r, w).serve(), "127.0.0.1", port)
    if ready:
        ready.set()
    return server


def main() -> None:
    port = int(sys.argv[1])

    async def run() -> None:
        server = await serve(port)
        print(f"adb stand-in device listening on 127.0.0.1:{port}", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(run())


if __name__ == "__main__":
    main()
