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
from .layers import LSTM, Elu, FullyConnected, Logit, Relu, Softmax, Tanh
from .network import Network, train
from .optim import SGD, Adam
from .recurrent import RecurrentNetwork, train_recurrent

__version__ = "0.1.0"

__all__ = [
    "LSTM",
    "SGD",
    "Adam",
    "Backend",
    "BackendUnavailable",
    "Elu",
    "FullyConnected",
    "Logit",
    "Network",
    "RecurrentNetwork",
    "Relu",
    "Softmax",
    "Tanh",
    "asarray",
    "available_backends",
    "get_backend",
    "keep_freed_memory",
    "load",
    "load_extra",
    "load_with_extra",
    "save",
    "set_backend",
    "to_numpy",
    "train",
    "train_recurrent",
    "use_backend",
]
