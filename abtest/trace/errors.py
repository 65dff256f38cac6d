"""Errors raised by trace readers and analyses. Every message names the file and where it went wrong."""

from __future__ import annotations


class TraceFormatError(ValueError):
    """A trace file is truncated, corrupt or not in the expected format.

    Attributes:
        path: the file that failed.
        offset: byte offset (binary formats) where decoding failed, or None.
        line: 1-based line number (text formats), or None.
        expected: short description of what the reader expected to find.
    """

    def __init__(
        self, path, message: str, *, offset: int | None = None, line: int | None = None, expected: str | None = None
    ):
        self.path = str(path)
        self.offset = offset
        self.line = line
        self.expected = expected
        where = ""
        if offset is not None:
            where = f" at byte offset {offset} (0x{offset:x})"
        elif line is not None:
            where = f" at line {line}"
        exp = f"; expected {expected}" if expected else ""
        super().__init__(f"{self.path}{where}: {message}{exp}")


class MissingEventsError(LookupError):
    """An analysis needs events the trace does not contain.

    The message names the missing events and how to record them.
    """

    def __init__(self, analysis: str, missing: list[str], path: str | None = None):
        self.analysis = analysis
        self.missing = sorted(missing)
        ev = " ".join(f"-e {e}" for e in self.missing)
        src = f" in {path}" if path else ""
        super().__init__(
            f"{analysis} needs events {', '.join(self.missing)} which are absent{src}. "
            f"Record them, e.g. `trace-cmd record {ev}` (or enable them under "
            f"/sys/kernel/tracing/events and `trace-cmd extract`), or with "
            f"`abtest collect`, which enables what the requested analyses declare."
        )


class AnalysisNotApplicable(ValueError):
    """An analysis does not apply to this trace for a reason other than absent events: it needs platform data
    the trace does not carry (an energy model, idle-state residencies, OPPs), or its input tables are present
    but empty. The message says what is missing and how to provide it.

    Callers that run many analyses (Trace.metrics, windows, compare, `abtest analyze`) catch this and
    MissingEventsError only, and report them as "skipped"; any other exception is a failure of that analysis
    and is reported as one. A subclass of ValueError so that code catching ValueError keeps working.
    """
