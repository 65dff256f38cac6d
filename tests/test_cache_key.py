"""The cache key of a trace (blake2b of its bytes) is remembered by the file's identity (abtest.trace.cache
content_key): an unchanged file is read once, a file written again is hashed again, a recent file every time.
A real shared trace is copied into tmp_path so that its mtime and content can be changed."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from abtest import Trace
from abtest.trace import cache


@pytest.fixture
def hashed(monkeypatch, tmp_path):
    """Counts the files whose bytes content_key reads; the cache root in tmp_path."""
    monkeypatch.setenv("ABTEST_CACHE_DIR", str(tmp_path / "cache"))
    calls: list[str] = []
    real = cache.hash_content

    def counting(path):
        calls.append(str(path))
        return real(path)

    monkeypatch.setattr(cache, "hash_content", counting)
    return calls


def _settled_copy(traces, tmp_path, name="trace.dat"):
    path = tmp_path / name
    shutil.copyfile(traces / "lisa/sched_load-trace.dat", path)
    old = time.time() - 60
    os.utime(path, (old, old))
    return path


def test_an_unchanged_file_is_read_once(traces, tmp_path, hashed):
    path = _settled_copy(traces, tmp_path)
    first = cache.content_key(path)
    assert first == cache.hash_content(path)
    hashed.clear()
    assert cache.content_key(path) == first
    assert Trace(path).events and Trace(path).events  # two opens (the second one maps the cache)
    assert hashed == []
    # a link to it (a store's iterations often are) shares what is remembered
    link = tmp_path / "link.dat"
    link.symlink_to(path)
    assert cache.content_key(link) == first and hashed == []


def test_a_rewritten_file_is_hashed_again(traces, tmp_path, hashed):
    path = _settled_copy(traces, tmp_path)
    first = cache.content_key(path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # same size, other content, written now (new mtime)
    path.write_bytes(bytes(data))
    hashed.clear()
    second = cache.content_key(path)
    assert hashed == [str(path)] and second != first
    # written just now: not remembered yet, hashed at every open until it has settled
    assert cache.content_key(path) == second and len(hashed) == 2
    old = time.time() - 60
    os.utime(path, (old, old))
    cache.content_key(path)
    hashed.clear()
    assert cache.content_key(path) == second and hashed == []


def test_the_same_bytes_under_another_inode_are_hashed_again(traces, tmp_path, hashed):
    path = _settled_copy(traces, tmp_path)
    first = cache.content_key(path)
    st = path.stat()
    shutil.copyfile(path, tmp_path / "tmp.dat")
    os.replace(tmp_path / "tmp.dat", path)  # same size, same bytes, same mtime, a new inode
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    hashed.clear()
    assert cache.content_key(path) == first and len(hashed) == 1


def test_a_new_reader_version_or_a_damaged_note_is_hashed_again(traces, tmp_path, hashed, monkeypatch):
    path = _settled_copy(traces, tmp_path)
    first = cache.content_key(path)
    note = cache._key_note(os.path.realpath(path))
    note.write_text("{not json")
    hashed.clear()
    assert cache.content_key(path) == first and len(hashed) == 1
    monkeypatch.setattr(cache, "READER_VERSION", "999")
    hashed.clear()
    assert cache.content_key(path) != first and len(hashed) == 1
    # the environment that changes a reader's output (abtest.trace.text_lines.PLAIN_PRINTK_ENV) changes the key
    second = cache.content_key(path)
    monkeypatch.setenv("ABTEST_PLAIN_PRINTK", "0")
    assert cache.content_key(path) != second


def test_a_read_only_cache_root_still_gives_the_key(traces, tmp_path, hashed, monkeypatch):
    path = _settled_copy(traces, tmp_path)
    monkeypatch.setenv("ABTEST_CACHE_DIR", "/proc/abtest-no-such-dir")
    assert cache.content_key(path) == cache.hash_content(path)
