"""dualtape: Grenade-style layers with Wengert tapes, written once against the array API."""

from . import losses
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
from .batching import batches, windows
from .gradcheck import GradientCheckError, check_gradients
from .io import load, load_extra, load_with_extra, save
from .kernels.overlap import overlap_gradients
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
    Embedding,
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
    register_layer,
)
from .network import Network
from .optim import SGD, Adam
from .recompute_check import RecomputeError, check_no_recompute
from .recurrent import RecurrentNetwork
from .route_choice import route
from .routes import Route, last_route
from .schedules import CosineRate, LambdaRate, LinearRate, Schedule, SequentialRate, StepRate
from .tape_report import TapeReport, tape_report
from .torch_weights import from_torch, state_from_torch, state_to_torch, to_torch
from .training import (
    Backprop,
    backpropagate,
    backpropagate_sequence,
    clip_gradients,
    train,
    train_recurrent,
)

__version__ = "0.1.0"

__all__ = [
    "GRU",
    "LSTM",
    "SGD",
    "Adam",
    "Backend",
    "BackendUnavailable",
    "Backprop",
    "BasicRecurrent",
    "Concat",
    "CosineRate",
    "Convolution",
    "Crop",
    "Deconvolution",
    "Dropout",
    "Elu",
    "Embedding",
    "FullyConnected",
    "GradientCheckError",
    "LambdaRate",
    "LinearRate",
    "RecomputeError",
    "Logit",
    "Merge",
    "Network",
    "Pad",
    "Pooling",
    "RecurrentNetwork",
    "Relu",
    "Route",
    "Schedule",
    "SequentialRate",
    "Reshape",
    "Sequential",
    "Sinusoid",
    "Softmax",
    "StandardLSTM",
    "StepRate",
    "TapeReport",
    "Tanh",
    "Trivial",
    "register_layer",
    "asarray",
    "available_backends",
    "backpropagate",
    "backpropagate_sequence",
    "batches",
    "check_gradients",
    "check_no_recompute",
    "clip_gradients",
    "from_torch",
    "get_backend",
    "keep_freed_memory",
    "last_route",
    "load",
    "load_extra",
    "load_with_extra",
    "losses",
    "overlap_gradients",
    "route",
    "save",
    "set_backend",
    "state_from_torch",
    "state_to_torch",
    "tape_report",
    "to_numpy",
    "to_torch",
    "train",
    "train_recurrent",
    "use_backend",
    "windows",
]
