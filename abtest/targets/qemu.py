"""QEMU targets: real Debian kernels booted under TCG with abtest's own initramfs.

- `find_kernel_package(glob)`: newest apt package matching a glob in which `*` stands for a version
  number (`linux-image-6.1.0-*-amd64` matches ...-56-amd64, not ...-56-cloud-amd64).
- `fetch_kernel(package)`: `apt-get download` + extract only boot/vmlinuz-* and the e1000 NIC module,
  cached in ~/.cache/abtest/qemu/<package>/ (a kernel is never apt-installed on the host).
- `build_initramfs(kernel)`: busybox-static applets, dropbear (pre-generated ed25519 host key, whose
  public half is pinned by the ssh target: host-key verification stays on), sftp-server, trace-cmd,
  hackbench, cyclictest, coreutils date (ns timestamps), all with the shared libraries `ldd` lists
  (the host userspace is bookworm, like the kernels), e1000.ko of that kernel, and an /init that mounts
  proc/sys/devtmpfs/devpts/tracefs, brings up eth0 (10.0.2.15/24) and starts dropbear.
- `QemuVM`: `qemu-system-x86_64 -accel tcg` (KVM here cannot boot stock kernels) with a user-mode NIC
  restricted to a host-forwarded ssh port on 127.0.0.1; stopped by the PID in its -pidfile.
- `QemuProvider`: the orchestrator's provider for kind = "qemu": one VM per kernel label, started on
  first use and kept running across iterations (boots are reused; ABAB costs no reboot).
TCG timings are emulated: compare kernels' behaviour, not absolute speed.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import lzma
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.markup import escape

from abtest.targets.base import TargetError, TargetTimeout
from abtest.targets.config import BootEntry, TargetConfig
from abtest.targets.shell import quote
from abtest.targets.ssh import SshTarget

INITRAMFS_VERSION = "4"  # bump when the initramfs content changes (part of the cache key)
GUEST_BINARIES = (
    "/usr/sbin/dropbear",
    "/usr/lib/sftp-server",
    "/usr/bin/trace-cmd",
    "/usr/bin/hackbench",
    "/usr/bin/cyclictest",
    "/usr/bin/date",
)
DROPBEAR_LINE = "dropbear -r /etc/dropbear/dropbear_ed25519_host_key -s -p 22 -P /run/dropbear.pid"
# without ssh (the LAVA recipe's ramdisk: no host key in it), /init marks the network ready instead
NO_SSH_LINE = ": > /run/abtest-net.ready"
INIT_SCRIPT_TEMPLATE = """#!/bin/sh
export PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /sys/kernel/tracing /sys/kernel/debug
mount -t devpts devpts /dev/pts
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || mount -t debugfs nodev /sys/kernel/debug
mount -t tmpfs tmpfs /tmp
hostname abtest-guest
for m in /lib/modules/*.ko; do [ -e "$m" ] && insmod "$m" 2>/dev/null; done
ip link set lo up
ip addr add 10.0.2.15/24 dev eth0 && ip link set eth0 up && ip route add default via 10.0.2.2
{dropbear}
echo "ABTEST-READY $(uname -r)" > /dev/console
while :; do sleep 3600; done
"""
INIT_SCRIPT = INIT_SCRIPT_TEMPLATE.replace("{dropbear}", DROPBEAR_LINE)


def cache_dir() -> Path:
    """~/.cache/abtest/qemu (or $ABTEST_QEMU_CACHE)."""
    d = Path(os.environ.get("ABTEST_QEMU_CACHE") or Path.home() / ".cache" / "abtest" / "qemu")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _version_key(name: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", name))


def find_kernel_package(glob: str) -> list[str]:
    """apt package names matching `glob` (`*` = a version number), newest first.

    Runs `apt-get update` once when apt knows no match (a fresh machine has empty lists).
    """
    rx = re.compile(fnmatch.translate(glob).replace(".*", r"[0-9][0-9.]*"))
    prefix = glob.split("*")[0]
    for attempt in range(2):
        out = subprocess.run(["apt-cache", "pkgnames", prefix], capture_output=True, text=True, timeout=120).stdout
        names = sorted((n for n in out.split() if rx.fullmatch(n)), key=_version_key, reverse=True)
        if names or attempt:
            return names
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=600)
    return []


@dataclass
class KernelImage:
    """An extracted Debian kernel: release (uname -r), vmlinuz path, modules to load at boot."""

    package: str
    release: str
    vmlinuz: Path
    modules: list[Path] = field(default_factory=list)


def fetch_kernel(package_glob: str, log: Callable[[str], None] = lambda m: None) -> KernelImage:
    """Newest package matching the glob, downloaded and partly extracted into the cache (reused)."""
    names = find_kernel_package(package_glob)
    if not names:
        raise TargetError(f"no apt package matches {package_glob!r} (apt-cache pkgnames found none)")
    # a cached extraction of any matching package is reused without asking apt again
    for name in names:
        d = cache_dir() / name
        if (d / ".complete").exists():
            return _kernel_from_dir(name, d)
    errors = []
    for name in names[:3]:
        d = cache_dir() / name
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache_dir()))
        try:
            log(f"downloading {name}")
            r = subprocess.run(["apt-get", "download", name], cwd=tmp, capture_output=True, text=True, timeout=600)
            debs = list(tmp.glob("*.deb"))
            if r.returncode != 0 or not debs:
                errors.append(f"{name}: {r.stderr.strip()[-300:]}")
                continue
            # only vmlinuz and the NIC driver: a few MB instead of the whole module tree
            tar = subprocess.run(
                f"dpkg-deb --fsys-tarfile {quote(str(debs[0]))} | tar -x -C {quote(str(tmp))} "
                "--wildcards './boot/vmlinuz-*' '*/drivers/net/ethernet/intel/e1000/e1000.ko*'",
                shell=True,
                capture_output=True,
                text=True,
                timeout=600,
            )
            if tar.returncode != 0:
                errors.append(f"{name}: extracting failed: {tar.stderr.strip()[-300:]}")
                continue
            debs[0].unlink()
            (tmp / ".complete").touch()
            if d.exists():
                shutil.rmtree(d)
            os.rename(tmp, d)
            return _kernel_from_dir(name, d)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    raise TargetError(f"could not fetch a kernel for {package_glob!r}: {'; '.join(errors)}")


