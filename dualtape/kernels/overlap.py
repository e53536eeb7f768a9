"""Weight gradients' matrix products on a second core while the backward pass goes on.

A recurrent network's backward pass is a chain: each layer's time loop needs the input
gradient of the layer above it, but no layer needs another's weight gradients. Inside
``overlap_gradients()`` (off unless asked for), the backward pass of a ``RecurrentNetwork``
writing into gradient buffers (a training call) hands those products (``batch_outer`` into a
buffer: ``dᵀ x`` and ``dᵀ c``; on the planned pass each layer's compiled weight gradients,
``call_later``) to one worker thread, and goes on with the next layer; at its
end it runs those the worker has not begun itself (the last first) and waits for the rest,
raising an error one of them raised, so no buffer is written after the call. The products
are the same calls with the same operands, run with the handing thread's flush-to-zero bits
(``kernels.flush``): the same bits; numpy arrays only, with the fast paths on
(``DUALTAPE_FUSED``). It pays where a core is free beside BLAS's threads: the main job's step
took 0.86x its time on 2 cores with BLAS at one thread (``bench/results/2026-12-03-overlap.md``);
with BLAS on every core the two would contend, and other processes on the same cores (MPI
ranks, a job's workers) are not known here, so it is off by default. ``train-text`` and
``dualtape bench`` turn it on under ``--threads auto`` when their thread rule leaves a core
free (``text/threads.py``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any

import numpy as np

from ..switches import switched_on
from .flush import control_here, under_control

Array = Any
HAND_OVER_FROM = 4_000_000
"""Multiply-adds from which a product is handed over (about 0.1 ms of BLAS on one core): a
smaller one costs about as much to hand over as to compute. With every product handed over,
a two-layer LSTM of 80 at batch 1 (products of 1.3 M) took 1.40-1.55x its training call's
time and at batch 4 (2.6-5 M) 1.11-1.40x; at batch 16 (5-20 M) 0.80-0.92x, at 32 0.75-0.83x
(AMD EPYC Zen 4, 2 cores, ``bench/results/2026-12-03-overlap.md``)."""
HAND_OVER_ROWS = 256
"""Rows (``T·batch``, the products' inner size) from which a product is handed over: with
fewer, each gradient entry is a short sum and the product mostly moves its output between the
cores' caches (Grenade's seed network at batch 1, 50 rows, its 1536 x 512 ``dᵀ c`` the only
large product: 1.06-1.14x the call's time handed over)."""
Handed = tuple[Future, Callable[..., Any], tuple[Any, ...], "int | None"]
"""A product handed to the worker: its future, the call and its arguments, and the handing
thread's flush bits."""
_ON: ContextVar[bool] = ContextVar("dualtape_overlap_gradients", default=False)
_PENDING: ContextVar[list[Handed] | None] = ContextVar("dualtape_overlap_pending",
                                                      default=None)
_WORKER: list[ThreadPoolExecutor] = []
_STARTING = threading.Lock()


@contextlib.contextmanager
def overlap_gradients(on: bool = True) -> Iterator[None]:
    """Within the block (in this thread or task), a training call's weight-gradient products
    run on a second thread beside the rest of its backward pass when ``on`` (the same
    results); ``overlap_gradients(False)`` turns it off inside a block that turned it on."""
    if not isinstance(on, bool):
        raise TypeError(f"overlap_gradients: on must be True or False, got {on!r}")
    token = _ON.set(on)
    try:
        yield
    finally:
        _ON.reset(token)


def overlap_requested() -> bool:
    """Whether this thread (or task) is inside ``overlap_gradients()`` (on)."""
    return _ON.get()


def offered(like: Array) -> bool:
    """Whether a backward pass over arrays like ``like`` offers its weight gradients'
    products to the worker (``overlapping`` opens a scope, ``matmul_later`` takes numpy's):
    inside ``overlap_gradients()``, the fast paths on (``DUALTAPE_FUSED``), numpy arrays."""
    return _ON.get() and type(like) is np.ndarray and switched_on("DUALTAPE_FUSED")


@contextlib.contextmanager
def overlapping() -> Iterator[None]:
    """The scope of one backward pass: products handed over inside it (``matmul_later``) are
    all finished when it ends, those the worker has not begun run by this thread (the last
    first, while the worker takes the first), and an error of theirs raised then. When the
    block itself raises, the products not begun are dropped, the others waited for, and the
    block's error raised."""
    if not _ON.get() or _PENDING.get() is not None or not switched_on("DUALTAPE_FUSED"):
        yield  # the same rule as ``offered``'s (the arrays' type: ``matmul_later``'s)
        return
    pending: list[Handed] = []
    token = _PENDING.set(pending)
    try:
        yield
    except BaseException:
        _settle(pending, run_here=False)  # nothing writes a buffer after the call
        raise
    finally:
        _PENDING.reset(token)
    errors = _settle(pending, run_here=True)
    if errors:
        raise errors[0]


def _settle(pending: list[Handed], run_here: bool) -> list[BaseException]:
    """Take back the products of ``pending`` the worker has not begun (from the last),
    running them here if ``run_here``, and wait for the rest; the errors they raised."""
    errors: list[BaseException] = []
    try:
        for future, call, args, control in reversed(pending):
            if future.cancel() and run_here:
                try:
                    _run(call, args, control)
                except Exception as exc:  # noqa: BLE001 - raised by the caller, as the worker's
                    errors.append(exc)
    finally:
        errors += [e for e in [f.exception() for f, *_ in pending if not f.cancelled()]
                   if e is not None]
    return errors


def matmul_later(a: Array, b: Array, out: Array) -> bool:
    """Hand ``out[...] = a @ b`` to the worker inside an ``overlapping`` scope when the three
    are numpy arrays and the product is large enough (``_hand``), and say whether it did
    (False: the caller multiplies now)."""
    if type(out) is not np.ndarray or type(a) is not np.ndarray or type(b) is not np.ndarray:
        return False
    return _hand(np.matmul, a.shape[-1], out.size * a.shape[-1], (a, b, out))


def call_later(call: Callable[..., Any], rows: int, madds: int, *args: Any) -> None:
    """``call(*args)``, products of inner size ``rows`` and ``madds`` multiply-adds in all
    (``planned_backprop``'s compiled weight gradients of a layer): on the worker inside an
    ``overlapping`` scope when large enough (``_hand``), else now."""
    if not _hand(call, rows, madds, args):
        call(*args)


def _hand(call: Callable[..., Any], rows: int, madds: int, args: tuple[Any, ...]) -> bool:
    """Hand ``call(*args)`` to the worker inside an ``overlapping`` scope when its products
    have ``HAND_OVER_ROWS`` rows and ``HAND_OVER_FROM`` multiply-adds or more; whether it
    did."""
    pending = _PENDING.get()
    if pending is None or rows < HAND_OVER_ROWS or madds < HAND_OVER_FROM:
        return False
    control = control_here()
    pending.append((_worker().submit(_run, call, args, control), call, args, control))
    return True


def _run(call: Callable[..., Any], args: tuple[Any, ...], control: int | None) -> None:
    """``call(*args)`` with the handing thread's flush bits (``kernels.flush``): the same
    bits as there."""
    with under_control(control):
        call(*args)


def _worker() -> ThreadPoolExecutor:
    """The one worker thread, started on first use (again in a forked child, where the
    parent's thread does not exist)."""
    with _STARTING:
        if not _WORKER:
            _WORKER.append(ThreadPoolExecutor(1, thread_name_prefix="dualtape-gradients"))
        return _WORKER[0]


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_WORKER.clear)
