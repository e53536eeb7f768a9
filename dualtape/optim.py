"""Optimizers. Their state lives here, never in the layers.

``step(params, grads)`` takes a list of parameter dicts (``net.params``) and a matching list of
gradient dicts and updates every parameter. On numpy and CuPy the update is **in place**
(ufuncs with ``out=``, one scratch buffer per parameter kept between steps, no other
temporaries; plain SGD of a large numpy parameter is one BLAS ``axpy`` pass where numpy
bundles OpenBLAS, ``kernels.blas``; Adam and SGD with momentum or L2 of a numpy parameter of
``COMPILED_FROM`` elements or more, once its state exists, one compiled pass where the compiled
CPU loops run, ``kernels.numba_optim``, which gives the ufuncs' bits and is switched off with
them, ``DUALTAPE_JIT=0``); on the other backends, on read-only arrays and with
``DUALTAPE_FUSED=0`` the generic array-API code puts a new array into the dict. Both give
bit-identical results, except BLAS's axpy, which rounds ``w − rate·g`` once where numpy rounds
twice (they agree to one rounding); read parameters from the dicts after a step, and copy an
array you want to keep as it was.

A step checks everything (groups, names, shapes, dtypes, backends, devices, the state; numpy's
matrix and masked arrays, whose arithmetic is not an array's, are refused) before it changes
anything: a step that raises leaves parameters, state and ``steps`` as they were.
Once two steps running were given the same arrays, all numpy arrays the compiled updates take
(or, for plain SGD's large parameters, its axpy), the next steps that are given them again
check only that they are the same objects (``held_update``) and update all parameters in a
few compiled calls; an array changed in place between steps (values, or its shape set in
place) is updated as it is.
State is tied to the parameter groups it was made for (the dict objects, or a ``StateGroup``'s
owner): a step on other groups while state exists raises ``ValueError``; ``load_state_dict``
ties it to the groups it is given. After ``net.to(...)`` the state follows the parameters to
their backend and device at the next step. A step counts once as a change of every layer's
``ParamDict`` it updates (``version``), in place or not, so tapes made before it are stale.

``SGD`` equals ``torch.optim.SGD(lr=rate, momentum=momentum, weight_decay=regulariser)`` when
momentum or L2 is 0 (with both, Grenade's L2 term decays ``w`` outside the momentum, torch's
inside it); ``Adam`` equals ``torch.optim.Adam``. ``tests/fixtures/optimizer_golden.npz`` holds
torch's numbers for both.

``schedule=`` (``schedules``: ``StepRate``, ``CosineRate``, ``LinearRate``, ``LambdaRate``,
``SequentialRate``; None, the default, keeps the rate constant) makes the rate a function of
the step: each step first sets ``rate`` to ``schedule(base_rate, steps)`` (``base_rate`` is the
constructor's ``rate``; ``steps`` counts the steps before it) on every update path, and a rate
that is negative, NaN or infinite raises ``ValueError`` before anything changes. ``rate`` is
then the rate of the last step. ``state_dict`` keeps the schedule as plain data beside
``steps``, so a resumed run continues it.
"""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar

import array_api_compat
import numpy as np

from .backend import backend_of, check_same_place, dtype_name, from_host, move, out_module, to_numpy
from .held_update import HeldUpdate
from .kernels import blas, optimizer_loops
from .layers.base import Array
from .layers.edges import check_real
from .layers.params import ParamDict
from .schedules import Schedule, check_schedule, describe, restore, scheduled_rate
from .switches import switched_on

BOOKKEEPING = ("steps", "kind", "schedule")
"""The ``state_dict`` entries that are not a parameter's slot."""


class StateGroup(dict):
    """A parameter group rebuilt for every call but belonging to a lasting ``owner`` (e.g.
    ``train_recurrent``'s learned initial states, owned by the caller's state list): the
    optimizer ties its state to the owner instead of the dict."""

    def __init__(self, owner: Any, arrays: dict[str, Array]) -> None:
        super().__init__(arrays)
        self.owner = owner


def _owner(group: dict[str, Array]) -> Any:
    return getattr(group, "owner", group)


def _defined_by(cls: type, name: str) -> type:
    """The class in ``cls``'s method resolution order whose own body defines ``name``."""
    return next(c for c in cls.__mro__ if name in vars(c))


def _same_place(a: Array, b: Array) -> bool:
    """True when ``a`` and ``b`` surely live on one backend and device (a cheap check); never
    for numpy's subclasses, which ``_check_plain`` looks at."""
    return type(a) is type(b) and (type(a) is np.ndarray or (
        not isinstance(a, np.ndarray) and a.device == b.device))


