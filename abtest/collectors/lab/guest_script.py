"""The shell script one lab iteration runs on the device, and the console commands that deliver it.

The script (POSIX sh; busybox ash is enough) does on the device what the ssh/adb collectors do over
their connection, in one go:
1. describe the target (abtest.collectors.meta.META_SCRIPT, the same sections meta.json is parsed from);
2. start ftrace through tracefs (buffer size, clock with fallbacks, each requested event or the first
   kernel name that exists for it: abtest.collectors.ftrace.KERNEL_EVENT_CANDIDATES), and the power
   sampling loop when [power] asks for one (hwmon, rapl or odpm, stamped with CLOCK_BOOTTIME);
3. run the workload between `abtest_workload_begin/end` trace markers, timed in ns on the device;
4. stop: per-CPU lost-event counters, `trace-cmd extract -o trace.dat`, events off, buffer emptied;
5. return every output file (see "Artifacts" below) and print `ABTEST-END status=ok|error`.

Console protocol (lines on the device console, i.e. the LAVA job log; parsed by lava_log.py):
    ABTEST-BEGIN key=<attempt key>               the attempt this log belongs to
    ABTEST-FILE <name> <bytes> <sha256>          manifest entry, for every file, whatever the transport
    ABTEST-DATA-BEGIN <name> / base64 lines / ABTEST-DATA-END <name>
                                                 the file gzip'ed and base64'ed through the log
    ABTEST-UPLOADED <name> | ABTEST-UPLOAD-FAILED <name> <reason>
    ABTEST-RESULT rc=<workload exit code>
    ABTEST-ERROR <reason>                        a step failed (the iteration will not be used)
    ABTEST-END status=ok|error                   last line; LAVA's interactive test waits for it

Artifacts: small files (<= `small_bytes`, default 64 KiB: the target description, ftrace start/stop
reports, usually the workload's output) always come through the log. Larger ones (trace.dat, long
outputs, power samples) go to `upload_url` (the collection's receiver, receiver.py) as
`POST <upload_url>/<name>` with body base64(gzip(file)) and headers X-Abtest-Sha256 / X-Abtest-Size
(busybox wget's --post-file is not binary-safe, hence base64) or, with transport "log", through the log
too, up to `log_max_bytes` for the whole job. The sha256 in the manifest (which travels in the LAVA job
log) is checked against every file abtest keeps, whichever way the bytes came.

Delivery: the script is gzip'ed and base64'ed into a few `echo <chunk> >> FILE` console commands (each
shorter than busybox's 1024-character line editor limit), decoded and run, so a job needs no network
for its script.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
from dataclasses import dataclass, field

from abtest.collectors.ftrace import NOT_FTRACE, STOP_LINES, setup_lines
from abtest.collectors.meta import META_SCRIPT
from abtest.collectors.power import discover_script, loop_script
from abtest.targets.shell import check_clock, check_event, check_key, quote

GUEST_DIR = "/tmp/abtest-job"
SCRIPT_PATH = "/tmp/abtest-job.sh"
SMALL_BYTES = 64 * 1024
CHUNK_CHARS = 700  # base64 characters per delivery command (busybox line editing stops at 1024)

# Files the script may return, in the order it sends them. Names are what harvest.py looks for.
META_FILE = "meta.txt"
FTRACE_START_FILE = "ftrace-start.txt"
FTRACE_STOP_FILE = "ftrace-stop.txt"
WALL_FILE = "wall.txt"
STDOUT_FILE = "workload.stdout"
STDERR_FILE = "workload.stderr"
TRACE_FILE = "trace.dat"
POWER_DISCOVER_FILE = "power-discover.txt"
POWER_FILE = "power.txt"
RETURNED_FILES = (
    META_FILE,
    FTRACE_START_FILE,
    WALL_FILE,
    STDOUT_FILE,
    STDERR_FILE,
    FTRACE_STOP_FILE,
    POWER_DISCOVER_FILE,
    POWER_FILE,
    TRACE_FILE,
)


@dataclass
class GuestSpec:
    """Everything the iteration script needs.

    key: the attempt key (printed back first, so a log is matched to its attempt).
    tag: "label=... workload=... iteration=..." (trace markers). command: the workload's shell command.
    tools: binaries the workload needs (checked first). timeout_s: workload time limit (s).
    events: canonical tables to record (empty = no tracing). buffer_size_kb: per CPU. clock: trace clock.
    power: [power] table ({"sampler": "hwmon"|"rapl"|"odpm", "period_s", "sysfs"}) or None.
    transport: "upload" or "log" (the upload URL is the script's first argument: delivery_commands).
    small_bytes: files up to this size go through the log. log_max_bytes: cap for transport "log".
    workdir: scratch directory on the device (emptied first). quiet_console: lower the console log
    level to emergencies only while the script runs (kernel messages would interleave with its output).
    """

    key: str
    tag: str
    command: str
    tools: tuple[str, ...] = ()
    timeout_s: float = 600.0
    events: list[str] = field(default_factory=list)
    buffer_size_kb: int = 8192
    clock: str = "boot"
    power: dict | None = None
    transport: str = "upload"
    small_bytes: int = SMALL_BYTES
    log_max_bytes: int = 8 << 20
    workdir: str = GUEST_DIR
    quiet_console: bool = True


def _ftrace_start(spec: GuestSpec) -> str:
    """Shell: find/mount tracefs into $T, set it up, enable the events; report lines go to stdout."""
    lines = [
        'T=""',
        'for d in /sys/kernel/tracing /sys/kernel/debug/tracing; do [ -e "$d/trace_marker" ] && { T=$d; break; }; done',
        'if [ -z "$T" ]; then mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null; '
        "[ -e /sys/kernel/tracing/trace_marker ] && T=/sys/kernel/tracing; fi",
        'if [ -z "$T" ]; then mount -t debugfs nodev /sys/kernel/debug 2>/dev/null; '
        "[ -e /sys/kernel/debug/tracing/trace_marker ] && T=/sys/kernel/debug/tracing; fi",
        'echo ABTEST_TRACEFS "$T"',
        '[ -n "$T" ] && cd "$T" && {',
        *setup_lines(spec.events, spec.buffer_size_kb, spec.clock),
        "}",
    ]
    return "\n".join(lines)


def _ftrace_stop() -> str:
    """Shell: stop tracing, lost-event counters per CPU, extract to $W/trace.dat, quiesce tracefs."""
    return "\n".join(
        [
            'cd "$T" || exit 90',
            *STOP_LINES,
            f'trace-cmd extract -o "$W/{TRACE_FILE}" >/dev/null 2>"$W/extract.err"; rc=$?',
            "echo > set_event; echo > trace",
            "echo ABTEST_EXTRACT_RC $rc",
            '[ $rc = 0 ] || sed "s/^/ABTEST_EXTRACT_ERR /" "$W/extract.err" | tail -20',
        ]
    )


def _send_function(spec: GuestSpec) -> str:
    """Shell function `abtest_send NAME`: manifest line, then the bytes through the log or the receiver."""
    return "\n".join(
        [
            "abtest_send() {",
            '  f=$1; [ -f "$f" ] || return 0',
            '  size=$(wc -c < "$f" | tr -d " "); sha=$(sha256sum "$f" | cut -d" " -f1)',
            '  echo "ABTEST-FILE $f $size $sha"',
            f'  if [ "$size" -le {int(spec.small_bytes)} ] || [ "$TRANSPORT" = log ]; then',
            f'    if [ "$TRANSPORT" = log ] && [ $((LOG_SENT + size)) -gt {int(spec.log_max_bytes)} ]; then',
            '      echo "ABTEST-ERROR $f ($size bytes) exceeds the job log budget; use artifacts = upload"; '
            "STATUS=error; return 0",
            "    fi",
            "    LOG_SENT=$((LOG_SENT + size))",
            # long lines: LAVA logs one record per console line, so fewer lines stream much faster
            '    echo "ABTEST-DATA-BEGIN $f"; gzip -c "$f" | base64 -w 16384; echo; echo "ABTEST-DATA-END $f"',
            "  else",
            '    gzip -c "$f" | base64 > "$f.b64"',
            '    r=$(wget -q -O - --header "X-Abtest-Sha256: $sha" --header "X-Abtest-Size: $size" '
            '--post-file "$f.b64" "$UPLOAD/$f" 2>&1)',
            '    rm -f "$f.b64"',
            '    case "$r" in "stored $sha"*) echo "ABTEST-UPLOADED $f";; '
            '*) echo "ABTEST-UPLOAD-FAILED $f $(echo $r | tr "\\n" " " | cut -c1-200)"; STATUS=error;; esac',
            "  fi",
            "}",
        ]
    )


def _now_function() -> str:
    """abtest_now: ns since the epoch (coreutils date), else CLOCK_BOOTTIME ns from /proc/uptime."""
    return (
        'abtest_now() { t=$(/usr/bin/date +%s%N 2>/dev/null || date +%s%N 2>/dev/null); case "$t" in '
        "*N*|'') t=$(awk '{printf \"%.0f\", $1*1000000000}' /proc/uptime);; esac; echo $t; }"
    )


def build_script(spec: GuestSpec) -> str:
    """The whole iteration script (see the module docstring). Event names, the clock and the key are checked
    against their alphabets (abtest.targets.shell: ShellNameError) before any text is built."""
    for e in spec.events:
        check_event(e)
    check_clock(spec.clock)
    check_key(spec.key)
    tracing = bool([e for e in spec.events if e not in NOT_FTRACE])
    mark = (lambda text: f'echo {quote(text)} > "$T/trace_marker" 2>/dev/null') if tracing else (lambda text: ":")
    timeout = max(1, int(round(spec.timeout_s)))
    parts = [
        "#!/bin/sh",
        f"# abtest lab iteration: {quote(spec.tag)}",
        # the upload URL (it holds the attempt's token) is the script's first argument, so it stays out
        # of the script text and can be redacted from stored job definitions
        f"W={quote(spec.workdir)}; TRANSPORT={quote(spec.transport)}; UPLOAD=${{1:-}}",
        "STATUS=ok; LOG_SENT=0; T=''",
        'rm -rf "$W"; mkdir -p "$W" && cd "$W" || { echo "ABTEST-END status=error"; exit 1; }',
        "echo 1 > /proc/sys/kernel/printk 2>/dev/null" if spec.quiet_console else ":",
        f"echo ABTEST-BEGIN key={quote(check_key(spec.key))}",
        _now_function(),
        _send_function(spec),
        "# -- the target, as meta.json describes it",
        f"( {META_SCRIPT.strip()}\n) > {META_FILE} 2>&1",
        "# -- tools the workload needs",
        *[
            f"command -v {quote(t)} >/dev/null || {{ echo ABTEST-ERROR missing tool {quote(t)}; STATUS=error; }}"
            for t in spec.tools
        ],
    ]
    if tracing:
        parts += [
            "# -- ftrace",
            f"( {_ftrace_start(spec)}\n) > {FTRACE_START_FILE} 2>&1",
            f"T=$(sed -n 's/^ABTEST_TRACEFS //p' {FTRACE_START_FILE})",
            f'[ -n "$T" ] && grep -q "^ABTEST_ON " {FTRACE_START_FILE} || '
            '{ echo "ABTEST-ERROR no tracefs or none of the requested events exist"; STATUS=error; }',
        ]
    if spec.power:
        kind, sysfs, period_s = (
            spec.power["sampler"],
            str(spec.power.get("sysfs", "/sys")),
            spec.power.get("period_s", 0.5),
        )
        parts += [
            "# -- power sampling (CLOCK_BOOTTIME stamps)",
            f"( {discover_script(kind, sysfs)} ) > {POWER_DISCOVER_FILE} 2>&1",
            f"PFILES=$(cut -d' ' -f1 {POWER_DISCOVER_FILE} | tr '\\n' ' ')",
            f'PFILES="$PFILES" sh -c {quote(loop_script(kind, sysfs, period_s, "$PFILES"))} > {POWER_FILE} 2>/dev/null '
            "</dev/null &",
            "PPID_SAMPLER=$!",
        ]
    parts += [
        "# -- the workload, between trace markers",
        'if [ "$STATUS" = ok ]; then',
        f"  {mark('abtest_workload_begin ' + spec.tag)}",
        "  s=$(abtest_now)",
        f"  if command -v timeout >/dev/null; then timeout {int(timeout)} sh -c {quote(spec.command)}; "
        f"else sh -c {quote(spec.command)}; fi > {STDOUT_FILE} 2> {STDERR_FILE}",
        "  rc=$?",
        "  e=$(abtest_now)",
        f"  {mark('abtest_workload_end ' + spec.tag)}",
        f"  echo ABTEST_WALL_NS $s $e > {WALL_FILE}",
        "else rc=255; fi",
    ]
    if spec.power:
        parts += ["kill $PPID_SAMPLER 2>/dev/null; sleep 0.1"]
    if tracing:
        parts += [
            f'if [ -n "$T" ]; then ( {_ftrace_stop()}\n) > {FTRACE_STOP_FILE} 2>&1; cd "$W"; fi',
            f"grep -q '^ABTEST_EXTRACT_RC 0$' {FTRACE_STOP_FILE} 2>/dev/null || "
            '{ echo "ABTEST-ERROR trace-cmd extract failed"; STATUS=error; }',
        ]
    parts += [
        "# -- outputs",
        *[f"abtest_send {name}" for name in RETURNED_FILES],
        "echo ABTEST-RESULT rc=$rc",
        "echo ABTEST-END status=$STATUS",
    ]
    return "\n".join(parts) + "\n"


def delivery_commands(
    script: str, upload_url: str = "", path: str = SCRIPT_PATH, chunk_chars: int = CHUNK_CHARS
) -> list[str]:
    """Console commands that write `script` to `path` on the device and run it: `rm`, a few `echo
    <base64 chunk> >> path.b64` (base64 needs no quoting in sh), then decode + gunzip + sha256 check +
    `sh path UPLOAD_URL`. The last command is the one whose output holds the ABTEST-* protocol lines."""
    blob = base64.b64encode(gzip.compress(script.encode(), compresslevel=9, mtime=0)).decode()
    sha = hashlib.sha256(script.encode()).hexdigest()
    b64 = path + ".b64"
    cmds = [f"rm -f {quote(path)} {quote(b64)}"]
    cmds += [f"echo {quote(blob[i : i + chunk_chars])} >> {quote(b64)}" for i in range(0, len(blob), chunk_chars)]
    # on a damaged delivery, print the end line so LAVA stops waiting (the quotes keep the marker out of
    # the command's own echo, which LAVA's pattern would otherwise match)
    cmds.append(
        f"base64 -d {quote(b64)} | gunzip > {quote(path)} && echo {quote(sha + '  ' + path)} | sha256sum -c -s "
        f"&& sh {quote(path)} {quote(upload_url)} "
        f'|| echo ABTEST-""END status=error delivery'
    )
    return cmds


def script_from_definition(definition: str) -> str:
    """The iteration script a job definition delivers (decoded from its `echo <chunk> >>` commands);
    "" when the definition holds none."""
    import yaml

    try:
        job = yaml.safe_load(definition) or {}
        tests = [a["test"] for a in job.get("actions", []) if "test" in a]
        cmds = [c.get("command", "") for t in tests for i in t.get("interactive", []) for c in i.get("script", [])]
    except (yaml.YAMLError, AttributeError, TypeError, KeyError):
        return ""
    chunks = [c.split()[1] for c in cmds if c.startswith("echo ") and c.endswith(f">> {SCRIPT_PATH}.b64")]
    try:
        return gzip.decompress(base64.b64decode("".join(chunks))).decode() if chunks else ""
    except (ValueError, OSError, EOFError):
        return ""


def script_sha256(script: str) -> str:
    return hashlib.sha256(script.encode()).hexdigest()