def _kernel_from_dir(name: str, d: Path) -> KernelImage:
    vmlinuz = sorted((d / "boot").glob("vmlinuz-*"))
    if not vmlinuz:
        raise TargetError(f"{d}: no boot/vmlinuz-* in {name}")
    release = vmlinuz[0].name[len("vmlinuz-") :]
    # bookworm's packages hold lib/modules, trixie's (merged /usr) usr/lib/modules
    nic = "modules/*/kernel/drivers/net/ethernet/intel/e1000/e1000.ko*"
    mods = sorted({m.resolve() for top in ("lib", "usr/lib") for m in d.glob(f"{top}/{nic}")})
    return KernelImage(name, release, vmlinuz[0], mods)


def _libs(binary: str) -> set[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    libs = set()
    for line in out.splitlines():
        m = re.search(r"(/\S+)\s+\(0x", line)
        if m:
            libs.add(m.group(1))
    return libs


def _copy(src: str, root: Path, dest: str | None = None) -> None:
    target = root / (dest or src).lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(os.path.realpath(src), target)


def guest_keys() -> tuple[Path, str, Path]:
    """(dropbear host key, its public key line, client private key) cached in the QEMU cache dir."""
    d = cache_dir() / "keys"
    d.mkdir(exist_ok=True)
    host = d / "dropbear_ed25519_host_key"
    if not host.exists():
        subprocess.run(["dropbearkey", "-t", "ed25519", "-f", str(host)], capture_output=True, check=True)
    pub = subprocess.run(["dropbearkey", "-y", "-f", str(host)], capture_output=True, text=True, check=True).stdout
    line = next(l for l in pub.splitlines() if l.startswith("ssh-"))
    client = d / "id_ed25519"
    if not client.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(client)], check=True)
    return host, " ".join(line.split()[:2]), client


def _decompress_module(src: Path, dest: Path) -> None:
    data = src.read_bytes()
    if src.suffix == ".xz":
        data = lzma.decompress(data)
    elif src.suffix == ".zst":
        import zstandard

        data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
    elif src.suffix == ".gz":
        data = gzip.decompress(data)
    dest.write_bytes(data)


