"""Platform descriptions (CPUs, frequency domains, OPPs, idle states, energy model) in one schema.

``load_platform(path_or_dict)`` reads any of:

* the project's own platform file (YAML or TOML; see "Platform file format" in
  docs/analysis-load-frequency-energy.md) or a target file embedding it under ``[platform]``,
* LISA ``plat_info.yml`` (``!!python/object`` tags are turned into plain dicts/lists; nothing is executed),
* LISA legacy platform JSON (``//`` comments and trailing commas allowed),
* Perfetto Wattson ``cpu_1d.csv`` power curves,
* a dict already in the schema below (validated and completed),

and returns a dict in this schema (units in the key names):

.. code-block:: text

    name                 str          platform name ("juno", "Tensor", ...)
    source               str          what was read ("LISA plat_info.yml: <path>")
    energy_model_source  str | None   label for energy estimates ("LISA plat_info.yml (juno)"); None = no EM
    notes                list[str]    assumptions made while loading (never silent)
    cpus   list of {cpu: int, domain: int, capacity: float | None (0..1024 at the domain's max OPP),
                    idle_states: [{index, name, target_residency_us, exit_latency_us, power_mw}]}
    domains list of {id: int, name: str | None, cpus: [int],
                    opps: [{frequency_khz: int, capacity: float | None (per CPU at this OPP),
                            power_mw: float | None (one busy CPU of the domain at this OPP),
                            static_mw: float | None (domain/cluster power while any CPU is busy),
                            idle_power_mw: [float] | None (per idle-state index, one idle CPU,
                                                          while the domain sits at this OPP)}]}
                    sorted by frequency_khz

``target_residency_us`` / ``exit_latency_us`` / ``power_mw`` are None when the source does not say.
Power values are what the model states: EAS models (LISA) may be in abstract "bogo" units scaled like mW.
"""

from __future__ import annotations

import csv
import functools
import json
import os
import re
import tomllib
import warnings
import weakref
from pathlib import Path
from typing import Any

import polars as pl

from abtest.ranges import number_ranges

__all__ = [
    "load_platform",
    "platform_from_meta",
    "trace_platform",
    "check_platform",
    "platform_mismatches",
    "PlatformMismatchError",
    "PlatformMismatchWarning",
    "df_cpus",
    "df_opps",
    "df_idle_states",
    "cpu_capacities",
    "domain_of_cpu",
]


class PlatformFormatError(ValueError):
    """A platform file is not in a recognised format or lacks required fields (message names the file)."""


class PlatformMismatchError(ValueError):
    """The platform does not describe the traced system: it would relabel idle states or place CPUs in
    domains they do not belong to. The message lists each disagreement."""


class PlatformMismatchWarning(UserWarning):
    """The platform disagrees with the trace in a way the analyses survive (frequencies outside its OPPs)."""


# -- YAML without executing anything ------------------------------------------------------------
# (yaml is imported when a YAML platform file is read: ~20 ms of every CLI start-up otherwise)
def _construct_inert(loader, tag_suffix: str, node):
    import yaml

    if isinstance(node, yaml.MappingNode):
        data: dict = {}
        yield data
        data.update(loader.construct_mapping(node))
    elif isinstance(node, yaml.SequenceNode):
        data_l: list = []
        yield data_l
        data_l.extend(loader.construct_sequence(node))
    else:
        yield loader.construct_scalar(node)


def _construct_mapping_unhashable_ok(loader, node, deep=False):
    import yaml

    # LISA dumps may use tuples (now lists) as keys; make them hashable
    if not isinstance(node, yaml.MappingNode):
        raise yaml.constructor.ConstructorError(None, None, "expected a mapping", node.start_mark)
    mapping = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, list):
            key = tuple(key)
        elif isinstance(key, dict):
            key = repr(key)
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


@functools.cache
def _inert_loader():
    """SafeLoader that turns every unknown tag (``!!python/object:...``, ``!call:...``) into plain data."""
    import yaml

    class _InertLoader(yaml.SafeLoader):
        pass

    _InertLoader.add_multi_constructor("tag:yaml.org,2002:python/", _construct_inert)
    _InertLoader.add_multi_constructor("!", _construct_inert)
    _InertLoader.construct_mapping = _construct_mapping_unhashable_ok  # type: ignore[assignment]
    return _InertLoader


