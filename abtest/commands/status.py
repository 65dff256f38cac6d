"""A spinner on stderr for the silent stretches of a command (rich; only when stderr is a terminal).

`abtest explain` reads the per-iteration metrics, compares and decomposes for 1-5 s before it prints anything;
a user at a terminal should see that it works, a pipe or a CI log should see nothing. The spinner appears
only once the stretch has lasted `delay_s` (a short command prints no flicker), says which step runs, and is
erased when the step ends (transient), before the command prints its result.

    with DelayedStatus("comparing A and B") as status:
        ...
        status.update("explaining the power change")

`status.console` (None when stderr is not a terminal) is the stderr console of the spinner: a progress bar
shown meanwhile (compare's per-iteration bar) is given the same console, and rich then nests the two live
displays instead of letting them overwrite each other's lines.
"""

from __future__ import annotations

import sys
import threading


class DelayedStatus:
    """Context manager: a transient rich spinner on stderr that starts after `delay_s` seconds; disabled (no
    thread, no rich import) when stderr is not a terminal, or when `enabled` is False."""

    def __init__(self, message: str, *, delay_s: float = 0.5, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.delay_s = delay_s
        self._message = message
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._status = None
        self._stopped = False
        self.console = None
        if self.enabled:
            from rich.console import Console

            self.console = Console(stderr=True)

    def __enter__(self) -> DelayedStatus:
        if self.enabled:
            self._timer = threading.Timer(self.delay_s, self._start)
            self._timer.daemon = True
            self._timer.start()
        return self

    def _start(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._status = self.console.status(self._message)
            self._status.start()

    def update(self, message: str) -> None:
        """Say which step runs now."""
        with self._lock:
            self._message = message
            if self._status is not None:
                self._status.update(message)

    def stop(self) -> None:
        """Erase the spinner (idempotent; also at the end of the with block)."""
        with self._lock:
            self._stopped = True
            if self._timer is not None:
                self._timer.cancel()
            if self._status is not None:
                self._status.stop()
                self._status = None

    def __exit__(self, *exc) -> None:
        self.stop()
