"""One file per layer; ``base`` holds the Layer and RecurrentLayer contracts."""

from .base import Activation, Layer, ParamDict, RecurrentLayer
from .elu import Elu
from .fully_connected import FullyConnected
from .logit import Logit
from .lstm import LSTM
from .relu import Relu
from .softmax import Softmax
from .tanh import Tanh

LAYER_KINDS = {cls.kind: cls for cls in (FullyConnected, Logit, Elu, Relu, Tanh, Softmax, LSTM)}

__all__ = [
    "LAYER_KINDS",
    "LSTM",
    "Activation",
    "Elu",
    "FullyConnected",
    "Layer",
    "Logit",
    "ParamDict",
    "RecurrentLayer",
    "Relu",
    "Softmax",
    "Tanh",
]
