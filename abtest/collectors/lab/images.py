"""Boot images of the QEMU recipe: the same Debian kernel and initramfs the qemu target boots, plus a
console overlay.

The kernel comes from `abtest.targets.qemu.fetch_kernel` (apt-get download + partial dpkg-deb extract,
cached in ~/.cache/abtest/qemu) and the initramfs from `build_initramfs` (busybox, dropbear, trace-cmd,
hackbench, cyclictest, e1000.ko; same cache). LAVA drives the device through its serial console and
needs a shell prompt there, which abtest's /init does not give (it starts dropbear and sleeps). So a
second, tiny newc cpio is appended: the kernel unpacks concatenated (compressed) cpio archives in
order, and `rdinit=/abtest-lava-init` runs its init, which starts abtest's /init in the background
(mounts, eth0 10.0.2.15/24 via the e1000 NIC) and execs a shell with the prompt `CONSOLE_PROMPT` on the
console.

No ssh in the LAVA ramdisk: it is built with `build_initramfs(..., ssh=False)`, so it carries neither the
dropbear host key the qemu target pins nor an authorized_keys file, and starts no dropbear (LAVA drives the
serial console). The ramdisk is served unauthenticated on the receiver's /images/ (a LAVA worker fetches
deploy URLs with no credentials abtest could give it, and the URL sits in the job definition anyway), so it
holds nothing secret: Debian binaries, the kernel's module and abtest's scripts.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from abtest.collectors.lab.receiver import sha256_file
from abtest.targets.config import BootEntry
from abtest.targets.qemu import KernelImage, build_initramfs, cache_dir, fetch_kernel, write_newc_cpio

CONSOLE_PROMPT = "abtest# "
CONSOLE_INIT_PATH = "/abtest-lava-init"
CONSOLE_INIT = f"""#!/bin/sh
# abtest LAVA console init: abtest's /init (mounts, eth0; no ssh) in the background, then a shell on
# the serial console with a fixed prompt for LAVA's interactive test action.
export PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
mount -t devtmpfs devtmpfs /dev 2>/dev/null
/init </dev/null >/dev/null 2>&1 &
i=0
while [ ! -e /run/abtest-net.ready ] && [ ! -e /run/dropbear.pid ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export PS1='{CONSOLE_PROMPT}'
echo "abtest console ready: $(uname -r)"
exec setsid cttyhack /bin/sh
"""
# The kernel must print its boot messages ("Linux version ..." is what LAVA waits for first): no `quiet`.
BASE_CMDLINE = f"console=ttyS0,115200 rdinit={CONSOLE_INIT_PATH} panic=-1"


@dataclass
class BootImages:
    """A label's kernel and ramdisk for the QEMU recipe.

    vmlinuz, ramdisk: local files; cmdline: kernel command line; sha256: {"kernel", "ramdisk"}.
    """

    label: str
    kernel: KernelImage
    vmlinuz: Path
    ramdisk: Path
    cmdline: str
    sha256: dict

    def describe(self) -> dict:
        """For meta.json."""
        return {
            "package": self.kernel.package,
            "release": self.kernel.release,
            "cmdline": self.cmdline,
            "kernel": self.vmlinuz.name,
            "ramdisk": self.ramdisk.name,
            "sha256": dict(self.sha256),
        }


def console_overlay() -> bytes:
    """gzip'ed newc cpio holding only CONSOLE_INIT at CONSOLE_INIT_PATH (deterministic bytes)."""
    with tempfile.TemporaryDirectory(prefix="abtest-lava-overlay-") as d:
        root = Path(d)
        init = root / CONSOLE_INIT_PATH.lstrip("/")
        init.write_text(CONSOLE_INIT)
        os.chmod(init, 0o755)
        os.utime(init, (0, 0))
        buf = io.BytesIO()
        with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as f:
            write_newc_cpio(root, f)
        return buf.getvalue()


def lava_ramdisk(kernel: KernelImage, extra_binaries: tuple[str, ...] = ()) -> Path:
    """abtest's initramfs for `kernel` with the console overlay appended (cached by content)."""
    base = build_initramfs(kernel, extra_binaries, ssh=False)
    overlay = console_overlay()
    key = hashlib.sha256(base.name.encode() + overlay).hexdigest()[:16]
    out_dir = cache_dir() / "lava"
    out_dir.mkdir(exist_ok=True)
    out = out_dir / f"ramdisk-{kernel.release}-{key}.cpio.gz"
    if not out.exists():
        tmp = out.with_suffix(f".tmp-{os.getpid()}")
        with open(tmp, "wb") as f, open(base, "rb") as b:
            while chunk := b.read(1 << 20):
                f.write(chunk)
            f.write(overlay)
        os.rename(tmp, out)
    return out


def qemu_boot_images(
    label: str, boot: BootEntry, qemu_cfg: dict | None = None, log: Callable[[str], None] = lambda m: None
) -> BootImages:
    """The label's [boot.LABEL] package -> kernel + ramdisk + command line ([qemu] append, then the
    entry's append)."""
    if not boot.package:
        raise ValueError(f'label {label}: the QEMU recipe needs [boot.{label}] package = "linux-image-..."')
    q = qemu_cfg or {}
    kernel = fetch_kernel(boot.package, log=log)
    ramdisk = lava_ramdisk(kernel, tuple(q.get("extra_binaries", ())))
    cmdline = " ".join(p for p in (BASE_CMDLINE, str(q.get("append", "")), boot.append) if p.strip())
    return BootImages(
        label,
        kernel,
        kernel.vmlinuz,
        ramdisk,
        cmdline,
        {"kernel": sha256_file(kernel.vmlinuz), "ramdisk": sha256_file(ramdisk)},
    )
