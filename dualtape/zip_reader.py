"""The bounded reader of a dualtape file's zip archive: nothing inflated beyond what is declared.

``open_archive`` opens a regular file without blocking and checks the zip directory before any
member is read (stored or deflated members, none encrypted or named twice, none claiming more
than its compressed bytes can produce, the compressed sizes within the file); ``read_member``
checks a member's ``.npy`` header against what the caller declares and reads its data through
``Bounded``, which never yields more than allowed. Damage is a one-line ``ValueError`` naming
the path (``unreadable``). What the header declares is ``io``'s business.

An honest archive can still inflate a thousandfold (deflate's limit): ``open_archive`` also
refuses, unread, a member that would inflate more than ``max_inflation`` (default
``INFLATION_RATIO``) times its compressed size, or members that together would inflate more
than that times the file's size, to over ``INFLATION_FLOOR`` bytes (as Apache POI refuses
members inflating more than 100-fold). ``max_inflation=None`` lifts the bound for a file the
caller trusts; dualtape's own files are stored, not compressed, and never reach it.
"""

from __future__ import annotations

import contextlib
import math
import os
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .files import open_regular

ARRAY_KINDS = "biufcSU"
"""The dtype kinds an ``extra`` array may have: booleans, numbers and strings, which numpy
reads without unpickling."""
NPY_HEADER_LIMIT = 10_000
"""Room for an ``.npy`` member's own header beyond its data (numpy's own read limit)."""
DEFLATE_RATIO = 1032
"""The most bytes deflate can produce from one compressed byte (258-byte matches in 2 bits)."""
UNSUPPORTED_FLAGS = 0x01 | 0x20 | 0x40
"""Zip flag bits for encryption, patched data and strong encryption."""
READ_CHUNK = 2**20
"""Bytes read from a member at a time."""
INFLATION_RATIO = 100.0
"""The most a member, or all of them over the file's size, may inflate beyond
``INFLATION_FLOOR`` bytes, by default."""
INFLATION_FLOOR = 2**25
"""Bytes (32 MiB) that members may inflate to whatever their ratio."""
UNREADABLE = (zipfile.BadZipFile, EOFError, OSError, ValueError, NotImplementedError, zlib.error)
"""What damaged zip or ``.npy`` data raises inside ``zipfile`` and numpy."""


@dataclass(frozen=True)
class Declared:
    """What the header says one member holds: ``what`` names it in errors."""

    what: str
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


@contextlib.contextmanager
def open_archive(path: str | os.PathLike, max_inflation: float | None = INFLATION_RATIO
                 ) -> Iterator[zipfile.ZipFile]:
    """The zip archive at ``path``, a regular file opened without blocking, its directory
    checked before any member is read (``check_inflation`` with ``max_inflation``)."""
    try:
        f, found = open_regular(path)
    except ValueError as exc:
        raise ValueError(f"{exc}; networks load only from regular files") from None
    with f:
        with unreadable(path, "not a zip archive"):
            archive = zipfile.ZipFile(f)
        with archive:
            check_directory(archive, found.st_size, path)
            check_inflation(archive, found.st_size, path, max_inflation)
            yield archive


@contextlib.contextmanager
def unreadable(path: Any, what: str) -> Iterator[None]:
    """Damaged zip or ``.npy`` data as a one-line ``ValueError`` naming ``path``."""
    try:
        yield
    except UNREADABLE as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ValueError(f"{path}: not a dualtape file ({what}: {reason})") from None


def capacity(info: zipfile.ZipInfo) -> int:
    """The most bytes ``info``'s compressed data can honestly inflate to."""
    ratio = 1 if info.compress_type == zipfile.ZIP_STORED else DEFLATE_RATIO
    return info.compress_size * ratio


def check_directory(archive: zipfile.ZipFile, file_size: int, path: Any) -> None:
    """Refuse members that could not be read safely: another compression method, encryption,
    a name given twice, more data than the compressed bytes can produce, or compressed sizes
    that add up to more than the file."""
    names = set()
    compressed = 0
    for info in archive.infolist():
        member = info.filename
        if member in names:
            raise ValueError(f"{path}: not a dualtape file (member {member!r} appears twice)")
        names.add(member)
        if info.flag_bits & UNSUPPORTED_FLAGS:
            raise ValueError(f"{path}: not a dualtape file (member {member!r} is encrypted or "
                             "patched)")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ValueError(f"{path}: not a dualtape file (member {member!r} uses compression "
                             f"method {info.compress_type}; only stored and deflate are read)")
        stored = info.compress_type == zipfile.ZIP_STORED
        if info.file_size > capacity(info) or stored and info.file_size != info.compress_size:
            raise ValueError(f"{path}: not a dualtape file (member {member!r} claims "
                             f"{info.file_size:,} bytes from {info.compress_size:,} compressed "
                             "bytes, which cannot produce that)")
        compressed += info.compress_size
    if compressed > file_size:
        raise ValueError(f"{path}: not a dualtape file (its members claim {compressed:,} "
                         f"compressed bytes in a file of {file_size:,}: overlapping or damaged "
                         "members)")