def _yaml_load(text: str, path: str) -> Any:
    import yaml

    try:
        return yaml.load(text, Loader=_inert_loader())  # noqa: S506 - inert loader: no object construction
    except yaml.YAMLError as exc:
        raise PlatformFormatError(f"{path}: not valid YAML: {exc}") from exc


# -- helpers -----------------------------------------------------------------------------------
def _f(x) -> float | None:
    return None if x is None else float(x)


def _opp(freq, capacity=None, power=None, static=None, idle_power=None) -> dict:
    return {
        "frequency_khz": int(freq),
        "capacity": _f(capacity),
        "power_mw": _f(power),
        "static_mw": _f(static),
        "idle_power_mw": None if idle_power is None else [float(v) for v in idle_power],
    }


def _idle_state(index, name=None, target_residency_us=None, exit_latency_us=None, power_mw=None) -> dict:
    return {
        "index": int(index),
        "name": None if name is None else str(name),
        "target_residency_us": _f(target_residency_us),
        "exit_latency_us": _f(exit_latency_us),
        "power_mw": _f(power_mw),
    }


def _finish(
    name,
    source,
    em_source,
    domains: list[dict],
    cpu_caps: dict[int, float | None],
    cpu_idle: dict[int, list[dict]],
    notes: list[str],
) -> dict:
    """Assemble the schema; fill per-OPP capacity from CPU capacity x f/f_max when the source lacks it."""
    cpus = []
    for d in domains:
        d["opps"] = sorted(d["opps"], key=lambda o: o["frequency_khz"])
        d["cpus"] = sorted(int(c) for c in d["cpus"])
        fmax = d["opps"][-1]["frequency_khz"] if d["opps"] else None
        cap = next((cpu_caps.get(c) for c in d["cpus"] if cpu_caps.get(c) is not None), None)
        if cap is None and d["opps"] and d["opps"][-1]["capacity"] is not None:
            cap = d["opps"][-1]["capacity"]
        if cap is not None and fmax and any(o["capacity"] is None for o in d["opps"]):
            for o in d["opps"]:
                if o["capacity"] is None:
                    o["capacity"] = cap * o["frequency_khz"] / fmax
            notes.append(f"domain {d['id']}: OPP capacity = CPU capacity x f / f_max (frequency-invariant scaling)")
        for c in d["cpus"]:
            cpus.append(
                {"cpu": c, "domain": d["id"], "capacity": _f(cpu_caps.get(c, cap)), "idle_states": cpu_idle.get(c, [])}
            )
    return {
        "name": name,
        "source": source,
        "energy_model_source": em_source,
        "notes": notes,
        "cpus": sorted(cpus, key=lambda c: c["cpu"]),
        "domains": sorted(domains, key=lambda d: d["id"]),
    }


