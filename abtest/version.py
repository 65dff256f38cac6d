"""abtest's version: the installed distribution's, or 0.0.0+src when running from a source tree."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("abtest")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+src"
