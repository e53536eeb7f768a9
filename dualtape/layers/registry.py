"""The layer classes ``load`` may build, by the kind a file names: dualtape's own, and those a
user registers (``register_layer``). A file never names code to run: a kind not registered in
this process is refused before anything is built."""

from __future__ import annotations

from typing import TypeVar

from .base import Layer
from .basic_recurrent import BasicRecurrent
from .concat import Concat
from .convolution import Convolution
from .crop import Crop
from .deconvolution import Deconvolution
from .dropout import Dropout
from .elu import Elu
from .embedding import Embedding
from .fully_connected import FullyConnected
from .gru import GRU
from .logit import Logit
from .lstm import LSTM
from .merge import Merge
from .pad import Pad
from .pooling import Pooling
from .relu import Relu
from .reshape import Reshape
from .sequential import Sequential
from .sinusoid import Sinusoid
from .softmax import Softmax
from .standard_lstm import StandardLSTM
from .tanh import Tanh
from .trivial import Trivial

LAYER_KINDS: dict[str, type[Layer]] = {cls.kind: cls for cls in (
    FullyConnected, Logit, Elu, Relu, Tanh, Softmax, Dropout, LSTM, StandardLSTM, GRU,
    BasicRecurrent, Convolution, Pooling, Pad, Crop, Reshape, Trivial, Sinusoid, Deconvolution,
    Sequential, Merge, Concat, Embedding)}
"""Each kind ``save`` writes and ``load`` builds, and its class."""

L = TypeVar("L", bound=type[Layer])


def register_layer(cls: L) -> L:
    """Let ``save`` keep layers of ``cls`` and ``load`` build them (also a class decorator).

    ``cls`` is a ``Layer`` subclass with a ``kind`` of its own (the name files store) and, as
    dualtape's layers have: ``config()`` (the JSON-able constructor settings), ``from_config(
    config, dtype)`` and ``param_shapes(config)``, which ``load`` calls on a file's settings
    before building anything, so it must refuse bad ones (``ValueError``, ``TypeError``).
    Registering the same class again does nothing; a kind taken by another class, a class that
    is not a ``Layer`` and a composite are refused (``TypeError``/``ValueError``). Returns
    ``cls``."""
    if not isinstance(cls, type) or not issubclass(cls, Layer):
        raise TypeError(f"register_layer: {cls!r} is not a dualtape Layer subclass")
    kind = cls.__dict__.get("kind")
    if not isinstance(kind, str) or not kind.isidentifier():
        raise ValueError(f"register_layer: {cls.__name__} needs a kind of its own, a name such "
                         f"as {cls.__name__!r} (class attribute kind), got {kind!r}")
    if cls.composite:
        raise ValueError(f"register_layer: {cls.__name__} is a composite; only dualtape's own "
                         "composites (Sequential, Merge, Concat) are saved")
    known = LAYER_KINDS.get(kind)
    if known is not None and known is not cls:
        raise ValueError(f"register_layer: the kind {kind!r} is {known.__module__}."
                         f"{known.__qualname__}'s; give {cls.__name__} another")
    LAYER_KINDS[kind] = cls
    return cls
