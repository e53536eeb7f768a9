"""The layer contract, Grenade style: a forward pass that returns a tape, a backward pass that
reads it.

``forward(x) -> (tape, y)`` and ``backward(tape, dy) -> (grads, dx)``; ``grads`` has the keys and
shapes of ``params``. A tape is a small named tuple of arrays holding what the derivative needs.
Public methods check their input once (``prepare_input``) and call the private ``_forward`` /
``_backward``, which take the array namespace ``xp`` explicitly and work on 2-D arrays.

Shapes, decided here for every layer: arrays are ``(batch,) + example`` inside layers. For the
feature layers an example is ``(features,)`` and ``n_in``/``n_out`` are ints (or None: any
size); the spatial layers (``Convolution``, ``Pooling``, ``Pad``, ``Crop``, ``Reshape``) work
on images ``(channels, height, width)``, so a batch is ``(batch, channels, height, width)``,
torch's layout. A layer states what it takes and gives per example: ``input_shape``, a tuple
whose entries are sizes or names of free axes (``(3, "height", "width")``), or None for any
shape (the elementwise layers, ``Dropout``, ``Trivial``: inside a ``Network`` they take any
trailing shape), and ``output_shape(shape)``, what it gives for an example of ``shape``
(raising ``ValueError`` when it cannot take it, e.g. an image smaller than a kernel). A
``Network`` chains these at construction, so a wrong channel count or a ``Reshape`` of the
wrong size fails there; sizes left free (an image's height and width before a ``Reshape``
fixes them) are checked by each layer when the data comes. The feature layers derive both
from ``n_in``/``n_out``, so their behaviour and messages are unchanged. A single example
(``(features,)``, or ``(channels, height, width)``) is accepted at the public edge and
returned in the same form.

Composite layers (``Sequential``, ``Merge``, ``Concat``; ``composite.py``) run other layers:
they have no parameters of their own, ``param_groups`` lists their leaves' dicts depth first,
and their ``backward`` returns a list of gradient dicts in that order (a plain layer's one
dict is its ``[params]`` group); a ``Network``'s ``params`` and gradients are the flat list
over its layers' groups.

Aliasing, decided here at the public edge for every layer: an input a tape keeps is copied
unless checking it already made a copy (a cast), states are copied, and every array a public
``forward`` returns is ``read_only``: a read-only view on numpy (free), a copy on backends
without read-only arrays. Writing to an input or an output afterwards never changes a tape.
A layer's tape class is named after its kind (``FullyConnectedTape``, ``LSTMSequenceTape``);
for layers with a fixed ``n_in`` its first field is the input.

A tape does not pin the weights: the tapes of layers with parameters end in the ``version``
of the ``ParamDict`` their forward pass saw (its docstring: when a stamp changes), and every
backward pass refuses a tape whose ``version`` is not the layer's (``_check_version``). The
rule, and what it does not see: docs/contract.md, "Tape versions".
"""

from __future__ import annotations

import itertools
import numbers
import operator
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, cast

import numpy as np

from ..backend import (
    backend_name_of,
    backend_of,
    check_same_place,
    dtype_name,
    from_host,
    namespace_of,
    out_module,
    zeros_like_place,
)
from ..checkpointing import (
    CheckpointedTape,
    segment_length,
    sequence_backward,
    sequence_forward,
)
from ..stack import RecurrentNetworkTape

Array = Any


def shape_text(dims: tuple) -> str:
    """``(batch, 40)`` style text of a shape whose entries are names or sizes."""
    return "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