def check_inflation(archive: zipfile.ZipFile, file_size: int, path: Any,
                    max_inflation: float | None) -> None:
    """Refuse a member that would inflate to more than ``max_inflation`` times its compressed
    size, or members that together would inflate to more than that times ``file_size``, to
    over ``INFLATION_FLOOR`` bytes; None refuses nothing."""
    if max_inflation is None:
        return
    how = (f"more than {max_inflation:g}-fold; refused unread (load(..., max_inflation=None) "
           "reads a file you trust)")
    total = 0
    for info in archive.infolist():
        total += info.file_size
        if info.file_size > max(INFLATION_FLOOR, max_inflation * info.compress_size):
            raise ValueError(f"{path}: member {info.filename!r} would inflate to "
                             f"{info.file_size:,} bytes from {info.compress_size:,}, {how}")
    if total > max(INFLATION_FLOOR, max_inflation * file_size):
        raise ValueError(f"{path}: its members would inflate to {total:,} bytes from a file of "
                         f"{file_size:,}, {how}")


class Bounded:
    """A member's stream that raises rather than yield more than ``allowed`` bytes, whatever
    the zip directory claims; ``count`` is what it yielded."""

    def __init__(self, stream: Any, allowed: int) -> None:
        self.stream, self.left, self.count = stream, allowed, 0

    def read(self, n: int = -1, /) -> bytes:
        """At most ``n`` bytes (``n`` < 0: all that is left), as ``io.RawIOBase.read``."""
        if n < 0:
            n = self.left + 1  # one more than allowed, to tell a member that yields too much
        data = self.stream.read(min(n, self.left + 1))
        if len(data) > self.left:
            raise ValueError(f"the member yields more than the {self.count + self.left:,} "
                             "bytes its sizes allow")
        self.left -= len(data)
        self.count += len(data)
        return data


def read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, spec: Declared | None,
                 limit: int, path: Any) -> np.ndarray:
    """One ``.npy`` member holding ``spec`` (when declared) of at most ``limit`` data bytes;
    sizes, dtype and shape checked before its data is read."""
    member = info.filename
    if info.file_size > limit + NPY_HEADER_LIMIT:
        raise ValueError(f"{path}: member {member!r} would inflate to {info.file_size:,} "
                         f"bytes, more than the header declares ({limit:,}); refused unread")
    what = f"member {member!r} is unreadable"
    with unreadable(path, what):
        stream = archive.open(info)
    with stream:
        reader = Bounded(stream, min(limit + NPY_HEADER_LIMIT, capacity(info)))
        with unreadable(path, what):
            shape, fortran, dtype = npy_header(reader)
        if spec is not None and (dtype != spec.dtype or shape != spec.shape):
            raise ValueError(f"{path}: {spec.what} should be {dtype_text(spec.dtype)} "
                             f"{spec.shape}, found {dtype_text(dtype)} {shape}")
        if dtype.kind not in ARRAY_KINDS:
            kind = "Python objects" if dtype.hasobject else f"{dtype} values"
            raise ValueError(f"{path}: member {member!r} holds {kind}; dualtape reads arrays "
                             "of booleans, numbers and strings only; refused unread")
        size = math.prod(shape) * dtype.itemsize
        if reader.count + size != info.file_size:
            raise ValueError(f"{path}: member {member!r} declares {size:,} bytes of {dtype.str}, "
                             f"but it holds {info.file_size - reader.count:,} bytes of data; "
                             "refused unread")
        with unreadable(path, what):
            return npy_data(reader, shape, fortran, dtype)


def npy_header(reader: Bounded) -> tuple[tuple[int, ...], bool, np.dtype]:
    version = np.lib.format.read_magic(reader)
    if version not in ((1, 0), (2, 0)):
        raise ValueError(f"npy version {version}")
    read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
            else np.lib.format.read_array_header_2_0)
    shape, fortran, dtype = read(reader)
    if not is_shape(list(shape)):
        raise ValueError(f"the shape {shape} is not one of sizes >= 0")
    return tuple(shape), fortran, dtype


def npy_data(reader: Bounded, shape: tuple[int, ...], fortran: bool, dtype: np.dtype
              ) -> np.ndarray:
    """The array whose data follows, to the member's end (where ``zipfile`` checks the CRC)."""
    buffer = bytearray(math.prod(shape) * dtype.itemsize)
    view, done = memoryview(buffer), 0
    while done < len(buffer):
        chunk = reader.read(min(READ_CHUNK, len(buffer) - done))
        if not chunk:
            raise EOFError(f"the data ends after {done:,} of {len(buffer):,} bytes")
        view[done:done + len(chunk)] = chunk
        done += len(chunk)
    flat = np.frombuffer(buffer, dtype=dtype)
    return flat.reshape(shape[::-1]).T if fortran else flat.reshape(shape)


def dtype_text(dtype: np.dtype) -> str:
    """``float64`` for native numbers, ``>f8`` or ``<U3`` otherwise."""
    return dtype.name if dtype.isnative and dtype.kind in "biufc" else dtype.str


def is_shape(shape: Any) -> bool:
    return isinstance(shape, list) and all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