def _check_plain(owner: str, k: int, name: str, g: Array, w: Array) -> None:
    """Refuse numpy's matrix and masked arrays as parameter ``name`` of group ``k`` or its
    gradient: ``*`` of matrices is a matrix product, and a mask would be dropped or kept."""
    for what, a in (("gradient", g), ("parameter", w)):
        if isinstance(a, np.matrix | np.ma.MaskedArray):
            raise TypeError(f"{owner}: the {what} of {name} in group {k} is a "
                            f"{type(a).__name__}, whose arithmetic is not an array's; pass a "
                            "plain array (np.asarray; a masked array's entries filled first)")


def _in_place_module(g: Array, w: Array, slot: dict[str, Array]) -> Any:
    """numpy or cupy when the parameter ``w`` (``g`` is on its backend: ``_plan``) and its
    ``slot`` arrays are of that module and ``w`` and the slots take ``out=`` writes
    (writeable, and no element shares memory with another, as in a broadcast view, which CuPy
    does not mark read-only); None for the generic code."""
    mod = out_module(w)
    if mod is None:
        return None
    for a in slot.values():  # loops, not all() over generators: a step calls this per parameter
        if type(a) is not type(w) or (mod is np and not a.flags.writeable):
            return None
    if mod is np and not w.flags.writeable:
        return None
    if 0 in w.strides and any(
        stride == 0 and size > 1 for stride, size in zip(w.strides, w.shape, strict=True)
    ):
        return None
    return mod


def _elementwise(w: Array, g: Array, slot: dict[str, Array]) -> bool:
    """Whether an update may run element by element in any order: every array C-contiguous and
    none overlapping ``w`` (numpy buffers an overlap; an element loop would read what it wrote)."""
    arrays = (w, g, *slot.values())
    return all(a.flags.c_contiguous for a in arrays) and not any(
        np.may_share_memory(w, a) for a in arrays[1:])


CHUNK = 1 << 15  # elements per pass of a large in-place numpy update: 256 KiB at float64
COMPILED_FROM = 1 << 12
"""The smallest numpy parameter the compiled updates take: below it the ufunc passes are as
fast (a call costs the compiled path about 6 µs here, four to ten ufuncs 3 to 5 µs)."""


