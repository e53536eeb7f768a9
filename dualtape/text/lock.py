"""One train-text run per checkpoint: an advisory lock (``fcntl.flock``) on ``PATH.lock``
beside the checkpoint ``PATH``, held for the life of the run and released by the system when
the process ends, however it ends. The lock file holds the holder's PID, for the message that
refuses a second run; it is never removed (removing it would let two runs lock two files).
Where ``fcntl`` is missing (Windows) no lock is taken. Under ``--distributed`` rank 0 alone
(the rank that writes) takes it, and a refusal ends every rank."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from .model import TextError

try:
    import fcntl
except ImportError:  # Windows: no advisory locks here
    fcntl = None  # type: ignore[assignment]  # mypy types a module that may be absent as always there

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


def hold_run_lock(save: str | None, resume: str | None, held: contextlib.ExitStack) -> None:
    """Lock the checkpoint a run writes (``save``, else ``resume``; none: nothing to lock)
    until ``held`` closes; ``TextError`` as ``lock_checkpoint``'s."""
    path = save or resume
    handle = None if path is None else lock_checkpoint(path)
    if handle is not None:
        held.callback(handle.close)  # the system releases it at exit too
