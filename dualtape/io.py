"""Save and load networks: an ``.npz`` archive of host arrays plus a JSON header, no pickle.

The header (array ``__header__``, UTF-8 JSON) records the format version, the network class,
the dtype, each layer's kind, constructor sizes and parameter shapes, and the dtype and shape of
every ``extra`` array. Parameters are stored as ``layer{k}/{name}``; ``extra`` values (JSON-able,
or numpy arrays of booleans, numbers or strings stored as ``extra/{name}``) ride along for
checkpoints; ``save(..., optimizer=opt)`` stores ``opt.state_dict()`` as the extra arrays
``optimizer/{key}`` (the names train-text checkpoints use), ``load(..., optimizer=opt)``
restores them into ``opt`` for the loaded network.

``save`` refuses, before the destination is touched, what ``load`` would refuse: a class other
than ``Network``/``RecurrentNetwork``, a layer that is not exactly one of ``LAYER_KINDS``
(dualtape's and those registered with ``register_layer``), a layer whose settings (edited since
it was built) ``load`` would refuse (``_checked_settings``, the check ``load`` makes, with the
message it would give), parameters missing, extra, or of another shape or dtype than its sizes
give, layers whose sizes no longer chain (``TypeError``/``ValueError`` naming layer and
parameter); ``extra`` values that are not JSON-able (``TypeError`` naming the key path);
optimizer state that fits no parameter; a destination that is a folder, read-only, or not a
regular file.

``load`` reads through ``zip_reader`` (a regular file opened without blocking, the zip
directory checked before any member is inflated, no member read past what is declared, none
inflating more than 100-fold to over 32 MiB unless ``max_inflation=None``) and checks the
header (format name, version 1 to ``FORMAT_VERSION``, known network, dtype and layer kinds,
parameter shapes the layers' own, every member declared, the declared total within what the
members can hold) before reading any array. Any damage is a one-line ``ValueError`` naming
the path; a missing or unopenable path raises the ``OSError`` of opening it. Its peak memory
is the model once plus 1 MB read pieces: each member is read into the array it becomes, and
layers are built around the stored arrays without drawing weights
(``layers.initial.placeholder_params``); ``bench/load_peak.py`` measures it.

Saving is crash-safe and deletes only what it provably created (``files.write_atomically``:
a temporary file in the same folder, fsync, rename; a dead writer's temporary files removed,
nothing else). ``load`` and friends follow a symlink given as ``path``; ``save`` follows one
unless ``replace=False``, which never replaces a file nor follows a link at ``path``
(``FileExistsError``). Errors name the user's path.
"""

from __future__ import annotations

import json
import os
import zipfile
from typing import Any, cast

import numpy as np

from .backend import FLOAT_DTYPES, get_backend, resolve_backend, to_numpy, use_backend
from .files import write_atomically
from .layers import LAYER_KINDS, Layer
from .layers.composite import COMPOSITE_DEPTH, Composite
from .layers.edges import check_real
from .layers.initial import placeholder_params
from .network import Network
from .optim import BOOKKEEPING
from .recurrent import RecurrentNetwork
from .zip_reader import (
    ARRAY_KINDS,
    INFLATION_RATIO,
    Declared,
    capacity,
    dtype_text,
    is_shape,
    open_archive,
    read_member,
)

FORMAT = "dualtape"
FORMAT_VERSION = 1
NETWORK_KINDS = {cls.__name__: cls for cls in (Network, RecurrentNetwork)}
HEADER_LIMIT = 64 * 2**20
"""The largest JSON header ``load`` reads (bytes); real ones are a few kilobytes."""
ZIP_SIGNATURE = b"PK\x03\x04"
"""How a zip archive, and so a save's partial file, starts."""
OPTIMIZER_PREFIX = "optimizer/"
"""The ``extra`` names under which optimizer state is stored."""
JSON_DEPTH = 100
"""How deeply lists and dicts may nest in an ``extra`` value."""


# --- saving ----------------------------------------------------------------------------------


