"""Digests of decoded tables that do not depend on the polars / pyarrow version: the fixture
tests/data/binary_decoder_tables.json holds them for every shared trace.dat and perfetto file, as
decoded by the reader before the native rewrite (issue 26), and tests/test_binary_decoder_tables.py
checks that today's readers give the same tables.

The fixture's "mutated" part holds the raw tables (tracedat.read) of shared traces changed in a way the
test module repeats (e.g. a ring-buffer page moved back in time), as main's record-index path decoded them.

A table digest is its height, its columns in order with their polars dtype (Categorical shown as
Categorical, its values compared as text) and one sha256 per column over the repr of its Python values
(None for null). `python tests/table_digest.py` rewrites the fixture from the installed reader.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import polars as pl

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "data" / "binary_decoder_tables.json"
# meta keys that name where the file was read from (not what the reader decoded)
VOLATILE_META = ("source_path",)


def column_digest(s: pl.Series) -> str:
    """sha256 of the column's values as Python objects (Categorical and Enum as their text)."""
    if s.dtype == pl.Categorical or s.dtype == pl.Enum:
        s = s.cast(pl.String)
    h = hashlib.sha256()
    for chunk_start in range(0, len(s), 1 << 16):
        h.update(repr(s.slice(chunk_start, 1 << 16).to_list()).encode())
    return h.hexdigest()


def table_digest(df: pl.DataFrame) -> dict:
    return {
        "rows": df.height,
        "columns": [[name, str(dtype), column_digest(df[name])] for name, dtype in df.schema.items()],
    }


def trace_digest(path: Path) -> dict:
    """{"tables": {name: table_digest}, "meta": meta without VOLATILE_META} of read_trace(path)."""
    from abtest.trace.readers import read_trace

    data = read_trace(path)
    meta = {k: v for k, v in data.meta.items() if k not in VOLATILE_META}
    return {
        "tables": {name: table_digest(df) for name, df in sorted(data.tables.items())},
        "meta": json.loads(json.dumps(meta, sort_keys=True, default=str)),
    }


def binary_traces(root: Path) -> list[Path]:
    """Every shared trace.dat and perfetto file under `root` (../shared/traces), sorted."""
    found = [
        p
        for p in root.rglob("*")
        if p.is_file() and (p.suffix == ".dat" or p.suffix == ".pb" or p.name.endswith(".perfetto-trace"))
    ]
    return sorted(found)


def main() -> None:
    sys.path.insert(0, str(HERE))
    from shared_data import TRACES

    old = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}
    out = {
        "traces": {str(p.relative_to(TRACES)): trace_digest(p) for p in binary_traces(TRACES)},
        "mutated": old.get("mutated", {}),
    }  # made once by the reader of main (see the test module)
    FIXTURE.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE}: {len(out['traces'])} traces")


if __name__ == "__main__":
    main()
