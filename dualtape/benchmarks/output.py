"""The files ``dualtape bench`` writes (``--json``, ``--markdown``, ``--plot``): checked before
anything is timed, written atomically after (``dualtape.files``).

A destination must be a regular file or not exist yet, in a folder that exists and takes new
files; a symlink is followed. A file is written to a temporary file in the same folder,
fsynced and renamed over the destination (keeping its permission bits), so a failure (a full
disk, Ctrl-C) leaves the old file or none, never half a file.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..files import check_destination


def destination(option: str, path: str) -> Path:
    """The file ``option`` (e.g. ``--json``) would write for ``path``, or ``ValueError`` saying
    why it cannot be written (empty, a folder, not a regular file, read-only, no folder)."""
    if not path:
        raise ValueError(f"{option} needs a file name")
    if path.endswith(("/", os.sep)):
        raise ValueError(f"{option} {path}: names a folder, not a file")
    try:
        target = check_destination(path, probe=True)
    except OSError as exc:
        raise ValueError(f"{option} {path}: {exc.strerror or exc}") from None
    return target
