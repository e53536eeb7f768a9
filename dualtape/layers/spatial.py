"""What the spatial layers share: the image layout, argument checks, sliding windows and their
fold (the generic unfold, the reference of ``kernels.windows``' fast paths), and the tape of
layers that keep only a shape.

Images are ``(batch, channels, height, width)`` (torch's layout), one example ``(channels,
height, width)``. A window of ``kernel`` ``(rows, cols)`` moves by ``stride`` ``(rows, cols)``
and only whole windows count: ``(height - rows) // stride_rows + 1`` of them down, as in torch
(Grenade's types demand that the stride divides ``height - rows``; here the remainder's last
rows and columns are not seen, as in torch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

from ..backend import zeros_like_place
from .base import Array, Layer
from .edges import as_int, fits, shape_text

Pair = tuple[int, int]
IMAGE = ("channels", "height", "width")
"""The example shape pattern of a layer that takes images with any number of channels."""


def check_pair(owner: str, name: str, value: Any, smallest: int = 1) -> Pair:
    """``(rows, cols)`` from a pair (or one number for both) of integers ``>= smallest``;
    else a one-line ``ValueError`` naming the layer and argument."""
    pair = (value, value) if as_int(value) is not None else value
    sizes = [as_int(n) for n in pair] if isinstance(pair, tuple | list) else []
    valid = [n for n in sizes if n is not None and n >= smallest]
    if len(sizes) != 2 or len(valid) != 2:
        least = "positive" if smallest == 1 else "non-negative"
        raise ValueError(f"{owner}: {name} must be a {least} integer or a pair (rows, cols) "
                         f"of them, got {value!r}")
    return valid[0], valid[1]


def check_shape(owner: str, name: str, value: Any) -> tuple[int, ...]:
    """An example shape: a non-empty tuple (or list) of positive integers."""
    sizes = [as_int(n) for n in value] if isinstance(value, tuple | list) else []
    valid = [n for n in sizes if n is not None and n >= 1]
    if not sizes or len(valid) != len(sizes):
        raise ValueError(f"{owner}: {name} must be a tuple of positive sizes such as "
                         f"(4, 13, 13), got {value!r}")
    return tuple(valid)


class Setting:
    """A layer's setting, checked by ``check(kind, name, value)`` (``check_pair`` for a
    kernel or stride, ``check_shape`` for a shape) whenever it is assigned, after construction
    too: ``pool.kernel = (0, 0)`` raises; it holds what ``check`` returns."""

    def __init__(self, check: Callable[[str, str, Any], Any]) -> None:
        self.check = check

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, layer: Any, owner: type | None = None) -> Any:
        return self if layer is None else layer.__dict__[self.name]

    def __set__(self, layer: Any, value: Any) -> None:
        layer.__dict__[self.name] = self.check(layer.kind, self.name, value)


def window_count(size: int | str, kernel: int, stride: int, what: str) -> int | str:
    """How many whole windows fit along an axis of ``size`` (a free axis: its name); a
    ``ValueError`` when not one does."""
    if isinstance(size, str):
        return size
    if size < kernel:
        raise ValueError(f"the input's {what} {size} is smaller than the kernel's {kernel}")
    return (size - kernel) // stride + 1


def windowed_shape(shape: tuple, channels: int | str, kernel: Pair, stride: Pair) -> tuple:
    """``(channels, rows, cols)`` of windows over an image example ``shape``."""
    return (channels, window_count(shape[1], kernel[0], stride[0], "height"),
            window_count(shape[2], kernel[1], stride[1], "width"))


def check_example(layer: Layer, x: Array) -> None:
    """Raise ``ValueError`` unless ``x`` is a batch of examples ``layer.input_shape`` takes
    and ``layer.output_shape`` accepts (for inputs a ``Network`` passes on, whose free axes
    it could not check before the data came)."""
    pattern = layer.input_shape
    assert pattern is not None  # only layers of a fixed example pattern come here
    if x.ndim != len(pattern) + 1 or not fits(tuple(x.shape[1:]), pattern):
        raise ValueError(f"{layer!r}: input must have shape "
                         f"{shape_text(('batch', *pattern))}, got {tuple(x.shape)}")
    try:
        layer.output_shape(tuple(x.shape[1:]))
    except ValueError as exc:
        raise ValueError(f"{layer!r}: {exc}") from None


def windows(xp: Any, x: Array, kernel: Pair, stride: Pair) -> Array:
    """The sliding windows of ``x`` (B, C, H, W): (B, C, rows, cols, kernel rows, kernel
    cols), through a backend's fast path where it has one (``kernels.windows``), else
    ``generic_windows``. Read it, never write into it (it may be a view of ``x``)."""
    from ..kernels.windows import window_view

    view = window_view(x, kernel, stride)
    return generic_windows(xp, x, kernel, stride) if view is None else view


def generic_windows(xp: Any, x: Array, kernel: Pair, stride: Pair) -> Array:
    """``windows`` in the array API alone: one strided slice per kernel position, stacked
    (Chainer's ``im2col`` loop); a new array."""
    (kh, kw), (sh, sw) = kernel, stride
    batch, channels, height, width = x.shape
    rows, cols = (height - kh) // sh + 1, (width - kw) // sw + 1
    parts = [x[:, :, i:i + sh * (rows - 1) + 1:sh, j:j + sw * (cols - 1) + 1:sw]
             for i in range(kh) for j in range(kw)]
    return xp.reshape(xp.stack(parts, axis=-1), (batch, channels, rows, cols, kh, kw))


def unfold(xp: Any, x: Array, kernel: Pair, stride: Pair) -> Array:
    """The windows of ``x`` as a matrix (channels·kernel rows·kernel cols,
    batch·rows·cols), Chainer's ``col`` layout: each row holds one kernel position's (rows,
    cols) image, read and written along rows of ``x``."""
    w = windows(xp, x, kernel, stride)
    batch, channels, rows, cols, kh, kw = w.shape
    return xp.reshape(xp.permute_dims(w, (1, 4, 5, 0, 2, 3)),
                      (channels * kh * kw, batch * rows * cols))


def rows_of(xp: Any, images: Array) -> Array:
    """An image batch (B, C, H, W) as a matrix (C, B·H·W): one row per channel."""
    batch, channels, height, width = images.shape
    return xp.reshape(xp.permute_dims(images, (1, 0, 2, 3)), (channels, batch * height * width))


def images_of(xp: Any, rows: Array, shape: tuple[int, ...]) -> Array:
    """The inverse of ``rows_of``: the image batch of ``shape`` (B, C, H, W) from (C, B·H·W)."""
    batch, channels, height, width = shape
    return xp.permute_dims(xp.reshape(rows, (channels, batch, height, width)), (1, 0, 2, 3))


def fold_matrix(xp: Any, m: Array, shape: tuple[int, ...], kernel: Pair, stride: Pair
                ) -> Array:
    """The adjoint of ``unfold``: the image batch of ``shape`` whose elements sum the
    entries of ``m`` (channels·kernel, batch·rows·cols) that ``unfold`` took from them."""
    batch, channels, height, width = shape
    rows, cols = (height - kernel[0]) // stride[0] + 1, (width - kernel[1]) // stride[1] + 1
    grads = xp.reshape(m, (channels, *kernel, batch, rows, cols))
    return fold(xp, xp.permute_dims(grads, (3, 0, 4, 5, 1, 2)), shape, stride)


def fold(xp: Any, grads: Array, shape: tuple[int, ...], stride: Pair) -> Array:
    """The adjoint of ``windows``: the gradient (B, C, H, W) of the input ``shape`` from the
    windows' gradient ``grads`` (B, C, rows, cols, kernel rows, kernel cols), each element
    summed over every window that holds it (Chainer's ``col2im``)."""
    rows, cols, kh, kw = grads.shape[2:]
    sh, sw = stride
    dx = zeros_like_place(tuple(shape), grads)
    for i in range(kh):
        for j in range(kw):
            at = (slice(None), slice(None), slice(i, i + sh * (rows - 1) + 1, sh),
                  slice(j, j + sw * (cols - 1) + 1, sw))
            dx[at] = dx[at] + grads[..., i, j]
    return dx


class ShapeTape(NamedTuple):
    """The tape of a layer whose derivative needs only the input's shape: ``empty``, an empty
    array of the input's dtype where the input lived (what ``dy`` is checked against), and
    the input's ``shape``."""

    empty: Array
    shape: tuple[int, ...]


class ShapeLayer(Layer):
    """A layer without parameters that only moves elements (``Pad``, ``Crop``, ``Reshape``,
    ``Trivial``), in a tape class of its own (``PadTape``, a subclass of ``ShapeTape``).

    Its output may be a view of its input (a crop, a reshape), so the public ``forward``
    copies the input (``keeps_input``): writing to it afterwards cannot reach a later
    layer's tape through the view."""

    keeps_input = True
    tape_class: ClassVar[type[ShapeTape]] = ShapeTape

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in vars(cls):  # not for a shared base such as MarginLayer
            cls.tape_class = type(f"{cls.kind}Tape", (ShapeTape,), {"__slots__": ()})

    @classmethod
    def from_config(cls, config: dict[str, Any], dtype: str) -> Layer:
        return cls(**config)

    def _forward(self, xp: Any, x: Array) -> tuple[ShapeTape, Array]:
        if self.input_shape is not None:
            check_example(self, x)
        empty = zeros_like_place((0,), x)
        return self.tape_class(empty, tuple(x.shape)), self.move(xp, x)

    def _backward(self, xp: Any, tape: ShapeTape, dy: Array) -> tuple[dict[str, Array], Array]:
        return {}, self.move_back(xp, dy, tape.shape)

    def _output_shape(self, tape: ShapeTape) -> tuple[int, ...]:
        shape = self.output_shape(tape.shape[1:])
        assert shape is not None  # given an example's shape, a layer says what it gives
        return (tape.shape[0], *shape)

    def move(self, xp: Any, x: Array) -> Array:
        """The output for the input batch ``x``."""
        raise NotImplementedError

    def move_back(self, xp: Any, dy: Array, shape: tuple[int, ...]) -> Array:
        """The input's gradient, of ``shape``, from the output's gradient ``dy``."""
        raise NotImplementedError
