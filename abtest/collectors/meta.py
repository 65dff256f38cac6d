"""meta.json contents: what a reviewer asks for ("kernel, version, hardware and the test condition").

One shell script gathers everything on the target in a single round trip; `parse_meta_output` turns
its sectioned output into a dict (pure function, tested on real output).
"""

from __future__ import annotations

import hashlib
import platform as host_platform
import re
import subprocess
from functools import lru_cache

from abtest.targets.base import Target

# Each section starts with a line "@@ name"; the parser keys on them.
META_SCRIPT = r"""
echo "@@ release"; uname -r
echo "@@ version"; uname -v
echo "@@ machine"; uname -m
echo "@@ cmdline"; cat /proc/cmdline
echo "@@ config"; if [ -r /proc/config.gz ]; then gzip -dc /proc/config.gz | sha256sum; \
  elif [ -r /boot/config-$(uname -r) ]; then sha256sum < /boot/config-$(uname -r); else echo none; fi
echo "@@ cpuinfo"; grep -m1 -E '^(model name|Hardware|cpu model)' /proc/cpuinfo; grep -c ^processor /proc/cpuinfo
echo "@@ meminfo"; grep -m1 MemTotal /proc/meminfo
echo "@@ boot_id"; cat /proc/sys/kernel/random/boot_id
echo "@@ uptime"; cat /proc/uptime
echo "@@ cpuidle"; d=/sys/devices/system/cpu/cpuidle; echo "driver $(cat $d/current_driver 2>/dev/null)"; \
  echo "governor $(cat $d/current_governor 2>/dev/null || cat $d/current_governor_ro 2>/dev/null)"
echo "@@ cpufreq"; for p in /sys/devices/system/cpu/cpufreq/policy*; do [ -d "$p" ] && \
  echo "${p##*/} $(cat $p/scaling_governor 2>/dev/null) $(cat $p/scaling_min_freq 2>/dev/null) $(cat $p/scaling_max_freq 2>/dev/null) $(cat $p/related_cpus 2>/dev/null)"; done
echo "@@ thermal"; for z in /sys/class/thermal/thermal_zone*; do [ -r "$z/temp" ] && \
  echo "${z##*/} $(cat $z/type 2>/dev/null) $(cat $z/temp 2>/dev/null)"; done
echo "@@ android"; getprop ro.build.fingerprint 2>/dev/null; getprop ro.product.model 2>/dev/null
echo "@@ tools"; trace-cmd -h 2>&1 | sed -n 's/^trace-cmd version \([^ ]*\).*/trace-cmd \1/p' | head -1; \
  busybox 2>&1 | head -1 | grep -o 'BusyBox v[^ ]*'
echo "@@ end"
"""  # noqa: E501 (a shell script: its lines stay whole)