# -- LISA plat_info.yml ---------------------------------------------------------------------------
def _lisa_plat_info(doc: dict, path: str) -> dict:
    conf = doc.get("platform-info", {}).get("conf")
    if not isinstance(conf, dict):
        raise PlatformFormatError(f"{path}: no platform-info.conf mapping (expected LISA plat_info.yml)")
    notes: list[str] = []
    name = str(conf.get("name") or "unknown")
    ncpus = int(conf.get("cpus-count") or 0)
    caps_raw = conf.get("cpu-capacities") or {}
    if isinstance(caps_raw, dict) and "orig" in caps_raw:
        caps_raw = caps_raw["orig"]
    elif isinstance(caps_raw, dict) and caps_raw and all(isinstance(v, dict) for v in caps_raw.values()):
        caps_raw = next(iter(caps_raw.values()))
    cpu_caps = {int(k): float(v) for k, v in (caps_raw or {}).items()}
    fdoms = conf.get("freq-domains") or ([list(range(ncpus))] if ncpus else [])
    freqs = {int(k): [int(f) for f in v] for k, v in (conf.get("freqs") or {}).items()}
    em = conf.get("nrg-model")
    em_cpu: dict[int, dict] = {}
    cluster_power: dict[int, dict[int, float]] = {}
    if isinstance(em, dict):
        for node in em.get("cpu_nodes") or []:
            if not isinstance(node, dict) or node.get("cpu") is None:
                continue
            em_cpu[int(node["cpu"])] = node
            parent = node.get("parent")
            if isinstance(parent, dict) and parent.get("active_states") and parent.get("cpus"):
                states = dict(parent["active_states"])  # cluster node: freq -> [capacity, power]
                for c in parent["cpus"]:
                    cluster_power[int(c)] = {int(f): float(s[1]) for f, s in states.items()}
    domains, cpu_idle = [], {}
    for i, dom_cpus in enumerate(fdoms):
        dom_cpus = [int(c) for c in dom_cpus]
        node = next((em_cpu[c] for c in dom_cpus if c in em_cpu), None)
        opps = []
        if node is not None and node.get("active_states"):
            cl = next((cluster_power[c] for c in dom_cpus if c in cluster_power), {})
            for f, state in dict(node["active_states"]).items():
                cap, power = (state["capacity"], state["power"]) if isinstance(state, dict) else state[:2]
                opps.append(_opp(f, cap, power, cl.get(int(f))))
        else:
            flist = next((freqs[c] for c in dom_cpus if c in freqs), None)
            if flist is None and len(freqs) == len(fdoms) and i in freqs:
                flist = freqs[i]
                notes.append(f"freqs key {i} taken as frequency domain {i} (no CPU of {dom_cpus} listed)")
            opps = [_opp(f) for f in (flist or [])]
        if node is not None and node.get("idle_states"):
            states = [_idle_state(j, nm, power_mw=p) for j, (nm, p) in enumerate(dict(node["idle_states"]).items())]
            for c in dom_cpus:
                cpu_idle[c] = [dict(s) for s in states]
        domains.append({"id": i, "name": None, "cpus": dom_cpus, "opps": opps})
    if em_cpu:
        notes.append("LISA EM idle states carry power only (no target residency / exit latency)")
    kernel = (conf.get("kernel") or {}).get("version")
    if isinstance(kernel, dict) and kernel.get("release"):
        notes.append(f"kernel {kernel['release']}")
    em_source = f"LISA plat_info.yml ({name})" if em_cpu else None
    return _finish(name, f"LISA plat_info.yml: {path}", em_source, domains, cpu_caps, cpu_idle, notes)


# -- LISA legacy platform JSON --------------------------------------------------------------------
_JSON_TOKENS = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/|,(?=\s*[}\]])', re.S)


def _relaxed_json(text: str, path: str) -> Any:
    cleaned = _JSON_TOKENS.sub(lambda m: m.group(0) if m.group(0).startswith('"') else "", text)
    try:
        return json.loads(cleaned)
    except json.JSONDecodeError as exc:
        raise PlatformFormatError(
            f"{path}: line {exc.lineno} column {exc.colno}: not valid JSON "
            f"(after removing // comments and trailing commas): {exc.msg}"
        ) from exc


