"""Save and load networks: an ``.npz`` archive of host arrays plus a JSON header, no pickle.

The header (array ``__header__``, UTF-8 JSON) records the format version, the network class,
the dtype, each layer's kind, constructor sizes and parameter shapes, and the dtype and shape of
every ``extra`` array. Parameters are stored as ``layer{k}/{name}``; optional ``extra`` values
(JSON-able, or numpy arrays of booleans, numbers or strings stored as ``extra/{name}``) ride
along for checkpoints.

Loading reads the header first and refuses a member the header does not declare, or one whose
zip or npy header says it is larger than declared, before inflating it; then it checks
everything before building, so a truncated, corrupted, hostile or mismatched file raises
``ValueError`` naming the path and never yields a half-built network. Files written before the
header declared its extra arrays load too: their ``extra/`` members must then be stored
uncompressed, so they cannot inflate beyond the file's own size.

Saving is crash-safe: the archive is written to a temporary file ``.NAME.PID.XXXXXXXX`` next to
the destination, fsynced, then renamed over it. A symlink is followed (its target is replaced),
the destination's permission bits are kept (a new file gets ``0666 & ~umask``), a read-only
destination is refused, and temporary files of the same destination left by a process that no
longer runs (``kill -9``; for older versions' names without a PID: untouched for an hour) are
removed. Errors name the user's path.
"""

from __future__ import annotations

import errno
import glob
import json
import math
import os
import re
import stat
import tempfile
import time
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from .backend import FLOAT_DTYPES, get_backend, resolve_backend, to_numpy, use_backend
from .layers import LAYER_KINDS
from .network import Chain, Network
from .recurrent import RecurrentNetwork

FORMAT = "dualtape"
FORMAT_VERSION = 1
NETWORK_KINDS = {cls.__name__: cls for cls in (Network, RecurrentNetwork)}
HEADER_LIMIT = 64 * 2**20
"""The largest JSON header ``load`` reads (bytes); real ones are a few kilobytes."""
LEGACY_TEMPORARY_AGE = 3600.0
"""Seconds after which a temporary file without a PID in its name counts as abandoned."""
ARRAY_KINDS = "biufcSU"
"""The dtype kinds an ``extra`` array may have: booleans, numbers and strings, which numpy
reads without unpickling."""
NPY_HEADER_LIMIT = 10_000
"""Room for an ``.npy`` member's own header beyond its data (numpy's own read limit)."""


def save(net: Chain, path: str | os.PathLike, *, extra: dict[str, Any] | None = None) -> None:
    """Write ``net`` (and ``extra``) to ``path`` atomically, from any backend.

    ``extra`` values must be JSON-able or numpy arrays of booleans, numbers or strings: anything
    ``load`` could not read back raises ``TypeError`` before the destination is touched."""
    if type(net).__name__ not in NETWORK_KINDS:
        raise TypeError(f"save: expected a Network or RecurrentNetwork, got {type(net).__name__}")
    arrays: dict[str, np.ndarray] = {}
    layers = []
    for k, layer in enumerate(net.layers):
        shapes = {}
        for name, p in layer.params.items():
            arrays[f"layer{k}/{name}"] = to_numpy(p)
            shapes[name] = list(p.shape)
        layers.append({"kind": layer.kind, "config": layer.config(), "params": shapes})
    plain, declared = {}, {}
    for name, value in (extra or {}).items():
        if not isinstance(name, str):
            raise TypeError(f"save: extra names must be strings, got {name!r}")
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in ARRAY_KINDS:
                raise TypeError(f"save: extra[{name!r}] is a {value.dtype} array; load reads "
                                "only arrays of booleans, numbers and strings (no objects)")
            arrays[f"extra/{name}"] = value
            declared[f"extra/{name}"] = {"dtype": value.dtype.str, "shape": list(value.shape)}
        else:
            plain[name] = value
    header = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "network": type(net).__name__,
        "dtype": net.dtype or "float32",
        "layers": layers,
        "extra": plain,
        "arrays": declared,
    }
    try:
        encoded = json.dumps(header).encode()
    except (TypeError, ValueError) as exc:  # circular references too
        raise TypeError(f"save: extra values must be JSON-able (numbers, strings, lists, "
                        f"dicts) or numpy arrays ({exc})") from None
    arrays["__header__"] = np.frombuffer(encoded, dtype=np.uint8)
    _write_atomically(arrays, path)


def check_destination(path: str | os.PathLike) -> Path:
    """The file ``save`` would write for ``path`` (symlinks followed); an ``OSError`` naming
    ``path`` when it is a folder, read-only, or its folder is missing or not writable."""
    target = Path(os.path.realpath(path))
    folder = target.parent
    if target.is_dir():
        raise IsADirectoryError(errno.EISDIR, "it is a folder", str(path))
    if not folder.is_dir():
        raise FileNotFoundError(errno.ENOENT, "its folder does not exist", str(path))
    if target.exists():
        mode = target.stat().st_mode
        if not mode & 0o222 or not os.access(target, os.W_OK):
            raise PermissionError(errno.EACCES, "the file is read-only", str(path))
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, "its folder is not writable", str(path))
    return target