def parse_meta_output(text: str) -> dict:
    """Sectioned META_SCRIPT output -> meta dict (kernel, hardware, governors, thermal, target tools)."""
    sections: dict[str, list[str]] = {}
    cur = None
    for line in text.splitlines():
        if line.startswith("@@ "):
            cur = line[3:].strip()
            sections[cur] = []
        elif cur is not None and line.strip():
            sections[cur].append(line.rstrip())

    def first(name: str) -> str:
        return sections.get(name, [""])[0] if sections.get(name) else ""

    cpu_lines = sections.get("cpuinfo", [])
    model = next((l.split(":", 1)[1].strip() for l in cpu_lines if ":" in l), "")
    ncpu = next((int(l) for l in cpu_lines if l.strip().isdigit()), None)
    mem = re.search(r"(\d+)", first("meminfo"))
    idle = dict(l.split(" ", 1) if " " in l else (l, "") for l in sections.get("cpuidle", []))
    freq = {}
    for l in sections.get("cpufreq", []):
        parts = l.split()
        if parts:
            freq[parts[0]] = {
                "governor": parts[1] if len(parts) > 1 else None,
                "min_khz": int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else None,
                "max_khz": int(parts[3]) if len(parts) > 3 and parts[3].isdigit() else None,
                "cpus": [int(c) for c in parts[4:] if c.isdigit()],
            }
    thermal = {}
    for l in sections.get("thermal", []):
        parts = l.split()
        if len(parts) >= 3 and re.fullmatch(r"-?\d+", parts[-1]):
            thermal[parts[0]] = {"type": " ".join(parts[1:-1]), "temp_c": int(parts[-1]) / 1000.0}
    cfg = first("config").split()[0] if first("config") else "none"
    tools = {}
    for l in sections.get("tools", []):
        if l.startswith("trace-cmd "):
            tools["trace-cmd"] = l.split()[1]
        elif l.startswith("BusyBox "):
            tools["busybox"] = l.split()[1]
    android = sections.get("android", [])
    up = first("uptime").split()
    return {
        "kernel": {
            "release": first("release"),
            "version": first("version"),
            "machine": first("machine"),
            "cmdline": first("cmdline"),
            "config_sha256": None if cfg == "none" else cfg,
        },
        "hardware": {
            "cpu_model": model,
            "cpus": ncpu,
            "memory_kb": int(mem.group(1)) if mem else None,
            "android_fingerprint": android[0] if android else None,
            "android_model": android[1] if len(android) > 1 else None,
        },
        "governors": {
            "cpuidle_driver": idle.get("driver") or None,
            "cpuidle": idle.get("governor") or None,
            "cpufreq": freq,
        },
        "thermal": thermal,
        "boot_id": first("boot_id"),
        "uptime_s": float(up[0]) if up else None,
        "target_tools": tools,
    }


def collect_target_meta(target: Target) -> dict:
    """Run META_SCRIPT on the target (one round trip) and parse it."""
    res = target.run(META_SCRIPT, 60, as_root=True)
    return parse_meta_output(res.stdout)


@lru_cache(maxsize=1)
def host_tools() -> dict:
    """Versions on the collecting host: abtest, python, trace-cmd, adb, qemu (None when absent)."""
    from abtest.version import __version__

    def ver(argv: list[str], pattern: str) -> str | None:
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        m = re.search(pattern, out.stdout + out.stderr)
        return m.group(1) if m else None

    return {
        "abtest": __version__,
        "python": host_platform.python_version(),
        "trace-cmd": ver(["trace-cmd", "-h"], r"trace-cmd version (\S+)"),
        "adb": ver(["adb", "version"], r"Android Debug Bridge version (\S+)"),
        "qemu": ver(["qemu-system-x86_64", "--version"], r"version (\S+)"),
    }


def tools_meta(meta: dict) -> dict:
    """meta.json "tools": the host's (host_tools) and the target's (popped from parse_meta_output's
    "target_tools", prefixed `target:`)."""
    return {**host_tools(), **{f"target:{k}": v for k, v in meta.pop("target_tools", {}).items()}}


def power_meta(power: dict | None, trace_meta: dict) -> dict | None:
    """meta.json "power" for a [power] sampler table (None: no sampler): samples stamped with CLOCK_BOOTTIME,
    aligned with the trace when its clock is boot."""
    if not power:
        return None
    return {
        "sampler": power.get("sampler"),
        "period_s": power.get("period_s", 0.5),
        "aligned": trace_meta.get("trace_clock") == "boot",
        "clock": "CLOCK_BOOTTIME",
    }


def workload_log(command: str, stdout: str, stderr: str, exit_code: int) -> str:
    """workload.log: the command, its stdout and stderr, its exit code."""
    return f"$ {command}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}\n--- exit {exit_code} ---\n"


def settings_hash(settings: dict) -> str:
    """Short stable hash of a settings dict (for meta.json)."""
    return hashlib.sha256(repr(sorted(settings.items())).encode()).hexdigest()[:16]
