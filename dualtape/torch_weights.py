"""Weights across frameworks: ``torch.nn.LSTM`` / ``torch.nn.GRU`` state dicts to and from
dualtape's ``StandardLSTM`` / ``GRU`` layers, and ``torch.nn.Embedding``'s (its one
``weight``, ``(vocab, n)`` in both) to and from ``Embedding``, with no torch needed at run
time.

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

from .backend import backend_of, from_host, get_backend, to_numpy, use_backend
from .layers import GRU, Embedding, StandardLSTM
from .layers.base import Array
from .layers.edges import check_dtype
from .layers.initial import placeholder_params

CELLS: dict[int, type[StandardLSTM] | type[GRU]] = {4: StandardLSTM, 3: GRU}
"""The dualtape layer for a torch module, by its number of gates."""

_KEY = re.compile(r"(weight|bias)_(ih|hh)(?:_l(0|[1-9][0-9]*))?")


def from_torch(
    state_dict: Mapping[str, Any], *, dtype: str | None = None
) -> list[StandardLSTM | GRU] | list[Embedding]:
    """One ``StandardLSTM`` or ``GRU`` per layer of a ``torch.nn.LSTM`` / ``nn.GRU`` (any
    ``num_layers``) or ``nn.LSTMCell`` / ``nn.GRUCell`` state dict, on the current backend;
    ``[Embedding]`` for an ``nn.Embedding``'s (its one key, ``weight``, a 2-D array).

    Values are host arrays (numpy, or anything ``np.asarray`` takes: CPU tensors); the cell
    kind comes from the shapes (``weight_ih`` has 4·hidden rows for an LSTM, 3·hidden for a
    GRU). ``dtype`` (``"float32"``/``"float64"``) casts; by default float32 and float64
    arrays keep their dtype and other floats become float32 (weights of both, without
    ``dtype``, raise ``ValueError``: the layers would differ in dtype). A module built with
    ``bias=False`` loads with zero biases (both biases absent; one alone is refused).
    Bidirectional modules, LSTMs with ``proj_size``, ``nn.RNN``, cell keys (``weight_ih``)
    mixed with layer keys (``weight_ih_l1``), layers of different hidden sizes and keys of
    anything else raise ``ValueError``.
    """
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"from_torch: expected a state dict (a mapping of names to arrays), "
                        f"got a {type(state_dict).__name__}")
    if list(state_dict) == ["weight"]:
        return [_embedding(_host("weight", state_dict["weight"]), dtype)]
    layers: dict[int, dict[str, np.ndarray]] = {}
    forms: set[bool] = set()  # whether each key is a cell's (no _l index)
    for key, value in state_dict.items():
        match = _KEY.fullmatch(str(key))
        if match is None:
            raise ValueError(f"from_torch: unexpected key {key!r}: only nn.LSTM and nn.GRU "
                             "weights (weight_ih_l0, ...) load; bidirectional modules "
                             "(_reverse) and LSTMs with proj_size (weight_hr) have no "
                             "dualtape layer")
        kind, side, index = match.groups()
        forms.add(index is None)
        name, arrays = f"{'W' if kind == 'weight' else 'b'}_{side}", layers.setdefault(
            int(index or 0), {})
        if name in arrays:
            raise ValueError(f"from_torch: {key!r} repeats a weight another key gave")
        arrays[name] = _host(key, value)
    if not layers:
        raise ValueError("from_torch: the state dict holds no weights")
    if len(forms) > 1:
        raise ValueError("from_torch: the state dict mixes a cell's keys (weight_ih) with a "
                         "module's (weight_ih_l0)")
    if sorted(layers) != list(range(len(layers))):
        raise ValueError(f"from_torch: the layers are numbered {sorted(layers)}; expected "
                         f"0 to {len(layers) - 1}")
    kept = sorted({_kept_dtype(a) for arrays in layers.values() for a in arrays.values()})
    if dtype is None and len(kept) > 1:
        raise ValueError(f"from_torch: the state dict mixes {' and '.join(kept)} weights; "
                         "pass dtype='float32' or 'float64' to cast them all")
    built = [_layer(k, layers[k], dtype) for k in range(len(layers))]
    for k in range(1, len(built)):
        if built[k].n_in != built[k - 1].n_out or type(built[k]) is not type(built[0]) \
                or built[k].n_out != built[0].n_out:
            raise ValueError(f"from_torch: layer {k} ({built[k]!r}) does not follow layer "
                             f"{k - 1} ({built[k - 1]!r})")
    return built


def to_torch(layers: Sequence[Any]) -> dict[str, np.ndarray]:
    """The state dict of the ``torch.nn.LSTM`` or ``nn.GRU`` that ``layers`` (a stack of
    ``StandardLSTM`` or of ``GRU`` layers, or one layer) make, as numpy arrays keyed
    ``weight_ih_l0`` ... in torch's order: build the module with ``num_layers=len(layers)``,
    ``input_size=layers[0].n_in``, ``hidden_size=layers[0].n_out``. For an ``Embedding`` (or
    ``[Embedding]``), ``{"weight": ...}`` of ``nn.Embedding(layer.vocab, layer.n)``."""
    if isinstance(layers, Embedding) or (
            isinstance(layers, Sequence) and len(layers) == 1 and isinstance(layers[0], Embedding)):
        layer = layers if isinstance(layers, Embedding) else layers[0]
        return {"weight": to_numpy(layer.params["weight"]).copy()}
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
        raise TypeError(f"{owner}: expected a list of StandardLSTM or GRU layers, got {got}")
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


def _layer(k: int, arrays: dict[str, np.ndarray], dtype: str | None) -> StandardLSTM | GRU:
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
    if dtype is not None:
        name = check_dtype("from_torch", dtype)
    else:
        name = _kept_dtype(W_ih)
    params = {"W_ih": W_ih, "W_hh": W_hh}
    if ("b_ih" in arrays) != ("b_hh" in arrays):
        raise ValueError(f"from_torch: layer {k} has only one of bias_ih and bias_hh; a torch "
                         "module has both, or neither (bias=False)")
    for bias in ("b_ih", "b_hh"):
        params[bias] = arrays.get(bias, np.zeros(rows))
        if params[bias].shape != (rows,):
            raise ValueError(f"from_torch: layer {k}'s {bias.replace('b', 'bias')} has shape "
                             f"{params[bias].shape}, expected ({rows},)")
    layer = cell(W_ih.shape[1], hidden, seed=0, dtype=name)
    backend = get_backend()
    layer.params = {key: from_host(np.array(v, dtype=name), backend)
                    for key, v in params.items()}
    return layer


def _embedding(weight: np.ndarray, dtype: str | None) -> Embedding:
    """The ``Embedding`` holding ``weight`` ``(vocab, n)``, in ``dtype`` (None: its own, as
    ``_kept_dtype`` says)."""
    if weight.ndim != 2 or 0 in weight.shape:
        raise ValueError(f"from_torch: an nn.Embedding's weight is (vocab, n), got "
                         f"{weight.shape}")
    name = _kept_dtype(weight) if dtype is None else check_dtype("from_torch", dtype)
    backend = get_backend()
    with use_backend("numpy"), placeholder_params():  # no weights drawn, no memory held
        layer = Embedding(*weight.shape, dtype=name)
    layer.params = {"weight": from_host(np.array(weight, dtype=name), backend)}
    return layer
