"""Units of measured values: which spellings name the same quantity, and the factor between two of them.

A run store's metrics.json says each value's unit ("ms", "W", "uJ" ...). Two labels collected by different
tools or versions may write one metric in different units (A in ms, B in s); compare must then convert B's
values into A's unit, or refuse the metric, never compare the raw numbers (a real +20 % read as -99.88 %).

`unit_factor(src, dst)`: the number a value in `src` is multiplied by to be in `dst`, or None when the two are
not units of one quantity known here (a typo, "°C" vs "K", "points" vs "%"). Spellings are case-sensitive
("mW" is a milliwatt, "MW" a megawatt); "u", "µ" (micro sign) and "μ" (Greek mu) are all micro.

Quantities and base units: time (s), power (W), energy (J; Ws, Wh), frequency (Hz; "1/s", "/s"),
data (B); and spellings of one unit: frame rate ("fps" = "frames/s"), percent ("%", "pct"), degrees Celsius
("°C", "C", "degC"). This module imports nothing from abtest: every layer may use it.
"""

from __future__ import annotations

# SI prefix -> power of ten
_PREFIX = {"n": -9, "u": -6, "µ": -6, "μ": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9}


def _prefixed(base: str, quantity: str, prefixes: str, scale: int = 1) -> dict[str, tuple[str, int, int]]:
    """{prefix + base: (quantity, power of ten, scale)} for each SI prefix in `prefixes` (characters of _PREFIX;
    "" is always included): one unit is scale * 10**power base units of the quantity."""
    return {p + base: (quantity, _PREFIX[p], scale) for p in ("", *prefixes)}


# spelling -> (quantity, power of ten, scale): the unit is scale * 10**power base units (kept exact as integers
# so that ms -> us is exactly 1000)
_UNITS: dict[str, tuple[str, int, int]] = {
    **_prefixed("s", "time", "nuµμm"),
    "sec": ("time", 0, 1),
    "secs": ("time", 0, 1),
    "second": ("time", 0, 1),
    "seconds": ("time", 0, 1),
    "msec": ("time", -3, 1),
    "usec": ("time", -6, 1),
    "nsec": ("time", -9, 1),
    "min": ("time", 0, 60),
    "h": ("time", 0, 3600),
    **_prefixed("W", "power", "nuµμmkMG"),
    **_prefixed("J", "energy", "nuµμmkM"),
    **_prefixed("Ws", "energy", "nuµμmk"),
    **_prefixed("Wh", "energy", "uµμmk", scale=3600),
    **_prefixed("Hz", "frequency", "mkMG"),
    "1/s": ("frequency", 0, 1),
    "/s": ("frequency", 0, 1),
    **_prefixed("B", "data", "kMG"),
    # spellings of one unit: frame rate, percent, degrees Celsius (factor 1 between them)
    "fps": ("frame rate", 0, 1),
    "FPS": ("frame rate", 0, 1),
    "frames/s": ("frame rate", 0, 1),
    "frame/s": ("frame rate", 0, 1),
    "%": ("percent", 0, 1),
    "percent": ("percent", 0, 1),
    "pct": ("percent", 0, 1),
    "°C": ("temperature", 0, 1),
    "C": ("temperature", 0, 1),
    "degC": ("temperature", 0, 1),
}


def quantity(unit: str) -> str | None:
    """The quantity a unit spelling measures ("time", "power", "energy", "frequency", "data"), or None."""
    hit = _UNITS.get(unit.strip())
    return hit[0] if hit else None


def unit_factor(src: str, dst: str) -> float | None:
    """Factor converting a value in `src` into `dst` (value_dst = value_src * factor): 1.0 for the same
    spelling, None when the two are not known units of one quantity (never guessed)."""
    src, dst = src.strip(), dst.strip()
    if src == dst:
        return 1.0
    a, b = _UNITS.get(src), _UNITS.get(dst)
    if a is None or b is None or a[0] != b[0]:
        return None
    exp = a[1] - b[1]
    ratio = a[2] * 10**exp / b[2] if exp >= 0 else a[2] / (b[2] * 10**-exp)
    return float(ratio)
