"""Regenerate the synthetic workload-result files in this folder (deterministic; run from anywhere).

These are SYNTHETIC files written in the real formats (schemas and text layouts as Android /
Jankbench / Geekbench produce them); they are not device data. See README.md.
"""
from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

HERE = Path(__file__).resolve().parent
INT64_MAX = 9223372036854775807


def jankbench_db(path: Path) -> None:
    """Jankbench results DB: table ui_results, one row per frame, stage durations in ms."""
    rng = random.Random(7)
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    con.execute(
        "CREATE TABLE ui_results (_id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, run_id INTEGER, "
        "iteration INTEGER, timestamp TEXT, unknown_delay REAL, input REAL, animation REAL, layout REAL, "
        "draw REAL, sync REAL, command_issue REAL, swap_buffers REAL, total_duration REAL, "
        "jank_frame BOOLEAN, device_charging INTEGER)")
    ts = 1_700_000_000_000
    for run_id, name, base in ((1, "list_view", 7.0), (1, "image_list_view", 11.0), (1, "shadow_grid", 14.0)):
        for iteration in range(3):
            for _ in range(80):
                stages = [rng.uniform(0, 0.6), rng.uniform(0, 0.4), rng.uniform(0.1, 1.0), rng.uniform(0.2, 2.5),
                          rng.uniform(0.5, base / 2), rng.uniform(0.2, base / 3), rng.uniform(0.3, base / 3),
                          rng.uniform(0.1, 1.5)]
                if rng.random() < 0.06:  # an occasional long frame
                    stages[4] += rng.uniform(10, 30)
                total = sum(stages)
                ts += int(total * 1000) + 16_000
                con.execute("INSERT INTO ui_results (name, run_id, iteration, timestamp, unknown_delay, input, "
                            "animation, layout, draw, sync, command_issue, swap_buffers, total_duration, jank_frame, "
                            "device_charging) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                            (name, run_id, iteration, str(ts), *stages, total, int(total > 16.0), 0))
    con.commit()
    con.close()


def geekbench_json(path: Path) -> None:
    """Geekbench 5-style JSON export: score (single-core), multicore_score, sections[].name/score/workloads."""
    doc = {
        "version": 5, "date": "2026-11-21T14:00:00Z", "runtime": 183.4,
        "metrics": [{"name": "Model", "value": "synthetic"}],
        "score": 1043, "multicore_score": 3317,
        "sections": [
            {"id": 1, "name": "Single-Core", "score": 1043,
             "workloads": [{"id": 101, "name": "AES-XTS", "score": 1650}, {"id": 102, "name": "Text Compression", "score": 880}]},
            {"id": 2, "name": "Multi-Core", "score": 3317,
             "workloads": [{"id": 101, "name": "AES-XTS", "score": 5801}, {"id": 102, "name": "Text Compression", "score": 2702}]},
        ],
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")


def surfaceflinger_latency(path: Path) -> None:
    """`dumpsys SurfaceFlinger --latency <layer>`: refresh period, then 127 lines of
    desiredPresent<TAB>actualPresent<TAB>frameReady (ns); empty ring slots are 0 0 0, a frame whose
    present fence has not signalled shows INT64_MAX as actualPresent."""
    rng = random.Random(11)
    period = 16_666_666
    lines = [str(period)]
    empty = 20
    lines += ["0\t0\t0"] * empty
    vsync = 5_785_800_000_000
    n = 127 - empty - 1
    for _ in range(n):
        vsync += period * (2 if rng.random() < 0.08 else 1)  # ~8 % frames miss a vsync
        desired = vsync - period - rng.randint(0, 2_000_000)
        ready = vsync - rng.randint(1_000_000, 6_000_000)
        lines.append(f"{desired}\t{vsync}\t{ready}")
    lines.append(f"{vsync + period - 3_000_000}\t{INT64_MAX}\t{vsync + 5_000_000}")  # still pending
    path.write_text("\n".join(lines) + "\n\n")


_HEADER_12 = ("Flags,FrameTimelineVsyncId,IntendedVsync,Vsync,InputEventId,HandleInputStart,AnimationStart,"
              "PerformTraversalsStart,DrawStart,FrameDeadline,FrameInterval,FrameStartTime,SyncQueued,SyncStart,"
              "IssueDrawCommandsStart,SwapBuffers,FrameCompleted,DequeueBufferDuration,QueueBufferDuration,"
              "GpuCompleted,SwapBuffersCompleted,DisplayPresentTime,CommandSubmissionCompleted,")
_HEADER_LEGACY = ("Flags,IntendedVsync,Vsync,OldestInputEvent,NewestInputEvent,HandleInputStart,AnimationStart,"
                  "PerformTraversalsStart,DrawStart,SyncQueued,SyncStart,IssueDrawCommandsStart,SwapBuffers,"
                  "FrameCompleted,DequeueBufferDuration,QueueBufferDuration,")


def _frame_row(rng: random.Random, header: list[str], iv: int, flags: int, vsync_id: int, period: int) -> str:
    dur = int(rng.uniform(4, 14) * 1e6) if rng.random() > 0.1 else int(rng.uniform(18, 40) * 1e6)
    t = {"Flags": flags, "FrameTimelineVsyncId": vsync_id, "IntendedVsync": iv, "Vsync": iv + 20_000,
         "InputEventId": 0, "OldestInputEvent": 0, "NewestInputEvent": 0,
         "HandleInputStart": iv + 300_000, "AnimationStart": iv + 400_000, "PerformTraversalsStart": iv + 600_000,
         "DrawStart": iv + 900_000, "FrameDeadline": iv + period, "FrameInterval": period,
         "FrameStartTime": iv + 250_000, "SyncQueued": iv + dur // 2, "SyncStart": iv + dur // 2 + 50_000,
         "IssueDrawCommandsStart": iv + dur // 2 + 200_000, "SwapBuffers": iv + dur - 500_000,
         "FrameCompleted": iv + dur, "DequeueBufferDuration": 45_000, "QueueBufferDuration": 60_000,
         "GpuCompleted": iv + dur + 1_000_000, "SwapBuffersCompleted": iv + dur - 100_000,
         "DisplayPresentTime": 0, "CommandSubmissionCompleted": iv + dur - 300_000}
    return ",".join(str(t[h]) for h in header) + ","


def gfxinfo_framestats(path: Path, header_line: str, seed: int) -> None:
    """`dumpsys gfxinfo <pkg> framestats`: summary text, then the ---PROFILEDATA--- CSV block (ns)."""
    rng = random.Random(seed)
    header = header_line.rstrip(",").split(",")
    period = 16_666_666
    iv = 5_785_827_025_958
    rows = []
    for i in range(120):
        iv += period * (1 if rng.random() > 0.05 else 3)
        flags = 1 if i == 0 else (4 if i == 57 else 0)  # first frame (window layout) and one other flagged
        rows.append(_frame_row(rng, header, iv, flags, 10_858 + i, period))
    text = [
        "Applications Graphics Acceleration Info:",
        "Uptime: 5786900123 Realtime: 5786900123",
        "",
        "** Graphics info for pid 18926 [com.example.synthetic] **",
        "",
        "Stats since: 5785800000000ns",
        "Total frames rendered: 120",
        "Janky frames: 9 (7.50%)",
        "50th percentile: 9ms",
        "90th percentile: 14ms",
        "95th percentile: 21ms",
        "99th percentile: 36ms",
        "Number Missed Vsync: 3",
        "Number High input latency: 0",
        "Number Slow UI thread: 5",
        "Number Slow bitmap uploads: 0",
        "Number Slow issue draw commands: 2",
        "Number Frame deadline missed: 4",
        "",
        "Profile data in ms:",
        "",
        "\tcom.example.synthetic/com.example.synthetic.MainActivity/android.view.ViewRootImpl@8f8b7a (visibility=0)",
        "---PROFILEDATA---",
        header_line,
        *rows,
        "---PROFILEDATA---",
        "",
        "View hierarchy:",
        "",
        "  com.example.synthetic/com.example.synthetic.MainActivity/android.view.ViewRootImpl@8f8b7a",
        "  27 views, 36.45 kB of render nodes",
        "",
        "Total ViewRootImpl   : 1",
        "Total attached Views : 27",
        "",
    ]
    path.write_text("\n".join(text))


if __name__ == "__main__":
    jankbench_db(HERE / "jankbench_results.db")
    geekbench_json(HERE / "geekbench5_result.json")
    surfaceflinger_latency(HERE / "surfaceflinger_latency.txt")
    gfxinfo_framestats(HERE / "gfxinfo_framestats.txt", _HEADER_12, seed=3)
    gfxinfo_framestats(HERE / "gfxinfo_framestats_legacy.txt", _HEADER_LEGACY, seed=5)
    print("wrote", *sorted(p.name for p in HERE.iterdir() if p.suffix in (".db", ".json", ".txt")))