class Optimizer:
    """Shared bookkeeping: per-parameter state keyed ``(group index, name)``, the step count,
    validation before any change, and the in-place/generic split.

    Subclasses name their state ``slots`` and implement ``_update(w, g, slot)`` (generic:
    returns the new parameter and a new slot dict, changing no argument and keeping none of
    them, ``g`` included, as a slot: the caller may reuse it; ``slot`` is empty at a
    parameter's first step) and, optionally, ``_update_in_place(mod, w, g, slot,
    scratch)`` (numpy/CuPy, ``mod`` the module: writes ``w`` and the slot arrays in place,
    adding them to the empty ``slot`` at the first step; ``scratch`` is ``w``-shaped space).
    Without ``_update_in_place`` every step takes ``_update``. Both are given whole
    parameters: the compiled updates, the passes of ``CHUNK`` elements and the kept step
    (``held_update``) run only where the class's compiled update is its own, as SGD's and
    Adam's are, never one inherited past its ``_update_in_place``.
    """

    slots: ClassVar[tuple[str, ...]] = ()
    non_negative: ClassVar[tuple[str, ...]] = ()  # slots that can never hold a value below 0
    _in_place: ClassVar[bool] = False  # whether the class has an _update_in_place
    _fast_paths: ClassVar[bool] = False  # compiled updates, passes, kept step: its own
    rate: float  # the rate of the last step (SGD's and Adam's)
    base_rate: float  # the rate a schedule is given (the constructor's)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Find, once per class, which of the update paths are its own (class docstring)."""
        super().__init_subclass__(**kwargs)
        in_place = _defined_by(cls, "_update_in_place")
        cls._in_place = cls._update_in_place is not Optimizer._update_in_place
        cls._fast_paths = cls._in_place and all(
            issubclass(_defined_by(cls, name), in_place)
            for name in ("_compiled_update", "_batch_operands", "_update_batch"))

    def __init__(self) -> None:
        self.state: dict[tuple[int, str], dict[str, Array]] = {}
        self.steps = 0
        self.schedule: Schedule | None = None
        self._owners: dict[int, Any] = {}
        self._scratch: dict[tuple[int, str], Array] = {}
        self._chunk_scratch: dict[np.dtype, np.ndarray] = {}
        self._held: HeldUpdate | None = None
        self._seen: list[int] = []  # the ids of the last full step's arrays
        self._refused: list[int] = []  # those of arrays whose step could not be kept
        self._held_for: Any = None  # the _kept_for() of the kept step

    def __getstate__(self) -> dict[str, Any]:
        """Pickled or copied without its kept step (``held_update``: compiled code and the
        addresses of these arrays); the copy keeps one of its own."""
        return {**self.__dict__, "_held": None, "_seen": [], "_refused": [], "_held_for": None}

    def step(self, params: list[dict[str, Array]], grads: list[dict[str, Array]]) -> None:
        """Update every parameter in ``params`` (in place where the arrays allow it)."""
        self._schedule_rate()
        held = self._held
        if held is not None and self._held_for == self._kept_for() and (
                held.serves(params, grads, self.state)):
            self.steps += 1
            held.run(self._update_batch)
            return
        plan = self._plan(params, grads)
        self.steps += 1
        fused = self._in_place and switched_on("DUALTAPE_FUSED")
        compiled: dict[Any, Any] = {}  # the compiled updates by dtype, looked up once a step
        try:  # everything that allocates, before the first write
            generic, in_place = [], []
            for group, name, w, g, slot, key in plan:
                module = _in_place_module(g, w, slot) if fused else None
                if module is None:
                    generic.append((group, name, key, *self._update(w, g, slot)))
                else:
                    loops, scratch = self._loops(compiled, module, w, g, slot), None
                    if loops is not None or self._in_passes(module, w, g, slot):
                        self._scratch.pop(key, None)  # one kept from a whole-array step
                    else:
                        scratch = self._scratch_for(key, module, w)
                    in_place.append((module, w, g, slot, key, scratch, loops))
        except BaseException:
            self.steps -= 1
            raise
        self._stamp(params)
        for module, w, g, slot, key, scratch, loops in in_place:
            if loops is None:
                self._apply_in_place(module, w, g, slot, scratch)
            else:
                self._compiled_update(loops, w, g, slot)
            self._keep(key, slot)
        for group, name, key, w, slot in generic:
            dict.__setitem__(group, name, w)  # counted once per step above, as in place
            self._keep(key, slot)
        self._held = self._hold(plan, params, grads)

    def _schedule_rate(self) -> None:
        """Set ``rate`` to the schedule's for the step about to run (``steps`` before it),
        refused as ``scheduled_rate`` says before anything changes; without a schedule, keep
        it. Every update path calls this first, so no kept plan holds a rate."""
        if self.schedule is not None:
            self.rate = scheduled_rate(type(self).__name__, self.schedule, self.base_rate,
                                       self.steps)

    def _hold(self, plan: list, params: list[dict[str, Array]],
              grads: list[dict[str, Array]]) -> HeldUpdate | None:
        """This step's update kept for the next ones (``held_update``) when the step before it
        was given the same arrays and ``_planned`` can keep it; else None, and then not tried
        again for these arrays."""
        seen = list(map(id, [a for *_, w, g, _, _ in plan for a in (w, g)]))
        repeated, self._seen = seen == self._seen, seen
        if not repeated or seen == self._refused:
            return None
        held = self._planned(plan, params, grads)
        if held is None:
            self._refused = seen
        return held

    def _planned(self, plan: list, params: list[dict[str, Array]],
                 grads: list[dict[str, Array]]) -> HeldUpdate | None:
        """The kept update of ``plan`` when every parameter, now with its slots, takes the
        compiled update (``_loops``'s conditions at any size, and ``_batch_operands``)."""
        if not plan or not self._fast_paths or not switched_on("DUALTAPE_FUSED"):
            return None
        columns: dict[Any, tuple[Any, list[list[Array]]]] = {}
        direct = []
        for _, _, w, g, slot, _ in plan:
            if _in_place_module(g, w, slot) is not np or not _elementwise(w, g, slot):
                return None
            operands = self._batch_operands(w, g, slot)
            if operands is None:
                call = self._direct_call(w, g, slot)
                if call is None:
                    return None
                direct.append((None, call))
                continue
            if w.dtype not in columns:
                loops = optimizer_loops(w, _check_compiled)
                if loops is None:
                    return None
                columns[w.dtype] = loops, [[] for _ in operands]
            for column, a in zip(columns[w.dtype][1], operands, strict=True):
                column.append(a)
        try:
            runs = [(loops, batch) for loops, found in columns.values()
                    for batch in loops.batches(found)]
        except ValueError:  # an operand the compiled code cannot index
            return None
        self._held_for = self._kept_for()
        return HeldUpdate(params, grads, self.state, runs + direct)

    def _kept_for(self) -> Any:
        """What a kept step's plan depends on beyond the arrays (SGD: whether there is momentum
        and L2); the step is full again when it changes. The values (rates, betas) are read at
        every step."""
        return None

    def _batch_operands(self, w: Array, g: Array, slot: dict[str, Array]) -> tuple | None:
        """The arrays ``_update_batch`` takes for this parameter, in order, or None where the
        update is not compiled (or a slot is missing)."""
        raise NotImplementedError

    def _direct_call(self, w: Array, g: Array, slot: dict[str, Array]) -> Any:
        """For a parameter without ``_batch_operands``: a call that ``_update_batch(None,
        call)`` makes to update it as a full step does, or None (the step is not kept)."""
        return None

    def _update_batch(self, loops: Any, batch: Any) -> None:
        """``_compiled_update`` of every parameter of ``batch`` (``numba_optim.batches`` of
        ``_batch_operands``) in one compiled call; with ``loops`` None, ``batch`` is a
        ``_direct_call``."""
        raise NotImplementedError

    def _in_passes(self, mod: Any, w: Array, g: Array, slot: dict[str, Array]) -> bool:
        """Whether the update runs on numpy in passes of ``CHUNK`` elements through one small
        scratch buffer that stays in the CPU cache: a large parameter then streams from memory
        once per array instead of also through a parameter-sized scratch (about 3x faster for
        the seed network's 0.96M parameters). Elementwise, so the result is the same, unless
        an array overlaps ``w`` (a pass would then read what an earlier one wrote): those take
        the whole-array path, where numpy buffers the overlap. Only SGD's and Adam's updates
        (``_fast_paths``) are known to be elementwise."""
        return mod is np and w.size > CHUNK and self._fast_paths and self._chunkable(slot) and (
            _elementwise(w, g, slot))

    def _loops(self, compiled: dict[Any, Any], mod: Any, w: Array, g: Array,
               slot: dict[str, Array]) -> Any:
        """The compiled updates (``kernels.optimizer_loops``, looked up once per dtype into
        ``compiled``) when they can update ``w`` in one pass: on numpy, its slots there (a
        first step makes them whole) and the arrays as ``_in_passes`` needs them; else None."""
        if mod is not np or w.size < COMPILED_FROM or not self._fast_paths or (
                not self._chunkable(slot)) or not _elementwise(w, g, slot):
            return None
        if w.dtype not in compiled:
            compiled[w.dtype] = optimizer_loops(w, _check_compiled)
        return compiled[w.dtype]

    def _compiled_update(self, loops: Any, w: Array, g: Array, slot: dict[str, Array]) -> None:
        """``_update_in_place``'s update, bit for bit, by the compiled ``loops``
        (``kernels.numba_optim``): one pass, no scratch."""
        raise NotImplementedError

    def _apply_in_place(
        self, mod: Any, w: Array, g: Array, slot: dict[str, Array], scratch: Array | None
    ) -> None:
        """``_update_in_place`` on the whole arrays with ``scratch``, or in passes when it is
        None (``_in_passes``: no parameter-sized scratch is then allocated)."""
        if scratch is not None:
            self._update_in_place(mod, w, g, slot, scratch)
            return
        flat_w, flat_g = w.reshape(-1), g.reshape(-1)
        flat_slot = {name: a.reshape(-1) for name, a in slot.items()}
        small = self._small_scratch(w.dtype)
        for start in range(0, w.size, CHUNK):
            end = min(start + CHUNK, w.size)
            self._update_in_place(np, flat_w[start:end], flat_g[start:end],
                                  {name: a[start:end] for name, a in flat_slot.items()},
                                  small[: end - start])

    def _chunkable(self, slot: dict[str, Array]) -> bool:
        """Whether ``_update_in_place`` only reads and writes ``slot`` (creates no slot)."""
        return all(name in slot for name in self.slots)

    def _small_scratch(self, dtype: Any) -> np.ndarray:
        key = np.dtype(dtype)
        if key not in self._chunk_scratch:
            self._chunk_scratch[key] = np.empty(CHUNK, dtype=key)
        return self._chunk_scratch[key]

    def _keep(self, key: tuple[int, str], slot: dict[str, Array]) -> None:
        if slot:  # a stateless optimizer keeps no entries, so it is tied to nothing
            self.state[key] = slot

    def _scratch_for(self, key: tuple[int, str], module: Any, w: Array) -> Array:
        """A ``w``-shaped buffer of ``module`` for parameter ``key``, kept between steps."""
        scratch = self._scratch.get(key)
        if scratch is None or not isinstance(scratch, type(w)) or scratch.shape != w.shape or (
            scratch.dtype != w.dtype
        ):
            scratch = self._scratch[key] = module.empty_like(w)
        return scratch

    def _plan(self, params: list[dict[str, Array]], grads: list[dict[str, Array]]) -> list:
        """Check every group against its gradients and the state; return what to update as
        ``(group, name, w, g, slot, key)`` with the slots on ``w``'s backend. Changes nothing."""
        owner = type(self).__name__
        if not isinstance(params, list | tuple) or not isinstance(grads, list | tuple):
            raise TypeError(f"{owner}: params and grads must be lists of dicts (net.params)")
        if grads and isinstance(grads[0], list | tuple):
            raise TypeError(
                f"{owner}: grads is a list of lists, not of dicts: pass the gradients alone, "
                "the first item of what backward returns (grads, dx = net.backward(...))"
            )
        if len(params) != len(grads):
            raise ValueError(
                f"{owner}: {len(params)} parameter groups but {len(grads)} gradient groups"
            )
        self._check_owners(params, "step")
        plan = []
        for k, (group, grad) in enumerate(zip(params, grads, strict=True)):
            if not isinstance(group, dict) or not isinstance(grad, dict):
                raise TypeError(f"{owner}: group {k} must be a dict of arrays")
            if group.keys() != grad.keys():
                raise ValueError(
                    f"{owner}: group {k} has parameters {sorted(group)} but gradients "
                    f"{sorted(grad)}"
                )
            for name, w in group.items():
                g = grad[name]
                if not _same_place(g, w):
                    check_same_place(g, w, f"the gradient of {name} in group {k}",
                                     f"{owner}'s parameter")
                    _check_plain(owner, k, name, g, w)
                if g.shape != w.shape or g.dtype != w.dtype:
                    raise ValueError(
                        f"{owner}: the gradient of {name} in group {k} has shape "
                        f"{tuple(g.shape)} and dtype {g.dtype}, the parameter "
                        f"{tuple(w.shape)} and {w.dtype}"
                    )
                slot = self._slot_for(k, name, w)
                plan.append((group, name, w, g, slot, (k, name)))
        return plan

    def _slot_for(self, k: int, name: str, w: Array) -> dict[str, Array]:
        """The state of parameter ``name`` of group ``k``, moved to ``w``'s backend and device
        if the network moved (a new dict: the stored one is replaced only on commit)."""
        stored = self.state.get((k, name))
        if not stored:
            return {}
        slot = dict(stored)
        for s, a in slot.items():
            if not _same_place(a, w):
                a = slot[s] = move(a, backend_of(w))
            if a.shape != w.shape or a.dtype != w.dtype:
                raise ValueError(
                    f"{type(self).__name__}: state {k}/{name}/{s} is {a.dtype} "
                    f"{tuple(a.shape)} but the parameter is {w.dtype} {tuple(w.shape)}"
                )
        return slot

    def _check_owners(self, params: list[dict[str, Array]], action: str) -> None:
        """Every group that holds state must be given as the same dict (or owner) as when the
        state was made; groups without state are free."""
        held = {k for k, _ in self.state}
        if all(k >= len(params) or _owner(params[k]) is self._owners.get(k) for k in held):
            return
        name = type(self).__name__
        raise ValueError(
            f"{name}: cannot {action} these parameters: this optimizer holds state for other "
            f"parameter groups (another network, or other dicts); use one {name} per network, "
            "or a new one"
        )

    def _bind(self, params: list[dict[str, Array]]) -> None:
        self._owners.update({k: _owner(group) for k, group in enumerate(params)})

    def _in_backward_declines(self) -> str | None:
        """Why this optimizer's step cannot move the weights inside the backward pass
        (``planned_backprop.planned_descent``: plain SGD, no gradient arrays), or None where
        it can."""
        return f"{type(self).__name__} is not SGD itself"

    def _counted_in_backward(self, params: list[dict[str, Array]]) -> None:
        """The bookkeeping of a step the backward pass applies (``planned_descent``), before any
        weight moves: the step counted and ``params`` stamped, as ``step`` does."""
        self.steps += 1
        self._stamp(params)

    def _stamp(self, params: list[dict[str, Array]]) -> None:
        """Bind ``params`` to this optimizer and mark them changed before a step writes them
        (tapes made before it are then stale): ``step``'s, and that of a step fused into the
        backward pass (``planned_descent``), which counts it too."""
        self._bind(params)
        for group in params:
            if isinstance(group, ParamDict):
                group.touch()

    def _update(self, w: Array, g: Array, slot: dict[str, Array]) -> tuple[Array, dict]:
        """Generic: the new parameter and a new slot dict (``slot`` is not changed)."""
        raise NotImplementedError

    def _update_in_place(
        self, mod: Any, w: Array, g: Array, slot: dict[str, Array], scratch: Array
    ) -> None:
        """numpy/CuPy: update ``w`` and ``slot`` in place; ``scratch`` is ``w``-shaped space."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, np.ndarray]:
        """The state as host copies named ``"k/param/slot"``, plus ``"steps"``, ``"kind"``
        (the class name) and ``"schedule"`` (``schedules.describe`` as JSON text)."""
        flat = {
            f"{k}/{name}/{s}": np.array(to_numpy(a), copy=True)
            for (k, name), slots in self.state.items()
            for s, a in slots.items()
        }
        flat["steps"] = np.asarray(self.steps)
        flat["kind"] = np.asarray(type(self).__name__)
        flat["schedule"] = np.asarray(json.dumps(describe(self.schedule)))
        return flat

    def load_state_dict(self, flat: dict[str, np.ndarray], params: list[dict[str, Array]]) -> None:
        """Restore ``state_dict()`` output for ``params`` (the groups it will update), copied
        onto their backend and dtype, and tie the optimizer to them. State of another kind,
        with unknown slots, non-float, NaN or infinite values, negative values in a slot that
        cannot hold them (Adam's second moment ``v``), a ``steps`` that is not an integer >= 0,
        a schedule that is not one (``schedules.restore``), or that does not fit ``params``
        raises ``ValueError``, changing nothing. The saved schedule replaces the optimizer's
        (set ``schedule`` after loading to change it); a state saved without one (before
        schedules) keeps the optimizer's."""
        owner = type(self).__name__
        if not isinstance(flat, dict):
            raise ValueError(f"{owner}: state must be a dict, got {type(flat).__name__}")
        kind = flat.get("kind", owner)
        if np.asarray(kind).ndim != 0 or str(np.asarray(kind)) != owner:
            raise ValueError(f"{owner}: the state belongs to a {kind!s} optimizer, not {owner}")
        steps = _check_steps(owner, flat.get("steps", 0))
        schedule = _load_schedule(owner, flat["schedule"], self.schedule) if (
            "schedule" in flat) else self.schedule
        expected = self.slots
        state: dict[tuple[int, str], dict[str, Array]] = {}
        for key, value in flat.items():
            if key in BOOKKEEPING:
                continue
            k, name, slot = _split_key(key)
            if slot not in expected:
                known = ", ".join(expected) or "none"
                raise ValueError(
                    f"{owner}: state {key!r} has an unknown slot {slot!r} (this {owner} keeps: "
                    f"{known})"
                )
            value = np.asarray(value)
            if value.dtype.kind != "f":
                raise ValueError(
                    f"{owner}: state {key!r} must be floating point, got {value.dtype}"
                )
            if not np.all(np.isfinite(value)):
                raise ValueError(f"{owner}: state {key!r} holds NaN or inf")
            if slot in self.non_negative and np.any(value < 0):
                raise ValueError(f"{owner}: state {key!r} holds negative values; it can only "
                                 "be >= 0")
            w = params[k].get(name) if 0 <= k < len(params) else None
            if w is None or tuple(w.shape) != value.shape:
                raise ValueError(
                    f"{owner}: state {key!r} of shape {value.shape} fits no parameter of the "
                    "network"
                )
            state.setdefault((k, name), {})[slot] = from_host(
                np.array(value, dtype=dtype_name(w.dtype), copy=True), backend_of(w)
            )
        for (k, name), slots in state.items():
            if set(slots) != set(expected):
                raise ValueError(
                    f"{owner}: state of {k}/{name} has slots {sorted(slots)}, expected "
                    f"{list(expected)}"
                )
        self.state, self.steps, self._owners = state, steps, {}
        self.schedule = schedule
        self._bind(params)
        self._scratch, self._held = {}, None


def _check_steps(owner: str, value: Any) -> int:
    """``steps`` as an int if it is an integer >= 0 (a Python int or a 0-d integer array)."""
    steps = np.asarray(value)
    if steps.ndim != 0 or steps.dtype.kind not in "iu" or int(steps) < 0:
        raise ValueError(f"{owner}: state 'steps' must be an integer >= 0, got {value!r}")
    return int(steps)


def _load_schedule(owner: str, text: Any, current: Schedule | None) -> Schedule | None:
    """The schedule saved as ``text`` (``state_dict``'s JSON), or a ``ValueError``."""
    try:
        return restore(json.loads(str(np.asarray(text))), current)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{owner}: state 'schedule': {exc}") from None


def _split_key(key: str) -> tuple[int, str, str]:
    """``"k/param/slot"`` as ``(k, param, slot)``; any other key raises ``ValueError``."""
    parts = key.split("/") if isinstance(key, str) else []
    if len(parts) != 3 or not parts[0].isdigit():
        raise ValueError(f"optimizer state key {key!r} is not 'group/parameter/slot'")
    return int(parts[0]), parts[1], parts[2]


class SGD(Optimizer):
    """Grenade's rule: ``m' = momentum·m − rate·g``; ``w' = w + m' − rate·regulariser·w``
    (``torch.optim.SGD``'s unless both momentum and regulariser are nonzero).

    Hyperparameters are real numbers (Python or numpy scalars); momentum in [0, 1).
    ``schedule`` makes the rate a function of the step (module docstring).
    """

    slots = ("m",)

    def _chunkable(self, slot: dict[str, Array]) -> bool:
        return not self.momentum or "m" in slot

    def _apply_in_place(
        self, mod: Any, w: Array, g: Array, slot: dict[str, Array], scratch: Array | None
    ) -> None:
        """Plain SGD of a parameter updated in passes (numpy, over ``CHUNK`` elements) is one
        BLAS axpy pass where numpy bundles OpenBLAS (``kernels.blas``); below that size the
        numpy passes are as fast."""
        if scratch is None and not (self.momentum or self.regulariser) and (
            blas.axpy(-self.rate, g, w)
        ):
            return
        super()._apply_in_place(mod, w, g, slot, scratch)

    def _loops(self, compiled: dict[Any, Any], mod: Any, w: Array, g: Array,
               slot: dict[str, Array]) -> Any:
        """None for plain SGD, whose two ufunc passes (or one BLAS pass) are as fast."""
        if not (self.momentum or self.regulariser):
            return None
        return super()._loops(compiled, mod, w, g, slot)

    def _compiled_update(self, loops: Any, w: Array, g: Array, slot: dict[str, Array]) -> None:
        loops.sgd(w, g, slot["m"] if self.momentum else None, self.rate, self.momentum,
                  self.regulariser)

    def _batch_operands(self, w: Array, g: Array, slot: dict[str, Array]) -> tuple | None:
        """``(w, g, m)``, or ``(w, g, w)`` without momentum (``m`` unread); None for a plain
        SGD parameter of over ``CHUNK`` elements, whose update is BLAS's axpy, of other bits."""
        plain = not (self.momentum or self.regulariser)
        if (plain and w.size > CHUNK) or not self._chunkable(slot):
            return None
        return w, g, slot["m"] if self.momentum else w

    def _kept_for(self) -> Any:
        return bool(self.momentum), bool(self.regulariser)

    def _direct_call(self, w: Array, g: Array, slot: dict[str, Array]) -> Any:
        """A plain SGD parameter of over ``CHUNK`` elements: its axpy (``blas.axpy_call``),
        as ``_apply_in_place`` makes it, or None where that takes numpy's passes."""
        if self.momentum or self.regulariser or w.size <= CHUNK:
            return None
        return blas.axpy_call(g, w)

    def _update_batch(self, loops: Any, batch: Any) -> None:
        if loops is None:
            batch(-self.rate)
        else:
            loops.sgd_many(batch, self.rate, self.momentum, self.regulariser,
                           bool(self.momentum))

    def __init__(self, rate: float, momentum: float = 0.0, regulariser: float = 0.0,
                 schedule: Schedule | None = None) -> None:
        super().__init__()
        self.rate = self.base_rate = check_real("SGD", "rate", rate, "(0, inf)")
        self.schedule = check_schedule("SGD", schedule)
        self.momentum = check_real("SGD", "momentum", momentum, "[0, 1)")
        self.regulariser = check_real("SGD", "regulariser", regulariser, "[0, inf)")

    def _in_backward_declines(self) -> str | None:
        """None for ``SGD`` itself (a subclass may step otherwise) with no momentum and no
        regulariser: its step, ``w -= rate·g``, is one the backward pass can apply."""
        if type(self) is not SGD:
            return f"{type(self).__name__} is not SGD itself"
        if self.momentum:
            return "SGD with momentum"
        return "SGD with a regulariser" if self.regulariser else None

    def _update(self, w: Array, g: Array, slot: dict[str, Array]) -> tuple[Array, dict]:
        m = -self.rate * g
        if self.momentum:
            if "m" in slot:
                m = self.momentum * slot["m"] + m
            slot = {"m": m}
        if self.regulariser:
            return w + m - (self.rate * self.regulariser) * w, slot
        return w + m, slot

    def _update_in_place(
        self, mod: Any, w: Array, g: Array, slot: dict[str, Array], scratch: Array
    ) -> None:
        m = mod.multiply(g, -self.rate, out=scratch)
        if self.momentum:
            if "m" in slot:
                m = mod.add(mod.multiply(slot["m"], self.momentum, out=slot["m"]), m, out=slot["m"])
            else:
                m = slot["m"] = m.copy()
        if not self.regulariser:
            mod.add(w, m, out=w)
        elif m is scratch:  # w + m − (rate·reg)·w with scratch holding m
            mod.add(w, m, out=scratch)
            mod.multiply(w, self.rate * self.regulariser, out=w)
            mod.subtract(scratch, w, out=w)
        else:
            mod.multiply(w, self.rate * self.regulariser, out=scratch)
            mod.add(w, m, out=w)
            mod.subtract(w, scratch, out=w)


class Adam(Optimizer):
    """Adam (Kingma & Ba) as ``torch.optim.Adam`` computes it: per step ``t``,
    ``m = β1·m + (1−β1)·g``, ``v = β2·v + (1−β2)·g²``, ``m̂ = m/(1−β1ᵗ)``, ``v̂ = v/(1−β2ᵗ)``,
    ``w −= rate·m̂/(√v̂ + eps)``: ``eps`` is added after the bias correction (TensorFlow adds it
    before). It runs as the same rule rewritten with the corrections in two scalars,
    ``w −= (rate·√(1−β2ᵗ)/(1−β1ᵗ))·m/(√v + eps·√(1−β2ᵗ))``, so it agrees with torch to float
    rounding (``tests/fixtures/optimizer_golden.npz`` holds torch's numbers). ``eps`` must be
    positive (at 0 a gradient that is exactly 0 would give 0/0 = NaN); ``load_state_dict``
    refuses moments that are not finite and negative second moments. ``schedule`` makes the
    rate a function of the step (module docstring)."""

    slots = ("m", "v")
    non_negative = ("v",)

    def __init__(
        self, rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
        schedule: Schedule | None = None,
    ) -> None:
        super().__init__()
        self.rate = self.base_rate = check_real("Adam", "rate", rate, "(0, inf)")
        self.schedule = check_schedule("Adam", schedule)
        self.beta1 = check_real("Adam", "beta1", beta1, "[0, 1)")
        self.beta2 = check_real("Adam", "beta2", beta2, "[0, 1)")
        self.eps = check_real("Adam", "eps", eps, "(0, inf)")

    def _corrections(self) -> tuple[float, float]:
        """``(step size, eps')`` of step ``steps``: ``rate·√(1−β2ᵗ)/(1−β1ᵗ)`` and
        ``eps·√(1−β2ᵗ)``, the bias corrections folded into two scalars."""
        root = math.sqrt(1.0 - self.beta2**self.steps)
        return self.rate * root / (1.0 - self.beta1**self.steps), self.eps * root

    def _update(self, w: Array, g: Array, slot: dict[str, Array]) -> tuple[Array, dict]:
        xp = array_api_compat.array_namespace(w)
        m = (1.0 - self.beta1) * g
        v = (1.0 - self.beta2) * g * g
        if "m" in slot:
            m = self.beta1 * slot["m"] + m
            v = self.beta2 * slot["v"] + v
        step, eps = self._corrections()
        return w - (m / (xp.sqrt(v) + eps)) * step, {"m": m, "v": v}

    def _update_in_place(
        self, mod: Any, w: Array, g: Array, slot: dict[str, Array], scratch: Array
    ) -> None:
        if "m" in slot:
            m, v = slot["m"], slot["v"]
            mod.add(mod.multiply(m, self.beta1, out=m),
                    mod.multiply(g, 1.0 - self.beta1, out=scratch), out=m)
            mod.multiply(g, 1.0 - self.beta2, out=scratch)
            mod.add(mod.multiply(v, self.beta2, out=v), mod.multiply(scratch, g, out=scratch),
                    out=v)
        else:
            m = slot["m"] = mod.multiply(g, 1.0 - self.beta1)
            v = slot["v"] = mod.multiply(mod.multiply(g, 1.0 - self.beta2), g)
        step, eps = self._corrections()
        mod.add(mod.sqrt(v, out=scratch), eps, out=scratch)
        mod.multiply(mod.divide(m, scratch, out=scratch), step, out=scratch)
        mod.subtract(w, scratch, out=w)

    def _compiled_update(self, loops: Any, w: Array, g: Array, slot: dict[str, Array]) -> None:
        step, eps = self._corrections()
        loops.adam(w, g, slot["m"], slot["v"], self.beta1, self.beta2, step, eps)

    def _batch_operands(self, w: Array, g: Array, slot: dict[str, Array]) -> tuple | None:
        return (w, g, slot["m"], slot["v"]) if self._chunkable(slot) else None

    def _update_batch(self, loops: Any, batch: Any) -> None:
        loops.adam_many(batch, self.beta1, self.beta2, *self._corrections())


def _check_compiled(loops: Any, like: Array) -> str | None:
    """How the compiled updates ``loops`` disagree with the ufunc code on arrays of ``like``'s
    dtype, or None: plain SGD, SGD with momentum and L2, and Adam, one parameter a call and
    (but plain SGD) in a batch, bit for bit."""
    rng = np.random.default_rng(0)
    size = 67  # a vector body and a remainder at any SIMD width
    w = rng.standard_normal(size).astype(like.dtype)
    g = (rng.standard_normal(size) * np.logspace(-30, 3, size)).astype(like.dtype)
    for optimizer in (SGD(0.1), SGD(0.1, momentum=0.9, regulariser=0.01), Adam(0.01)):
        optimizer.steps = 3
        slot = {} if optimizer._chunkable({}) else {  # the slots it reads (plain SGD: none)
            s: np.abs(rng.standard_normal(size)).astype(like.dtype) for s in optimizer.slots}
        ufunc_w, ufunc_slot = w.copy(), {s: a.copy() for s, a in slot.items()}
        optimizer._update_in_place(np, ufunc_w, g, ufunc_slot, np.empty_like(w))
        batch_w, batch_slot = w.copy(), {s: a.copy() for s, a in slot.items()}
        optimizer._compiled_update(loops, w, g, slot)
        found = [("", w, slot)]
        operands = optimizer._batch_operands(batch_w, g, batch_slot)
        if operands is not None:  # the batched call too (plain SGD has none)
            for batch in loops.batches([[a] for a in operands]):
                optimizer._update_batch(loops, batch)
            found.append((" in a batch", batch_w, batch_slot))
        for how, got_w, got_slot in found:
            for what, a, b in (("w", ufunc_w, got_w),
                               *((s, ufunc_slot[s], got_slot[s]) for s in slot)):
                if not np.array_equal(a, b):
                    return (f"{type(optimizer).__name__}'s {what}{how} differs from the ufunc "
                            f"code's by up to {float(np.max(np.abs(a - b)))}")
    return None