def save(
    net: Network | RecurrentNetwork,
    path: str | os.PathLike,
    *,
    extra: dict[str, Any] | None = None,
    optimizer: Any = None,
    replace: bool = True,
) -> None:
    """Write ``net`` (and ``extra``, and ``optimizer``'s state) to ``path`` atomically, from
    any backend.

    ``extra`` values must be JSON-able (dicts with string keys, lists, tuples, strings,
    numbers, booleans, None) or numpy arrays of booleans, numbers or strings. ``optimizer`` is
    an ``SGD``, ``Adam`` or ``DataParallel`` (anything with ``state_dict``/``load_state_dict``)
    that updates ``net``. Anything ``load`` could not read back raises ``TypeError`` or
    ``ValueError`` naming the layer, parameter or key before the destination is touched.
    ``replace=False`` never replaces an existing file nor follows a link at ``path``
    (``FileExistsError``); see the module docstring for what is followed where."""
    layers, arrays = _network_arrays(net)
    if extra is not None and not isinstance(extra, dict):
        raise TypeError(f"save: extra must be a dict of names to values, got "
                        f"{type(extra).__name__}")
    entries = dict(extra or {})
    if optimizer is not None:
        clash = next((k for k in entries if str(k).startswith(OPTIMIZER_PREFIX)), None)
        if clash is not None:
            raise ValueError(f"save: extra[{clash!r}] would be overwritten by optimizer=; pass "
                             "optimizer state either way, not both")
        entries.update(_optimizer_entries(optimizer, net))
    plain, declared = {}, {}
    for name, value in entries.items():
        if not isinstance(name, str) or "\0" in name:
            raise TypeError(f"save: extra names must be strings without NUL, got {name!r}")
        if isinstance(value, np.ndarray) and not isinstance(value, np.ma.MaskedArray):
            value = np.asarray(value)
            if value.dtype.kind not in ARRAY_KINDS:
                raise TypeError(f"save: extra[{name!r}] is a {value.dtype} array; load reads "
                                "only arrays of booleans, numbers and strings (no objects)")
            arrays[f"extra/{name}"] = value
            declared[f"extra/{name}"] = {"dtype": value.dtype.str, "shape": list(value.shape)}
        else:
            problem = _not_json(value, f"extra[{name!r}]", JSON_DEPTH)
            if problem is not None:
                raise TypeError(f"save: {problem}")
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
    except ValueError as exc:  # integers too long for JSON text
        raise TypeError(f"save: an extra value cannot be written as JSON ({exc})") from None
    arrays["__header__"] = np.frombuffer(encoded, dtype=np.uint8)
    # the names are layer.../..., extra/... and __header__, never savez's allow_pickle
    write_atomically(path, lambda f: np.savez(f, **arrays), replace=replace,  # type: ignore[arg-type]
                     signature=ZIP_SIGNATURE)


def _network_arrays(net: Any) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    """The header's layer table and each parameter as a host array ``layer{k}/{name}``, after
    checking that ``load`` would rebuild exactly this network."""
    if type(net) not in NETWORK_KINDS.values():
        raise TypeError(f"save: expected a Network or RecurrentNetwork, got {type(net).__name__}")
    dtype = net.dtype or "float32"  # a dtype other than FLOAT_DTYPES raises here
    arrays: dict[str, np.ndarray] = {}
    layers = [_layer_spec(layer, str(k), dtype, arrays) for k, layer in enumerate(net.layers)]
    try:
        type(net)(net.layers)  # the checks load makes when it rebuilds the network
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"save: load could not rebuild this network: {exc}") from None
    return layers, arrays