def prepare_input(
    x: Any,
    *,
    n_features: int | tuple | None,
    dtype: str | None,
    reference: Array | None,
    owner: str,
    leading: tuple[str, ...] = ("batch",),
    what: str = "input",
    single_form: bool = True,
    copy: bool = False,
) -> tuple[Any, Array, bool]:
    """Check an input at the public edge; return ``(xp, x, single)``.

    ``x`` must have shape ``leading + (n_features,)`` or the same without its last leading
    axis (a single example, ``single=True``, given a batch axis of 1 here). ``n_features``
    may also be an example's shape pattern (``Layer.input_shape``: sizes, and names of
    free axes), for examples of more than one axis. Python lists are
    converted onto ``reference``'s backend; arrays must live where ``reference`` does.
    Floating input is cast to ``dtype``; integer or boolean input raises ``TypeError``.
    ``single_form=False`` leaves the single-example form out of the error message (for a
    caller that accepts it only when the batch is 1 and checks that itself). ``copy=True``
    returns an array that shares no memory with ``x`` (copied only if no conversion did).
    """
    fresh = isinstance(x, list | tuple | float | int | np.number)
    if fresh:
        x = from_host(np.asarray(x), backend_of(reference) if reference is not None else None)
    try:
        xp = namespace_of(x)
    except TypeError:
        raise TypeError(f"{owner}: {what} must be an array, got {type(x).__name__}") from None
    if reference is not None:
        check_same_place(x, reference, what, owner)
    try:
        given = dtype_name(x.dtype)
    except ValueError:  # not float32/float64: other floats are cast, the rest rejected
        given = None
    if given is None and not xp.isdtype(x.dtype, "real floating"):
        raise TypeError(
            f"{owner}: {what} must be floating point, got {x.dtype}; integer and boolean "
            f"arrays are rejected, not cast: convert with x.astype(...) or "
            f"dualtape.asarray(x, dtype={dtype or 'float32'!r})"
        )
    example = pattern_of(n_features)
    full = leading + example
    if x.ndim not in (len(full), len(full) - 1) or not fits(tuple(x.shape[-len(example):]),
                                                            example):
        alternative = f" or {shape_text(leading[:-1] + example)}" if single_form else ""
        raise ValueError(
            f"{owner}: {what} must have shape {shape_text(full)}{alternative}, "
            f"got {tuple(x.shape)}"
        )
    if dtype is not None and given != dtype:
        x, fresh = xp.astype(x, getattr(xp, dtype)), True
    if copy and not fresh:  # ndarray.copy is four times quicker than the compat asarray
        x = x.copy() if isinstance(x, np.ndarray) else xp.asarray(x, copy=True)
    single = x.ndim == len(full) - 1
    if single:
        x = xp.expand_dims(x, axis=len(leading) - 1 if leading else -2)
    return xp, x, single


def pattern_of(n_features: int | tuple | None) -> tuple:
    """An example's shape pattern: ``n_features`` as a tuple, ``("features",)`` for None."""
    if n_features is None:
        return ("features",)
    return n_features if isinstance(n_features, tuple) else (n_features,)


def fits(shape: tuple, pattern: tuple) -> bool:
    """Whether ``shape`` (sizes, or names of free axes) can be an example of ``pattern``: the
    same number of axes, and the same size wherever both give one."""
    return len(shape) == len(pattern) and all(isinstance(a, str) or isinstance(b, str) or a == b
                                              for a, b in zip(shape, pattern, strict=False))


def restore(y: Array, single: bool, batch_axis: int = -2) -> Array:
    """Undo the batch axis ``prepare_input`` added to a single example: ``batch_axis`` is the
    batch's axis (0 for a batch of examples of any shape, -2 for features in a sequence)."""
    if not single:
        return y
    return y[0, ...] if batch_axis == 0 else y[..., 0, :]


def read_only(a: Array) -> Array:
    """``a`` as a public call hands it out: a read-only view on numpy (no copy); a copy on
    backends without read-only arrays (CuPy, torch, array-api-strict). Either way writing to
    the result cannot change a tape that holds ``a``."""
    if isinstance(a, np.ndarray):
        view = a.view()
        view.flags.writeable = False
        return view
    return namespace_of(a).asarray(a, copy=True)


def check_dtype(owner: str, dtype: Any) -> str:
    """``"float32"`` or ``"float64"`` for a layer's ``dtype`` argument; else ``ValueError``."""
    try:
        return dtype_name(dtype)
    except ValueError:
        raise ValueError(f"{owner}: dtype must be 'float32' or 'float64', got {dtype!r}") from None


