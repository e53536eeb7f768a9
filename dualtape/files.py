"""Crash-safe files: checked destinations, atomic writes, regular files opened without blocking.

``write_atomically`` writes ``.NAME.dualtape-partial.HOST.PID.XXXXXXXX`` in the destination's
folder (HOST: the host name and, on Linux, the PID namespace; NAME shortened to fit 255 bytes),
fsyncs it, renames it over the destination and fsyncs the folder: a crash or ``kill -9`` leaves
the old file or the new one. A new file gets ``0666 & ~umask``, a replaced one keeps its mode.
Given the ``signature`` its files start with, it first deletes such temporary files of the same
destination only when they are provably a dead writer's: this host and PID namespace, a PID that
no longer runs, a regular file (``lstat``; opened with ``O_NOFOLLOW | O_NONBLOCK``) of this
user, empty or starting with the signature. Anything else (another host's over NFS, a live or
reused PID, a link, a FIFO) stays; without ``os.getuid`` nothing is deleted.

What is followed where: ``replace=True`` (the default) follows a symlink given as ``path`` and
replaces its target. ``replace=False`` follows links in the folders of ``path`` but not at
``path`` itself, which must not exist: the file is hard-linked into place (``os.link``), so an
existing file, or a link planted meanwhile, is never replaced nor followed
(``FileExistsError``); file systems without hard links cannot write this way. ``open_regular``
follows a symlink given as ``path``. Errors name the caller's path.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

TEMPORARY_MARKER = "dualtape-partial"
"""The word that marks ``write_atomically``'s temporary files."""
NAME_MAX = 255
"""The longest file name, in bytes, on common file systems."""


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether paths ``a`` and ``b`` name one file: the same after links and relative spellings
    are resolved, or (both existing) one file under two hard links."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_destination(path: str | os.PathLike, *, replace: bool = True,
                      probe: bool = False) -> Path:
    """The file ``write_atomically`` would write for ``path``: with ``replace``, a symlink at
    ``path`` is followed and an existing file is replaced; without, ``path`` itself (links in
    its folders followed), which must not exist. An ``OSError`` naming ``path`` when it is a
    folder, not a regular file (FIFO, device, socket), read-only, exists and ``replace`` is
    false, or when its folder is missing or not writable; with ``probe``, also when the folder
    refuses a new file (a read-only file system, a quota)."""
    given = Path(path)
    if replace:
        target = Path(os.path.realpath(path))
    else:
        target = Path(os.path.realpath(given.parent)) / given.name
    try:
        found = os.stat(target) if replace else os.lstat(target)
    except FileNotFoundError:
        found = None
    except OSError as exc:  # a link loop, a file used as a folder, no permission
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    if found is not None:
        if stat.S_ISDIR(found.st_mode):
            raise IsADirectoryError(errno.EISDIR, "it is a folder", str(path))
        if not replace:
            raise FileExistsError(errno.EEXIST, "it exists (replace=False never replaces a "
                                  "file)", str(path))
        if not stat.S_ISREG(found.st_mode):
            raise OSError(errno.EINVAL, f"it is {file_kind(found.st_mode)}, not a regular "
                          "file", str(path))
        if not found.st_mode & 0o222 or not os.access(target, os.W_OK):
            raise PermissionError(errno.EACCES, "the file is read-only", str(path))
    if not target.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, "its folder does not exist", str(path))
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, "its folder is not writable", str(path))
    if probe:
        try:
            with tempfile.TemporaryFile(dir=target.parent):
                pass
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(path)) from None
    return target


def file_kind(mode: int) -> str:
    """What a ``st_mode`` is, in words: ``"a FIFO"``, ``"a character device"``, ..."""
    kinds = {stat.S_ISFIFO: "a FIFO", stat.S_ISCHR: "a character device",
             stat.S_ISBLK: "a block device", stat.S_ISSOCK: "a socket",
             stat.S_ISDIR: "a folder", stat.S_ISLNK: "a symbolic link"}
    return next((name for test, name in kinds.items() if test(mode)), "not a plain file")