def _lisa_legacy_json(doc: dict, path: str) -> dict:
    clusters = doc.get("clusters") or {}
    board = doc.get("board") or {}
    if not clusters and doc.get("topology"):
        clusters = {str(i): cpus for i, cpus in enumerate(doc["topology"])}
    if not clusters and board.get("cores") and board.get("big_core"):  # cros-elm, pixel: board only
        for cpu, core in enumerate(board["cores"]):
            clusters.setdefault("big" if core == board["big_core"] else "little", []).append(cpu)
    if not clusters:
        raise PlatformFormatError(
            f"{path}: no 'clusters', 'topology' or 'board.cores': cannot tell which CPUs "
            "exist (expected LISA platform JSON)"
        )
    freqs = doc.get("freqs") or {}
    nrg = doc.get("nrg_model") or {}
    notes: list[str] = []
    # map nrg_model entries (often named big/little) to clusters (sometimes named "0"/"1")
    em_of: dict[str, dict] = {k: nrg[k] for k in clusters if k in nrg}
    if nrg and not em_of:
        cores, big_core = board.get("cores"), board.get("big_core")
        for k, cpus in clusters.items():
            if cores and big_core:
                role = "big" if all(cores[c] == big_core for c in cpus) else "little"
            else:
                top = max(clusters, key=lambda n: max(freqs.get(n, [0]) or [0]))
                role = "big" if k == top else "little"
            if role in nrg:
                em_of[k] = nrg[role]
        notes.append("nrg_model big/little mapped to clusters by board.big_core (or highest frequency)")
    domains, cpu_caps = [], {}
    for i, (cname, cpus) in enumerate(clusters.items()):
        flist = sorted(int(f) for f in freqs.get(cname, []))
        em = em_of.get(cname)
        opps = []
        if em and flist:
            fmax = flist[-1]
            cap_max = em.get("cpu", {}).get("cap_max")
            p_max = em.get("cpu", {}).get("nrg_max")
            cl_max = em.get("cluster", {}).get("nrg_max")
            for f in flist:
                r = f / fmax
                opps.append(
                    _opp(
                        f,
                        None if cap_max is None else cap_max * r,
                        None if p_max is None else p_max * r**3,
                        None if cl_max is None else cl_max * r**3,
                    )
                )
            if cap_max is not None:
                for c in cpus:
                    cpu_caps[int(c)] = float(cap_max)
        else:
            opps = [_opp(f) for f in flist]
            if em and em.get("cpu", {}).get("cap_max") is not None:
                for c in cpus:
                    cpu_caps[int(c)] = float(em["cpu"]["cap_max"])
        if not flist:
            notes.append(f"cluster {cname}: no OPP list in the file")
        domains.append({"id": i, "name": str(cname), "cpus": [int(c) for c in cpus], "opps": opps})
    em_source = None
    if em_of:
        em_source = f"LISA legacy platform JSON ({Path(path).stem}); power below f_max scaled as (f/f_max)^3"
        notes.append("legacy nrg_model gives power at f_max only: lower OPPs scaled as (f/f_max)^3 (assumption)")
    return _finish(Path(path).stem, f"LISA platform JSON: {path}", em_source, domains, cpu_caps, {}, notes)


# -- Perfetto Wattson cpu_1d.csv ------------------------------------------------------------------
_WATTSON_COLUMNS = {"device", "policy", "freq_khz", "static", "active", "idle0", "idle1"}


def _wattson_csv(path: str, cpus_count: int | None) -> dict:
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = _WATTSON_COLUMNS - set(reader.fieldnames or [])
        if missing:
            raise PlatformFormatError(f"{path}: line 1: Wattson cpu_1d.csv header lacks {sorted(missing)}")
        rows = list(reader)
    notes: list[str] = []
    by_policy: dict[int, list[dict]] = {}
    for lineno, r in enumerate(rows, start=2):
        try:
            by_policy.setdefault(int(r["policy"]), []).append(
                _opp(
                    int(r["freq_khz"]),
                    None,
                    float(r["active"]),
                    float(r["static"]),
                    [float(r["idle0"]), float(r["idle1"])],
                )
            )
        except (TypeError, ValueError) as exc:
            raise PlatformFormatError(
                f"{path}: line {lineno}: expected integer policy/freq_khz and numeric static/active/idle0/idle1: {exc}"
            ) from exc
    if 255 in by_policy:
        del by_policy[255]
        notes.append("policy 255 (DSU / shared cache) skipped: not a CPU frequency domain")
    if cpus_count is None:
        cpus_count = 8
        notes.append("cpus_count not given: assumed 8 (last policy spans up to CPU 7)")
    policies = sorted(by_policy)
    domains = []
    for i, p in enumerate(policies):
        end = policies[i + 1] if i + 1 < len(policies) else cpus_count
        domains.append({"id": p, "name": f"policy{p}", "cpus": list(range(p, end)), "opps": by_policy[p]})
    if policies and policies[0] != 0:
        notes.append(f"CPUs 0..{policies[0] - 1} have no 1D curve in this file (likely in cpu_2d.csv): not modelled")
    device = rows[0]["device"] if rows else Path(path).parent.name
    idle = [_idle_state(0, "idle0"), _idle_state(1, "idle1")]
    notes.append("Wattson curves carry no CPU capacities; idle power is per OPP (idle_power_mw)")
    cpu_idle = {c: [dict(s) for s in idle] for d in domains for c in d["cpus"]}
    return _finish(
        device, f"Perfetto Wattson cpu_1d.csv: {path}", f"Wattson {device} cpu_1d.csv", domains, {}, cpu_idle, notes
    )


