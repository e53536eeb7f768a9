"""Weights across frameworks: ``torch.nn.LSTM`` / ``torch.nn.GRU`` state dicts to and from
dualtape's ``StandardLSTM`` / ``GRU`` layers, ``torch.nn.Embedding``'s (its one ``weight``,
``(vocab, n)`` in both) and ``torch.nn.Linear``'s (``weight`` ``(out, in)``, ``bias``: the
layouts of ``FullyConnected``'s ``W`` and ``b``) to and from ``Embedding`` and
``FullyConnected``; and whole models (a torch module whose leaves are those and the
activations, or a state dict with its layout) to and from a ``Network`` or
``RecurrentNetwork``. No torch needed at run time.

In torch: ``sd = {k: v.numpy() for k, v in module.state_dict().items()}`` (CPU tensors;
``np.asarray(v)`` works too), then ``layers = dualtape.from_torch(sd)``; back:
``module.load_state_dict({k: torch.from_numpy(v) for k, v in dualtape.to_torch(layers).items()})``.
Torch's own layouts are kept: gate order (i, f, g, o) and (r, z, n), and both biases.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .backend import backend_of, from_host, to_numpy, use_backend
from .layers import GRU, Elu, Embedding, FullyConnected, Logit, Relu, Softmax, StandardLSTM, Tanh
from .layers.base import Array, Layer
from .layers.edges import check_dtype
from .layers.initial import placeholder_params
from .network import Chain, Network
from .recurrent import RecurrentNetwork
from .torch_modules import TORCH_NAMES, Piece, described, is_module, layout_pieces, module_pieces

CELLS: dict[int, type[StandardLSTM] | type[GRU]] = {4: StandardLSTM, 3: GRU}
"""The dualtape layer for a torch module, by its number of gates."""
ACTIVATIONS: dict[str, type[Layer]] = {"sigmoid": Logit, "tanh": Tanh, "relu": Relu,
                                       "elu": Elu, "softmax": Softmax}
"""The dualtape layer for each torch activation that maps."""

_KEY = re.compile(r"(weight|bias)_(ih|hh)(?:_l(0|[1-9][0-9]*))?")


def from_torch(source: Any, *, layout: Sequence[str] | None = None, dtype: str | None = None
               ) -> list[Layer] | Network | RecurrentNetwork:
    """dualtape's layers for one torch module's state dict, or the network of a whole model.

    A state dict (host arrays: numpy, or anything ``np.asarray`` takes: CPU tensors) gives a
    list: one ``StandardLSTM`` or ``GRU`` per layer of an ``nn.LSTM`` / ``nn.GRU`` (any
    ``num_layers``) or ``nn.LSTMCell`` / ``nn.GRUCell`` (the kind from the shapes:
    ``weight_ih`` has 4·hidden rows for an LSTM, 3·hidden for a GRU); ``[Embedding]`` for an
    ``nn.Embedding``'s (its one key, ``weight``); ``[FullyConnected]`` for an ``nn.Linear``'s
    (``weight`` and ``bias``).

    A model gives a ``RecurrentNetwork`` when it holds an LSTM or GRU, else a ``Network``: a
    ``torch.nn.Module`` (``nn.Sequential``, or a module whose children run in registration
    order: its leaves, in that order, each ``nn.Embedding``, ``nn.LSTM``, ``nn.GRU``,
    ``nn.Linear``, ``nn.Sigmoid`` (``Logit``), ``nn.Tanh``, ``nn.ReLU``, ``nn.ELU(alpha=1)``
    or ``nn.Softmax`` over the features; an LSTM's or GRU's outputs, not its states, go on),
    or a state dict with ``layout``: the model's modules in order, by kind (``"embedding"``,
    ``"lstm"``, ``"gru"``, ``"linear"``, ``"sigmoid"``, ``"tanh"``, ``"relu"``, ``"elu"``,
    ``"softmax"``), each kind with weights taking the next module's keys (a key's module is
    what comes before its last dot: ``lstm.weight_ih_l0``'s is ``lstm``).

    ``dtype`` (``"float32"``/``"float64"``) casts; by default float32 and float64 arrays keep
    their dtype and other floats become float32 (weights of both, without ``dtype``, raise
    ``ValueError``). Modules built with ``bias=False`` load with zero biases (an LSTM's or
    GRU's two both absent; one alone is refused). Bidirectional modules, LSTMs with
    ``proj_size``, ``batch_first=True``, dropout between layers, an Embedding with
    ``padding_idx``, ``max_norm`` or ``scale_grad_by_freq``, other modules and keys raise
    ``ValueError`` naming the module or key.
    """
    if layout is not None or is_module(source):
        if layout is not None and is_module(source):
            raise TypeError("from_torch: layout= goes with a state dict; a module gives its own")
        pieces = module_pieces(source) if layout is None else layout_pieces(source, layout)
        return _network(pieces, dtype)
    if not isinstance(source, Mapping):
        raise TypeError(f"from_torch: expected a state dict (a mapping of names to arrays) or "
                        f"a torch module, got a {type(source).__name__}")
    host = {key: _host(key, value) for key, value in source.items()}
    kind = ("embedding" if list(host) == ["weight"]
            else "linear" if set(host) == {"weight", "bias"} else "cells")
    return _module_layers(kind, host, _resolved(host.values(), dtype))


def to_torch(layers: Any, *, like: Any = None, layout: Sequence[str] | None = None
             ) -> dict[str, np.ndarray]:
    """A torch state dict (numpy arrays, copies) of ``layers``.

    Without ``like``: the ``torch.nn.LSTM`` or ``nn.GRU`` that ``layers`` (a stack of
    ``StandardLSTM`` or of ``GRU`` layers, or one layer) make, keyed ``weight_ih_l0`` ... in
    torch's order (build it with ``num_layers=len(layers)``, ``input_size=layers[0].n_in``,
    ``hidden_size=layers[0].n_out``); for an ``Embedding`` (or ``[Embedding]``) ``{"weight"}``
    of ``nn.Embedding(layer.vocab, layer.n)``; for a ``FullyConnected`` ``{"weight",
    "bias"}`` of ``nn.Linear(layer.n_in, layer.n_out)``.

    With ``like`` (a torch module, or a state dict with ``layout``, as ``from_torch`` takes):
    a network's (or a list of layers'), keyed as that model's state dict, for
    ``model.load_state_dict``; the layers must be what ``from_torch(like, layout=layout)``
    makes, in kind and shape (``ValueError`` naming the first that is not), and a bias the
    model does not have (``bias=False``) must be zero."""
    if like is not None:
        return _like(layers, like, layout)
    if layout is not None:
        raise TypeError("to_torch: layout= describes like=, which is missing")
    one = layers[0] if isinstance(layers, Sequence) and len(layers) == 1 else layers
    if type(one) is Embedding:
        return {"weight": to_numpy(one.params["weight"]).copy()}
    if type(one) is FullyConnected:
        return {"weight": to_numpy(one.params["W"]).copy(),
                "bias": to_numpy(one.params["b"]).copy()}
    if isinstance(layers, Chain):
        raise TypeError(f"to_torch: got a {type(layers).__name__}, whose keys are its torch "
                        "model's: pass like=the model (or its state dict with layout=)")
    layers = _layers("to_torch", [layers] if isinstance(layers, StandardLSTM | GRU) else layers)
    state = {}
    for k, layer in enumerate(layers):
        if type(layer) is not type(layers[0]) or layer.n_out != layers[0].n_out or (
                k and layer.n_in != layers[k - 1].n_out):
            raise ValueError(f"to_torch: layer {k} ({layer!r}) does not stack on layer 0 "
                             f"({layers[0]!r}) as one torch module's layers do")
        for name, value in layer.params.items():
            kind, side = name.split("_")
            state[f"{'weight' if kind == 'W' else 'bias'}_{side}_l{k}"] = to_numpy(value).copy()
    return state


def state_from_torch(layers: Sequence[Any], h: Any, c: Any = None) -> list[Array]:
    """Per-layer states for ``layers`` from torch's initial state: ``h`` (and, for an LSTM,
    ``c``) of shape ``(num_layers, batch, hidden)`` or ``(num_layers, hidden)``, host arrays."""
    layers = _layers("state_from_torch", layers)
    h = _host("h", h, "state_from_torch")
    if h.ndim not in (2, 3) or h.shape[0] != len(layers):
        raise ValueError(f"state_from_torch: h must be (num_layers={len(layers)}, batch, "
                         f"hidden) or (num_layers, hidden), got {h.shape}")
    lstm = all(isinstance(layer, StandardLSTM) for layer in layers)
    if lstm != (c is not None):
        raise ValueError("state_from_torch: an LSTM's state needs c as well as h; a GRU's "
                         "has h only")
    if lstm and (c := _host("c", c, "state_from_torch")).shape != h.shape:
        raise ValueError(f"state_from_torch: c must have h's shape {h.shape}, got {c.shape}")
    states = []
    for k, layer in enumerate(layers):
        host = np.concatenate([h[k], c[k]], axis=-1) if lstm else h[k]
        if host.shape[-1] != layer.state_size:
            raise ValueError(f"state_from_torch: layer {k} ({layer!r}) has {layer.n_out} "
                             f"units, the state {h.shape[-1]}")
        states.append(from_host(host.astype(layer.dtype), backend_of(layer._reference())))
    return states


def state_to_torch(layers: Sequence[Any], states: Sequence[Any]) -> tuple[np.ndarray, ...]:
    """``(h, c)`` for LSTM layers, ``(h,)`` for GRU layers: torch's ``(num_layers, batch,
    hidden)`` form of per-layer states, as numpy arrays."""
    layers, states = _layers("state_to_torch", layers), [to_numpy(s) for s in states]
    if len(states) != len(layers):
        raise ValueError(f"state_to_torch: {len(layers)} layers but {len(states)} states")
    if all(isinstance(layer, StandardLSTM) for layer in layers):
        n = layers[0].n_out
        return np.stack([s[..., :n] for s in states]), np.stack([s[..., n:] for s in states])
    return (np.stack(states),)


def _layers(owner: str, layers: Any) -> list[StandardLSTM | GRU]:
    """``layers`` as a list, or ``TypeError`` unless it holds ``StandardLSTM`` or ``GRU``
    layers (one or more)."""
    found = list(layers) if isinstance(layers, Iterable) else None
    if not found or any(type(layer) not in (StandardLSTM, GRU) for layer in found):
        name = type(layers).__name__
        got = (f"{'an' if name[0] in 'AEIOUaeiou' else 'a'} {name}" if found is None
               else str([type(layer).__name__ for layer in found]))
        also = ", an Embedding or a FullyConnected" if owner == "to_torch" else ""
        raise TypeError(f"{owner}: expected a list of StandardLSTM or GRU layers{also}, got "
                        f"{got}")
    return found


def _host(key: Any, value: Any, owner: str = "from_torch") -> np.ndarray:
    try:
        host = np.asarray(value)
    except (TypeError, RuntimeError, ValueError) as exc:
        raise TypeError(f"{owner}: {key} is not an array on the host ({exc}); pass "
                        "v.detach().cpu().numpy()") from None
    if not np.issubdtype(host.dtype, np.floating):
        raise TypeError(f"{owner}: {key} holds {host.dtype} numbers, not floating point")
    return host


def _kept_dtype(host: np.ndarray) -> str:
    """The dtype a host array keeps without ``dtype=``: float32 and float64 their own, other
    floats float32."""
    return host.dtype.name if host.dtype.name in ("float32", "float64") else "float32"


def _resolved(arrays: Iterable[np.ndarray], dtype: str | None) -> str:
    """The dtype the layers get: ``dtype`` checked, else the one the arrays keep (float32 for
    none); ``ValueError`` when they keep two."""
    if dtype is not None:
        return check_dtype("from_torch", dtype)
    kept = sorted({_kept_dtype(host) for host in arrays})
    if len(kept) > 1:
        raise ValueError(f"from_torch: the state dict mixes {' and '.join(kept)} weights; "
                         "pass dtype='float32' or 'float64' to cast them all")
    return kept[0] if kept else "float32"


def _module_layers(kind: str, host: dict[str, np.ndarray], dtype: str) -> list[Layer]:
    """The layers of one torch module of ``kind`` (a key of ``TORCH_NAMES``, or ``"cells"``:
    an LSTM's or GRU's, as the shapes say) from its host state dict."""
    if kind in ACTIVATIONS:
        return [ACTIVATIONS[kind]()]
    if kind == "embedding":
        if list(host) != ["weight"]:
            raise ValueError(f"from_torch: an nn.Embedding's state dict is its weight alone, "
                             f"got {list(host)}")
        return [_embedding(host["weight"], dtype)]
    if kind == "linear":
        return [_linear(host, dtype)]
    layers = _cells(host, dtype)
    if kind != "cells" and type(layers[0]) is not (StandardLSTM if kind == "lstm" else GRU):
        raise ValueError(f"from_torch: its weights are a {type(layers[0]).__name__}'s, not an "
                         f"nn.{TORCH_NAMES[kind]}'s")
    return layers


def _cells(host: dict[str, np.ndarray], dtype: str) -> list[Layer]:
    """One ``StandardLSTM`` or ``GRU`` per layer of an LSTM's or GRU's state dict."""
    layers: dict[int, dict[str, np.ndarray]] = {}
    forms: set[bool] = set()  # whether each key is a cell's (no _l index)
    for key, value in host.items():
        match = _KEY.fullmatch(str(key))
        if match is None:
            raise ValueError(f"from_torch: unexpected key {key!r}: the state dict of one "
                             "nn.LSTM or nn.GRU (weight_ih_l0, ...), nn.Embedding (weight) or "
                             "nn.Linear (weight, bias) loads, a whole model's with layout=; "
                             "bidirectional modules (_reverse) and LSTMs with proj_size "
                             "(weight_hr) have no dualtape layer")
        kind, side, index = match.groups()
        forms.add(index is None)
        name = f"{'W' if kind == 'weight' else 'b'}_{side}"
        arrays = layers.setdefault(int(index or 0), {})
        if name in arrays:
            raise ValueError(f"from_torch: {key!r} repeats a weight another key gave")
        arrays[name] = value
    if not layers:
        raise ValueError("from_torch: the state dict holds no weights")
    if len(forms) > 1:
        raise ValueError("from_torch: the state dict mixes a cell's keys (weight_ih) with a "
                         "module's (weight_ih_l0)")
    if sorted(layers) != list(range(len(layers))):
        raise ValueError(f"from_torch: the layers are numbered {sorted(layers)}; expected "
                         f"0 to {len(layers) - 1}")
    built = [_layer(k, layers[k], dtype) for k in range(len(layers))]
    for k in range(1, len(built)):
        if built[k].n_in != built[k - 1].n_out or type(built[k]) is not type(built[0]) \
                or built[k].n_out != built[0].n_out:
            raise ValueError(f"from_torch: layer {k} ({built[k]!r}) does not follow layer "
                             f"{k - 1} ({built[k - 1]!r})")
    return list(built)


def _layer(k: int, arrays: dict[str, np.ndarray], dtype: str) -> StandardLSTM | GRU:
    """Layer ``k`` from its ``W_ih``, ``W_hh`` (and biases) after checking their shapes."""
    if "W_ih" not in arrays or "W_hh" not in arrays:
        raise ValueError(f"from_torch: layer {k} lacks weight_ih or weight_hh")
    W_ih, W_hh = arrays["W_ih"], arrays["W_hh"]
    hidden = W_hh.shape[-1] if W_hh.ndim == 2 else 0
    rows = W_ih.shape[0] if W_ih.ndim == 2 else 0
    cell = CELLS.get(rows // hidden) if hidden and rows % hidden == 0 else None
    if cell is None or W_hh.shape != (rows, hidden):
        raise ValueError(f"from_torch: layer {k}'s weights {W_ih.shape} and {W_hh.shape} are "
                         "neither an LSTM's (4h, in), (4h, h) nor a GRU's (3h, in), (3h, h)")
    params = {"W_ih": W_ih, "W_hh": W_hh}
    if ("b_ih" in arrays) != ("b_hh" in arrays):
        raise ValueError(f"from_torch: layer {k} has only one of bias_ih and bias_hh; a torch "
                         "module has both, or neither (bias=False)")
    for bias in ("b_ih", "b_hh"):
        params[bias] = arrays.get(bias, np.zeros(rows))
        if params[bias].shape != (rows,):
            raise ValueError(f"from_torch: layer {k}'s {bias.replace('b', 'bias')} has shape "
                             f"{params[bias].shape}, expected ({rows},)")
    return _made(cell, (W_ih.shape[1], hidden), params, dtype)


def _linear(host: dict[str, np.ndarray], dtype: str) -> FullyConnected:
    """The ``FullyConnected`` of an ``nn.Linear``'s ``weight`` ``(out, in)`` and ``bias``
    (zeros when absent: ``bias=False``)."""
    if "weight" not in host or set(host) - {"weight", "bias"}:
        raise ValueError(f"from_torch: an nn.Linear's state dict is weight and bias (weight "
                         f"alone with bias=False), got {list(host)}")
    weight = host["weight"]
    if weight.ndim != 2 or 0 in weight.shape:
        raise ValueError(f"from_torch: an nn.Linear's weight is (out_features, in_features), "
                         f"got {weight.shape}")
    bias = host.get("bias", np.zeros(weight.shape[0]))
    if bias.shape != weight.shape[:1]:
        raise ValueError(f"from_torch: an nn.Linear's bias is (out_features,) = "
                         f"({weight.shape[0]},) for weight {weight.shape}, got {bias.shape}")
    return _made(FullyConnected, weight.shape[::-1], {"W": weight, "b": bias}, dtype)


def _embedding(weight: np.ndarray, dtype: str) -> Embedding:
    """The ``Embedding`` holding ``weight`` ``(vocab, n)``."""
    if weight.ndim != 2 or 0 in weight.shape:
        raise ValueError(f"from_torch: an nn.Embedding's weight is (vocab, n), got "
                         f"{weight.shape}")
    return _made(Embedding, weight.shape, {"weight": weight}, dtype)


def _made(cls: Any, sizes: tuple[int, ...], params: dict[str, np.ndarray], dtype: str) -> Any:
    """A ``cls(*sizes)`` holding copies of ``params`` in ``dtype`` on the current backend (no
    weights drawn, no memory held, to be thrown away)."""
    with use_backend("numpy"), placeholder_params():
        layer = cls(*sizes, dtype=dtype)
    layer.params = {key: from_host(np.array(v, dtype=dtype)) for key, v in params.items()}
    return layer


def _network(pieces: list[Piece], dtype: str | None) -> Network | RecurrentNetwork:
    """The network of a model's ``pieces``: recurrent when one is an LSTM or GRU."""
    recurrent = any(piece.kind in ("lstm", "gru") for piece in pieces)
    for piece in pieces:
        if piece.dim not in (None, -1, 2 if recurrent else 1):
            raise ValueError(f"from_torch: {described(piece.name)} (nn.Softmax(dim={piece.dim})) "
                             "normalises another axis than the features' (dim=-1)")
    layers = [layer for _, built in _piece_layers(pieces, dtype) for layer in built]
    try:
        return (RecurrentNetwork if recurrent else Network)(layers)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"from_torch: the modules do not chain: {exc}") from None


