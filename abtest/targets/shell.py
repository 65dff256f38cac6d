"""The one place where a value becomes part of a shell command line: `quote`, and the alphabets names must fit.

Every shell string abtest builds for a target (collectors, targets, the lab's guest script) puts a value in
through `quote` (POSIX single quotes: the value reaches the command as one literal word, whatever it holds),
or through `int()`/a float format when it is a number; tests/test_collect_injection.py reads the collectors and
targets and fails on a shell string built another way.

Names are also checked against a strict alphabet before anything runs, so that a name is refused with a
clear message instead of being quoted into something surprising (and so that names stay readable in logs,
trace markers and console protocol lines). The alphabets, per kind:

| kind | alphabet | length | why |
|---|---|---|---|
| ftrace event | `[A-Za-z0-9_]` first, then `[A-Za-z0-9_.:*-]` | 1..128 | `group:event`, `group:*` (set_event) |
| trace clock | `[A-Za-z0-9_-]` | 1..32 | local, boot, mono_raw, x86-tsc ... |
| label, workload name | `[A-Za-z0-9_]` first, then `[A-Za-z0-9_ .+,:=@%~-]`, no end space | 1..100 | a store dir too |
| lab attempt key | `[A-Za-z0-9._-]` | 1..160 | a staging directory and one word of the console protocol |

A space or `+` in a label is fine (quoted); `$`, quotes, backquotes, `;`, `|`, `&`, `<`, `>`, `(`, `)`,
`\\`, `/`, newlines and any non-ASCII character are not.
"""

from __future__ import annotations

import re
import shlex

__all__ = [
    "ShellNameError",
    "check_clock",
    "check_event",
    "check_key",
    "check_label",
    "check_workload_name",
    "join",
    "quote",
    "quote_glob",
    "slug",
    "split",
]


class ShellNameError(ValueError):
    """A name does not fit its alphabet (the message names the kind, the value and the alphabet)."""


_ALPHABETS: dict[str, tuple[re.Pattern, str]] = {
    "ftrace event": (
        re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:*-]{0,127}"),
        "letters, digits, `_` first, then also `.`, `:`, `*`, `-`; at most 128",
    ),
    "trace clock": (re.compile(r"[A-Za-z0-9_-]{1,32}"), "letters, digits, `_`, `-`; at most 32"),
    "label": (
        re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_ .+,:=@%~-]{0,98}[A-Za-z0-9_.+,:=@%~-])?"),
        (
            "letters, digits, `_` first, then also space, `.`, `+`, `,`, `:`, `=`, `@`, `%`, `~`, `-` "
            "(no trailing space); at most 100"
        ),
    ),
    "lab attempt key": (re.compile(r"[A-Za-z0-9._-]{1,160}"), "letters, digits, `.`, `_`, `-`; at most 160"),
}
_ALPHABETS["workload name"] = _ALPHABETS["label"]


def quote(value: object) -> str:
    """`value` (str() of it) as one literal shell word (POSIX single quotes where needed)."""
    return shlex.quote(str(value))


def quote_glob(pattern: str) -> str:
    """A path pattern for the shell to expand: `*`, `?` and `[...]` stay active, everything else is quoted
    (`/sys/class/thermal/thermal_zone*/temp` -> the same words, `$(x)*` -> `'$(x)'*`)."""
    pieces = re.split(r"(\*|\?|\[[^\]/]*\])", str(pattern))
    return "".join(p if i % 2 else (quote(p) if p else "") for i, p in enumerate(pieces)) or "''"


def join(argv) -> str:
    """An argv list -> one command line, every element quoted."""
    return " ".join(quote(a) for a in argv)


def split(text: str) -> list[str]:
    """A command line -> argv, as POSIX sh would split it (no expansion); ValueError on unbalanced quotes."""
    return shlex.split(text)


def _check(kind: str, name: object) -> str:
    pattern, words = _ALPHABETS[kind]
    if not isinstance(name, str) or not pattern.fullmatch(name):
        raise ShellNameError(f"{kind} {name!r} is outside its alphabet ({words})")
    return name


def check_event(name: str) -> str:
    """`name` when it is a valid ftrace event name (`sched_switch`, `sched:sched_switch`, `sched:*`)."""
    return _check("ftrace event", name)


def check_clock(name: str) -> str:
    """`name` when it is a valid trace clock name."""
    return _check("trace clock", name)


def check_label(name: str) -> str:
    """`name` when it is a valid label (spaces and `+` allowed)."""
    return _check("label", name)


def check_workload_name(name: str) -> str:
    """`name` when it is a valid workload name (the label alphabet)."""
    return _check("workload name", name)


def check_key(name: str) -> str:
    """`name` when it is a valid lab attempt key."""
    return _check("lab attempt key", name)


def slug(name: str) -> str:
    """`name` with every character outside the attempt-key alphabet replaced by `_` (for keys and
    directory names derived from labels; the label itself is kept as it is elsewhere)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:48] or "_"
