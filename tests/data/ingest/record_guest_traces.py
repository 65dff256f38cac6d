"""How tests/data/ingest/printk/*, kprobe/* and funcgraph/6.18-*.txt, 7.3-*.txt were recorded (2026-11-29): run from the work tree,
`.venv/bin/python tests/data/ingest/record_guest_traces.py OUTDIR abtest_printk.ko bzImage`, after

- the 6.18 kernel: `apt-get download linux-image-6.18.15+deb13-amd64` from Debian trixie-backports, vmlinuz and
  e1000.ko extracted into ~/.cache/abtest/qemu/linux-image-6.18.15+deb13-amd64/ as abtest.targets.qemu.fetch_kernel
  does;
- the module: abtest_printk.c built against Debian's linux-headers-6.1.0-56-amd64 + linux-kbuild-6.1
  (`make -C .../linux-headers-6.1.0-56-amd64 M=$PWD modules`, with `obj-m := abtest_printk.o` in Kbuild).
- the 7.3 kernel (funcgraph/7.3-*: Debian builds neither funcgraph-retval nor -retaddr): Debian's linux-source-7.3
  (7.3.4-1~bpo13+1, trixie-backports) built as `make tinyconfig`, then `scripts/config --enable` of 64BIT PRINTK TTY
  SERIAL_8250 SERIAL_8250_CONSOLE BLK_DEV_INITRD RD_GZIP DEVTMPFS DEVTMPFS_MOUNT PROC_FS PROC_SYSCTL SYSFS TMPFS SHMEM
  BINFMT_ELF BINFMT_SCRIPT MULTIUSER FUTEX EPOLL SIGNALFD TIMERFD EVENTFD POSIX_TIMERS FILE_LOCKING UNIX98_PTYS NET
  INET UNIX PACKET NETDEVICES ETHERNET NET_VENDOR_INTEL E1000 PCI SMP FTRACE FUNCTION_TRACER FUNCTION_GRAPH_TRACER
  FUNCTION_GRAPH_RETVAL FUNCTION_GRAPH_RETADDR DYNAMIC_FTRACE KALLSYMS KALLSYMS_ALL HIGH_RES_TIMERS, ORC unwinder off,
  `make olddefconfig`, `make -j2 bzImage`; the bzImage given as the third argument.
A second run gives other timestamps and counts (the tests count from each file); the reader read those too.
"""

import contextlib
import sys
from pathlib import Path

from abtest.targets.qemu import KernelImage, QemuVM, _kernel_from_dir, build_initramfs, cache_dir


@contextlib.contextmanager
def guest(kernel: KernelImage | str):
    """An ssh target on a booted QEMU guest of `kernel` (a KernelImage, or the name of a package in the cache)."""
    if isinstance(kernel, str):
        kernel = _kernel_from_dir(kernel, cache_dir() / kernel)
    vm = QemuVM(kernel, build_initramfs(kernel), memory_mb=768).start(timeout_s=300)
    try:
        yield vm.target("guest")
    finally:
        vm.stop()


def record_printk(out: Path, module: Path) -> None:
    with guest("linux-image-6.1.0-56-amd64") as t:
        t.push(module, "/tmp/abtest_printk.ko")
        tracing = "cd /sys/kernel/tracing; echo > trace; "
        load = "insmod /tmp/abtest_printk.ko; sleep 0.4; "
        sched = "echo 1 > events/sched/sched_switch/enable; echo 1 > events/sched/sched_wakeup/enable; "
        for name, options in (
            ("default", ""),
            ("sym-offset-sched", "echo 1 > options/sym-offset; " + sched),
            ("sym-addr", "echo 1 > options/sym-addr; echo 1 > options/sym-offset; "),
        ):
            # `cat trace` while the module is loaded: its symbols resolve (its freed init code does not)
            r = t.run(
                tracing + options + "echo 1 > tracing_on; " + load + "echo 0 > tracing_on; echo 0 > events/enable; "
                "cat trace; echo 0 > options/sym-addr; echo 0 > options/sym-offset; rmmod abtest_printk",
                timeout=120,
            )
            (out / f"6.1-trace_printk-{name}.txt").write_text(r.stdout)
        t.run(
            "cd /tmp && trace-cmd record -q -o /tmp/printk.dat -e sched:sched_switch -e sched:sched_wakeup "
            f"-e power:cpu_idle sh -c '{load}rmmod abtest_printk'",
            timeout=300,
        )
        t.pull("/tmp/printk.dat", out / "6.1-trace_printk-sched.dat")


