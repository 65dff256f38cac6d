"""Every shared trace.dat and perfetto file decodes to the tables (and metadata) it decoded to before the
native core was rewritten (issue 26): tests/data/binary_decoder_tables.json holds their digests
(tests/table_digest.py), made with the reader of main at commit 211803b; and so does a shared trace with a
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