def write_atomically(path: str | os.PathLike, write: Callable[[BinaryIO], object], *,
                     replace: bool = True, signature: bytes | None = None) -> None:
    """Put what ``write`` writes into a binary file at ``path``, atomically (see the module
    docstring); on any failure the temporary file is removed and ``path`` is as it was.
    ``signature``: the first bytes of what ``write`` writes, for removing dead writers'
    temporary files (None: none is removed)."""
    target = check_destination(path, replace=replace)
    if signature is not None:
        _remove_stale_temporaries(target, signature)
    mode = stat.S_IMODE(os.stat(target).st_mode) if replace and target.exists() \
        else 0o666 & ~_umask()
    try:
        handle, tmp = tempfile.mkstemp(dir=target.parent, prefix=_temporary_prefix(target.name))
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        with os.fdopen(handle, "wb") as f:
            write(f)
            f.flush()
            os.chmod(f.fileno() if os.chmod in os.supports_fd else tmp, mode)
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, target)
        else:
            os.link(tmp, target)  # fails on anything at target, a link included
            os.unlink(tmp)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    _fsync_folder(target.parent)


def open_regular(path: str | os.PathLike) -> tuple[BinaryIO, os.stat_result]:
    """``path`` opened for reading without blocking, and its ``fstat``: ``ValueError`` naming
    ``path`` when it is not a regular file (a FIFO would block, a device never ends), checked
    on the opened descriptor; the ``OSError`` of opening when it cannot be opened."""
    fd: int | None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError:  # a socket cannot be opened at all: say what it is, if it is one
        found = _stat_or_none(path)
        if found is None or stat.S_ISREG(found.st_mode):
            raise
        fd = None
    else:
        found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode):
        if fd is not None:
            os.close(fd)
        raise ValueError(f"{path}: not a regular file ({file_kind(found.st_mode)})")
    assert fd is not None  # only what could not be opened lacks one, and it is not regular
    return open(fd, "rb"), found


def _stat_or_none(path: str | os.PathLike) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_folder(folder: Path) -> None:
    """Make the rename durable where the platform allows opening a folder."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _writer() -> str:
    """This process's host for temporary names: the host name (characters other than letters,
    digits, ``.`` and ``-`` escaped as ``_xx``) and, where readable, ``+`` the PID namespace,
    so PIDs are only compared where they mean the same process."""
    host = "".join(c if re.fullmatch(r"[A-Za-z0-9.-]", c) else
                   "".join(f"_{b:02x}" for b in c.encode("utf-8", "surrogateescape"))
                   for c in socket.gethostname())
    try:
        space = re.sub(r"\D", "", os.readlink("/proc/self/ns/pid"))
    except OSError:
        return host
    return f"{host}+{space}"


PID_DIGITS = len(str(2**32 - 1))
"""The most digits a process id has (a 32-bit ``pid_t``): every writer's name fits."""


def _temporary_stem(name: str) -> str:
    """``.NAME.dualtape-partial.``, NAME shortened so a whole temporary name fits NAME_MAX
    whatever the writer's process id (the stem is the same for every process of a host)."""
    tail = f".{TEMPORARY_MARKER}.{_writer()}.{'9' * PID_DIGITS}.XXXXXXXX"
    room = max(NAME_MAX - 1 - len(os.fsencode(tail)), 0)
    short = os.fsdecode(os.fsencode(name)[:room])
    return f".{short}.{TEMPORARY_MARKER}."


def _temporary_prefix(name: str) -> str:
    return f"{_temporary_stem(name)}{_writer()}.{os.getpid()}."


def _remove_stale_temporaries(target: Path, signature: bytes) -> None:
    """Delete the temporary files of ``target`` that a process of this host which no longer
    runs left (``kill -9``), when they are this user's regular files, empty or starting with
    ``signature``. A file in doubt stays."""
    if not hasattr(os, "getuid"):
        return
    stem = _temporary_stem(target.name)
    ours = re.compile(re.escape(_writer()) + r"\.([1-9][0-9]*)\.[a-z0-9_]{8}")
    try:
        names = os.listdir(target.parent)
    except OSError:
        return
    for name in names:
        match = ours.fullmatch(name[len(stem):]) if name.startswith(stem) else None
        if match is not None and not _process_runs(int(match.group(1))):
            _remove_if_partial(target.parent / name, signature)


def _remove_if_partial(entry: Path, signature: bytes) -> None:
    """Unlink ``entry`` if it is a regular file of this user that is empty or starts with
    ``signature``; nothing else is opened, no link is followed."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        seen = os.lstat(entry)
        if not stat.S_ISREG(seen.st_mode) or seen.st_uid != os.getuid():
            return
        fd = os.open(entry, flags)
        try:
            opened = os.fstat(fd)
            same = (opened.st_dev, opened.st_ino) == (seen.st_dev, seen.st_ino)
            start = os.read(fd, len(signature)) if same else None
        finally:
            os.close(fd)
        if start in (b"", signature):
            os.unlink(entry)
    except OSError:  # gone already, or not ours to remove: the save goes on
        return


def _process_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True