def prepare_like(
    a: Any, shape: tuple[int, ...], reference: Array, owner: str, what: str, copy: bool = False,
    batch_axis: int = -2,
) -> tuple[Any, Array, bool]:
    """Check a gradient or state of exactly ``shape`` (or without its batch axis
    ``batch_axis`` when the batch is 1) against the place and dtype of ``reference``; return
    ``(xp, a, single)``."""
    axis = batch_axis % len(shape) if len(shape) > 1 else 0
    xp, a, single = prepare_input(
        a,
        n_features=tuple(shape[axis + 1:]) if len(shape) > 1 else shape[-1],
        dtype=dtype_name(reference.dtype),
        reference=reference,
        owner=owner,
        leading=tuple(str(n) for n in shape[:axis + 1]) if len(shape) > 1 else (),
        what=what,
        single_form=len(shape) < 2 or shape[axis] == 1,
        copy=copy,
    )
    if tuple(a.shape) != tuple(shape):
        got = a.shape[:axis] + a.shape[axis + 1:] if single else a.shape
        raise ValueError(f"{owner}: {what} must have shape {tuple(shape)}, got {tuple(got)}")
    return xp, a, single


EINSUM_MIN = 1 << 13  # elements of a one-row outer product from which numpy's einsum wins


def batch_outer(a: Array, b: Array, out: Array | None = None) -> Array:
    """``aᵀ b``, the sum over rows of outer products: a matrix product, or at one row a
    broadcast product (BLAS is about twice as slow with an inner size of 1); written into
    ``out`` when given (numpy and CuPy arrays only). A one-row numpy product of at least
    ``EINSUM_MIN`` elements goes through ``einsum``, whose outer-product loop is about 1.6x
    faster than broadcasting's row-by-row loop there (the same products, bit for bit)."""
    if out is None:
        return a.T * b if a.shape[0] == 1 else a.T @ b
    mod = out_module(out)
    if a.shape[0] != 1:
        return mod.matmul(a.T, b, out=out)
    if mod is np and out.size >= EINSUM_MIN:
        return np.einsum("i,j->ij", a[0], b[0], out=out)
    return mod.multiply(a.T, b, out=out)


def batch_sum(xp: Any, a: Array, out: Array | None = None) -> Array:
    """The column sums of ``a`` (rows, k), written into ``out`` (k,) when given (numpy and
    CuPy arrays only). On numpy a product with a vector of ones (a ``gemv``: 3-5x faster than
    numpy's row-by-row reduction at 1600 rows, and no less exact: both add each column in the
    dtype of ``a``, BLAS in several partial sums), with or without ``out``, so reused gradient
    buffers give the same bits as fresh ones."""
    if type(a) is np.ndarray and a.ndim == 2 and a.shape[0] > 1:
        return np.matmul(np.ones(a.shape[0], dtype=a.dtype), a, out=out)
    if out is None:
        return xp.sum(a, axis=0)
    return a.sum(axis=0, out=out)


def sequence_product(xp: Any, xs: Array, M: Array) -> Array:
    """``xs_t M`` for every step of ``xs`` (T, B, i) as one matrix product: (T, B, M's
    columns)."""
    steps, batch, n_in = xs.shape
    return xp.reshape(xp.reshape(xs, (steps * batch, n_in)) @ M, (steps, batch, M.shape[-1]))


def project_sequence(xp: Any, xs: Array, W: Array, b: Array) -> Array:
    """``xs Wᵀ + b`` for every step of ``xs`` (T, B, i) as one matrix product: the input
    projection a recurrent layer makes before its time loop, (T, B, rows of W)."""
    return sequence_product(xp, xs, W.T) + b


def sequence_outer(xp: Any, d: Array, inputs: Array) -> Array:
    """``Σ_t d_tᵀ inputs_t`` for ``d`` (T, B, k) and ``inputs`` (T, B, j): a weight gradient
    of shape (k, j), one product over all ``T·B`` rows, after the time loop."""
    rows = d.shape[0] * d.shape[1]
    return batch_outer(xp.reshape(d, (rows, d.shape[-1])),
                       xp.reshape(inputs, (rows, inputs.shape[-1])))


def sequence_weight_grads(xp: Any, d: Array, inputs: Array) -> tuple[Array, Array]:
    """``(sequence_outer(d, inputs), Σ_t Σ_b d_t)``: a weight gradient and its bias
    gradient (k,)."""
    flat = xp.reshape(d, (d.shape[0] * d.shape[1], d.shape[-1]))
    return sequence_outer(xp, d, inputs), batch_sum(xp, flat)


def as_int(value: Any) -> int | None:
    """``value`` as a plain ``int`` if ``operator.index`` takes it (Python or numpy integers),
    bools excluded; else ``None``."""
    if isinstance(value, bool | np.bool_):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def check_size(owner: str, name: str, n: Any) -> int:
    """``n`` as a plain ``int`` if it is a positive integer (numpy's too), else a
    ``ValueError`` naming the layer and argument."""
    size = as_int(n)
    if size is None or size < 1:
        raise ValueError(f"{owner}: {name} must be a positive integer, got {n!r}")
    return size


