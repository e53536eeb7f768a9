"""One file per layer; ``base`` holds the Layer and RecurrentLayer contracts, ``registry`` the
kinds ``load`` builds."""

from .base import Activation, Layer, RecurrentLayer
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
from .params import ParamDict
from .pooling import Pooling
from .registry import LAYER_KINDS, register_layer
from .relu import Relu
from .reshape import Reshape
from .sequential import Sequential
from .sinusoid import Sinusoid
from .softmax import Softmax
from .standard_lstm import StandardLSTM
from .tanh import Tanh
from .trivial import Trivial

__all__ = [
    "GRU",
    "LAYER_KINDS",
    "LSTM",
    "Activation",
    "BasicRecurrent",
    "Concat",
    "Convolution",
    "Crop",
    "Deconvolution",
    "Dropout",
    "Elu",
    "Embedding",
    "FullyConnected",
    "Layer",
    "Logit",
    "Merge",
    "Pad",
    "ParamDict",
    "Pooling",
    "RecurrentLayer",
    "Relu",
    "Reshape",
    "Sequential",
    "Sinusoid",
    "Softmax",
    "StandardLSTM",
    "Tanh",
    "Trivial",
    "register_layer",
]
