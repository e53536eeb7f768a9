"""The main job as a benchmark: one training step of ``dualtape train-text``'s default model.

``text/char-model-80x80-batch-32`` is one step of ``TextTrainer.step`` (the code train-text
runs) on the built-in corpus: one-hot 57 symbols -> LSTM 80 -> LSTM 80 -> FullyConnected 57,
softmax cross entropy on the logits summed over time and batch and divided by
``batch · seq_len`` (nats per character), Adam 0.01, no clipping, windows of 50 x batch 32.

Every row starts from the same data: ``host_data`` holds the parameters train-text would draw
from ``SEED`` (``build_text_network``, dualtape's layout: per LSTM ``W`` (4o, i), ``U`` (3o, o),
``b`` (4o,) with blocks f, i, o, c; for the top ``W`` (V, o), ``b`` (V,)), the corpus as symbol
ids, and the seed the trainer's window generator is drawn from, so ``windows(data)`` gives
every reference the windows TextTrainer draws, step by step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend import Backend, from_host, use_backend

ADAM_RATE = 0.01


def config(workload: Any, dtype: str, seed: int) -> Any:
    """The ``TrainConfig`` of ``workload``: ``layers`` LSTMs of ``size``, windows of
    ``steps`` x ``batch``, Adam 0.01 without clipping, in ``dtype``."""
    from ..text.config import TrainConfig

    return TrainConfig(hidden=[workload.size] * workload.layers, seq_len=workload.steps,
                       batch=workload.batch, optimizer="adam", rate=ADAM_RATE, clip=0.0,
                       dtype=dtype, seed=seed)


def host_data(workload: Any, dtype: str, seed: int) -> dict[str, Any]:
    """``make_data`` of the built-in corpus for ``workload``; ``ValueError`` when the corpus no
    longer has ``workload.n_in`` symbols (the workload's name and rows assume that
    vocabulary)."""
    from ..text.model import MAX_CORPUS_MB, read_corpus

    cfg = config(workload, dtype, seed)
    data = make_data(read_corpus(None, cfg.encoding, MAX_CORPUS_MB), cfg)
    if len(data["vocab"]) != workload.n_in:
        raise ValueError(f"{workload.key}: the built-in corpus has {len(data['vocab'])} "
                         f"symbols, not {workload.n_in}")
    return data


def make_data(text: str, cfg: Any) -> dict[str, Any]:
    """What train-text starts from for ``text`` and the ``TrainConfig`` ``cfg``: the config,
    the vocabulary, the symbol ids and the network's parameters (host arrays)."""
    from ..text.model import Vocabulary, build_text_network

    vocab = Vocabulary.build(text, cfg.vocab, cfg.annotate_capitals)
    with use_backend("numpy"):
        net = build_text_network(len(vocab), cfg.hidden, seed=cfg.seed, dtype=cfg.dtype)
    params = [dict(group) for group in net.params if group]
    return {"config": cfg, "vocab": vocab, "ids": vocab.encode(text), "params": params}


def windows(data: dict[str, Any]) -> Callable[[], np.ndarray]:
    """A source of ``(seq_len + 1, batch)`` symbol ids, one call per step: the windows
    ``TextTrainer`` draws for ``data["config"]``, in the same order."""
    from ..text.model import random_windows

    cfg = data["config"]
    rng = np.random.default_rng([cfg.seed, 1])
    return lambda: random_windows(data["ids"], cfg.seq_len, cfg.batch, rng)


def trainer(backend: Backend, data: dict[str, Any]) -> Any:
    """A ``TextTrainer`` on ``backend`` starting from ``data``'s parameters, config and ids."""
    from ..text.config import make_optimizer
    from ..text.model import build_text_network
    from ..text.trainer import TextTrainer

    cfg, vocab = data["config"], data["vocab"]
    with use_backend(backend.name, backend.device):
        net = build_text_network(len(vocab), cfg.hidden, dtype=cfg.dtype)
        for layer, params in zip((lay for lay in net.layers if lay.params), data["params"],
                                 strict=True):
            layer.params = {k: from_host(np.array(v), backend) for k, v in params.items()}
    return TextTrainer(net, vocab, cfg, make_optimizer(cfg), data["ids"])


def prepare(backend: Backend, data: dict[str, Any]) -> Callable[[], None]:
    """One training step of train-text's own code (``TextTrainer.step``) per call."""
    return trainer(backend, data).step
