"""One train-text run per checkpoint: an advisory lock (``fcntl.flock``) on ``PATH.lock``
beside the checkpoint ``PATH``, held for the life of the run and released by the system when
the process ends, however it ends. The lock file holds the holder's PID, for the message that
refuses a second run; it is never removed (removing it would let two runs lock two files).
Where ``fcntl`` is missing (Windows) no lock is taken."""

from __future__ import annotations

import os
from typing import Any

from .model import TextError

try:
    import fcntl
except ImportError:  # Windows: no advisory locks here
    fcntl = None

SUFFIX = ".lock"


def lock_checkpoint(path: str) -> Any:
    """The open lock file of checkpoint ``path``, locked (keep it open for the run; closing
    it releases the lock); None where there is no ``fcntl`` or the lock file cannot be opened
    (a missing or read-only folder: the destination check then says so). ``TextError``
    naming the PID when another run holds it."""
    if fcntl is None:
        return None
    lock = os.path.realpath(path) + SUFFIX  # one lock for every spelling of the checkpoint
    try:
        handle = open(lock, "a+")
    except OSError:  # a read-only folder, a folder at the path: the destination check says so
        return None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise TextError(f"checkpoint {path} is in use by another train-text run (PID {holder}, "
                        f"holding {lock}); wait for it to end or choose another --save") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle
