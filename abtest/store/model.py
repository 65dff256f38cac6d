"""Values of the run store: one iteration and the metrics.json entries it carries."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from abtest.store.layout import METRICS_FILE


class StoreError(ValueError):
    """A store, label or iteration directory is missing or malformed. The message names the path."""


# JSON files of a store (metrics.json, meta.json) nest a few levels; deeper is damage or a hostile file, which
# the recursive code downstream (flattening meta.json into conditions, printing) must never meet
MAX_JSON_DEPTH = 32
# integer literals longer than this many digits are refused, naming their key (Python's own limit for int <-> str,
# whose ValueError named neither file nor key); longer than a float goes (about 1.8e308) is Metric.from_json's error
MAX_INT_DIGITS = 4300


class _LongInt:
    """Stand-in for an integer literal of more than MAX_INT_DIGITS digits, found and reported after parsing."""

    def __init__(self, digits: int):
        self.digits = digits


def _parse_int(text: str):
    digits = len(text.lstrip("+-"))
    return _LongInt(digits) if digits > MAX_INT_DIGITS else int(text)


def _key_path(keys: tuple) -> str:
    """("hardware", "deep", 0, 0) -> "hardware.deep[0][0]" (the first 8 keys, at most 200 characters)."""
    shown = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys[:8]).lstrip(".")
    return (shown[:200] + (" ..." if len(keys) > 8 or len(shown) > 200 else "")) or "(top level)"


def _check_tree(doc, path: Path) -> None:
    """StoreError naming the file and the key when `doc` nests deeper than MAX_JSON_DEPTH or holds a too-long
    integer (walked without recursion)."""
    stack = [(doc, ())]
    while stack:
        value, keys = stack.pop()
        if isinstance(value, _LongInt):
            raise StoreError(
                f"{path}: key {_key_path(keys)}: an integer of {value.digits} digits (at most "
                f"{MAX_INT_DIGITS} are read)"
            )
        if len(keys) > MAX_JSON_DEPTH:
            raise StoreError(f"{path}: key {_key_path(keys)}: nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(value, dict):
            stack.extend((v, keys + (k,)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, keys + (i,)) for i, v in enumerate(value))


def read_json(path: Path, expected: str = "") -> object:
    """The JSON document in `path`. Raises StoreError naming the file (and the key or the line) for text that
    is not UTF-8, invalid JSON, nesting deeper than MAX_JSON_DEPTH (or than Python's parser goes) and integer
    literals of more than MAX_INT_DIGITS digits. expected: what the file should hold, appended to syntax
    errors."""
    hint = f"; expected {expected}" if expected else ""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"), parse_int=_parse_int)
    except UnicodeDecodeError as e:
        raise StoreError(f"{path}: not UTF-8 text (byte offset {e.start}){hint}") from e
    except json.JSONDecodeError as e:
        raise StoreError(f"{path}: line {e.lineno} column {e.colno}: invalid JSON ({e.msg}){hint}") from e
    except RecursionError:
        raise StoreError(f"{path}: nested deeper than {MAX_JSON_DEPTH} levels (arrays or objects)") from None
    except ValueError as e:  # e.g. a float literal Python cannot convert
        raise StoreError(f"{path}: {e}") from e
    _check_tree(doc, path)
    return doc


@dataclass(frozen=True)
class Metric:
    """One scalar measured in one iteration.

    value: the number, in `unit`.  lower_is_better: direction of "better" (power, jank, latency: True;
    fps, score: False; None: no preferred direction, e.g. a residency).  source: where it came from
    ("metrics.json", "power.csv", "trace:<module>").
    """

    value: float
    unit: str = ""
    lower_is_better: bool | None = True
    source: str = METRICS_FILE

    def to_json(self) -> dict:
        return {"value": self.value, "unit": self.unit, "lower_is_better": self.lower_is_better, "source": self.source}

    @classmethod
    def from_json(cls, obj, *, where: str = "", source: str = METRICS_FILE) -> Metric:
        """Build from the metrics.json entry form `{"value", "unit", "lower_is_better"}` (or a Metric)."""
        if isinstance(obj, Metric):
            return obj
        if not isinstance(obj, dict) or "value" not in obj:
            raise StoreError(f"{where}: expected an object with 'value', 'unit', 'lower_is_better'; got {obj!r}")
        raw = obj["value"]
        if raw is None:
            value = math.nan
        elif isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise StoreError(f"{where}: 'value' must be a number, got {raw!r}")
        else:
            try:
                value = float(raw)
            except OverflowError:
                raise StoreError(
                    f"{where}: 'value' {str(raw)[:20]}... is out of the range of a float (about 1.8e308)"
                ) from None
        lib = obj.get("lower_is_better", True)
        if lib is not None and not isinstance(lib, bool):
            raise StoreError(f"{where}: 'lower_is_better' must be true, false or null, got {lib!r}")
        return cls(
            value=value, unit=str(obj.get("unit", "")), lower_is_better=lib, source=str(obj.get("source", source))
        )


@dataclass
class Iteration:
    """One run of one workload on one kernel.

    label: kernel label (the directory under STORE).  workload: workload name.  index: iteration number
    (trailing digits of the directory name, else its position).  path: the iteration directory.
    complete: `.complete` present.  metrics: name -> Metric (from metrics.json; derived metrics are added by
    abtest.compare.metrics).  meta: meta.json contents.  trace_path / power_path / battor_path / platform_path: files or
    None.
    name: directory name.  problems: why the iteration is unusable (empty when fine).
    """

    label: str
    workload: str
    index: int
    path: Path
    complete: bool
    metrics: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    trace_path: Path | None = None
    power_path: Path | None = None
    battor_path: Path | None = None
    platform_path: Path | None = None
    name: str = ""
    problems: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if not self.name:
            self.name = self.path.name
        # Accept plain metrics.json-style dicts (e.g. from interop converters).
        self.metrics = {k: Metric.from_json(v, where=f"{self.path}: metric {k!r}") for k, v in self.metrics.items()}

    @property
    def usable(self) -> bool:
        """Complete and nothing wrong with it."""
        return self.complete and not self.problems
