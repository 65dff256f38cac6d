"""Parquet write layouts on the bench trace's tables: abtest's writer (uncompressed default, lz4_raw) vs polars'
writer (lz4 without statistics, zstd default). Prints best-of-5 write wall / CPU time, total file size, and
the best time for polars to read all the files back.

Usage: .venv/bin/python bench/parquet_layouts.py [TRACE]   (default: the trace bench/ingest.py records)
"""
import sys
import time, tempfile, shutil, resource
from pathlib import Path
import polars as pl
from abtest.trace.readers import read_trace
from abtest.trace.parquet_write import write_parquet_tables
p = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.home() / '.cache/abtest/bench/hackbench-sched-power.dat'
t = read_trace(p).tables
def cpu(): r=resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime+r.ru_stime
def size(d): return sum(f.stat().st_size for f in d.iterdir())/1e6
def run(name, fn):
    best=bestc=1e9; rb=1e9
    for i in range(5):
        d=Path(tempfile.mkdtemp()); c=cpu(); t0=time.perf_counter(); fn(d); w=time.perf_counter()-t0; c=cpu()-c
        best=min(best,w); bestc=min(bestc,c)
        t0=time.perf_counter(); [pl.read_parquet(f) for f in d.iterdir()]; rb=min(rb,time.perf_counter()-t0)
        s=size(d); shutil.rmtree(d)
    print(f"{name:28s} write wall {best*1e3:6.1f} ms CPU {bestc*1e3:6.1f} ms  files {s:5.1f} MB  polars read {rb*1e3:6.1f} ms")
run("abtest uncompressed", lambda d: write_parquet_tables(t, d))
run("abtest lz4_raw", lambda d: write_parquet_tables(t, d, compression="lz4_raw"))
run("polars lz4 no stats", lambda d: [df.write_parquet(d/f"{k}.parquet", compression="lz4", statistics=False) for k,df in t.items()])
run("polars zstd (default)", lambda d: [df.write_parquet(d/f"{k}.parquet") for k,df in t.items()])
