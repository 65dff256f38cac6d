"""guest_death_reason: the one line the collector logs when a QEMU guest stops. The panic text below is
the serial-log tail of a Debian 6.12 guest that died under TCG in a CI run of test_collect_qemu.py."""

from abtest.targets.qemu import _kernel_from_dir, guest_death_reason

CI_PANIC_TAIL = """[    2.821522] CR2: 0000000000000000 CR3: 000000001d022000 CR4: 0000000000751ef0
[    2.821535] PKRU: 55555554
[    2.821591] Tainted: [D]=DIE
[    2.821607] Hardware name: QEMU Standard PC (i440FX + PIIX, 1996), BIOS 1.16.2-debian-1.16.2-1 04/01/2014
[    2.821620] RIP: 0010:sched_clock_cpu+0x9/0x190
[    2.821734] Kernel panic - not syncing: Fatal exception in interrupt
[    4.956583] Shutting down cpus with NMI
"""


def test_panic_line_and_rip_are_reported():
    assert guest_death_reason(CI_PANIC_TAIL) == (
        "guest kernel panic: Fatal exception in interrupt at sched_clock_cpu+0x9/0x190"
    )


def test_a_killed_guest_is_not_called_a_panic():
    booted = "[    1.2] Run /init as init process\nABTEST-READY 6.12.117+deb12-amd64\n"
    assert guest_death_reason(booted) == "no panic in the serial log"
    assert guest_death_reason("") == "no panic in the serial log"


def test_panic_without_oops_has_no_rip():
    log = "[    0.5] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)\r\n"
    assert guest_death_reason(log) == "guest kernel panic: VFS: Unable to mount root fs on unknown-block(0,0)"


def test_kernel_package_layouts_find_the_nic_module(tmp_path):
    """bookworm's kernel packages hold lib/modules, trixie's (merged /usr) usr/lib/modules: the e1000 module is
    found in both (before, a trixie kernel booted without it and its ssh never answered); a lib -> usr/lib link
    gives it once."""
    nic = "modules/6.18.15+deb13-amd64/kernel/drivers/net/ethernet/intel/e1000/e1000.ko.xz"
    for layout in ("lib", "usr/lib", "link"):
        d = tmp_path / layout.replace("/", "-")
        (d / "boot").mkdir(parents=True)
        (d / "boot/vmlinuz-6.18.15+deb13-amd64").write_bytes(b"")
        top = "usr/lib" if layout == "link" else layout
        (d / top / nic).parent.mkdir(parents=True)
        (d / top / nic).write_bytes(b"")
        if layout == "link":
            (d / "lib").symlink_to("usr/lib")
        kernel = _kernel_from_dir("linux-image-6.18.15+deb13-amd64", d)
        assert kernel.release == "6.18.15+deb13-amd64"
        assert [m.name for m in kernel.modules] == ["e1000.ko.xz"], layout