def record_kprobes(out: Path) -> None:
    """kprobe / kretprobe events (names chosen by the user, text `(func+0x0/0x30)` without fetch arguments)."""
    with guest("linux-image-6.1.0-56-amd64") as t:
        r = t.run(
            "cd /sys/kernel/tracing; echo 'p:abtest_open do_sys_openat2' >> kprobe_events; "
            "echo 'r:abtest_open_ret do_sys_openat2' >> kprobe_events; "
            "echo 'p:abtest_open_args do_sys_openat2 dfd=%di flags=+8(%dx):x32' >> kprobe_events; "
            "echo > trace; echo 1 > events/kprobes/enable; echo 1 > events/sched/sched_switch/enable; "
            "echo 1 > tracing_on; cat /proc/version > /dev/null; ls / > /dev/null; echo 0 > tracing_on; "
            "echo 0 > events/enable; cat trace; echo > kprobe_events",
            timeout=120,
        )
        (out / "6.1-kprobes.txt").write_text(r.stdout)


def record_funcgraph_args(out: Path) -> None:
    with guest("linux-image-6.18.15+deb13-amd64") as t:
        reset = (
            "cd /sys/kernel/tracing; echo nop > current_tracer; echo 0 > tracing_on; echo > trace; "
            "for o in funcgraph-args funcgraph-proc funcgraph-abstime funcgraph-tail; do echo 0 > options/$o; done; "
        )
        graph = "echo function_graph > current_tracer; echo 1 > options/funcgraph-args; "
        open_ls = "echo 1 > tracing_on; cat /proc/version > /dev/null; ls / > /dev/null; echo 0 > tracing_on; "
        proc = "echo 1 > options/funcgraph-proc; echo 1 > options/funcgraph-abstime; "
        sched = "echo 1 > events/sched/sched_switch/enable; echo 1 > events/sched/sched_wakeup/enable; "
        for name, recipe in (
            ("args", "echo do_sys_openat2 > set_graph_function; " + graph + open_ls),
            (
                "args-proc-abstime",
                "echo do_sys_openat2 > set_graph_function; " + graph + proc + "echo 1 > options/funcgraph-tail; "
                + open_ls,
            ),
            (
                "args-schedule-events",
                "echo schedule > set_graph_function; " + graph + proc + sched
                + "echo 1 > tracing_on; sleep 0.05; ls / > /dev/null; sleep 0.02; echo 0 > tracing_on; "
                "echo 0 > events/enable; ",
            ),
        ):
            r = t.run(reset + recipe + "cat trace", timeout=300)
            (out / f"6.18-{name}.txt").write_text(r.stdout)


def record_funcgraph_retval(out: Path, bzimage: Path) -> None:
    with guest(KernelImage("custom-7.3.4", "7.3.4-tinyconfig-funcgraph", bzimage, [])) as t:
        reset = (
            "cd /sys/kernel/tracing; echo nop > current_tracer; echo 0 > tracing_on; echo > trace; for o in "
            "funcgraph-retval funcgraph-retaddr funcgraph-proc funcgraph-abstime funcgraph-tail; do echo 0 > options/$o; "
            "done; echo do_sys_openat2 > set_graph_function; echo function_graph > current_tracer; "
        )
        work = "echo 1 > tracing_on; cat /proc/version > /dev/null; ls /nonexistent; ls / > /dev/null; echo 0 > tracing_on; "
        for name, options in (
            ("retval", "funcgraph-retval"),
            ("retval-retaddr-tail", "funcgraph-retval funcgraph-retaddr funcgraph-tail funcgraph-proc funcgraph-abstime"),
        ):
            on = "".join(f"echo 1 > options/{o}; " for o in options.split())
            r = t.run(reset + on + work + "cat trace", timeout=300)
            (out / f"7.3-{name}.txt").write_text(r.stdout)


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    record_printk(out, Path(sys.argv[2]))
    record_kprobes(out)
    record_funcgraph_args(out)
    record_funcgraph_retval(out, Path(sys.argv[3]))
