"""One file per layer; ``base`` holds the Layer and RecurrentLayer contracts."""

from .base import Activation, Layer, ParamDict, RecurrentLayer
from .basic_recurrent import BasicRecurrent
from .dropout import Dropout
from .elu import Elu
from .fully_connected import FullyConnected
from .gru import GRU
from .logit import Logit
from .lstm import LSTM
from .relu import Relu
from .softmax import Softmax
from .standard_lstm import StandardLSTM
from .tanh import Tanh

LAYER_KINDS = {cls.kind: cls for cls in (
    FullyConnected, Logit, Elu, Relu, Tanh, Softmax, Dropout, LSTM, StandardLSTM, GRU,
    BasicRecurrent)}

__all__ = [
    "GRU",
    "LAYER_KINDS",
    "LSTM",
    "Activation",
    "BasicRecurrent",
    "Dropout",
    "Elu",
    "FullyConnected",
    "Layer",
    "Logit",
    "ParamDict",
    "RecurrentLayer",
    "Relu",
    "Softmax",
    "StandardLSTM",
    "Tanh",
]