def build_initramfs(kernel: KernelImage, extra_binaries: tuple[str, ...] = (), *, ssh: bool = True) -> Path:
    """gzip'ed newc cpio for `kernel` (cached by content key); returns its path.

    ssh=False: no dropbear host key (nor authorized_keys) in the archive and /init starts no dropbear (it
    touches /run/abtest-net.ready once eth0 is up): for images served to others, such as the LAVA recipe's
    ramdisk, which must not carry the private key the qemu target's ssh connection pins."""
    binaries = tuple(b for b in GUEST_BINARIES + tuple(extra_binaries))
    init = INIT_SCRIPT if ssh else INIT_SCRIPT_TEMPLATE.replace("{dropbear}", NO_SSH_LINE)
    key = hashlib.sha256(repr((INITRAMFS_VERSION, kernel.release, binaries, init)).encode()).hexdigest()[:16]
    out = cache_dir() / f"initramfs-{kernel.release}-{key}.cpio.gz"
    if out.exists():
        return out
    host_key, _, client = guest_keys() if ssh else (None, None, None)
    with tempfile.TemporaryDirectory(prefix="abtest-initramfs-") as tmpd:
        root = Path(tmpd) / "root"
        for d in (
            "bin",
            "sbin",
            "usr/bin",
            "usr/sbin",
            "usr/lib",
            "etc/dropbear",
            "proc",
            "sys",
            "dev",
            "tmp",
            "run",
            "root/.ssh",
            "lib/modules",
            "var/log",
        ):
            (root / d).mkdir(parents=True, exist_ok=True)
        _copy("/bin/busybox", root, "/bin/busybox")
        applets = subprocess.run(["/bin/busybox", "--list"], capture_output=True, text=True, check=True).stdout.split()
        for a in applets:
            if a != "busybox" and not (root / "bin" / a).exists():
                (root / "bin" / a).symlink_to("busybox")
        libs = set()
        for b in binaries:
            if not Path(b).exists():
                raise TargetError(f"{b} is missing on the host (needed in the guest initramfs; see Makefile APT_PKGS)")
            dest = "/usr/bin/" + Path(b).name if b.startswith("/usr/bin") else b
            if (root / dest.lstrip("/")).is_symlink():
                (root / dest.lstrip("/")).unlink()
            _copy(b, root, dest)
            libs |= _libs(b)
        for lib in libs:
            _copy(lib, root)
        for ld in ("/lib64/ld-linux-x86-64.so.2",):
            _copy(ld, root)
        for m in kernel.modules:
            _decompress_module(m, root / "lib/modules" / (m.name.split(".ko")[0] + ".ko"))
        if ssh:
            shutil.copy(host_key, root / "etc/dropbear/dropbear_ed25519_host_key")
            (root / "root/.ssh/authorized_keys").write_text(client.with_suffix(".pub").read_text())
            os.chmod(root / "root/.ssh/authorized_keys", 0o600)
        os.chmod(root / "root/.ssh", 0o700)
        (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
        (root / "etc/group").write_text("root:x:0:\n")
        (root / "etc/shells").write_text("/bin/sh\n")
        (root / "init").write_text(init)
        os.chmod(root / "init", 0o755)
        tmp_out = out.with_suffix(".tmp")
        with gzip.open(tmp_out, "wb", compresslevel=1) as f:
            write_newc_cpio(root, f)
        os.rename(tmp_out, out)
    return out


def _newc_entry(name: str, mode: int, data: bytes, ino: int, nlink: int = 1, mtime: int = 0) -> bytes:
    """One newc ("070701") cpio record: 110-byte ASCII header, NUL-terminated name, data, 4-byte padding."""
    nb = name.encode() + b"\0"
    fields = [ino, mode, 0, 0, nlink, mtime, len(data), 0, 0, 0, 0, len(nb), 0]
    hdr = b"070701" + b"".join(f"{v:08X}".encode() for v in fields)
    pad1 = b"\0" * ((4 - (len(hdr) + len(nb)) % 4) % 4)
    pad2 = b"\0" * ((4 - len(data) % 4) % 4)
    return hdr + nb + pad1 + data + pad2


def write_newc_cpio(root: Path, f) -> None:
    """Write the tree under `root` as a newc cpio archive (what the kernel unpacks as initramfs)."""
    ino = 1
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        entries = ([] if rel_dir == "." else [rel_dir]) + [
            os.path.normpath(os.path.join(rel_dir, n)) for n in sorted(filenames)
        ]
        # symlinks to directories show up in dirnames: archive them as links too
        entries += [
            os.path.normpath(os.path.join(rel_dir, n)) for n in dirnames if os.path.islink(os.path.join(dirpath, n))
        ]
        for rel in entries:
            full = root / rel
            st = os.lstat(full)
            if os.path.islink(full):
                data = os.readlink(full).encode()
            elif full.is_dir():
                data = b""
            else:
                data = full.read_bytes()
            f.write(_newc_entry(rel, st.st_mode, data, ino, 2 if full.is_dir() and not full.is_symlink() else 1))
            ino += 1
    f.write(_newc_entry("TRAILER!!!", 0, b"", 0))


def guest_death_reason(serial_log: str) -> str:
    """One line on why a guest stopped, from its serial log: the kernel's panic message and the RIP of
    the oops when present ("no panic in the serial log" otherwise, e.g. the qemu process was killed)."""
    panic = re.findall(r"Kernel panic - not syncing: ([^\r\n]*)", serial_log)
    rip = re.findall(r"RIP: \S+:(\S+)", serial_log)
    if not panic:
        return "no panic in the serial log"
    return f"guest kernel panic: {panic[-1].strip()}" + (f" at {rip[-1]}" if rip else "")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class QemuVM:
    """One TCG guest; `start()` returns once dropbear answers on the forwarded 127.0.0.1 port."""

    def __init__(
        self,
        kernel: KernelImage,
        initrd: Path,
        *,
        memory_mb: int = 512,
        smp: int = 2,
        append: str = "",
        workdir: Path | None = None,
    ):
        self.kernel, self.initrd = kernel, initrd
        self.memory_mb, self.smp, self.append = memory_mb, smp, append
        self.owns_dir = workdir is None
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="abtest-vm-"))
        self.port = 0
        self.pidfile = self.dir / "qemu.pid"
        self.serial_log = self.dir / "serial.log"
        self.pid: int | None = None
        self.boot_s: float | None = None
        self.death_reason: str | None = None  # set when qemu exits during boot (guest_death_reason)

    def argv(self) -> list[str]:
        # loglevel=4: warnings (RCU stalls, soft lockups, oopses) reach the serial log for diagnosis
        cmdline = f"console=ttyS0 loglevel=4 panic=-1 {self.append}".strip()
        return [
            "qemu-system-x86_64",
            "-accel",
            "tcg,thread=multi",
            "-cpu",
            "max",
            "-m",
            str(self.memory_mb),
            "-smp",
            str(self.smp),
            "-display",
            "none",
            "-no-reboot",
            "-kernel",
            str(self.kernel.vmlinuz),
            "-initrd",
            str(self.initrd),
            "-append",
            cmdline,
            "-nic",
            f"user,model=e1000,restrict=on,hostfwd=tcp:127.0.0.1:{self.port}-:22",
            "-pidfile",
            str(self.pidfile),
            "-serial",
            f"file:{self.serial_log}",
            "-daemonize",
        ]

    def start(self, timeout_s: float = 120.0) -> QemuVM:
        self.port = free_port()
        self.serial_log.unlink(missing_ok=True)
        t0 = time.monotonic()
        r = subprocess.run(self.argv(), capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise TargetError(f"qemu failed to start: {r.stderr.strip()[-500:]}")
        self.pid = int(self.pidfile.read_text().strip())
        while time.monotonic() - t0 < timeout_s:
            if not self.alive():
                self.death_reason = guest_death_reason(self.log_text())
                raise TargetError(
                    f"qemu exited during boot of {self.kernel.release} "
                    f"({self.death_reason}); serial log tail: {self.log_tail()}"
                )
            if "ABTEST-READY" in self.log_text():
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                        s.settimeout(5)
                        if s.recv(64).startswith(b"SSH-"):
                            self.boot_s = time.monotonic() - t0
                            return self
                except OSError:
                    pass
            time.sleep(0.25)
        self.stop()
        raise TargetTimeout(
            f"{self.kernel.release} did not boot to ssh within {timeout_s:.0f} s; serial log tail: {self.log_tail()}"
        )

    def log_text(self) -> str:
        try:
            return self.serial_log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, n: int = 600) -> str:
        return self.log_text()[-n:]

    def alive(self) -> bool:
        if self.pid is None:
            return False
        try:
            cmd = Path(f"/proc/{self.pid}/cmdline").read_bytes()
        except FileNotFoundError:
            return False
        return str(self.pidfile).encode() in cmd  # our qemu, not a recycled PID

    def stop(self) -> None:
        """SIGTERM then SIGKILL the PID from our pidfile (only if it is still our qemu)."""
        if self.alive():
            os.kill(self.pid, signal.SIGTERM)
            for _ in range(50):
                if not self.alive():
                    break
                time.sleep(0.1)
            if self.alive():
                os.kill(self.pid, signal.SIGKILL)
        self.pid = None
        if self.owns_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def target(self, name: str) -> SshTarget:
        _, host_pub, client = guest_keys()
        return SshTarget(
            name=name,
            host="127.0.0.1",
            port=self.port,
            user="root",
            key_file=str(client),
            host_key=host_pub,
            connect_timeout_s=30,
        )


