"""Where new arrays live: backend selection, host<->device transfer, device checks and the
memory free there (``free_memory``).

The namespace of a computation always comes from its data (``namespace_of``); the selected
backend only decides where *new* arrays are created (parameters, states, ``asarray``).
Selection, lowest to highest priority: the ``DUALTAPE_BACKEND`` environment variable (read
lazily, on first use), ``set_backend``, then ``with use_backend(...)``. Without any of them the
backend is numpy. A device is checked when it is chosen: one that is not a device of the backend
(``"cuda:x"``, ``"gpu"`` for numpy) raises ``ValueError``, one this machine lacks (``"cuda"`` on a
CPU-only torch, ``"cuda:7"`` with fewer GPUs, ``"mps"`` off Apple silicon, a CuPy index past the
device count) raises ``BackendUnavailable`` saying why.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import array_api_compat
import numpy as np

KNOWN_BACKENDS = ("numpy", "cupy", "torch", "array_api_strict")
FLOAT_DTYPES = ("float32", "float64")


class BackendUnavailable(RuntimeError):
    """A known backend that cannot run on this machine (not installed, or no GPU)."""


@dataclass(frozen=True)
class Backend:
    """A chosen backend: its ``name``, array namespace ``xp`` and ``device``."""

    name: str
    xp: Any
    device: Any

    def __repr__(self) -> str:
        return f"Backend(name={self.name!r}, device={self.device!r})"


_context_choice: ContextVar[Backend | None] = ContextVar("dualtape_backend", default=None)
_global_choice: Backend | None = None


def _import_cupy() -> Any:
    try:
        cupy = importlib.import_module("cupy")
    except ImportError as exc:
        raise BackendUnavailable(
            "backend 'cupy' needs CuPy, which is not installed: "
            'pip install "dualtape[cuda12]" (or "dualtape[cuda13]" for CUDA 13)'
        ) from exc
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDA driver missing or broken
        raise BackendUnavailable(f"backend 'cupy' found no working CUDA driver: {exc}") from exc
    if count == 0:
        raise BackendUnavailable("backend 'cupy' found no CUDA device on this machine")
    return cupy


@functools.cache
def _namespace(name: str) -> Any:
    """The array namespace of a backend name; raises BackendUnavailable."""
    if name == "numpy":
        return array_api_compat.array_namespace(np.empty(0))
    if name == "cupy":
        _import_cupy()
        return importlib.import_module("array_api_compat.cupy")
    if name == "torch":
        try:
            importlib.import_module("torch")
        except ImportError as exc:
            raise BackendUnavailable(
                "backend 'torch' needs PyTorch, which is not installed: pip install torch"
            ) from exc
        return importlib.import_module("array_api_compat.torch")
    if name == "array_api_strict":
        try:
            return importlib.import_module("array_api_strict")
        except ImportError as exc:
            raise BackendUnavailable(
                "backend 'array_api_strict' is not installed: pip install array-api-strict"
            ) from exc
    raise ValueError(f"unknown backend {name!r}; known backends: {', '.join(KNOWN_BACKENDS)}")


def _default_device(name: str, xp: Any) -> Any:
    if name == "cupy":
        return importlib.import_module("cupy").cuda.Device()
    if name == "torch":
        return importlib.import_module("torch").device("cpu")
    if name == "array_api_strict":
        return xp.Device("CPU_DEVICE")
    return "cpu"


def _normalise_device(name: str, xp: Any, device: Any) -> Any:
    """``device`` checked for backend ``name``: ``ValueError`` for what is not a device of that
    backend, ``BackendUnavailable`` for a device this machine does not have."""
    if device is None:
        return _default_device(name, xp)
    if name == "cupy":
        return _cupy_device(device)
    if name == "torch":
        return _torch_device(device)
    if name == "array_api_strict":
        try:
            return device if isinstance(device, xp.Device) else xp.Device(str(device))
        except ValueError as exc:
            raise ValueError(f"backend 'array_api_strict': {exc}") from None
    if device != "cpu":
        raise ValueError(f"backend 'numpy' has only the device 'cpu', not {device!r}")
    return device


def _is_index(device: Any) -> bool:
    return isinstance(device, int | np.integer) and not isinstance(device, bool)


def _index(device: Any, name: str) -> int:
    """A device index as an ``int``; ``ValueError`` when it is negative."""
    if device < 0:
        raise ValueError(f"backend {name!r}: a device index is >= 0, not {device}")
    return int(device)


def _cupy_device(device: Any) -> Any:
    """A ``cupy.cuda.Device`` from an index or a Device, checked against the device count."""
    cupy = importlib.import_module("cupy")
    if isinstance(device, cupy.cuda.Device):
        index = device.id
    elif _is_index(device):
        index = _index(device, "cupy")
    else:
        raise ValueError(f"backend 'cupy': a device is an index 0, 1, ... or a "
                         f"cupy.cuda.Device, not {device!r}")
    count = cupy.cuda.runtime.getDeviceCount()
    if index >= count:
        raise BackendUnavailable(f"backend 'cupy' has no device {index}: CuPy sees {count} "
                                 f"CUDA device{'s' if count != 1 else ''} here")
    return cupy.cuda.Device(index)


def _torch_device(device: Any) -> Any:
    """A ``torch.device`` that works here: cpu, an existing CUDA device (``"cuda"`` becomes the
    current one), mps where there is one, or another type torch can allocate on."""
    torch = importlib.import_module("torch")
    if _is_index(device):
        device = f"cuda:{_index(device, 'torch')}"  # an index is a CUDA device, as for CuPy
    elif not isinstance(device, str | torch.device):
        raise ValueError(f"backend 'torch': a device is a string such as 'cpu', 'cuda:1' or "
                         f"'mps', a CUDA index or a torch.device, not {device!r}")
    try:
        chosen = torch.device(device)
    except RuntimeError:
        raise ValueError(f"backend 'torch': {device!r} is not a device; devices are written "
                         "'cpu', 'cuda', 'cuda:1', 'mps', ...") from None
    where = f"backend 'torch' device {str(device)!r}"
    if chosen.type == "cpu":
        if chosen.index not in (None, 0):
            raise ValueError(f"{where}: torch has one CPU device, 'cpu'")
        return torch.device("cpu")
    if chosen.type == "meta":
        raise ValueError(f"{where}: meta tensors hold no values, so nothing can run on them")
    if chosen.type == "cuda":
        chosen = _torch_cuda(torch, chosen, where)
    elif chosen.type == "mps" and not torch.backends.mps.is_available():
        built = torch.backends.mps.is_built()
        raise BackendUnavailable(f"{where}: " + ("this machine has no MPS device (Apple silicon)"
                                                 if built else "torch was built without MPS"))
    try:
        torch.empty(0, device=chosen)
    except Exception as exc:  # a device type torch knows but cannot use here
        raise BackendUnavailable(f"{where} does not work here: {exc}") from exc
    return chosen


def _torch_cuda(torch: Any, chosen: Any, where: str) -> Any:
    """``chosen`` (type cuda) with its index, or why it cannot run here."""
    if not torch.backends.cuda.is_built():
        raise BackendUnavailable(f"{where}: this torch ({torch.__version__}) was built without "
                                 "CUDA; install a CUDA build of torch")
    count = torch.cuda.device_count()
    if count == 0:
        raise BackendUnavailable(f"{where}: torch finds no CUDA device on this machine")
    if chosen.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    if chosen.index >= count:
        raise BackendUnavailable(f"{where} does not exist: torch sees {count} CUDA "
                                 f"device{'s' if count != 1 else ''} here")
    return chosen


def resolve_backend(name: str, device: Any = None) -> Backend:
    """The ``Backend`` for ``name`` (``"auto"`` = cupy when a CUDA device works, else numpy)."""
    if not isinstance(name, str):
        raise TypeError(f"a backend name must be a string, not {type(name).__name__}")
    if name == "auto":
        name = "cupy" if "cupy" in available_backends() else "numpy"
    xp = _namespace(name)
    return Backend(name, xp, _normalise_device(name, xp, device))


def available_backends() -> list[str]:
    """The backends usable right now, in the order numpy, cupy, torch, array_api_strict."""
    usable = []
    for name in KNOWN_BACKENDS:
        try:
            _namespace(name)
        except BackendUnavailable:
            continue
        usable.append(name)
    return usable


def set_backend(name: str, device: Any = None) -> Backend:
    """Choose where new arrays are created from now on, for this process."""
    global _global_choice
    _global_choice = resolve_backend(name, device)
    return _global_choice


@contextlib.contextmanager
def use_backend(name: str, device: Any = None) -> Iterator[Backend]:
    """Choose a backend inside a ``with`` block; the previous choice returns on exit."""
    choice = resolve_backend(name, device)
    token = _context_choice.set(choice)
    try:
        yield choice
    finally:
        _context_choice.reset(token)


def get_backend() -> Backend:
    """The backend new arrays are created on now."""
    global _global_choice
    chosen = _context_choice.get()
    if chosen is not None:
        return chosen
    if _global_choice is None:
        name = os.environ.get("DUALTAPE_BACKEND") or "numpy"
        try:
            _global_choice = resolve_backend(name)
        except ValueError as exc:
            raise ValueError(f"environment variable DUALTAPE_BACKEND: {exc}") from None
    return _global_choice


_names_by_type: dict[type, str] = {}


def _classify(a: Any) -> str:
    if array_api_compat.is_numpy_array(a):
        return "numpy"
    if array_api_compat.is_cupy_array(a):
        return "cupy"
    if array_api_compat.is_torch_array(a):
        return "torch"
    try:
        xp = array_api_compat.array_namespace(a)
    except TypeError:
        xp = None
    if xp is not None and array_api_compat.is_array_api_strict_namespace(xp):
        return "array_api_strict"
    raise TypeError(f"expected an array of {', '.join(KNOWN_BACKENDS)}, got {type(a).__name__}")


def backend_name_of(a: Any) -> str:
    """The name of the backend an array belongs to (classified once per array type)."""
    kind = type(a)
    name = _names_by_type.get(kind)
    if name is None:
        name = _names_by_type[kind] = _classify(a)
    return name


def out_module(a: Any) -> Any:
    """numpy or cupy, the module whose functions write into ``a`` with ``out=``; None for
    arrays of the other backends (the generic array-API code has no ``out=``)."""
    if type(a) is np.ndarray:
        return np
    if array_api_compat.is_cupy_array(a):
        return importlib.import_module("cupy")
    return None


def backend_of(a: Any) -> Backend:
    """The backend and device an existing array lives on."""
    name = backend_name_of(a)
    return Backend(name, _namespace(name), "cpu" if name == "numpy" else a.device)


def namespace_of(*arrays: Any) -> Any:
    """The array namespace shared by ``arrays``; mixing backends raises ``TypeError``."""
    names = {backend_name_of(a) for a in arrays}
    if len(names) != 1:
        raise TypeError(f"arrays of several backends mixed: {', '.join(sorted(names))}")
    return _namespace(names.pop())


def describe(a: Any) -> str:
    """A short description of where an array lives, for error messages."""
    where = backend_of(a)
    return f"{where.name} array on device {where.device}"


def check_same_place(a: Any, reference: Any, what: str, owner: str) -> None:
    """Raise ``TypeError`` (other backend) or ``ValueError`` (other device) naming both."""
    if backend_name_of(a) == backend_name_of(reference) == "numpy":
        return
    mine, theirs = backend_of(a), backend_of(reference)
    if mine.name != theirs.name:
        raise TypeError(
            f"{what} is a {describe(a)} but {owner} lives on {describe(reference)}; "
            f"move one of them (dualtape.asarray, .to('{mine.name}'))"
        )
    if mine.device != theirs.device:
        raise ValueError(
            f"{what} is a {describe(a)} but {owner} lives on {describe(reference)}; "
            "move one of them to the other's device"
        )


def device_context(backend: Backend) -> contextlib.AbstractContextManager:
    """A context that makes ``backend.device`` current (CuPy ignores ``device=`` in places)."""
    if backend.name == "cupy":
        return backend.device
    return _NO_DEVICE_CHANGE


_NO_DEVICE_CHANGE = contextlib.nullcontext()  # reentrant and stateless: one serves all


def device_context_of(a: Any) -> contextlib.AbstractContextManager:
    """``device_context(backend_of(a))``, without building the backend for a numpy array."""
    return _NO_DEVICE_CHANGE if type(a) is np.ndarray else device_context(backend_of(a))


def zeros_like_place(shape: tuple[int, ...], reference: Any) -> Any:
    """Zeros of ``shape`` with the dtype, backend and device of ``reference``."""
    if type(reference) is np.ndarray:  # the common case, without the namespace's checks
        return np.zeros(shape, dtype=reference.dtype)
    where = backend_of(reference)
    with device_context(where):
        return where.xp.zeros(shape, dtype=reference.dtype, device=reference.device)


def to_numpy(a: Any) -> np.ndarray:
    """A numpy copy (or view, for numpy input) of any supported array."""
    if isinstance(a, np.ndarray):
        return a
    where = backend_of(a)
    if where.name == "cupy":
        return a.get()
    if where.name == "torch":
        return a.detach().cpu().numpy()
    if where.name == "array_api_strict":
        return np.asarray(a.to_device(where.xp.Device("CPU_DEVICE")))
    return np.asarray(a)


def from_host(host: np.ndarray, backend: Backend | None = None) -> Any:
    """Copy a numpy array onto ``backend`` (default: the current one)."""
    backend = backend or get_backend()
    if backend.name == "numpy":
        return host
    with device_context(backend):
        if backend.name == "cupy":
            return backend.xp.asarray(host)
        return backend.xp.asarray(host, device=backend.device)


def move(a: Any, backend: Backend) -> Any:
    """``a`` copied onto ``backend`` through the host (unchanged if it already lives there)."""
    here = backend_of(a)
    if here.name == backend.name and here.device == backend.device:
        return a
    return from_host(_c_order(to_numpy(a)), backend)


def asarray(obj: Any, dtype: str | None = None) -> Any:
    """An array on the current backend holding ``obj`` (a list, scalar or any supported array)."""
    with contextlib.suppress(TypeError):
        obj = to_numpy(obj)
    host = np.asarray(obj, dtype=None if dtype is None else np.dtype(dtype))
    return from_host(_c_order(host))


def _c_order(host: np.ndarray) -> np.ndarray:
    """``host`` in C order, keeping its shape (``np.ascontiguousarray`` turns () into (1,))."""
    return host if host.flags.c_contiguous else np.ascontiguousarray(host)


def host_rng(seed: int | None) -> np.random.Generator:
    """The seeded host generator all random initialisation draws from; ``seed`` is None or an
    integer >= 0 (``ValueError`` otherwise)."""
    if seed is not None and (
        not isinstance(seed, int | np.integer) or isinstance(seed, bool) or seed < 0
    ):
        raise ValueError(f"seed must be None or an integer >= 0, got {seed!r}")
    return np.random.default_rng(seed)


_dtype_names: dict[tuple[type, Any], str] = {}  # keyed with the type: libraries' dtypes differ


def dtype_name(dtype: Any) -> str:
    """``"float32"`` or ``"float64"`` for a dtype object of any backend, a numpy scalar type
    (``np.float32``) or a name; anything else raises ``ValueError``."""
    key = (type(dtype), dtype)
    try:
        return _dtype_names[key]
    except (KeyError, TypeError):
        pass
    if isinstance(dtype, type) and issubclass(dtype, np.generic):
        name = np.dtype(dtype).name
    else:
        name = str(dtype).rsplit(".", 1)[-1]
    if name not in FLOAT_DTYPES:
        raise ValueError(f"dtype must be one of {FLOAT_DTYPES}, got {dtype!r}")
    with contextlib.suppress(TypeError):
        _dtype_names[key] = name
    return name


def free_memory(backend: Backend) -> int | None:
    """Bytes free where ``backend`` allocates (the host's available memory on the CPU, the
    device's free memory on a GPU); None when it cannot be told."""
    try:
        if backend.name == "cupy":
            import cupy

            with cupy.cuda.Device(backend.device.id):
                return int(cupy.cuda.runtime.memGetInfo()[0])
        if backend.name == "torch" and getattr(backend.device, "type", "cpu") == "cuda":
            import torch

            return int(torch.cuda.mem_get_info(backend.device)[0])
        if not os.path.exists("/proc/meminfo"):  # not Linux: the free pages, where told
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except Exception:  # no /proc nor sysconf's count, no driver: it cannot be told
        return None
