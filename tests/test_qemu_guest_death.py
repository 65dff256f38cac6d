"""guest_death_reason: the one line the collector logs when a QEMU guest stops. The panic text below is
the serial-log tail of a Debian 6.12 guest that died under TCG in a CI run of test_collect_qemu.py."""

from abtest.targets.qemu import guest_death_reason

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
