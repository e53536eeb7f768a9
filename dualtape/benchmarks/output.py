"""The files ``dualtape bench`` writes (``--json``, ``--markdown``, ``--plot``): checked before
anything is timed, written atomically after.

A destination must be a regular file or not exist yet, in a folder that exists and takes new
files; a symlink is followed. A file is written to ``.NAME.PID.RANDOM.tmp`` in the same folder,
fsynced and renamed over the destination (keeping its permission bits), so a failure (a full
disk, Ctrl-C) leaves the old file or none, never half a file.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from ..io import check_destination


def destination(option: str, path: str) -> Path:
    """The file ``option`` (e.g. ``--json``) would write for ``path``, or ``ValueError`` saying
    why it cannot be written (empty, a folder, not a regular file, read-only, no folder)."""
    if not path:
        raise ValueError(f"{option} needs a file name")
    if path.endswith(("/", os.sep)):
        raise ValueError(f"{option} {path}: names a folder, not a file")
    try:
        target = check_destination(path)
        if target.exists() and not stat.S_ISREG(target.stat().st_mode):
            raise ValueError(f"{option} {path}: is not a regular file (a FIFO, a device, ...)")
        _probe(target.parent)
    except OSError as exc:
        raise ValueError(f"{option} {path}: {exc.strerror or exc}") from None
    return target


def _probe(folder: Path) -> None:
    """Create and remove a temporary file in ``folder`` (read-only file systems, quotas)."""
    handle, tmp = _temporary(folder / "probe")
    os.close(handle)
    tmp.unlink()


def _temporary(target: Path) -> tuple[int, Path]:
    """A new, empty file beside ``target`` created with ``0o666 & ~umask``: its descriptor
    (open for writing) and path."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp


def write_atomically(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """Replace ``path`` (a symlink's target) with what ``write`` puts into a binary file; on
    any failure the temporary file is removed and the destination is unchanged."""
    target = Path(os.path.realpath(path))
    handle, tmp = _temporary(target)
    try:
        with os.fdopen(handle, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if target.exists():
            os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