def check_real(owner: str, name: str, value: Any, interval: str) -> float:
    """``value`` as a float if it is a real number (numpy's too; bools and NaN are not) in
    ``interval``, written as in mathematics (``"[0, 1)"``, ``"(0, inf]"``); else a
    ``ValueError`` naming the owner, the argument and the interval."""
    low, high = (float(end) for end in interval[1:-1].split(","))
    real = cast(float, value)  # typeshed's numbers.Real declares no comparison with a float
    inside = isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_) and (
        (low <= real if interval[0] == "[" else low < real)
        and (real <= high if interval[-1] == "]" else real < high))
    if not inside:
        raise ValueError(f"{owner}: {name} must be a real number in {interval}, got {value!r}")
    return float(value)


def checked_sizes(owner: str, config: dict[str, Any]) -> tuple[int, int]:
    """``(n_in, n_out)`` from a layer's ``config``, each a positive integer."""
    return check_size(owner, "n_in", config["n_in"]), check_size(owner, "n_out", config["n_out"])


_STAMPS = itertools.count(1)  # ParamDict.version: next() is atomic under the GIL


class ParamDict(dict):
    """A layer's parameters: a dict whose ``version`` (an int) stamps its state. The stamps
    come from one counter for the whole process, so no two dicts (two networks of the same
    architecture, a copy, an unpickled one) and no two states of one dict share a stamp:
    building it and every change made through it (``d[k] = a``, ``update``, ``del``, ``pop``,
    ...) or announced by ``touch`` (optimizers call it after updating arrays in place) takes a
    new one. A tape that kept ``params.version`` can tell at backward whether it was made with
    these parameters as they are now.

    An array set in place of another (``d[k] = a``, ``update``) must have its shape and dtype
    (``ValueError``), and with ``d[k] = a`` also its backend and device (``TypeError`` /
    ``ValueError``; ``update`` may move the whole dict, as ``net.to`` does): the error names
    the layer and the parameter where the change is made, not at the next step."""

    version: int = 0  # (a class default too: unpickling fills the dict before its state)
    layer_name: str = "layer"  # the class of the layer that took the dict: for errors

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.touch()

    def touch(self) -> None:
        """Take a new stamp: arrays of this dict were changed in place."""
        self.version = next(_STAMPS)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled or copied: the state, but a stamp of this process (another process's
        counter may have given the same number to other parameters here)."""
        self.__dict__.update(state)
        self.touch()

    def _check_replacement(self, key: str, value: Any, place: bool) -> None:
        """Raise unless ``value`` can stand for the array under ``key`` (a new key: anything)."""
        previous = self.get(key)
        if previous is None:
            return
        what = f"{self.layer_name}.params[{key!r}]"
        shape, dtype = tuple(previous.shape), dtype_name(previous.dtype)
        try:
            backend_name_of(value)
            fits = tuple(value.shape) == shape and dtype_name(value.dtype) == dtype
        except (TypeError, ValueError):
            got = type(value).__name__ + (f" of {value.dtype}" if hasattr(value, "dtype") else "")
            raise TypeError(f"{what} must be an array of shape {shape} and dtype {dtype}, "
                            f"got {got}") from None
        if not fits:
            raise ValueError(f"{what} must have shape {shape} and dtype {dtype} like the "
                             f"array it replaces, got shape {tuple(value.shape)} and dtype "
                             f"{value.dtype}")
        if place:
            check_same_place(value, previous, what, f"the {self.layer_name}")

    def __setitem__(self, key: str, value: Array) -> None:
        self._check_replacement(key, value, place=True)
        super().__setitem__(key, value)
        self.touch()

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self.touch()

    # mypy compares |= with dict's overloaded | (a new dict) and finds them incompatible;
    # |= updates this dict in place and returns it, as dict's own does
    def __ior__(self, other: Any) -> Self:  # type: ignore[misc]
        self.update(other)
        return self

    def update(self, *args: Any, **kwargs: Any) -> None:
        new = dict(*args, **kwargs)
        for key, value in new.items():
            self._check_replacement(key, value, place=False)
        super().update(new)
        self.touch()

    def pop(self, *args: Any) -> Any:
        value = super().pop(*args)
        self.touch()
        return value

    def popitem(self) -> tuple[str, Array]:
        item = super().popitem()
        self.touch()
        return item

    def setdefault(self, key: str, default: Array = None) -> Array:
        value = super().setdefault(key, default)
        self.touch()
        return value

    def clear(self) -> None:
        super().clear()
        self.touch()


if TYPE_CHECKING:
    from typing_extensions import Self  # typing's from Python 3.11

    class _ParamsAttribute:
        """What ``Layer.__setattr__`` makes of ``params``, told to the type checker: it reads
        as a ``ParamDict`` and takes any dict of arrays (wrapped into one)."""

        def __get__(self, layer: object, owner: type | None = None) -> ParamDict: ...

        def __set__(self, layer: object, value: dict[str, Array]) -> None: ...


class Layer:
    """A feed-forward layer. Subclasses set ``kind`` and implement ``_forward``/``_backward``.

    ``n_in``/``n_out`` are the feature sizes, or ``None`` for layers that keep any size.
    """

    kind: ClassVar[str]
    recurrent: ClassVar[bool] = False
    keeps_input: bool = True  # the tape holds the input: forward copies it (a composite sets
    # its own, from its layers')
    fills_gradient_buffers: ClassVar[bool] = False
    """Whether ``_backward_sequence`` writes into the ``grads_out`` arrays it is given (a
    fast path that does; ``gradient_buffers`` makes them only for such layers)."""
    n_in: int | None = None
    n_out: int | None = None
    spatial: ClassVar[bool] = False
    """Whether the layer works on images ``(channels, height, width)`` (or turns features
    into them): such layers chain in a ``Network``, not in a ``RecurrentNetwork``."""
    composite: ClassVar[bool] = False
    """Whether the layer runs other layers (``Sequential``, ``Merge``, ``Concat``): it has no
    parameters of its own, its layers' are in ``param_groups``."""

    if TYPE_CHECKING:
        params = _ParamsAttribute()
    else:
        params: ParamDict
    """The parameter arrays by name. Assigning a dict stores it as a ``ParamDict`` (a plain
    dict is copied into one, holding the same arrays, with a new ``version``), so earlier
    tapes are stale."""

    def __init__(self) -> None:
        self.params = {}

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "params":  # an attribute, not a property: read in every call, set rarely
            if not isinstance(value, ParamDict):
                value = ParamDict(value)
            value.layer_name = type(self).__name__
        super().__setattr__(name, value)

    def _check_version(self, tape: Any) -> None:
        """Raise ``RuntimeError`` unless ``tape`` was made with the parameters as they are
        (its ``version`` is that of ``params``): an integer comparison per backward pass."""
        if tape.version != self.params.version:
            raise RuntimeError(
                f"{self!r}: this tape was made with other parameters (another network's, or "
                "these before an optimizer step, params[...] = ..., update or net.to(...)), so "
                "backward would mix its activations with these weights; pass the tape this "
                "layer's forward returned, run forward again, or take the gradients before "
                "updating"
            )

    def _checked_dtype(self, dtype: Any) -> str:
        """A constructor's ``dtype`` argument as ``"float32"``/``"float64"``, else ValueError
        naming the layer: the one dtype check every layer constructor calls."""
        return check_dtype(self.kind, dtype)

    @property
    def dtype(self) -> str | None:
        """The parameters' dtype name, or ``None`` for a layer without parameters."""
        first = next(iter(self.params.values()), None)
        return None if first is None else dtype_name(first.dtype)

    def config(self) -> dict[str, Any]:
        """The constructor arguments that rebuild this layer's shape (for ``dualtape.save``)."""
        return {}

    @classmethod
    def from_config(cls, config: dict[str, Any], dtype: str) -> Layer:
        """A new layer of the shape ``config`` describes, with parameters in ``dtype``."""
        # the layers that keep this default take dtype; Layer itself is never built
        return cls(**config, dtype=dtype)  # type: ignore[call-arg]

    @classmethod
    def param_shapes(cls, config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        """The parameter shapes of a layer built from ``config``, without building it."""
        return {}

    def __repr__(self) -> str:
        return f"{self.kind}({', '.join(str(v) for v in self.config().values())})"

    def _reference(self) -> Array | None:
        return next(iter(self.params.values()), None)

    def leaves(self) -> list[Layer]:
        """The layers that hold this layer's parameters, in order: ``[self]``; a composite
        layer's are its layers' leaves."""
        return [self]

    @property
    def param_groups(self) -> list[ParamDict]:
        """The parameter dicts an optimizer steps for this layer (``[params]``; a composite
        layer's, one per leaf), in the order of the gradient list of ``_backward_groups``."""
        return [leaf.params for leaf in self.leaves()]

    def _backward_groups(self, xp: Any, tape: Any, dy: Array) -> tuple[list[dict], Array]:
        """``_backward`` with the gradients as a list aligned with ``param_groups``."""
        grads, dx = self._backward(xp, tape, dy)
        return [grads], dx

    @property
    def input_shape(self) -> tuple | None:
        """What one example must look like: a tuple of sizes and names of free axes
        (``(n_in,)``, ``(3, "height", "width")``), or None for any shape."""
        return None if self.n_in is None else (self.n_in,)

    def output_shape(self, shape: tuple | None) -> tuple | None:
        """What the layer gives for an example of ``shape`` (sizes and names of free axes;
        None: not known), which ``input_shape`` fits; ``ValueError`` when it cannot take it."""
        return shape if self.n_out is None else (self.n_out,)

    def forward(self, x: Any) -> tuple[Any, Array]:
        """``(tape, y)`` for ``x`` of shape ``(batch,) + input_shape`` or one example
        ``input_shape`` (``(batch, n_in)`` or ``(n_in,)`` for the feature layers)."""
        xp, x, single = prepare_input(
            x, n_features=self.input_shape, dtype=self.dtype, reference=self._reference(),
            owner=repr(self), copy=self.keeps_input,
        )
        tape, y = self._forward(xp, x)
        return tape, read_only(restore(y, single, batch_axis=0))

    def backward(self, tape: Any, dy: Any) -> tuple[dict[str, Array], Array]:
        """``(grads, dx)`` from a tape of ``forward`` and the gradient ``dy`` of its output."""
        self._check_tape(tape, repr(self))
        xp, dy, single = prepare_like(dy, self._output_shape(tape), tape_array(tape),
                                      repr(self), "dy", batch_axis=0)
        grads, dx = self._backward(xp, tape, dy)
        return grads, restore(dx, single, batch_axis=0)

    def _output_shape(self, tape: Any) -> tuple[int, ...]:
        """The shape of the output the tape belongs to (for checking ``dy``)."""
        return tuple(tape[-1].shape)

    def _check_tape(self, tape: Any, owner: str, k: int | None = None) -> None:
        """Raise ``ValueError`` unless ``tape`` can be this layer's (layer ``k`` of ``owner``,
        or the layer itself when ``k`` is None): its class is named after the layer's kind,
        and its input has ``n_in`` features."""
        name = type(tape).__name__
        if (
            not isinstance(tape, tuple)
            or not name.startswith(self.kind)
            or (self.n_in is not None and tape[0].shape[-1] != self.n_in)
        ):
            if k is None:
                raise ValueError(
                    f"{owner}: the tape is a {name}, not one of this layer; pass the tape its "
                    "forward returned"
                )
            raise ValueError(
                f"{owner}: tape {k} is a {name}, not one of layer {k} {self!r}; pass the tapes "
                "this network's forward returned"
            )

    def _forward(self, xp: Any, x: Array) -> tuple[Any, Array]:
        raise NotImplementedError

    def _backward(self, xp: Any, tape: Any, dy: Array) -> tuple[dict[str, Array], Array]:
        raise NotImplementedError


def tape_array(tape: tuple) -> Array:
    """The first array of a tape (the one ``dy`` is checked against for place and dtype),
    looking inside the tapes a composite layer's tape holds."""
    first = tape[0]
    return tape_array(first) if isinstance(first, tuple) else first


class OutputTape(NamedTuple):
    """The tape of an activation whose derivative needs only its output ``y``."""

    y: Array


class Activation(Layer):
    """An elementwise or row-wise layer without parameters that keeps only its output, in a
    tape class of its own (``TanhTape``, a subclass of ``OutputTape``)."""

    keeps_input = False
    tape_class: ClassVar[type[OutputTape]] = OutputTape

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.tape_class = type(f"{cls.kind}Tape", (OutputTape,), {"__slots__": ()})

    @classmethod
    def from_config(cls, config: dict[str, Any], dtype: str) -> Layer:
        return cls(**config)

    def _forward(self, xp: Any, x: Array) -> tuple[OutputTape, Array]:
        y = self.activate(xp, x)
        return self.tape_class(y), y

    def _backward(self, xp: Any, tape: OutputTape, dy: Array) -> tuple[dict[str, Array], Array]:
        return {}, self.derivative(xp, tape.y, dy)

    def activate(self, xp: Any, x: Array) -> Array:
        """The layer's function."""
        raise NotImplementedError

    def derivative(self, xp: Any, y: Array, dy: Array) -> Array:
        """The gradient of the input from the output ``y`` and its gradient ``dy``."""
        raise NotImplementedError


class RecurrentLayer(Layer):
    """A layer with a recurrent state, Grenade's recurrent-layer contract.

    Step: ``forward(state, x) -> (tape, state_next, y)`` and
    ``backward(tape, dstate_next, dy) -> (grads, dstate, dx)``.
    Sequence: ``forward_sequence(state, xs) -> (tape, state_T, ys)`` and
    ``backward_sequence(tape, dstate_T, dys) -> (grads, dstate_0, dxs)`` over ``(T, batch, ·)``.
    Subclasses implement ``_forward_step``, ``_backward_step``, ``_forward_sequence`` and
    ``_backward_sequence`` on 2-D (step) and 3-D (sequence) arrays.
    """

    recurrent = True
    state_size: int
    n_in: int
    n_out: int

    def initial_state(self, batch: int | None = None) -> Array:
        """Zeros of shape ``(batch, state_size)``, or ``(state_size,)`` when ``batch`` is None."""
        if batch is None:
            return zeros_like_place((self.state_size,), self._reference())
        return zeros_like_place(
            (check_size(repr(self), "batch", batch), self.state_size), self._reference()
        )

    def _check_state(self, state: Any, batch: int, copy: bool = False) -> tuple[Array, bool]:
        """The state checked for ``batch`` (None: zeros); ``copy=True`` for one a tape may
        keep."""
        if state is None:
            return zeros_like_place((batch, self.state_size), self._reference()), False
        _, state, single = prepare_like(
            state, (batch, self.state_size), self._reference(), repr(self), "state", copy=copy
        )
        return state, single

    def forward(self, state: Any, x: Any) -> tuple[Any, Array, Array]:  # type: ignore[override]
        """One step: ``(tape, state_next, y)`` for ``x`` ``(batch, n_in)`` or ``(n_in,)``;
        ``state`` None starts from zeros."""
        xp, x, single = prepare_input(
            x, n_features=self.n_in, dtype=self.dtype, reference=self._reference(),
            owner=repr(self), copy=True,
        )
        state, _ = self._check_state(state, x.shape[0], copy=True)
        tape, state_next, y = self._forward_step(xp, state, x)
        return tape, read_only(restore(state_next, single)), read_only(restore(y, single))

    def backward(  # type: ignore[override]
        self, tape: Any, dstate_next: Any, dy: Any
    ) -> tuple[dict[str, Array], Array, Array]:
        """One step back: ``(grads, dstate, dx)``; ``dstate_next`` may be None (zeros)."""
        self._check_tape(tape, repr(self))
        batch = tape[0].shape[0]
        xp, dy, single = prepare_like(dy, (batch, self.n_out), tape[0], repr(self), "dy")
        dstate_next = self._state_gradient(xp, dstate_next, batch, "dstate_next")
        grads, dstate, dx = self._backward_step(xp, tape, dstate_next, dy)
        return grads, restore(dstate, single), restore(dx, single)

    def forward_sequence(
        self, state: Any, xs: Any, *, tape: str | int = "full"
    ) -> tuple[Any, Array, Array]:
        """A sequence: ``(tape, state_T, ys)`` for ``xs`` ``(T, batch, n_in)`` or ``(T, n_in)``,
        from ``state`` ``(batch, state_size)`` or ``(state_size,)``, or None for zeros.
        ``tape`` as in ``RecurrentNetwork.forward_sequence``: ``"full"`` (every step's tape),
        ``"sqrt"`` or k (a ``CheckpointedTape`` of the states every ⌈√T⌉ or k steps, each
        segment recomputed in ``backward_sequence``)."""
        xp, xs, single = prepare_input(
            xs,
            n_features=self.n_in,
            dtype=self.dtype,
            reference=self._reference(),
            owner=repr(self),
            leading=("time", "batch"),
            what="input sequence",
            copy=True,
        )
        check_not_empty(xs, repr(self))
        every = segment_length(tape, xs.shape[0])
        state, _ = self._check_state(state, xs.shape[1], copy=True)
        kept, states, ys = sequence_forward([self], xp, [state], xs, every)
        if isinstance(kept, RecurrentNetworkTape):  # a stack of one: the layer's own tape
            kept = kept.tapes[0]
        return kept, read_only(restore(states[0], single)), read_only(restore(ys, single))

    def backward_sequence(
        self, tape: Any, dstate_T: Any, dys: Any
    ) -> tuple[dict[str, Array], Array, Array]:
        """Backprop through time: ``(grads, dstate_0, dxs)``.

        ``dstate_T`` ``(batch, state_size)`` or ``(state_size,)`` is the gradient of the last
        state (None: zeros), ``dys`` ``(T, batch, n_out)`` or ``(T, n_out)`` that of the outputs;
        the order of ``backward(tape, dstate_next, dy)`` and ``RecurrentNetwork``'s. Arguments
        in the other order raise ``ValueError`` (a state gradient has no time axis).
        """
        checkpointed = isinstance(tape, CheckpointedTape)
        if not checkpointed:
            self._check_tape(tape, repr(self))
        check_sequence_gradients_order(repr(self), dstate_T, dys)
        steps, batch = tape[0].shape[:2]
        xp, dys, single = prepare_like(
            dys, (steps, batch, self.n_out), tape[0], repr(self), "dys"
        )
        dstate_T = self._state_gradient(xp, dstate_T, batch, "dstate_T")
        stacked = tape if checkpointed else RecurrentNetworkTape([tape], steps, batch)
        grads, dstates, dxs = sequence_backward([self], xp, stacked, [dstate_T], dys)
        return grads[0], restore(dstates[0], single), restore(dxs, single)

    def _forward_step(self, xp: Any, state: Array, x: Array) -> tuple[Any, Array, Array]:
        raise NotImplementedError

    def _backward_step(
        self, xp: Any, tape: Any, dstate_next: Array, dy: Array
    ) -> tuple[dict[str, Array], Array, Array]:
        raise NotImplementedError

    def _state_gradient(self, xp: Any, dstate: Any, batch: int, what: str) -> Array:
        reference = self._reference()
        if dstate is None:
            return zeros_like_place((batch, self.state_size), reference)
        _, dstate, _ = prepare_like(dstate, (batch, self.state_size), reference, repr(self), what)
        return dstate

    def predict_step(self, state: Any, x: Any) -> tuple[Array, Array]:
        """``(state_next, y)`` without a tape, for generation (one step of
        ``predict_sequence``)."""
        _, state_next, y = self.forward(state, x)
        return state_next, y

    def step(self, state: Any, x: Any) -> tuple[Array, Array]:
        """``predict_step``'s former name, kept working (``step`` also names an optimizer's
        update)."""
        return self.predict_step(state, x)


def check_not_empty(xs: Array, owner: str) -> None:
    """Raise ``ValueError`` for a sequence of no time steps."""
    if xs.shape[0] == 0:
        raise ValueError(f"{owner}: the input sequence is empty (T = 0); give at least one step")


def check_sequence_gradients_order(owner: str, dstate_T: Any, dys: Any) -> None:
    """Raise ``ValueError`` when ``backward_sequence(tape, dstate_T, dys)`` was given its
    gradients the other way round: a state gradient is ``(batch, s)`` or ``(s,)``, never 3-D,
    and ``dys`` always has a time axis, so it is never 1-D. (Only at T = batch = 1 with both
    given 2-D can the two not be told apart.)"""
    if (dstate_T is not None and np.ndim(dstate_T) == 3) or np.ndim(dys) == 1:
        raise ValueError(
            f"{owner}: backward_sequence takes (tape, dstate_T, dys), got dstate_T of shape "
            f"{None if dstate_T is None else tuple(np.shape(dstate_T))} and dys of shape "
            f"{tuple(np.shape(dys))}: the two look swapped"
        )
