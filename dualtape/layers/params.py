"""``ParamDict``: a layer's parameters, stamped with a version at every change, so a tape can
tell whether it was made with them as they are now."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from ..backend import backend_name_of, check_same_place, dtype_name

if TYPE_CHECKING:
    from typing_extensions import Self  # typing's from Python 3.11

Array = Any


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
