"""abtest.commands.status.DelayedStatus: the spinner `abtest explain` shows on stderr at a terminal."""

from __future__ import annotations

import time

from abtest.commands.status import DelayedStatus


def test_nothing_when_stderr_is_not_a_terminal(capsys):
    with DelayedStatus("working", delay_s=0.0) as status:  # pytest's captured stderr is not a terminal
        time.sleep(0.05)
        status.update("still working")
    assert status.console is None and status._timer is None
    assert capsys.readouterr().err == ""


def test_starts_after_the_delay_and_stops_at_the_end():
    with DelayedStatus("working", delay_s=0.0, enabled=True) as status:
        deadline = time.monotonic() + 5
        while status._status is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert status._status is not None  # started by the timer
        status.update("step 2")
    assert status._status is None and status._stopped


def test_a_short_stretch_shows_nothing():
    with DelayedStatus("working", delay_s=10.0, enabled=True) as status:
        pass
    assert status._status is None  # the timer was cancelled before it fired
    assert not status._timer.is_alive() or status._timer.finished.is_set()
