"""dualtape: Grenade-style layers with Wengert tapes, written once against the array API."""

from .allocator import keep_freed_memory
from .backend import (
    Backend,
    BackendUnavailable,
    asarray,
    available_backends,
    get_backend,
    set_backend,
    to_numpy,
    use_backend,
)
from .io import load, load_extra, load_with_extra, save
from .layers import (
    GRU,
    LSTM,
    BasicRecurrent,
    Concat,
    Convolution,
    Crop,
    Deconvolution,
    Dropout,
    Elu,
    FullyConnected,
    Logit,
    Merge,
    Pad,
    Pooling,
    Relu,
    Reshape,
    Sequential,
    Sinusoid,
    Softmax,
    StandardLSTM,
    Tanh,
    Trivial,
)
from .network import Network
from .optim import SGD, Adam
from .recurrent import RecurrentNetwork
from .torch_weights import from_torch, state_from_torch, state_to_torch, to_torch
from .training import clip_gradients, train, train_recurrent

__version__ = "0.1.0"

__all__ = [
    "GRU",
    "LSTM",
    "SGD",
    "Adam",
    "Backend",
    "BackendUnavailable",
    "BasicRecurrent",
    "Concat",
    "Convolution",
    "Crop",
    "Deconvolution",
    "Dropout",
    "Elu",
    "FullyConnected",
    "Logit",
    "Merge",
    "Network",
    "Pad",
    "Pooling",
    "RecurrentNetwork",
    "Relu",
    "Reshape",
    "Sequential",
    "Sinusoid",
    "Softmax",
    "StandardLSTM",
    "Tanh",
    "Trivial",
    "asarray",
    "available_backends",
    "clip_gradients",
    "from_torch",
    "get_backend",
    "keep_freed_memory",
    "load",
    "load_extra",
    "load_with_extra",
    "save",
    "set_backend",
    "state_from_torch",
    "state_to_torch",
    "to_numpy",
    "to_torch",
    "train",
    "train_recurrent",
    "use_backend",
]