def _layer_spec(layer: Any, where: str, dtype: str, arrays: dict[str, np.ndarray]
                ) -> dict[str, Any]:
    """The header's entry for ``layer`` (layer ``where``: ``2``, or ``2.0.1`` inside
    composites), its parameters added to ``arrays`` as ``layer{where}/{name}``; a composite's
    entry lists its layers' under ``"layers"``."""
    kind = LAYER_KINDS.get(getattr(layer, "kind", ""))
    if type(layer) is not kind:
        raise TypeError(f"save: layer {where} is a {type(layer).__name__}, which load cannot "
                        "rebuild: register its class with dualtape.register_layer(cls) (a "
                        f"kind of its own; registered now: {', '.join(LAYER_KINDS)})")
    try:
        config = json.loads(json.dumps(layer.config()))  # what load will read
    except (TypeError, ValueError) as exc:
        raise TypeError(f"save: layer {where} ({kind.kind}) has settings that JSON cannot "
                        f"hold ({exc})") from None
    expected = _checked_settings(kind, config, dtype, where, "save")
    if set(layer.params) != set(expected):
        raise ValueError(f"save: layer {where} ({layer!r}) has parameters "
                         f"{sorted(layer.params)}; load expects {sorted(expected)}")
    shapes = {}
    for name, shape in expected.items():
        p = layer.params[name]
        host = to_numpy(p) if hasattr(p, "shape") and hasattr(p, "dtype") else None
        if host is None or host.shape != shape or host.dtype != np.dtype(dtype):
            found = type(p).__name__ if host is None else f"{host.dtype} {host.shape}"
            raise ValueError(f"save: layer {where} ({layer!r}) parameter {name} is {found}; "
                             f"load expects {dtype} {shape}")
        arrays[f"layer{where}/{name}"] = host
        shapes[name] = list(shape)
    spec = {"kind": kind.kind, "config": config, "params": shapes}
    if layer.composite:
        spec["layers"] = [_layer_spec(child, f"{where}.{i}", dtype, arrays)
                          for i, child in enumerate(cast(Composite, layer).children)]
    return spec


def _optimizer_entries(optimizer: Any, net: Any) -> dict[str, np.ndarray]:
    """``optimizer.state_dict()`` as ``extra`` arrays, each checked to fit ``net``."""
    if isinstance(optimizer, type) or not all(
            callable(getattr(optimizer, m, None)) for m in ("state_dict", "load_state_dict")):
        raise TypeError(f"save: optimizer must be an optimizer such as dualtape.SGD or "
                        f"dualtape.Adam (with state_dict and load_state_dict), got {optimizer!r}")
    entries = {}
    for key, value in optimizer.state_dict().items():
        value = np.asarray(value)
        if key not in BOOKKEEPING:
            k, name, _ = (key.split("/") + ["", ""])[:3]
            groups = net.params
            params = groups[int(k)] if k.isdigit() and int(k) < len(groups) else {}
            if name not in params or tuple(params[name].shape) != value.shape:
                raise ValueError(f"save: the optimizer's state {key!r} {value.shape} fits no "
                                 "parameter of this network (is it another network's "
                                 "optimizer?)")
        entries[f"{OPTIMIZER_PREFIX}{key}"] = value
    return entries


def _not_json(value: Any, where: str, depth: int) -> str | None:
    """What in ``value`` (at key path ``where``) JSON text cannot hold, or None; ``depth``
    more levels of lists and dicts are allowed (which also stops a value containing itself)."""
    if value is None or isinstance(value, bool | int | float | str):
        return None
    if isinstance(value, dict | list | tuple) and depth == 0:
        return f"{where} is nested more than {JSON_DEPTH} lists or dicts deep (or holds itself)"
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return (f"{where} has the key {key!r}, which is not a string (JSON would "
                        "turn it into one)")
            found = _not_json(item, f"{where}[{key!r}]", depth - 1)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = _not_json(item, f"{where}[{i}]", depth - 1)
            if found is not None:
                return found
        return None
    if type(value) is np.ndarray:
        return (f"{where} is a numpy array, which is not JSON-able (arrays may only be "
                "top-level extra values; pass an optimizer as optimizer=)")
    return f"{where} is a {type(value).__name__}, which is not JSON-able"


# --- loading ---------------------------------------------------------------------------------


