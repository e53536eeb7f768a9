"""Data parallelism over MPI (mpi4py), after ChainerMN's multi-node optimizer.

Every process (rank) holds the whole network. ``broadcast_parameters`` gives every rank the
root's parameters once; ``DataParallel`` wraps an optimizer so that each step averages the
ranks' gradients in one allreduce over a single flat buffer and then applies the wrapped rule on
every rank alike, so the parameters stay identical. N ranks on b examples each equal one process
on the N·b examples together (the loss is a batch mean), to float rounding.

Importing this module never imports mpi4py; without it, or with one rank, everything runs as a
single process. ``comm=None`` means ``mpi4py.MPI.COMM_WORLD``.

Agreement: ``broadcast_parameters`` and ``DataParallel``'s first step check that every rank
holds the same parameter layout, and that first step checks that every rank wraps the same
optimizer kind with the same settings (``optimizer_settings``); otherwise every rank raises
``ValueError`` naming a rank that differs and how (one pickled gather each, never per step).

Failures: ``train``/``train_recurrent`` average ``[loss, input finite]`` over the ranks
(``DataParallel.mean``) before any gradient is reduced, so a NaN or inf input or loss on any
rank raises ``FloatingPointError`` on every rank in the same call, with nothing updated
anywhere. Any other exception on one rank leaves the others waiting in their next collective:
run scripts as ``mpiexec -n 4 python -m mpi4py script.py``, which aborts every rank when one
raises.

Transport: numpy (and other host backends) reduce through mpi4py's buffer interface
(``Allreduce``, no pickling). On CuPy each rank should use GPU ``local rank % device count``
(``select_gpu``); gradients are packed on the GPU and reduced with NCCL when ``cupy.cuda.nccl``
is available, else copied through the host. The CuPy paths have not run on a GPU yet.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .backend import backend_of, dtype_name, from_host, to_numpy
from .layers.base import Array


def mpi_module() -> Any:
    """``mpi4py.MPI``, or None when mpi4py is not installed."""
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    return MPI


def _world(comm: Any) -> Any:
    """``comm``, or COMM_WORLD, or None when there is no MPI (a single process)."""
    if comm is not None:
        return comm
    mpi = mpi_module()
    return None if mpi is None else mpi.COMM_WORLD


def rank(comm: Any = None) -> int:
    """This process's rank (0 without MPI)."""
    comm = _world(comm)
    return 0 if comm is None else comm.Get_rank()


def world_size(comm: Any = None) -> int:
    """The number of processes (1 without MPI)."""
    comm = _world(comm)
    return 1 if comm is None else comm.Get_size()


def local_rank(comm: Any = None) -> int:
    """This process's rank among the ranks on its own machine (0 without MPI)."""
    comm = _world(comm)
    if comm is None or comm.Get_size() == 1:
        return 0
    node = comm.Split_type(mpi_module().COMM_TYPE_SHARED)
    try:
        return node.Get_rank()
    finally:
        node.Free()


def select_gpu(comm: Any = None) -> int:
    """Make GPU ``local rank % device count`` CuPy's current device and return its index.
    Call it before building networks or selecting ``"cupy"``; needs CuPy and a GPU."""
    import cupy

    index = local_rank(comm) % cupy.cuda.runtime.getDeviceCount()
    cupy.cuda.Device(index).use()
    return index


def _layout(groups: list[dict[str, Array]]) -> list[tuple[int, str, tuple[int, ...], str]]:
    """``(group, name, shape, dtype)`` of every array, in a fixed order."""
    return [(k, name, tuple(group[name].shape), dtype_name(group[name].dtype))
            for k, group in enumerate(groups) for name in sorted(group)]


def _check_same_layout(comm: Any, layout: list, what: str) -> None:
    """Raise ``ValueError`` on every rank unless all ranks hold the same ``layout`` (one
    pickled gather, at setup or when the layout changes, never per step)."""
    layouts = comm.allgather(layout)
    for other, theirs in enumerate(layouts):
        if theirs != layouts[0]:
            raise ValueError(f"{what}: rank {other} has arrays {theirs} but rank 0 has "
                             f"{layouts[0]}; every rank must build the same network")


