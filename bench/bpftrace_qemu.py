#!/usr/bin/env python3
"""Does Debian 12's bpftrace reach the scheduler's bare tracepoints (PELT, uclamp, capacity, overutilized) on the
Debian kernels abtest boots under QEMU? Prints the evidence (commands and their output) for
docs/analysis-kernel-views.md.

    nice python bench/bpftrace_qemu.py

Downloads the bpftrace package and its one missing library with `apt-get download` (nothing is installed on the
host), puts them into abtest's QEMU initramfs, boots linux-image-6.1.0-*-amd64 and linux-image-6.12.*+deb12-amd64
(abtest.targets.qemu), and runs in the guest: the kernel's BTF and bare tracepoints (the bpf raw-tracepoint
targets), bpftrace's version, a control probe on a trace event, and raw-tracepoint probes on pelt_cfs_tp,
sched_overutilized_tp and sched_cpu_capacity_tp. Not part of `make test` (about a minute per kernel).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from abtest.targets.qemu import QemuVM, build_initramfs, cache_dir, fetch_kernel  # noqa: E402

KERNELS = ("linux-image-6.1.0-*-amd64", "linux-image-6.12.*+deb12-amd64")
PACKAGES = ("bpftrace", "libclang1-14")  # libclang1-14 is the only dependency this host lacks


def bpftrace_tree() -> Path:
    """bpftrace and libclang1-14 extracted under the QEMU cache (not under /tmp: the guest mounts a tmpfs there)."""
    d = cache_dir() / "bpftrace-debian"
    exe = d / "usr" / "bin" / "bpftrace"
    if not exe.exists():
        d.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", *PACKAGES], cwd=d, check=True, capture_output=True)
        for deb in d.glob("*.deb"):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(d)], check=True)
    return d


GUEST_SCRIPT = """
echo "== uname -r"; uname -r
echo "== BTF"; ls -la /sys/kernel/btf/vmlinux
echo "== bare tracepoints in the kernel (no trace event, raw tracepoint targets)"
for tp in pelt_cfs_tp pelt_se_tp sched_cpu_capacity_tp sched_overutilized_tp sched_util_est_cfs_tp; do
  printf '%s: ' $tp; grep -c " __tracepoint_$tp$" /proc/kallsyms; done
echo "== events/sched has them as trace events?"; ls /sys/kernel/tracing/events/sched/ | grep -c -e pelt -e overutil -e capacity
echo "== bpftrace --version"; {bt} --version 2>&1
echo "== control: a trace event probe"; timeout 120 {bt} -e 'tracepoint:sched:sched_switch {{ printf("sched_switch seen\\n"); exit(); }}' 2>&1 | tail -3
for tp in pelt_cfs_tp sched_overutilized_tp sched_cpu_capacity_tp; do
  echo "== rawtracepoint:$tp"; timeout 120 {bt} -e "rawtracepoint:$tp {{ printf(\\"hit\\n\\"); exit(); }}" 2>&1 | tail -3
done
echo "== bpftrace -l 'rawtracepoint:*'"; timeout 120 {bt} -l 'rawtracepoint:*' 2>&1 | head -3
"""  # noqa: E501 (a shell script: its lines stay whole)


def main() -> int:
    tree = bpftrace_tree()
    libdirs = [str(tree / "usr/lib/x86_64-linux-gnu"), str(tree / "usr/lib/llvm-14/lib")]
    os.environ["LD_LIBRARY_PATH"] = ":".join(libdirs)  # for ldd while the initramfs is built
    exe = str(tree / "usr/bin/bpftrace")
    bt = f"env LD_LIBRARY_PATH={':'.join(libdirs)} {exe}"
    for glob in KERNELS:
        kernel = fetch_kernel(glob)
        initrd = build_initramfs(kernel, (exe,))
        vm = QemuVM(kernel, initrd, memory_mb=2048)
        t0 = time.monotonic()
        try:
            vm.start(timeout_s=240)
            print(
                f"### {kernel.package} (release {kernel.release}), booted in {vm.boot_s:.1f} s; initramfs "
                f"{initrd.stat().st_size / 1e6:.0f} MB"
            )
            res = vm.target(kernel.release).run(GUEST_SCRIPT.format(bt=bt), timeout=900)
            print(res.stdout + res.stderr)
        finally:
            vm.stop()
        print(f"(total {time.monotonic() - t0:.0f} s)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