def _read(path: str | os.PathLike, max_inflation: float | None
          ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header and every array, everything checked before the member it concerns is
    inflated (see the module docstring; ``max_inflation`` as ``load`` takes it)."""
    if max_inflation is not None:
        check_real("load", "max_inflation", max_inflation, "[1, inf]")
    with open_archive(path, max_inflation) as archive:
        header = _read_header(archive, path)
        declared = _declared(header, path)
        members = [info for info in archive.infolist() if info.filename != "__header__.npy"]
        limits = {}
        for info in members:
            name = info.filename.removesuffix(".npy")
            spec = declared.get(name)
            if spec is None and name.startswith("extra/") and "arrays" not in header \
                    and info.compress_type == zipfile.ZIP_STORED:
                limits[name] = info.file_size  # an older file: stored as is, it cannot inflate
            elif spec is None:
                raise ValueError(f"{path}: the archive holds a member {info.filename!r} that "
                                 "the header does not declare; refused unread")
            else:
                limits[name] = spec.nbytes
        room = sum(map(capacity, members))
        wanted = sum(spec.nbytes for spec in declared.values())
        if wanted > room:
            raise ValueError(f"{path}: the header declares {wanted:,} bytes of arrays, more "
                             f"than this file's members can hold ({room:,}); refused unread")
        arrays = {}
        for info in members:
            name = info.filename.removesuffix(".npy")
            arrays[name] = read_member(archive, info, declared.get(name), limits[name], path)
    for name, spec in declared.items():
        if name not in arrays:
            raise ValueError(f"{path}: {spec.what} should be {dtype_text(spec.dtype)} "
                             f"{spec.shape}, but it is missing")
    return header, arrays


def read_header(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON header of a dualtape file, checked for the format and version, without reading
    any array; ``ValueError`` naming ``path`` when it is not a regular dualtape file."""
    with open_archive(path) as archive:
        return _read_header(archive, path)


def _read_header(archive: zipfile.ZipFile, path: Any) -> dict[str, Any]:
    try:
        info = archive.getinfo("__header__.npy")
    except KeyError:
        raise ValueError(f"{path}: not a dualtape file (no dualtape header)") from None
    return _parse_header(read_member(archive, info, None, HEADER_LIMIT, path), path)


def _parse_header(raw: np.ndarray, path: Any) -> dict[str, Any]:
    try:
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise ValueError(f"a {raw.dtype} array of shape {raw.shape}")
        header = json.loads(raw.tobytes().decode())
    except (ValueError, RecursionError) as exc:  # JSON, unicode and nesting errors included
        raise ValueError(f"{path}: not a dualtape file (the header is not JSON text: "
                         f"{' '.join(str(exc).split())})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f"{path}: not a dualtape file (no dualtape header)")
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
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


def _declared(header: dict[str, Any], path: Any) -> dict[str, Declared]:
    """What the header says each member holds: the layers' parameters (the shapes their kind
    and sizes give, which the header must repeat) and the extra arrays."""
    dtype, specs = header.get("dtype"), header.get("layers")
    if header.get("network") not in tuple(NETWORK_KINDS) or dtype not in FLOAT_DTYPES \
            or not isinstance(specs, list):
        raise ValueError(f"{path}: the header names no known network, dtype and layer list")
    declared: dict[str, Declared] = {}
    for k, spec in enumerate(specs):
        _declare_layer(spec, str(k), np.dtype(dtype), declared, path, 0)
    arrays = header.get("arrays", {})
    if not isinstance(arrays, dict):
        raise ValueError(f"{path}: the header's array table is not a mapping")
    for name, spec in arrays.items():
        try:
            array_dtype = np.dtype(spec["dtype"])
            ok = name.startswith("extra/") and array_dtype.kind in ARRAY_KINDS \
                and is_shape(spec["shape"])
        except (TypeError, KeyError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"{path}: the header declares an invalid array {name}: {spec!r}")
        declared[name] = Declared(f"array {name}", array_dtype, tuple(spec["shape"]))
    return declared


def _checked_settings(kind: type[Layer], config: Any, dtype: str, where: str, who: Any
                     ) -> dict[str, tuple[int, ...]]:
    """The parameter shapes of layer ``where``, a ``kind`` with the settings ``config`` (as
    JSON gives them back), once a layer has been built from them as ``load`` builds it (on
    numpy, with placeholder parameters): the one check of a layer's settings, which ``load``
    makes for every layer before reading any array and ``save`` before writing anything. Else
    one ``ValueError``, ``{who}: layer {where}'s settings ... are invalid (reason)``, ``who``
    the file's path (load) or ``save``."""
    try:
        if not isinstance(config, dict):
            raise TypeError("not a mapping of names")
        shapes = kind.param_shapes(config)
        if not kind.composite:
            with use_backend("numpy"), placeholder_params():
                kind.from_config(config, dtype)
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        raise ValueError(f"{who}: layer {where}'s settings {_short(config)} are invalid "
                         f"({' '.join(str(exc).split())})") from None
    return shapes


def _declare_layer(spec: Any, where: str, dtype: np.dtype, declared: dict[str, Declared],
                   path: Any, depth: int) -> None:
    """Add the parameters of layer ``where``'s header entry ``spec`` (and of the layers of a
    composite, at most ``COMPOSITE_DEPTH`` deep) to ``declared``, checked against the shapes
    its kind and sizes give."""
    named = spec.get("kind") if isinstance(spec, dict) else None
    kind = LAYER_KINDS.get(named) if isinstance(named, str) else None
    if kind is None:
        raise ValueError(f"{path}: layer {where} has an unknown kind {_short(spec)}; a layer "
                         "class of your own loads once registered with "
                         "dualtape.register_layer(cls), before load")
    config, params = spec.get("config", {}), spec.get("params", {})
    shapes = _checked_settings(kind, config, dtype.name, where, path)
    label = f"{kind.kind}({', '.join(map(str, config.values()))})"
    if not isinstance(params, dict) or set(params) != set(shapes):
        raise ValueError(f"{path}: layer {where} ({label}) declares the parameters "
                         f"{_short(params)}; its kind has {sorted(shapes)}")
    for name, shape in shapes.items():
        what = f"layer {where} ({label}) parameter {name}"
        if params[name] != list(shape):
            raise ValueError(f"{path}: {what} should be {dtype} {shape}, found "
                             f"{_short(params[name])} in the header")
        declared[f"layer{where}/{name}"] = Declared(what, dtype, shape)
    children = spec.get("layers")
    if kind.composite and config:
        raise ValueError(f"{path}: layer {where} ({kind.kind}) has sizes {_short(config)}; a "
                         "composite has none of its own")
    if kind.composite != (children is not None):
        raise ValueError(f"{path}: layer {where} ({kind.kind}) "
                         + ("lists no layers" if kind.composite else "lists layers of its own"))
    if children is None:
        return
    if not isinstance(children, list) or not children:
        raise ValueError(f"{path}: layer {where} ({kind.kind}) lists its layers as "
                         f"{_short(children)}, not a non-empty list")
    if depth >= COMPOSITE_DEPTH:
        raise ValueError(f"{path}: composite layers nest more than {COMPOSITE_DEPTH} deep at "
                         f"layer {where}; refused unread")
    for i, child in enumerate(children):
        _declare_layer(child, f"{where}.{i}", dtype, declared, path, depth + 1)


def _short(value: Any, limit: int = 200) -> str:
    """``repr(value)``, cut to ``limit`` characters (a hostile header's entry can be long)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _build(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> Network | RecurrentNetwork:
    """The network the (checked) header describes, on numpy, with the stored parameters."""
    with use_backend("numpy"):
        layers = [_build_layer(spec, str(k), header["dtype"], arrays)
                  for k, spec in enumerate(header["layers"])]
    return NETWORK_KINDS[header["network"]](layers)


def _build_layer(spec: dict[str, Any], where: str, dtype: str, arrays: dict[str, np.ndarray]
                 ) -> Any:
    """Layer ``where`` from its (checked) header entry: a composite from its layers; a layer
    holds the stored arrays, no weights drawn for it."""
    kind = LAYER_KINDS[spec["kind"]]
    if kind.composite:
        composite = cast(type[Composite], kind)  # the composite kinds are Composites
        return composite.from_children([_build_layer(child, f"{where}.{i}", dtype, arrays)
                                        for i, child in enumerate(spec["layers"])])
    with placeholder_params():
        layer = kind.from_config(spec.get("config", {}), dtype)
    layer.params.update({name: arrays[f"layer{where}/{name}"] for name in layer.params})
    return layer


def load(path: str | os.PathLike, backend: str | None = None, device: Any = None, *,
         optimizer: Any = None, max_inflation: float | None = INFLATION_RATIO
         ) -> Network | RecurrentNetwork:
    """Read a network saved by ``save`` onto ``backend`` and ``device`` (default: the current
    backend and its device): a ``Network`` or ``RecurrentNetwork``, as saved.

    With ``optimizer`` (an ``SGD``, ``Adam`` or ``DataParallel`` of the kind saved), the state
    saved with ``save(..., optimizer=...)`` is restored into it for the loaded network; a file
    without optimizer state, or with another kind's, raises ``ValueError``.

    A compressed member that would inflate more than ``max_inflation`` times its compressed
    size (members together: the file's size) to over 32 MiB is refused before it is inflated
    (``ValueError`` naming the member); ``max_inflation=None`` loads such a file on purpose.
    ``save`` writes members uncompressed, so its files never reach the bound."""
    return load_with_extra(path, backend, device, optimizer=optimizer,
                           max_inflation=max_inflation)[0]


def load_with_extra(
    path: str | os.PathLike, backend: str | None = None, device: Any = None, *,
    optimizer: Any = None, max_inflation: float | None = INFLATION_RATIO,
) -> tuple[Network | RecurrentNetwork, dict[str, Any]]:
    """``load`` and ``load_extra`` in one read of the file: ``(network, extra)``."""
    if isinstance(optimizer, type) or optimizer is not None and not callable(
            getattr(optimizer, "load_state_dict", None)):
        raise TypeError(f"load: optimizer must be an optimizer such as dualtape.SGD or "
                        f"dualtape.Adam (with load_state_dict), got {optimizer!r}")
    header, arrays = _read(path, max_inflation)
    try:
        net = _build(header, arrays)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc
    except (TypeError, KeyError, AttributeError) as exc:  # sizes that do not fit the layer
        raise ValueError(f"{path}: a layer's sizes in the header are invalid ({exc})") from exc
    if backend is None and device is None:
        net.to(get_backend())
    else:
        net.to(resolve_backend(backend or get_backend().name, device))
    extra = _extra(header, arrays)
    if optimizer is not None:
        _restore_optimizer(optimizer, extra, net, path)
    return net, extra


def _restore_optimizer(optimizer: Any, extra: dict[str, Any], net: Any, path: Any) -> None:
    flat = {k[len(OPTIMIZER_PREFIX):]: v for k, v in extra.items()
            if k.startswith(OPTIMIZER_PREFIX)}
    if not flat:
        raise ValueError(f"{path}: holds no optimizer state (it was saved without "
                         "optimizer=); load it without optimizer=")
    try:
        optimizer.load_state_dict(flat, net.params)
    except ValueError as exc:
        raise ValueError(f"{path}: its optimizer state does not fit: {exc}") from None


def load_extra(path: str | os.PathLike, *, max_inflation: float | None = INFLATION_RATIO
               ) -> dict[str, Any]:
    """The ``extra`` values saved with a network (arrays as numpy arrays; optimizer state as
    ``optimizer/...`` arrays); ``max_inflation`` as ``load`` takes it."""
    return _extra(*_read(path, max_inflation))


def _extra(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    extra = dict(header.get("extra", {}))
    extra.update({k[len("extra/"):]: v for k, v in arrays.items() if k.startswith("extra/")})
    return extra
