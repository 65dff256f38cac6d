"""Cool-down before an iteration: a fixed pause, then the target's thermal zones polled until the hottest is
at or below a temperature (bounded). Options over the target file's [cooldown] table."""

from __future__ import annotations

import time

from abtest.collectors.plan import CollectConfig
from abtest.targets.base import Target
from abtest.targets.shell import quote_glob

THERMAL_TEMPS = "/sys/class/thermal/thermal_zone*/temp"


def wait_cooldown(
    t: Target,
    *,
    fixed_s: float = 0.0,
    thermal_max_c: float | None = None,
    timeout_s: float = 300.0,
    temp_glob: str = THERMAL_TEMPS,
    poll_s: float = 2.0,
) -> dict:
    """Sleep fixed_s, then poll the target's thermal zones (milli-degC files matching temp_glob) until the
    hottest is at or below thermal_max_c, for at most timeout_s. Returns what happened, for meta.json:
    {"fixed_s", "thermal_max_c", "zones", "max_temp_c" (last reading), "reached", "waited_s"}."""
    out = {"fixed_s": fixed_s, "thermal_max_c": thermal_max_c, "waited_s": 0.0, "reached": True}
    t0 = time.monotonic()
    if fixed_s:
        time.sleep(fixed_s)
    if thermal_max_c is not None:
        while True:
            temps = [
                int(x) / 1000
                for x in t.run(f"cat {quote_glob(temp_glob)} 2>/dev/null", 30).stdout.split()
                if x.lstrip("-").isdigit()
            ]
            out["zones"] = len(temps)
            out["max_temp_c"] = max(temps) if temps else None
            if not temps:
                out["reached"] = None  # no thermal zone to wait on
                break
            if max(temps) <= float(thermal_max_c):
                break
            if time.monotonic() - t0 > timeout_s:
                out["reached"] = False
                break
            time.sleep(poll_s)
    out["waited_s"] = round(time.monotonic() - t0, 3)
    return out


def cooldown(t: Target, cc: CollectConfig) -> dict:
    """wait_cooldown with the collection's options, else the target file's [cooldown] values."""
    c = cc.target_cfg.cooldown
    return wait_cooldown(
        t,
        fixed_s=cc.cooldown_fixed_s if cc.cooldown_fixed_s is not None else float(c.get("fixed_s", 0)),
        thermal_max_c=cc.cooldown_thermal_max_c if cc.cooldown_thermal_max_c is not None else c.get("thermal_max_c"),
        timeout_s=cc.cooldown_timeout_s if cc.cooldown_timeout_s is not None else float(c.get("timeout_s", 300)),
        temp_glob=c.get("temp_glob", THERMAL_TEMPS),
    )
