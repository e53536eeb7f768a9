"""One file per layer; ``base`` holds the Layer and RecurrentLayer contracts."""

from .base import Activation, Layer, ParamDict, RecurrentLayer
from .basic_recurrent import BasicRecurrent
from .convolution import Convolution
from .crop import Crop
from .deconvolution import Deconvolution
from .dropout import Dropout
from .elu import Elu
from .fully_connected import FullyConnected
from .gru import GRU
from .logit import Logit
from .lstm import LSTM
from .pad import Pad
from .pooling import Pooling
from .relu import Relu
from .reshape import Reshape
from .sinusoid import Sinusoid
from .softmax import Softmax
from .standard_lstm import StandardLSTM
from .tanh import Tanh
from .trivial import Trivial

LAYER_KINDS = {cls.kind: cls for cls in (
    FullyConnected, Logit, Elu, Relu, Tanh, Softmax, Dropout, LSTM, StandardLSTM, GRU,
    BasicRecurrent, Convolution, Pooling, Pad, Crop, Reshape, Trivial, Sinusoid, Deconvolution)}

__all__ = [
    "GRU",
    "LAYER_KINDS",
    "LSTM",
    "Activation",
    "BasicRecurrent",
    "Convolution",
    "Crop",
    "Deconvolution",
    "Dropout",
    "Elu",
    "FullyConnected",
    "Layer",
    "Logit",
    "Pad",
    "ParamDict",
    "Pooling",
    "RecurrentLayer",
    "Relu",
    "Reshape",
    "Sinusoid",
    "Softmax",
    "StandardLSTM",
    "Tanh",
    "Trivial",
]
