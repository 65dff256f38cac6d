"""Store writes that a hostile tree cannot redirect (issue 27 items 15, 16): abtest.safe_io and its use by the
run-store writer and `abtest collect`, on the real filesystem."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from abtest.safe_io import UnsafePathError, check_name, confined, write_file_no_follow
from abtest.store.writer import IterationWriter, discard_stale_temps

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("bad", ["", "..", ".", "../../escape_label", "a/b", "a\\b", ".hidden", "x\ny", "nul\0"])
def test_check_name_refuses_what_is_not_a_plain_name(bad):
    with pytest.raises(UnsafePathError):
        check_name(bad, "label")


@pytest.mark.parametrize("good", ["menu", "kernel-6.1.0", "A_B", "teo+util", "6.12"])
def test_check_name_takes_plain_names(good):
    assert check_name(good) == good


def test_confined_follows_symlinks(tmp_path):
    store, outside = tmp_path / "store", tmp_path / "outside"
    store.mkdir()
    outside.mkdir()
    (store / "label").symlink_to(outside)
    with pytest.raises(UnsafePathError):
        confined(store / "label" / "wl", store)
    with pytest.raises(UnsafePathError):
        confined(store / ".." / "outside", store)
    assert confined(store / "ok" / "wl", store) == (store / "ok" / "wl").resolve()


def test_write_file_no_follow_replaces_a_planted_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("root-owned secret\n")
    victim.chmod(0o600)
    d = tmp_path / "iteration"
    d.mkdir()
    (d / ".abtest-metrics.json").symlink_to(victim)
    write_file_no_follow(d, ".abtest-metrics.json", '{"key": 1}\n')
    assert victim.read_text() == "root-owned secret\n"  # not written through
    assert not (d / ".abtest-metrics.json").is_symlink()
    assert (d / ".abtest-metrics.json").read_text() == '{"key": 1}\n'
    assert sorted(p.name for p in d.iterdir()) == [".abtest-metrics.json"]  # no temp file left


def test_write_file_no_follow_refuses_a_symlinked_directory(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    link = tmp_path / "label"
    link.symlink_to(outside)
    with pytest.raises(UnsafePathError):
        write_file_no_follow(link, "cache.json", "{}")
    assert not list(outside.iterdir())


def test_iteration_writer_refuses_a_label_dir_leading_out_of_the_store(tmp_path):
    store, outside = tmp_path / "store", tmp_path / "outside"
    store.mkdir()
    outside.mkdir()
    (store / "menu").symlink_to(outside)
    with pytest.raises(UnsafePathError):
        IterationWriter(store, "menu", "hackbench", 1)
    # the stale-temp sweep does not follow it either
    (outside / "hackbench" / ".tmp-1-99").mkdir(parents=True)
    (outside / "hackbench" / ".tmp-1-99" / "keep").write_text("x")
    assert discard_stale_temps(store) == []
    assert (outside / "hackbench" / ".tmp-1-99" / "keep").exists()


def test_iteration_writer_is_private_until_complete(tmp_path):
    w = IterationWriter(tmp_path / "store", "a", "wl", 1)
    assert w.tmp.stat().st_mode & 0o777 == 0o700
    (w.tmp / "trace.dat").write_bytes(b"x")
    os.chmod(w.tmp / "trace.dat", 0o600)
    final = w.commit({}, {"label": "a"})
    umask = os.umask(0)
    os.umask(umask)
    assert final.stat().st_mode & 0o777 == 0o777 & ~umask
    assert (final / "trace.dat").stat().st_mode & 0o777 == 0o600
    assert (final / ".complete").is_file() and (final / "meta.json").is_file()


def test_collect_refuses_traversal_in_label_and_workload_name(tmp_path):
    """The verified exploit of issue 27 item 15, now refused before anything is written."""
    store = tmp_path / "store"
    for args in (
        ["--label", "../../escape_label", "--workload", "shell:cmd=true"],
        ["--label", "ok", "--workload", "shell:name=../../../escape_wl,cmd=true"],
        ["--label", ".hidden", "--workload", "shell:cmd=true"],
    ):
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "abtest.cli",
                "collect",
                "--target",
                "localhost",
                "-n",
                "1",
                "--no-trace",
                "--no-progress",
                "--store",
                str(store),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert res.returncode == 2, res.stderr
        assert "path separator" in res.stderr or "starts with a dot" in res.stderr
    assert not store.exists() and not Path("/escape_wl").exists()
