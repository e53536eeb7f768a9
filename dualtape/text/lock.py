"""One train-text run per checkpoint: an advisory lock (``fcntl.flock``) on ``PATH.lock``
beside the checkpoint ``PATH``, held for the life of the run and released by the system when
the process ends, however it ends. The lock file holds one line, ``MARK`` and the holder's PID,
for the message that refuses a second run; it is never removed (removing it would let two runs
lock two files). A file at that name is used only when it is a regular file with no other hard
link, opened without following a link (``O_NOFOLLOW``) or blocking, and empty or holding a lock
line (this format's or the former bare PID): anything else (``poetry.lock`` beside ``--save
poetry``, a link, a FIFO, a device, a folder) is refused in one line and left as it is.
Where ``fcntl`` is missing (Windows) no lock is taken. Under ``--distributed`` rank 0 alone
(the rank that writes) takes it, and a refusal ends every rank."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from typing import Any

from ..files import file_kind
from .model import TextError

try:
    import fcntl
except ImportError:  # Windows: no advisory locks here
    fcntl = None  # type: ignore[assignment]  # mypy types a module that may be absent as always there

SUFFIX = ".lock"
MARK = "dualtape train-text lock, PID"
"""What a lock file's line starts with; the holder's PID follows."""
OURS = re.compile(rf"(?:{re.escape(MARK)} )?(\d{{0,20}})\n?")
"""A lock file's whole content: empty, a lock line, or the former format's bare PID line."""
MOST = 256
"""Bytes read to tell a lock file: a longer file is not one."""
NO_FOLDER = (errno.ENOENT, errno.EACCES, errno.EPERM, errno.EROFS)
"""Why a lock cannot be created in a missing or read-only folder (the destination check
then says so)."""


def lock_checkpoint(path: str) -> Any:
    """The open lock file of checkpoint ``path``, locked (keep it open for the run; closing
    it releases the lock); None where there is no ``fcntl`` or nothing is at the lock's name
    and its folder is missing or read-only (the destination check then says so). ``TextError``
    in one line naming the lock file when another run holds it (with its PID) or the name
    holds something other than a lock file."""
    if fcntl is None:
        return None
    lock = os.path.realpath(path) + SUFFIX  # one lock for every spelling of the checkpoint
    # os.open's descriptors are not inherited (PEP 446): a child never holds the lock
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(lock, flags, 0o666)
    except OSError as exc:
        try:
            found = os.lstat(lock)
        except OSError:
            if exc.errno in NO_FOLDER:
                return None
            raise TextError(f"cannot lock checkpoint {path}: cannot create {lock}: "
                            f"{exc.strerror}; choose another --save") from None
        why = (exc.strerror or str(exc)) if stat.S_ISREG(found.st_mode) else _what(found.st_mode)
        raise _refusal(path, lock, why) from None
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise _refusal(path, lock, _what(found.st_mode))
        if found.st_nlink > 1:  # not != 1: some file systems count no links
            raise _refusal(path, lock, "it has another hard link (another file's name)")
        if _holder(fd) is None:
            raise _refusal(path, lock, "it is not a train-text lock file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise TextError(f"checkpoint {path} is in use by another train-text run (PID "
                            f"{_holder(fd) or 'unknown'}, holding {lock}); wait for it to end "
                            "or choose another --save") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{MARK} {os.getpid()}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return open(fd, "rb")


def _holder(fd: int) -> str | None:
    """The PID a lock file names (``""`` for none); None when it is not a lock file."""
    found = OURS.fullmatch(os.pread(fd, MOST + 1, 0).decode("ascii", "replace"))
    return None if found is None else found.group(1)


def _what(mode: int) -> str:
    return f"it is {file_kind(mode)}, not a regular file"


def _refusal(path: str, lock: str, why: str) -> TextError:
    return TextError(f"cannot lock checkpoint {path}: {lock}: {why}; it was left as it is: "
                     "move it away or choose another --save")


def hold_run_lock(save: str | None, resume: str | None, held: contextlib.ExitStack) -> None:
    """Lock the checkpoint a run writes (``save``, else ``resume``; none: nothing to lock)
    until ``held`` closes; ``TextError`` as ``lock_checkpoint``'s."""
    path = save or resume
    handle = None if path is None else lock_checkpoint(path)
    if handle is not None:
        held.callback(handle.close)  # the system releases it at exit too