def optimizer_settings(optimizer: Any) -> dict[str, Any]:
    """The kind of ``optimizer`` and its public numbers, steps taken included (``{"kind":
    "SGD", "rate": 0.1, "momentum": 0.9, "regulariser": 0.0, "steps": 0}``)."""
    numbers = {name: value for name, value in sorted(vars(optimizer).items())
               if not name.startswith("_") and isinstance(value, (bool, int, float, str))}
    return {"kind": type(optimizer).__name__, **numbers}


def _check_same_optimizer(comm: Any, optimizer: Any) -> None:
    """Raise ``ValueError`` on every rank unless all ranks' ``optimizer_settings`` agree."""
    everyone = comm.allgather(optimizer_settings(optimizer))
    reference = everyone[0]
    for other, theirs in enumerate(everyone):
        if theirs == reference:
            continue
        if theirs.get("kind") != reference["kind"]:
            how = f"wraps {theirs.get('kind')} but rank 0 wraps {reference['kind']}"
        else:
            names = sorted(k for k in {*theirs, *reference} if theirs.get(k) != reference.get(k))
            how = (f"wraps {theirs['kind']} with "
                   f"{', '.join(f'{k}={theirs.get(k)!r}' for k in names)} where rank 0 has "
                   f"{', '.join(f'{k}={reference.get(k)!r}' for k in names)}")
        raise ValueError(f"DataParallel: rank {other} {how}; every rank must wrap the same "
                         "optimizer with the same settings")


def _single_dtype(layout: list, what: str) -> np.dtype:
    dtypes = {entry[3] for entry in layout}
    if len(dtypes) != 1:
        raise ValueError(f"{what}: all arrays must share one dtype to travel in one buffer, "
                         f"got {sorted(dtypes)}")
    return np.dtype(dtypes.pop())


def _pack_host(groups: list[dict[str, Array]], layout: list, dtype: np.dtype) -> np.ndarray:
    """Every array of ``groups`` copied, in ``layout`` order, into one new host buffer."""
    sizes = [int(np.prod(shape)) for _, _, shape, _ in layout]
    flat = np.empty(sum(sizes), dtype=dtype)
    offset = 0
    for (k, name, _, _), size in zip(layout, sizes, strict=True):
        flat[offset:offset + size] = to_numpy(groups[k][name]).reshape(-1)
        offset += size
    return flat


def _unpack(flat: Any, layout: list, like: list[dict[str, Array]]) -> list[dict[str, Array]]:
    """Dicts shaped like ``like`` whose arrays are consecutive pieces of ``flat``, moved to
    the backend and device of the array each replaces."""
    out: list[dict[str, Array]] = [{} for _ in like]
    offset = 0
    for k, name, shape, _ in layout:
        size = int(np.prod(shape))
        piece = flat[offset:offset + size].reshape(shape)
        reference = like[k][name]
        out[k][name] = piece if type(piece) is type(reference) else from_host(
            piece, backend_of(reference))
        offset += size
    return out


def broadcast_parameters(net: Any, root: int = 0, comm: Any = None) -> None:
    """Give every rank the parameters of rank ``root`` (one buffer through the host). Every
    rank must call it with a network of the same layout, else every rank raises
    ``ValueError``."""
    comm = _world(comm)
    size = 1 if comm is None else comm.Get_size()
    if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < size:
        raise ValueError(f"broadcast_parameters: root must be a rank in [0, {size}), got {root!r}")
    if size == 1:
        return
    groups = net.params
    layout = _layout(groups)
    _check_same_layout(comm, layout, "broadcast_parameters")
    if not layout:
        return
    flat = _pack_host(groups, layout, _single_dtype(layout, "broadcast_parameters"))
    comm.Bcast(flat, root=root)
    for group, new in zip(groups, _unpack(flat, layout, groups), strict=True):
        group.update(new)


