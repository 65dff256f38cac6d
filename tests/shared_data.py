"""Where the shared real test data is: ../shared (traces/, platforms/) beside the repository.

Looked for, in order: $ABTEST_SHARED; `shared` beside this checkout; `shared` beside the checkout this one
was cloned from (`git clone` of /work/main into a temporary directory, as a fresh-clone check does). The
first that holds traces/ wins; otherwise the first candidate is returned and the `traces` fixture fails
with its path.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _origin_checkout() -> Path | None:
    """The local checkout `origin` points to, if it is a directory on this machine."""
    try:
        url = subprocess.run(
            ["git", "-C", str(ROOT), "remote", "get-url", "origin"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    path = Path(url.removeprefix("file://")) if url else None
    return path.resolve() if path is not None and path.is_dir() else None


def find_shared() -> Path:
    candidates = [Path(os.environ["ABTEST_SHARED"])] if os.environ.get("ABTEST_SHARED") else []
    candidates.append(ROOT.parent / "shared")
    origin = _origin_checkout()
    if origin is not None:
        candidates.append(origin.parent / "shared")
    return next((c for c in candidates if (c / "traces").is_dir()), candidates[0])


SHARED = find_shared()
TRACES = SHARED / "traces"
PLATFORMS = SHARED / "platforms"