# -- the project's own format / already-normalised dicts ----------------------------------------
def _own_format(doc: dict, source: str) -> dict:
    if "platform" in doc and isinstance(doc["platform"], dict):  # a target file embedding a platform
        doc = doc["platform"]
    if "domains" not in doc:
        raise PlatformFormatError(
            f"{source}: no 'domains' list (see the platform file format in docs/analysis-load-frequency-energy.md)"
        )
    notes = list(doc.get("notes") or [])
    cpu_caps: dict[int, float | None] = {}
    cpu_idle: dict[int, list[dict]] = {}
    domains = []
    for i, d in enumerate(doc["domains"]):
        if "cpus" not in d:
            raise PlatformFormatError(f"{source}: domains[{i}] has no 'cpus'")
        did = int(d.get("id", i))
        opps = []
        for j, o in enumerate(d.get("opps") or []):
            if isinstance(o, (list, tuple)):  # [frequency_khz, power_mw, capacity]
                o = dict(zip(("frequency_khz", "power_mw", "capacity"), o))
            if "frequency_khz" not in o:
                raise PlatformFormatError(f"{source}: domains[{i}].opps[{j}] has no frequency_khz")
            opps.append(
                _opp(
                    o["frequency_khz"], o.get("capacity"), o.get("power_mw"), o.get("static_mw"), o.get("idle_power_mw")
                )
            )
        idle = [
            _idle_state(
                s.get("index", k),
                s.get("name"),
                s.get("target_residency_us"),
                s.get("exit_latency_us"),
                s.get("power_mw"),
            )
            for k, s in enumerate(d.get("idle_states") or [])
        ]
        for c in d["cpus"]:
            if d.get("capacity") is not None:
                cpu_caps[int(c)] = float(d["capacity"])
            cpu_idle[int(c)] = [dict(s) for s in idle]
        domains.append({"id": did, "name": d.get("name"), "cpus": [int(c) for c in d["cpus"]], "opps": opps})
    for c in doc.get("cpus") or []:  # per-CPU overrides (also the shape of our own output)
        if c.get("capacity") is not None:
            cpu_caps[int(c["cpu"])] = float(c["capacity"])
        if c.get("idle_states"):
            cpu_idle[int(c["cpu"])] = [
                _idle_state(
                    s.get("index", k),
                    s.get("name"),
                    s.get("target_residency_us"),
                    s.get("exit_latency_us"),
                    s.get("power_mw"),
                )
                for k, s in enumerate(c["idle_states"])
            ]
    em = doc.get("energy_model_source")
    if em is None and any(o["power_mw"] is not None for d in domains for o in d["opps"]):
        em = f"platform file {doc.get('name') or source}"
    out = _finish(
        str(doc.get("name") or "unknown"), doc.get("source") or source, em, domains, cpu_caps, cpu_idle, notes
    )
    rails = doc.get("rail_channels", doc.get("rails"))  # {channel: [rail names]} (a target file says `rails`)
    if rails is not None:
        if not isinstance(rails, dict) or not all(isinstance(v, list) for v in rails.values()):
            raise PlatformFormatError(f"{source}: rail_channels must map channel names to lists of rail names")
        out["rail_channels"] = {str(k): [str(r) for r in v] for k, v in rails.items()}
    return out


