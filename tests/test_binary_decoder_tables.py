"""Every shared trace.dat and perfetto file decodes to the tables (and metadata) it decoded to before the
native core was rewritten (issue 26): tests/data/binary_decoder_tables.json holds their digests
(tests/table_digest.py), made with the reader of main at commit 211803b and remade at 33264a0 (same tables;
main's metadata had gained cpus_header, import_errors, inferred_gaps...; perfetto's extension packet 76 named
frame_timeline_event since issue 38); and so does a shared trace with a
ring-buffer page moved back in time (the one decode pipeline orders it as main's record-index path did:
a stable sort by timestamp of all records in file order)."""

from __future__ import annotations

import json
import struct

import pytest
from shared_data import TRACES
from table_digest import FIXTURE, binary_traces, table_digest, trace_digest

from abtest.trace import tracedat

EXPECTED = json.loads(FIXTURE.read_text())


def test_fixture_covers_every_shared_binary_trace(traces):
    assert sorted(str(p.relative_to(traces)) for p in binary_traces(traces)) == sorted(EXPECTED["traces"])


@pytest.mark.parametrize("rel", sorted(EXPECTED["traces"]))
def test_tables_and_meta_unchanged(traces, rel):
    got = trace_digest(TRACES / rel)
    want = EXPECTED["traces"][rel]
    assert sorted(got["tables"]) == sorted(want["tables"])
    for name, table in want["tables"].items():
        assert got["tables"][name] == table, f"{rel}: table {name} differs"
    assert got["meta"] == want["meta"]


def test_page_moved_back_in_time_orders_like_a_stable_sort(tmp_path):
    """The lisa trace's largest CPU's middle page stamped 1 ms before that CPU's first page: every table
    is what main's record-index path made of it (a stable sort by timestamp of all records in file order),
    and the metadata says so in one more warning than main gave."""
    src = TRACES / "lisa" / "sched_load-trace.dat"
    data = bytearray(src.read_bytes())
    lay = tracedat.layout(src, bytes(data))
    cpu = max((c for c in lay["buffers"][0]["cpus"] if c["size"]), key=lambda c: c["size"])
    middle = cpu["offset"] + (cpu["size"] // lay["page_size"] // 2) * lay["page_size"]
    first_ts = struct.unpack_from("<Q", data, cpu["offset"])[0]
    struct.pack_into("<Q", data, middle, first_ts - 1_000_000)
    raw, meta = tracedat.read(src, bytes(data))
    want = EXPECTED["mutated"]["lisa/sched_load-trace.dat:backwards-page"]
    assert {n: table_digest(df) for n, df in sorted(raw.items())} == want["tables"]
    new = [w for w in meta["warnings"] if w not in want["meta"]["warnings"]]
    assert new == [
        f"CPU {cpu['cpu']}: 1 records are earlier than the record before them on that CPU (ring-buffer "
        f"pages out of time order); every table is ordered by timestamp"
    ]
    meta["warnings"] = want["meta"]["warnings"]
    assert json.loads(json.dumps(meta, default=str)) == want["meta"]
