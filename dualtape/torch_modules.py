"""A torch model read as the modules dualtape maps, without importing torch: a module's leaves
in registration order, each checked for what maps exactly, or a state dict cut into the
modules a layout names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

TORCH_NAMES = {"embedding": "Embedding", "lstm": "LSTM", "gru": "GRU", "linear": "Linear",
               "sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "ReLU", "elu": "ELU",
               "softmax": "Softmax"}
"""The kinds that map, by the lowercase names a layout uses, and their ``torch.nn`` classes."""
WEIGHTED = ("embedding", "lstm", "gru", "linear")
"""The kinds with weights: each takes one module's keys of a state dict."""
SUPPORTED = ("nn.Embedding, nn.LSTM, nn.GRU, nn.Linear, nn.Sigmoid, nn.Tanh, nn.ReLU, "
             "nn.ELU(alpha=1), nn.Softmax(dim=-1)")


class Piece(NamedTuple):
    """One torch module: its ``kind`` (a key of ``TORCH_NAMES``), its dotted ``name`` in the
    model (its keys' prefix; ``""`` for the model itself), its own ``state`` (keys without the
    prefix; values as given) and, for a softmax, the ``dim`` it normalises (else None)."""

    kind: str
    name: str
    state: dict[str, Any]
    dim: int | None = None


def is_module(value: Any) -> bool:
    """Whether ``value`` is a ``torch.nn.Module`` (told by its classes' names: torch is not
    imported)."""
    return any(c.__name__ == "Module" and c.__module__ == "torch.nn.modules.module"
               for c in type(value).__mro__)


def module_pieces(model: Any) -> list[Piece]:
    """``model``'s leaf modules in registration order (the order its forward is taken to run
    them in), or ``model`` itself when it is a leaf; ``ValueError`` for a module that does not
    map exactly, a container holding weights of its own, or no modules at all."""
    pieces = []
    for name, module in model.named_modules():
        if next(module.children(), None) is not None:
            own = [n for n, _ in (*module.named_parameters(recurse=False),
                                  *module.named_buffers(recurse=False))]
            if own:
                raise ValueError(f"from_torch: {described(name)} ({type(module).__name__}) "
                                 f"holds weights of its own ({', '.join(own)}), which no "
                                 "dualtape layer takes")
            continue
        kind = _kind(name, module)
        pieces.append(Piece(kind, name, {k: v.detach().cpu() for k, v in
                                         module.state_dict().items()},
                            module.dim if kind == "softmax" else None))
    return pieces


def layout_pieces(state_dict: Any, layout: Any) -> list[Piece]:
    """The modules ``layout`` (kinds, in order) names, each weighted one taking the next
    module's keys of ``state_dict`` (a key's module is what comes before its last dot)."""
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"from_torch: layout= goes with a state dict, got a "
                        f"{type(state_dict).__name__}")
    if isinstance(layout, str) or not isinstance(layout, Sequence) or not layout:
        raise TypeError(f"from_torch: layout must be a list of module kinds "
                        f"({', '.join(TORCH_NAMES)}), got {layout!r}")
    for k, kind in enumerate(layout):
        if kind not in TORCH_NAMES:
            raise ValueError(f"from_torch: layout[{k}] is {kind!r}; the kinds are "
                             f"{', '.join(TORCH_NAMES)}")
    groups: dict[str, dict[str, Any]] = {}
    for key, value in state_dict.items():
        prefix, _, own = str(key).rpartition(".")
        groups.setdefault(prefix, {})[own] = value
    weighted = [kind for kind in layout if kind in WEIGHTED]
    if len(weighted) != len(groups):
        raise ValueError(f"from_torch: layout names {len(weighted)} modules with weights "
                         f"({', '.join(weighted)}) but the state dict holds {len(groups)} "
                         f"({', '.join(map(repr, groups))})")
    names = iter(groups)
    return [Piece(kind, name := next(names), groups[name]) if kind in WEIGHTED
            else Piece(kind, "", {}, -1) if kind == "softmax" else Piece(kind, "", {})
            for kind in layout]


def described(name: str) -> str:
    """A module's words in a message: ``module 'lstm'``, or ``the model`` for the model."""
    return f"module {name!r}" if name else "the model"


def _kind(name: str, module: Any) -> str:
    """The kind of a leaf ``module``, or ``ValueError`` unless it maps exactly."""
    cls = type(module)
    found = [kind for kind, torch_name in TORCH_NAMES.items() if torch_name == cls.__name__]
    if not found or not cls.__module__.startswith("torch.nn.modules."):
        raise ValueError(f"from_torch: {described(name)} is a {cls.__name__}, which has no "
                         f"dualtape layer; supported: {SUPPORTED}, in nn.Sequential or modules "
                         "whose children run in registration order")
    kind, refused = found[0], _refused(module, found[0])
    if refused:
        raise ValueError(f"from_torch: {described(name)} (nn.{cls.__name__}) has "
                         f"{refused}")
    return kind


def _refused(module: Any, kind: str) -> str:
    """What of ``module``'s settings dualtape's layer does not compute (empty when none)."""
    alone = "; its weights alone load from its state_dict() with layout="
    if kind in ("lstm", "gru"):
        if module.batch_first:
            return f"batch_first=True: dualtape's sequences are (time, batch, features){alone}"
        if module.bidirectional or getattr(module, "proj_size", 0):
            return (f"bidirectional={module.bidirectional}, proj_size={module.proj_size}: "
                    "dualtape's cells run one way, without a projection")
        if module.dropout and module.num_layers > 1:
            return f"dropout={module.dropout!r} between its layers{alone}"
    if kind == "embedding":
        for setting in ("padding_idx", "max_norm"):
            if getattr(module, setting) is not None:
                return f"{setting}={getattr(module, setting)!r}{alone}"
        if module.scale_grad_by_freq:
            return f"scale_grad_by_freq=True{alone}"
    if kind == "elu" and module.alpha != 1.0:
        return f"alpha={module.alpha!r}: dualtape's Elu has alpha=1"
    if kind == "softmax" and module.dim is None:
        return "dim=None (torch picks the axis by the input's rank); build it with dim=-1"
    return ""