def load_platform(path_or_dict: dict | str | os.PathLike, *, cpus_count: int | None = None) -> dict:
    """Read a platform description (any supported format, see module doc) into the common schema.

    Args:
        path_or_dict: a file path, or a dict (own format, or already in the schema).
        cpus_count: number of CPUs, used by Wattson curves (which do not say) to size the last domain.
    Raises:
        PlatformFormatError: unreadable or unrecognised file, naming the file (and line where known).
    """
    if isinstance(path_or_dict, dict):
        return _own_format(path_or_dict, "dict")
    path = str(path_or_dict)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise PlatformFormatError(f"{path}: cannot read platform file: {exc}") from exc
    head = text.lstrip()[:200]
    if path.endswith(".csv") or head.startswith("device,policy"):
        return _wattson_csv(path, cpus_count)
    if path.endswith(".toml"):
        try:
            return _own_format(tomllib.loads(text), path)
        except tomllib.TOMLDecodeError as exc:
            raise PlatformFormatError(f"{path}: not valid TOML: {exc}") from exc
    if path.endswith(".json") or head.startswith(("{", "//")):
        doc = _relaxed_json(text, path)
        if isinstance(doc, dict) and "domains" in doc:
            return _own_format(doc, path)
        return _lisa_legacy_json(doc, path)
    doc = _yaml_load(text, path)
    if not isinstance(doc, dict):
        raise PlatformFormatError(f"{path}: expected a mapping at top level, got {type(doc).__name__}")
    if "platform-info" in doc:
        return _lisa_plat_info(doc, path)
    return _own_format(doc, path)


def platform_from_meta(meta: dict) -> dict | None:
    """Platform from trace metadata: ``meta["platform"]`` (schema or own format) or a perfetto CpuInfo
    list ``meta["cpu_info"]`` / ``meta["cpuinfo"]`` of ``{cpu, capacity?, frequencies_khz?/freqs?,
    cluster?}``. Returns None when the trace carries neither."""
    plat = meta.get("platform")
    if isinstance(plat, dict) and plat.get("domains"):
        return _own_format(plat, "trace metadata")
    info = meta.get("cpu_info") or meta.get("cpuinfo")
    if not info and isinstance(plat, dict) and isinstance(plat.get("cpus"), list):
        info = plat["cpus"]  # readers' per-CPU list: {cpu, capacity, opps_khz, ...}
    if not info:
        return None
    groups: dict[tuple, list[dict]] = {}
    for c in info:
        freqs = tuple(
            int(f)
            for f in (c.get("frequencies_khz") or c.get("opps_khz") or c.get("freqs") or c.get("frequencies") or [])
        )
        key = (c.get("cluster", c.get("cluster_id")), freqs)
        groups.setdefault(key, []).append(c)
    domains = []
    for i, ((_, freqs), cs) in enumerate(sorted(groups.items(), key=lambda kv: min(int(c["cpu"]) for c in kv[1]))):
        domains.append(
            {
                "id": i,
                "cpus": [int(c["cpu"]) for c in cs],
                "opps": [{"frequency_khz": f} for f in freqs],
                "capacity": next((c.get("capacity") for c in cs if c.get("capacity") is not None), None),
            }
        )
    src = (plat or {}).get("source") if isinstance(plat, dict) else None
    return _own_format(
        {"name": meta.get("device") or "trace", "source": f"trace metadata ({src or 'CpuInfo'})", "domains": domains},
        "trace metadata",
    )


def _resolve_platform(trace) -> dict | None:
    plat = trace.platform
    if isinstance(plat, dict) and plat.get("domains") and plat.get("cpus") and "notes" in plat:
        return plat
    if isinstance(plat, dict) and plat.get("domains"):
        return load_platform(plat)
    return platform_from_meta(trace.meta)


# trace -> (platform object checked, checked platform with notes); a window view is checked again
_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def trace_platform(trace) -> dict | None:
    """The platform of a Trace in this module's schema: the one given to Trace(..., platform=...) (any format
    load_platform reads), else the trace's own metadata (platform_from_meta), else None.

    The platform is checked against the trace once (check_platform): a platform for another system (CPU
    count, idle states) raises PlatformMismatchError; frequencies outside its OPPs warn
    (PlatformMismatchWarning) and are recorded in the returned platform's ``notes``."""
    plat = _resolve_platform(trace)
    if plat is None:
        return None
    try:
        hit = _CHECKED.get(trace)
    except TypeError:  # not weak-referenceable: check every time
        hit = None
    if hit is not None and hit[0] is plat:
        return hit[1]
    checked = check_platform(plat, trace)
    try:
        _CHECKED[trace] = (plat, checked)
    except TypeError:
        pass
    return checked