class QemuProvider:
    """Orchestrator provider for kind = "qemu": a VM per kernel label, booted once, kept running."""

    def __init__(self, cfg: TargetConfig, log: Callable[[str], None] = print):
        self.cfg, self.log = cfg, log
        self.vms: dict[str, QemuVM] = {}
        self.targets: dict[str, SshTarget] = {}

    def _boot(self, label: str, boot: BootEntry) -> SshTarget:
        """Start the label's VM. A guest that dies during boot (a kernel panic under emulation) is
        relaunched, up to [qemu] boot_attempts times in all (default 3); each death is logged with the
        guest's panic line."""
        q = self.cfg.qemu
        kernel = fetch_kernel(boot.package, log=self.log)
        initrd = build_initramfs(kernel, tuple(q.get("extra_binaries", ())))
        attempts = max(1, int(q.get("boot_attempts", 3)))
        timeout_s = float(q.get("boot_timeout_s", boot.timeout_s if boot.timeout_s != 300.0 else 120.0))
        for attempt in range(1, attempts + 1):
            vm = QemuVM(
                kernel,
                initrd,
                memory_mb=int(q.get("memory_mb", 512)),
                smp=int(q.get("smp", 2)),
                append=f"{q.get('append', '')} {boot.append}".strip(),
            )
            self.log(f"booting {label}: {kernel.package} ({kernel.release}) under QEMU TCG")
            try:
                vm.start(timeout_s=timeout_s)
                break
            except TargetError:
                vm.stop()
                if vm.death_reason is None or attempt == attempts:
                    raise
                self.log(
                    f"[yellow]{label}: guest died during boot ({escape(vm.death_reason)}); relaunching "
                    f"(boot attempt {attempt + 1}/{attempts})[/]"
                )
        self.log(f"{label}: {kernel.release} up in {vm.boot_s:.1f} s on 127.0.0.1:{vm.port}")
        self.vms[label] = vm
        t = vm.target(f"{self.cfg.name}:{label}")
        t.platform = self.cfg.platform
        self.targets[label] = t
        return t

    def activate(self, label) -> SshTarget:
        if label.boot is None or not label.boot.package:
            raise TargetError(f'label {label.name}: a qemu target needs [boot.{label.name}] package = "..."')
        vm = self.vms.get(label.name)
        if vm is not None and not vm.alive():
            self._forget(label.name, f"VM exited ({guest_death_reason(vm.log_text())})")
            vm = None
        if vm is None:
            self._boot(label.name, label.boot)
        t = self.targets[label.name]
        rel = t.uname_r()
        if label.boot.expect_release and not fnmatch.fnmatch(rel, label.boot.expect_release):
            raise TargetError(f"label {label.name}: guest runs {rel}, expected {label.boot.expect_release!r}")
        return t

    def recover(self, label, timeout_s: float = 30) -> SshTarget:
        """The label's target after a failed iteration: the same VM if it answers again within
        `timeout_s` seconds (plus the ssh connect timeout of the attempt under way), otherwise a new one
        (a hung VM is stopped by its PID; a dead one is logged with its panic line)."""
        vm = self.vms.get(label.name)
        if vm is not None and vm.alive():
            try:
                self.targets[label.name].wait_until_back(timeout_s, poll_s=1)
                return self.activate(label)
            except TargetError as e:
                if vm.alive():
                    self._forget(label.name, f"VM hung ({e})")
        return self.activate(label)

    def _forget(self, label: str, why: str) -> None:
        """Log why the label's VM is being replaced, stop it (by PID) and drop its target."""
        self.log(f"[yellow]{label}: {escape(why)}; relaunching[/]")
        vm = self.vms.pop(label, None)
        if vm is not None:
            vm.stop()  # kills a hung qemu; removes the work dir of a dead one
        old = self.targets.pop(label, None)
        if old is not None:
            old.close()

    def boot_times(self) -> dict[str, float | None]:
        return {label: vm.boot_s for label, vm in self.vms.items()}

    def close(self) -> None:
        for t in self.targets.values():
            t.close()
        for vm in self.vms.values():
            vm.stop()
        self.vms.clear()