def _piece_layers(pieces: list[Piece], dtype: str | None) -> list[tuple[Piece, list[Layer]]]:
    """Each piece beside its layers, all in one dtype (``_resolved`` over all the weights);
    an error in a piece names its module."""
    hosts = [{key: _host(f"{piece.name}.{key}" if piece.name else key, value)
              for key, value in piece.state.items()} for piece in pieces]
    name = _resolved([array for host in hosts for array in host.values()], dtype)
    found = []
    for piece, host in zip(pieces, hosts, strict=True):
        try:
            found.append((piece, _module_layers(piece.kind, host, name)))
        except (TypeError, ValueError) as exc:
            raise _reworded(exc, f"from_torch: {described(piece.name)} "
                                 f"(nn.{TORCH_NAMES[piece.kind]}): ") from None
    return found


def _like(layers: Any, like: Any, layout: Sequence[str] | None) -> dict[str, np.ndarray]:
    """``to_torch(layers, like=like, layout=layout)``."""
    mine = layers.layers if isinstance(layers, Chain) else layers
    if not isinstance(mine, Sequence) or not all(isinstance(m, Layer) for m in mine):
        raise TypeError(f"to_torch: expected a network or a list of layers, got a "
                        f"{type(layers).__name__}")
    try:
        if layout is None and not is_module(like):
            raise TypeError(f"from_torch: expected the torch model, or its state dict with "
                            f"layout=, got a {type(like).__name__}")
        pieces = module_pieces(like) if layout is None else layout_pieces(like, layout)
        built = _piece_layers(pieces, "float64")  # only the kinds and shapes count
    except (TypeError, ValueError) as exc:
        raise _reworded(exc, "to_torch: like: ") from None
    theirs = [(piece, layer) for piece, layers_of in built for layer in layers_of]
    if len(mine) != len(theirs):
        raise ValueError(f"to_torch: {len(mine)} layers, but like's model maps to {len(theirs)}")
    for k, (our, (piece, their)) in enumerate(zip(mine, theirs, strict=True)):
        if type(our) is not type(their) or _shapes(our) != _shapes(their):
            where = f" ({described(piece.name)})" if piece.name else ""
            raise ValueError(f"to_torch: layer {k} ({our!r}) is not like's {their!r}{where}")
    state, k = {}, 0
    for piece, layers_of in built:
        if piece.state:
            state.update(_keyed(piece, list(mine[k:k + len(layers_of)])))
        k += len(layers_of)
    return state


def _keyed(piece: Piece, layers: list[Layer]) -> dict[str, np.ndarray]:
    """``to_torch(layers)`` keyed as ``piece``'s module in its model: its prefix, a cell's
    keys without ``_l0``, and only the keys it has (a bias it lacks must be zero)."""
    own = to_torch(layers)
    if "weight_ih" in piece.state:
        own = {key.removesuffix("_l0"): value for key, value in own.items()}
    for key in sorted(own.keys() - piece.state.keys()):
        if own[key].any():
            raise ValueError(f"to_torch: {layers[0]!r}'s {key} is not zero, but "
                             f"{described(piece.name)} in like has none (bias=False)")
    prefix = f"{piece.name}." if piece.name else ""
    return {prefix + key: own[key] for key in piece.state}


def _shapes(layer: Layer) -> dict[str, tuple[int, ...]]:
    return {name: tuple(value.shape) for name, value in layer.params.items()}


def _reworded(exc: Exception, head: str) -> Exception:
    """``exc`` again, its ``from_torch: `` replaced by ``head``."""
    return type(exc)(head + str(exc).removeprefix("from_torch: "))
