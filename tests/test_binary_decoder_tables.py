"""Every shared trace.dat and perfetto file decodes to the tables (and metadata) it decoded to before the
native core was rewritten (issue 26): tests/data/binary_decoder_tables.json holds their digests
(tests/table_digest.py), made with the reader of main at commit 211803b."""
from __future__ import annotations

import json

import pytest

from shared_data import TRACES
from table_digest import FIXTURE, binary_traces, trace_digest

EXPECTED = json.loads(FIXTURE.read_text())


def test_fixture_covers_every_shared_binary_trace(traces):
    assert sorted(str(p.relative_to(traces)) for p in binary_traces(traces)) == sorted(EXPECTED)


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_tables_and_meta_unchanged(traces, rel):
    got = trace_digest(TRACES / rel)
    want = EXPECTED[rel]
    assert sorted(got["tables"]) == sorted(want["tables"])
    for name, table in want["tables"].items():
        assert got["tables"][name] == table, f"{rel}: table {name} differs"
    assert got["meta"] == want["meta"]
