"""Save and load networks: an ``.npz`` archive of host arrays plus a JSON header, no pickle.

The header (array ``__header__``, UTF-8 JSON) records the format version, the network class,
the dtype and each layer's kind, constructor sizes and parameter shapes. Parameters are stored
as ``layer{k}/{name}``; optional ``extra`` values (JSON-able, or numpy arrays stored as
``extra/{name}``) ride along for checkpoints. Loading checks everything before building, so a
truncated, corrupted or mismatched file raises ``ValueError`` and never yields a half-built
network.
"""

from __future__ import annotations

import json
import os
import tempfile
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


def save(net: Chain, path: str | os.PathLike, *, extra: dict[str, Any] | None = None) -> None:
    """Write ``net`` (and ``extra``) to ``path`` atomically, from any backend."""
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
    plain = {}
    for name, value in (extra or {}).items():
        if isinstance(value, np.ndarray):
            arrays[f"extra/{name}"] = value
        else:
            plain[name] = value
    header = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "network": type(net).__name__,
        "dtype": net.dtype or "float32",
        "layers": layers,
        "extra": plain,
    }
    arrays["__header__"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    path = Path(path)
    handle, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header and every array, fully read and checked for the format and version."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
        header = json.loads(arrays.pop("__header__").tobytes().decode())
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except Exception as exc:  # zip, npy, JSON and unicode errors all mean the same here
        raise ValueError(f"{path}: not a readable dualtape file ({type(exc).__name__}: {exc})") \
            from exc
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
    return header, arrays


def _build(header: dict[str, Any], arrays: dict[str, np.ndarray], path: Any) -> Chain:
    """The network the header describes, on numpy, with the stored parameters."""
    network = NETWORK_KINDS.get(header.get("network"))
    dtype = header.get("dtype")
    specs = header.get("layers")
    if network is None or dtype not in FLOAT_DTYPES or not isinstance(specs, list):
        raise ValueError(f"{path}: the header names no known network, dtype and layer list")
    layers = []
    with use_backend("numpy"):
        for k, spec in enumerate(specs):
            kind = LAYER_KINDS.get(spec.get("kind") if isinstance(spec, dict) else None)
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
    except (TypeError, KeyError) as exc:  # sizes that do not fit the layer
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