def platform_mismatches(
    platform: dict,
    *,
    cpus: int | None,
    text_format: bool = False,
    cpus_with_events: set[int] | None = None,
    max_idle_state: dict[int, int] | None = None,
    frequencies: dict[int, set[int]] | None = None,
) -> tuple[list[str], list[str]]:
    """(errors, warnings) comparing a platform with what a trace shows.

    Errors (the platform describes another system): events on CPUs the platform lacks; a CPU count that
    differs (a text trace may show fewer CPUs than it had: fewer is only a warning there); an idle state
    index used on a CPU whose platform entry lists fewer states (its states would be relabelled).
    Warnings: cpu_frequency values (kernel or marker-carried) that are not OPPs of the CPU's domain.
    """
    errors: list[str] = []
    warns: list[str] = []
    name = platform.get("name") or "the platform"
    plat_cpus = sorted(c["cpu"] for c in platform.get("cpus", []))
    outside = sorted((cpus_with_events or set()) - set(plat_cpus))
    if outside:
        errors.append(f"the trace has events on CPUs {outside} that {name} does not describe (it has CPUs {plat_cpus})")
    if cpus and plat_cpus and cpus != len(plat_cpus):
        msg = f"{name} describes {len(plat_cpus)} CPUs, the trace has {cpus}"
        (warns if text_format and cpus < len(plat_cpus) else errors).append(msg)
    states = {c["cpu"]: len(c.get("idle_states") or []) for c in platform.get("cpus", [])}
    for cpu, top in sorted((max_idle_state or {}).items()):
        n = states.get(cpu)
        if n and top >= n:
            errors.append(
                f"CPU{cpu} enters idle state {top} but {name} lists {n} idle states for it "
                f"(index 0..{n - 1}): its idle states would be relabelled"
            )
    opps = {
        c: {
            o["frequency_khz"] for d in platform.get("domains", []) if c in d.get("cpus", []) for o in d.get("opps", [])
        }
        for c in plat_cpus
    }
    for cpu, seen in sorted((frequencies or {}).items()):
        allowed = opps.get(cpu)
        if allowed:
            extra = sorted(seen - allowed)
            if extra:
                warns.append(
                    f"CPU{cpu} runs at {', '.join(f'{k} kHz' for k in extra[:5])}"
                    f"{' ...' if len(extra) > 5 else ''}, not OPPs of {name} "
                    f"({', '.join(str(k) for k in sorted(allowed))} kHz)"
                )
    return errors, warns


def check_platform(platform: dict, trace) -> dict:
    """Check a platform against a Trace (platform_mismatches over its cpu_idle, cpu_frequency, sched_switch and
    marker-carried frequencies). Raises PlatformMismatchError listing every error; returns the platform, with
    each warning appended to ``notes`` (and emitted as PlatformMismatchWarning) when there are any."""
    seen: set[int] = set()
    for name in ("sched_switch", "cpu_idle", "cpu_frequency"):
        if name in trace.tables:
            seen |= set(trace.df(name, windowed=False)["cpu"].cast(pl.Int64).unique().to_list())
    max_state = None
    if "cpu_idle" in trace.tables:
        idle = trace.df("cpu_idle", windowed=False).filter(pl.col("state") >= 0)
        max_state = dict(idle.group_by(pl.col("cpu").cast(pl.Int64)).agg(pl.col("state").max()).iter_rows())
    freqs: dict[int, set[int]] = {}
    frames = []
    if "cpu_frequency" in trace.tables:
        frames.append(
            trace.df("cpu_frequency", windowed=False).select(
                pl.col("cpu").cast(pl.Int64), pl.col("frequency_khz").cast(pl.Int64)
            )
        )
    if "marker" in trace.tables:
        from abtest.analysis.meta_events import meta_cpu_frequency

        frames.append(
            meta_cpu_frequency(trace.df("marker", windowed=False)).select(pl.col("cpu").cast(pl.Int64), "frequency_khz")
        )
    if frames:
        both = pl.concat(frames).unique()
        for cpu, khz in both.group_by("cpu").agg(pl.col("frequency_khz")).iter_rows():
            freqs[cpu] = set(khz)
    errors, warns = platform_mismatches(
        platform,
        cpus=trace.cpus or None,
        text_format=str(trace.meta.get("format", "")).endswith("text"),
        cpus_with_events=seen,
        max_idle_state=max_state,
        frequencies=freqs,
    )
    src = platform.get("source") or platform.get("name") or "platform"
    if errors:
        raise PlatformMismatchError(
            f"{src} does not match {trace.path}: "
            + "; ".join(errors)
            + ". Pass the platform of the traced system (or none)."
        )
    if not warns:
        return platform
    for w in warns:
        warnings.warn(PlatformMismatchWarning(f"{src} vs {trace.path}: {w}"), stacklevel=3)
    return {**platform, "notes": list(platform.get("notes") or []) + [f"does not match the trace: {w}" for w in warns]}