def _write_atomically(arrays: dict[str, np.ndarray], path: str | os.PathLike) -> None:
    target = check_destination(path)
    _remove_stale_temporaries(target)
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o666 & ~_umask()
    try:
        handle, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.{os.getpid()}.")
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        with os.fdopen(handle, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    _fsync_folder(target.parent)


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


def _remove_stale_temporaries(target: Path) -> None:
    """Delete ``.NAME.PID.XXXXXXXX`` files of ``target`` whose writing process is gone, and
    ``.NAME.XXXXXXXX`` files (from versions that wrote no PID) untouched for an hour; only
    files that are empty or start like a zip archive, as a save's temporary file does."""
    pattern = re.compile(re.escape(f".{target.name}.") + r"(?:(\d+)\.)?[a-z0-9_]{8}")
    for entry in target.parent.glob(f".{glob.escape(target.name)}.*"):
        match = pattern.fullmatch(entry.name)
        if match is None:
            continue
        pid = match.group(1)
        try:
            stale = (not _process_runs(int(pid)) if pid
                     else time.time() - entry.stat().st_mtime > LEGACY_TEMPORARY_AGE)
            if stale and _looks_like_a_partial_archive(entry):
                entry.unlink()
        except OSError:  # gone already, or not ours to remove: the save goes on
            continue


def _looks_like_a_partial_archive(entry: Path) -> bool:
    with open(entry, "rb") as f:
        return f.read(4) in (b"", b"PK\x03\x04")


def _process_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _read(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header and every array, the header read and checked first: format, version, and a
    declared size for every member before that member is inflated."""
    with _open(path) as archive:
        header = _read_header(archive, path)
        declared = _declared_sizes(header, path)
        arrays = {}
        for info in archive.infolist():
            filename = info.filename
            if filename == "__header__.npy":
                continue
            name = filename.removesuffix(".npy")
            limit = declared.get(name)
            if limit is None and name.startswith("extra/") and "arrays" not in header \
                    and info.compress_type == zipfile.ZIP_STORED:
                limit = info.file_size  # an older file: stored as is, it cannot inflate
            if limit is None:
                raise ValueError(f"{path}: the archive holds a member {filename!r} that the "
                                 "header does not declare; refused unread")
            arrays[name] = _read_member(archive, info, limit, path)
    for name, spec in header.get("arrays", {}).items():
        found = arrays.get(name)
        if found is None or found.dtype.str != spec["dtype"] or list(found.shape) != spec["shape"]:
            raise ValueError(f"{path}: array {name} should be {spec['dtype']} "
                             f"{tuple(spec['shape'])}, found "
                             f"{'nothing' if found is None else (found.dtype.str, found.shape)}")
    return header, arrays


def read_header(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON header of a dualtape file, checked for the format and version, without reading
    any array; ``ValueError`` naming ``path`` when it is not a dualtape file."""
    with _open(path) as archive:
        return _read_header(archive, path)


def _open(path: str | os.PathLike) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"{path}: not a dualtape file (not a zip archive: {exc})") from None


def _read_header(archive: zipfile.ZipFile, path: Any) -> dict[str, Any]:
    try:
        info = archive.getinfo("__header__.npy")
    except KeyError:
        raise ValueError(f"{path}: not a dualtape file (no dualtape header)") from None
    return _parse_header(_read_member(archive, info, HEADER_LIMIT, path), path)


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int, path: Any
                 ) -> np.ndarray:
    """One ``.npy`` member of at most ``limit`` data bytes, sizes checked before reading."""
    if info.file_size > limit + NPY_HEADER_LIMIT:
        raise ValueError(f"{path}: member {info.filename!r} would inflate to {info.file_size:,} "
                         f"bytes, more than the header declares ({limit:,}); refused unread")
    try:
        with archive.open(info) as f:
            version = np.lib.format.read_magic(f)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f"npy version {version}")
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, _, dtype = read_header(f)
            size = math.prod(shape) * dtype.itemsize
            if not dtype.hasobject and size <= min(limit, info.file_size):
                f.seek(0)
                return np.lib.format.read_array(f, allow_pickle=False)
    except (ValueError, EOFError, OSError, zipfile.BadZipFile, zlib.error) as exc:
        raise ValueError(f"{path}: not a dualtape file (member {info.filename!r} is unreadable: "
                         f"{exc})") from None
    what = "Python objects" if dtype.hasobject else f"{size:,} bytes"
    raise ValueError(f"{path}: member {info.filename!r} declares {what}, more than the header "
                     f"allows ({limit:,} bytes) or the archive holds ({info.file_size:,}); "
                     "refused unread")


