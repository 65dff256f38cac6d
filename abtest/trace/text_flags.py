"""The latency-format flags column of ftrace text -> ``common_flags`` / ``common_preempt_count`` (UInt8).

Two writers print this column, with different letters (facts from the kernel's trace_output.c and
libtraceevent's latency format, checked against the binary fields of real trace.dat files in
tests/test_text_flags.py):

kernel (tracefs ``trace``/``trace_pipe``, atrace, systrace; CPU in brackets: ``[001] dN.2.``)
    char 0  irqs-off     ``.`` 0, ``d`` IRQS_OFF 0x01, ``X`` IRQS_NOSUPPORT 0x02 (old kernels), ``b`` BH_OFF 0x80,
                         ``D`` IRQS_OFF|BH_OFF 0x81
    char 1  need-resched ``.`` 0, ``n`` NEED_RESCHED 0x04, ``p`` PREEMPT_RESCHED 0x20, ``N`` both 0x24,
                         lazy (6.13+, NEED_RESCHED_LAZY reuses bit 0x02): ``l`` 0x02, ``L`` 0x22, ``b`` 0x06, ``B`` 0x26
    char 2  irq context  ``.`` 0, ``h`` HARDIRQ 0x08, ``s`` SOFTIRQ 0x10, ``H`` both 0x18, ``z`` NMI 0x40,
                         ``Z`` NMI|HARDIRQ 0x48
    char 3  preempt depth: hex digit or ``.`` (0) -> common_preempt_count bits 0-3
    char 4  (5.13+) migrate-disable depth: hex digit or ``.`` -> common_preempt_count bits 4-7
  Every bit of common_flags and common_preempt_count is recoverable: the values equal the binary fields.

trace-cmd report -l (libtraceevent; CPU digits run into the flags: ``1dN.2.``)
    same columns, but ``N`` is NEED_RESCHED alone (0x04) and PREEMPT_RESCHED (0x20), NMI (0x40) and
    BH_OFF (0x80) are not printed: common_flags holds only the bits 0x1f (LATENCY_FORM_FLAG_BITS) and
    ``meta["text_columns"]["flags_bits"]`` says so.

A flags column that does not fit (unknown letter, preempt depth of more than two hex digits) gives
null for that row, never a guess.
"""

from __future__ import annotations

import polars as pl

KERNEL_FLAG_BITS = 0xFF
LATENCY_FORM_FLAG_BITS = 0x1F

_IRQS = {".": 0, "d": 0x01, "X": 0x02, "b": 0x80, "D": 0x81}
_RESCHED_KERNEL = {".": 0, "n": 0x04, "p": 0x20, "N": 0x24, "l": 0x02, "L": 0x22, "b": 0x06, "B": 0x26}
_RESCHED_LATENCY_FORM = {".": 0, "N": 0x04}
_CONTEXT = {".": 0, "h": 0x08, "s": 0x10, "H": 0x18, "z": 0x40, "Z": 0x48}


def _nibble(ch: pl.Expr) -> pl.Expr:
    """One hex digit or '.' -> 0..15 (Int32); anything else -> null."""
    return pl.when(ch == ".").then(pl.lit(0)).otherwise(ch.str.to_integer(base=16, strict=False)).cast(pl.Int32)


def flags_columns(flags: pl.Expr, latency_form: pl.Expr) -> list[pl.Expr]:
    """Expressions for ``common_flags`` and ``common_preempt_count`` (UInt8, null where unknown).

    flags: the flags text (``d..2.``); latency_form: True on rows printed by ``trace-cmd report -l``.
    """

    def char(i: int) -> pl.Expr:
        return flags.str.slice(i, 1)

    def lookup(i: int, mapping: dict[str, int]) -> pl.Expr:
        return char(i).replace_strict(mapping, default=None, return_dtype=pl.Int32)

    resched = pl.when(latency_form).then(lookup(1, _RESCHED_LATENCY_FORM)).otherwise(lookup(1, _RESCHED_KERNEL))
    bits = lookup(0, _IRQS) | resched | lookup(2, _CONTEXT)
    depth = flags.str.slice(3)
    n = depth.str.len_chars()
    low = _nibble(depth.str.slice(0, 1))
    high = pl.when(n == 2).then(_nibble(depth.str.slice(1, 1))).when(n == 1).then(pl.lit(0))
    preempt = low | (high * 16)
    well_formed = flags.str.len_chars().is_between(4, 5)
    return [
        pl.when(well_formed).then(bits).cast(pl.UInt8).alias("common_flags"),
        pl.when(well_formed).then(preempt).cast(pl.UInt8).alias("common_preempt_count"),
    ]