class DataParallel:
    """An optimizer averaging the gradients of all ranks before the wrapped one's update.

    Used like ``SGD``/``Adam`` in ``train`` and ``train_recurrent``; ``state_dict`` and
    ``load_state_dict`` are the wrapped optimizer's (identical on every rank).
    ``reduce_seconds`` adds up the time spent packing, reducing and unpacking gradients.
    """

    def __init__(self, optimizer: Any, comm: Any = None) -> None:
        if isinstance(optimizer, DataParallel) or not callable(getattr(optimizer, "step", None)):
            what = "another DataParallel" if isinstance(optimizer, DataParallel) else repr(
                optimizer)
            raise TypeError(f"DataParallel wraps an optimizer such as SGD or Adam, not {what}")
        self.optimizer = optimizer
        self.comm = _world(comm)
        self.size = 1 if self.comm is None else self.comm.Get_size()
        self.reduce_seconds = 0.0
        self._checked_layout: list | None = None
        self._checked_optimizer = False
        self._nccl: Any = None

    def __repr__(self) -> str:
        return f"DataParallel({self.optimizer!r}, ranks={self.size})"

    def step(self, params: list[dict[str, Array]], grads: list[dict[str, Array]]) -> None:
        """Average ``grads`` over the ranks, then let the wrapped optimizer update ``params``."""
        if self.size > 1:
            if not self._checked_optimizer:
                _check_same_optimizer(self.comm, self.optimizer)
                self._checked_optimizer = True
            began = time.perf_counter()
            grads = self._average(grads)
            self.reduce_seconds += time.perf_counter() - began
        self.optimizer.step(params, grads)

    def mean(self, values: list[float]) -> list[float]:
        """``values`` averaged over the ranks (NaN anywhere gives NaN everywhere). Every rank
        must call it in the same order as its other collectives."""
        if self.size == 1:
            return values
        buffer = np.asarray(values, dtype=np.float64)
        self.comm.Allreduce(mpi_module().IN_PLACE, buffer, op=mpi_module().SUM)
        return [float(v) / self.size for v in buffer]

    def state_dict(self) -> dict[str, np.ndarray]:
        """The wrapped optimizer's state."""
        return self.optimizer.state_dict()

    def load_state_dict(self, flat: dict[str, np.ndarray],
                        params: list[dict[str, Array]]) -> None:
        """Restore the wrapped optimizer's state (give every rank the same)."""
        self.optimizer.load_state_dict(flat, params)

    def _average(self, grads: list[dict[str, Array]]) -> list[dict[str, Array]]:
        layout = _layout(grads)
        if layout != self._checked_layout:
            _check_same_layout(self.comm, layout, "DataParallel")
            self._checked_layout = layout
        if not layout:
            return grads
        dtype = _single_dtype(layout, "DataParallel")
        first = grads[layout[0][0]][layout[0][1]]
        if backend_of(first).name == "cupy":
            return self._average_cupy(grads, layout, first)
        flat = _pack_host(grads, layout, dtype)
        self.comm.Allreduce(mpi_module().IN_PLACE, flat, op=mpi_module().SUM)
        flat /= self.size
        return _unpack(flat, layout, grads)

    def _average_cupy(self, grads: list[dict[str, Array]], layout: list,
                      first: Any) -> list[dict[str, Array]]:
        """Pack on the GPU; NCCL allreduce when available, else a round trip through the
        host. (Not yet run on a GPU.)"""
        import cupy

        with first.device:
            flat = cupy.concatenate([grads[k][name].reshape(-1) for k, name, _, _ in layout])
            communicator = self._nccl_communicator(first.dtype)
            if communicator is None:
                host = flat.get()
                self.comm.Allreduce(mpi_module().IN_PLACE, host, op=mpi_module().SUM)
                flat = cupy.asarray(host)
            else:
                nccl, nccl_comm, nccl_type = communicator
                stream = cupy.cuda.get_current_stream()
                nccl_comm.allReduce(flat.data.ptr, flat.data.ptr, flat.size, nccl_type,
                                    nccl.NCCL_SUM, stream.ptr)
            flat /= self.size
        return _unpack(flat, layout, grads)

    def _nccl_communicator(self, dtype: Any) -> tuple[Any, Any, Any] | None:
        """``(nccl module, communicator, NCCL dtype)``, made once; None without NCCL."""
        if self._nccl is None:
            try:
                from cupy.cuda import nccl
            except ImportError:
                nccl = None
            if nccl is None or not getattr(nccl, "available", True):
                self._nccl = False
            else:
                uid = nccl.get_unique_id() if self.comm.Get_rank() == 0 else None
                uid = self.comm.bcast(uid, root=0)
                self._nccl = (nccl, nccl.NcclCommunicator(self.size, uid, self.comm.Get_rank()))
        if self._nccl is False:
            return None
        nccl, communicator = self._nccl
        kind = {"float32": nccl.NCCL_FLOAT32, "float64": nccl.NCCL_FLOAT64}[dtype_name(dtype)]
        return nccl, communicator, kind
