"""abtest's version: the installed distribution's, or 0.0.0+src when running from a source tree.

Read on first use (``from abtest.version import __version__`` or ``abtest.version.get()``): the lookup
(importlib.metadata scans the installed distributions, ~35 ms) is not paid by commands that never print or
record the version (`abtest analyze`)."""

from __future__ import annotations

from functools import cache


@cache
def get() -> str:
    """The version string."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("abtest")
    except PackageNotFoundError:  # running from a source tree without install
        return "0.0.0+src"


def __getattr__(name: str):
    if name == "__version__":
        return get()
    raise AttributeError(f"module 'abtest.version' has no attribute {name!r}")