def _parse_header(raw: np.ndarray, path: Any) -> dict[str, Any]:
    try:
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise ValueError(f"a {raw.dtype} array of shape {raw.shape}")
        header = json.loads(raw.tobytes().decode())
    except (ValueError, RecursionError) as exc:  # JSON, unicode and nesting errors included
        raise ValueError(f"{path}: not a dualtape file (the header is not JSON text: {exc})") \
            from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f"{path}: not a dualtape file (no dualtape header)")
    version = header.get("version")
    if not isinstance(version, int) or version < 1:
        raise ValueError(f"{path}: the header has no valid format version ({version!r})")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{path}: written in format version {version!r}, but this dualtape reads versions "
            f"up to {FORMAT_VERSION}; upgrade dualtape to load it"
        )
    if not isinstance(header.get("extra", {}), dict):
        raise ValueError(f"{path}: the header's extra values are a "
                         f"{type(header['extra']).__name__}, not a mapping of names")
    return header


def _declared_sizes(header: dict[str, Any], path: Any) -> dict[str, int]:
    """The most data bytes the header allows for each array it declares."""
    dtype, specs = header.get("dtype"), header.get("layers")
    if header.get("network") not in NETWORK_KINDS or dtype not in FLOAT_DTYPES \
            or not isinstance(specs, list):
        raise ValueError(f"{path}: the header names no known network, dtype and layer list")
    sizes = {}
    for k, spec in enumerate(specs):
        params = spec.get("params", {}) if isinstance(spec, dict) else None
        if not isinstance(params, dict) or not all(map(_is_shape, params.values())):
            raise ValueError(f"{path}: layer {k} declares no valid parameter shapes ({spec!r})")
        for name, shape in params.items():
            sizes[f"layer{k}/{name}"] = math.prod(shape) * np.dtype(dtype).itemsize
    arrays = header.get("arrays", {})
    if not isinstance(arrays, dict):
        raise ValueError(f"{path}: the header's array table is not a mapping")
    for name, spec in arrays.items():
        try:
            kind = np.dtype(spec["dtype"]).kind
            ok = name.startswith("extra/") and kind in ARRAY_KINDS and _is_shape(spec["shape"])
        except (TypeError, KeyError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"{path}: the header declares an invalid array {name}: {spec!r}")
        sizes[name] = math.prod(spec["shape"]) * np.dtype(spec["dtype"]).itemsize
    return sizes


def _is_shape(shape: Any) -> bool:
    return isinstance(shape, list) and all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)


def _build(header: dict[str, Any], arrays: dict[str, np.ndarray], path: Any) -> Chain:
    """The network the (checked) header describes, on numpy, with the stored parameters."""
    network, dtype = NETWORK_KINDS[header["network"]], header["dtype"]
    layers = []
    with use_backend("numpy"):
        for k, spec in enumerate(header["layers"]):
            kind = LAYER_KINDS.get(spec.get("kind"))
            if kind is None:
                raise ValueError(f"{path}: layer {k} has an unknown kind {spec!r}")
            config = spec.get("config", {})
            params = {}
            for name, shape in kind.param_shapes(config).items():
                stored = arrays.get(f"layer{k}/{name}")
                if stored is None or stored.shape != shape or str(stored.dtype) != dtype:
                    found = "missing" if stored is None else f"{stored.dtype} {stored.shape}"
                    raise ValueError(
                        f"{path}: layer {k} ({kind.kind}({', '.join(map(str, config.values()))})) "
                        f"parameter {name} should be {dtype} "
                        f"{shape}, found {found}"
                    )
                params[name] = stored
            layer = kind.from_config(config, dtype)
            layer.params.update(params)
            layers.append(layer)
    return network(layers)


def load(path: str | os.PathLike, backend: str | None = None, device: Any = None) -> Chain:
    """Read a network saved by ``save`` onto ``backend`` and ``device`` (default: the current
    backend and its device)."""
    return load_with_extra(path, backend, device)[0]


def load_with_extra(
    path: str | os.PathLike, backend: str | None = None, device: Any = None
) -> tuple[Chain, dict[str, Any]]:
    """``load`` and ``load_extra`` in one read of the file: ``(network, extra)``."""
    header, arrays = _read(path)
    try:
        net = _build(header, arrays, path)
    except ValueError as exc:
        raise ValueError(str(exc) if str(path) in str(exc) else f"{path}: {exc}") from exc
    except (TypeError, KeyError, AttributeError) as exc:  # sizes that do not fit the layer
        raise ValueError(f"{path}: a layer's sizes in the header are invalid ({exc})") from exc
    if backend is None and device is None:
        net.to(get_backend())
    else:
        net.to(resolve_backend(backend or get_backend().name, device))
    return net, _extra(header, arrays)


def load_extra(path: str | os.PathLike) -> dict[str, Any]:
    """The ``extra`` values saved with a network (arrays as numpy arrays)."""
    return _extra(*_read(path))


def _extra(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    extra = dict(header.get("extra", {}))
    extra.update({k[len("extra/"):]: v for k, v in arrays.items() if k.startswith("extra/")})
    return extra