def cpu_list_name(cpus) -> str:
    """ "cpu0-3", "cpu0,3-5", "cpu6": a CPU set written as runs of consecutive numbers."""
    return "cpu" + (number_ranges(cpus) or "?")


def domain_names(platform: dict) -> dict[int, str]:
    """{frequency domain id: its CPUs as cpu_list_name ("cpu0-3", "cpu0,3-5")}."""
    out = {}
    for d in platform.get("domains", []):
        cpus = d.get("cpus") or [c["cpu"] for c in platform.get("cpus", []) if c.get("domain") == d["id"]]
        out[d["id"]] = cpu_list_name(cpus)
    return out


# -- tables ----------------------------------------------------------------------------------------
def df_cpus(platform: dict) -> pl.DataFrame:
    """One row per CPU: cpu (Int32), domain (Int32), capacity (Float64, 0..1024 at max OPP, null = unknown)."""
    return pl.DataFrame(
        [{k: c[k] for k in ("cpu", "domain", "capacity")} for c in platform["cpus"]],
        schema={"cpu": pl.Int32, "domain": pl.Int32, "capacity": pl.Float64},
    )


def df_opps(platform: dict) -> pl.DataFrame:
    """One row per (domain, OPP): domain, frequency_khz, capacity (per CPU), power_mw (one busy CPU),
    static_mw (domain while busy), is_max (bool). Nulls where the model does not say."""
    rows = [
        {
            "domain": d["id"],
            "frequency_khz": o["frequency_khz"],
            "capacity": o["capacity"],
            "power_mw": o["power_mw"],
            "static_mw": o["static_mw"],
        }
        for d in platform["domains"]
        for o in d["opps"]
    ]
    df = pl.DataFrame(
        rows,
        schema={
            "domain": pl.Int32,
            "frequency_khz": pl.Int64,
            "capacity": pl.Float64,
            "power_mw": pl.Float64,
            "static_mw": pl.Float64,
        },
    )
    return df.with_columns((pl.col("frequency_khz") == pl.col("frequency_khz").max().over("domain")).alias("is_max"))


def df_idle_states(platform: dict) -> pl.DataFrame:
    """One row per (cpu, idle state): cpu, state (index as in cpu_idle), name, target_residency_us,
    exit_latency_us, power_mw (nulls where unknown)."""
    rows = [
        {
            "cpu": c["cpu"],
            "state": s["index"],
            "name": s["name"],
            "target_residency_us": s["target_residency_us"],
            "exit_latency_us": s["exit_latency_us"],
            "power_mw": s["power_mw"],
        }
        for c in platform["cpus"]
        for s in c["idle_states"]
    ]
    return pl.DataFrame(
        rows,
        schema={
            "cpu": pl.Int32,
            "state": pl.Int64,
            "name": pl.Utf8,
            "target_residency_us": pl.Float64,
            "exit_latency_us": pl.Float64,
            "power_mw": pl.Float64,
        },
    )


def cpu_capacities(platform: dict) -> dict[int, float | None]:
    """cpu -> capacity (0..1024 at the max OPP; None if unknown)."""
    return {c["cpu"]: c["capacity"] for c in platform["cpus"]}


def domain_of_cpu(platform: dict) -> dict[int, int]:
    """cpu -> frequency domain id."""
    return {c["cpu"]: c["domain"] for c in platform["cpus"]}
