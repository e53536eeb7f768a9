"""Training a character model: the step, its random state and saving checkpoints.

The loss is the mean cross entropy per character in nats (summed over a window as
``losses.py`` does, then divided by ``seq_len``), so ``--rate`` means the same for any window
length. The network ends in Softmax (for sampling and saving), but a step runs the layers
before it and takes ``softmax_cross_entropy`` of their output: the same function and gradient
(``y − t``) as Softmax followed by the "cross_entropy" loss, computed stably. Grenade's LSTM has
no tanh on the cell, so outputs grow; with the probability form, float32 probabilities of the
right character underflowed to 0 (a logit spread of 140 at step 253, seed 0, SGD 0.5), the loss
became infinite and the weights NaN.

Each step draws ``batch`` random windows on the host (with ``stateful``, the next window of
each of ``batch`` streams read in order, begun from the state the stream's previous window
ended in: ``streams.py``) and sends their symbol ids to the device. The inputs go in as ids
(the first recurrent layer takes them in place of their one-hot rows: its input projection a
gather, its input weights' gradient a sum by id, 0.12 against 1.34 ms for the two one-hot
products on the main job: ``docs/benchmarks.md``), and the next characters' ids are the loss's
class labels (no one-hot targets; on numpy the compiled softmax cross entropy at labels,
``kernels.numba_softmax_cross_entropy``). ``dualtape.backpropagate_sequence`` gives the loss
and gradients (its loss a callable, the cross entropy per character): the loss stays on the
device, summed, and is read back only by ``read_loss`` (every ``--log-every`` steps), where NaN
is caught. The range checks of the ids and of the labels read one value each back from the
device each step (nothing on numpy). The global gradient norm is clipped to ``clip`` on the
device (``dualtape.clip_gradients``; the first steps' norm is ~11; without clipping SGD
diverged), in place, so the optimizer is given the same arrays every step and keeps its step.

Random state: parameters come from ``seed``; the window and sample generators are
``default_rng([seed, 1])`` and ``default_rng([seed, 2])``; each Dropout layer (``--dropout``)
draws its masks from its own generator, seeded as ``model.layer_seeds`` says. A checkpoint
stores every generator's state, so a resumed run draws the windows and masks it would have
drawn without the stop (a step that raises puts the window generator back as it was).
Dropout is on in training steps only: the loss a save point checks (``spread_loss``) and the
samples are computed with it off (``model.evaluating``), drawing no masks.

Held out (``valid``, a fraction): the corpus's last symbols, never in a training window, are
scored as streams from the initial state through the tapeless forward (``held_out_loss``),
the same symbols every time; checkpoints keep the last and best scores, and the split, fixed
by the fraction, is the same on resume.

Saving: every save point checks first that the parameters and the optimizer state are finite;
a diverged model is never written (``DivergedError``), so the last checkpoint stays. A
checkpoint is read back, every field of its training state checked, by ``checkpoint.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import secrets
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..backend import (
    Backend,
    device_context,
    from_host,
    to_numpy,
    use_backend,
)
from ..io import save
from ..layers.base import Array
from ..losses import softmax_cross_entropy
from ..optim import Optimizer
from ..recurrent import RecurrentNetwork
from ..route_choice import route
from ..routes import Route
from ..switches import held
from ..training import backpropagate_sequence, clip_gradients, mean_over_processes
from .config import TrainConfig, make_optimizer
from .memory import check_memory
from .model import (
    TextError,
    Vocabulary,
    build_text_network,
    dropout_layers,
    evaluating,
    layer_seeds,
    random_windows,
    sample,
    windows_at,
)
from .split import check_length, split_held_out
from .streams import StreamPosition, advance, check_streams, layout, stream_starts

TEXT_FORMAT = 1
"""Version of the train-text checkpoint contents (on top of ``io``'s file format)."""
DIVERGED_FACTOR = 100
"""A network whose loss per character exceeds this many times ``ln V`` (a uniform guess over
``V`` symbols costs ``ln V``) has diverged, though its weights may still be finite: one step at
``--rate 1e30`` leaves weights near 1e27 and a loss near 1e28, while a new model starts near
``ln V`` and clipped training stays within a few times that."""
GENERATORS = ("windows", "samples")
"""The random generators a checkpoint stores (``extra["rng"]``), besides ``"dropout"``: a
list of the Dropout layers' generator states, there when the network has Dropout layers."""
DROPOUT = "dropout"
STREAM_STATE = "stream_state/"
"""The ``extra`` names under which a stateful run's carried states are stored, one per
recurrent layer (``stream_state/0``, ...); ``extra["streams"]`` holds their position."""



class DivergedError(FloatingPointError):
    """Training diverged: the loss, a parameter or the optimizer state is NaN or infinite. Every
    rank of a distributed run raises it at the same step (the loss is read as a mean over the
    ranks; the parameters are the same on every rank)."""


HELD_OUT_CHARS = 2**17
"""The most held-out symbols a held-out loss reads: the held-out part's first ones (the rest
is still never trained on)."""
HELD_OUT_STREAM = 2_000
"""Symbols per held-out stream, at least: the held-out text is read as up to ``batch``
streams, each from the initial state, so a model is scored with the context it has when it
writes (as ``sample`` does), not only a window's."""
HELD_OUT_CHUNK = 256
"""Steps per forward pass of the held-out loss."""


def _generator(state: Any) -> np.random.Generator:
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = state
    return rng


class TextTrainer:
    """A text model being trained: network, vocabulary, optimizer, corpus ids, step count and
    the window and sample generators."""

    def __init__(
        self,
        net: Any,
        vocab: Vocabulary,
        config: TrainConfig,
        optimizer: Optimizer,
        ids: np.ndarray,
        *,
        step: int = 0,
        rngs: dict[str, Any] | None = None,
        streams: tuple[dict[str, int], list[np.ndarray]] | None = None,
        held_out: dict[str, list] | None = None,
    ) -> None:
        self.net, self.vocab, self.config, self.optimizer = net, vocab, config, optimizer
        self._rated = optimizer  # what DataParallel may wrap as self.optimizer later
        self.ids, self.held_ids = split_held_out(ids, config.valid, config.seq_len)
        """The symbols trained on, and the held-out ones after them (None: none)."""
        self.held_out: dict[str, list] = dict(held_out or {})
        """The held-out losses seen: ``"last"`` and ``"best"``, each ``[step, nats]``."""
        self.step_count = step
        self.backend: Backend = net.backend
        self._logits = RecurrentNetwork(net.layers[:-1])  # shares the layers, without Softmax
        self.xp = self.backend.xp
        dropouts = dropout_layers(net)
        if rngs is None:
            self.window_rng = np.random.default_rng([config.seed, 1])
            self.sample_rng = np.random.default_rng([config.seed, 2])
            seeds = layer_seeds(config.seed, len(config.hidden))[2]
            generators = [np.random.default_rng(seed) for seed in seeds[:len(dropouts)]]
        else:
            self.window_rng, self.sample_rng = _generator(rngs["windows"]), _generator(
                rngs["samples"])
            generators = [_generator(state) for state in rngs.get(DROPOUT, [])]
        if len(generators) != len(dropouts):
            raise TextError(f"{len(generators)} dropout generator states for the network's "
                            f"{len(dropouts)} Dropout layers")
        self.dropout_rngs = generators
        self.stream_first, self.stream_count = 0, config.batch
        self.position = StreamPosition()
        """Where the next stateful step reads (``streams``); unused on random windows."""
        self.carried: list[Array] | None = None
        """The states the last stateful step ended in (None: the initial state)."""
        self._stored_streams = streams
        if config.stateful:
            self.share_streams(0, config.batch)
        self._loss_sum: Array | None = None
        self._loss_count = 0
        self.saved: tuple[str, int] | None = None
        """The last checkpoint written: ``(path, step)``."""

    @property
    def dropout_rngs(self) -> list[np.random.Generator]:
        """The generators the Dropout layers draw their masks from, in order (setting it
        gives each layer its generator)."""
        return [layer.rng for layer in dropout_layers(self.net)]

    @dropout_rngs.setter
    def dropout_rngs(self, generators: list[np.random.Generator]) -> None:
        for layer, rng in zip(dropout_layers(self.net), generators, strict=True):
            layer.rng = rng

    def share_streams(self, first: int, count: int) -> None:
        """Before the first step of a stateful run: read streams ``first .. first + batch -
        1`` of ``count`` (a distributed run's rank r reads from ``r · batch`` of ``ranks ·
        batch``), continuing the checkpoint's streams where they fit."""
        check_streams(len(self.ids), self.config.seq_len, count)
        self.stream_first, self.stream_count = first, count
        self.position, self.carried = StreamPosition(), None
        if self._stored_streams is not None:
            self._continue_streams(*self._stored_streams)

    def _continue_streams(self, where: dict[str, int], states: list[np.ndarray]) -> None:
        """Continue the streams a checkpoint stopped at (``where``: its ``extra["streams"]``,
        ``states``: the carried states it stored, if any). Streams laid out for another
        batch, window length or text begin that epoch again, from the initial state."""
        cfg = self.config
        position = StreamPosition(where["epoch"], where["window"])
        fits = (where["count"] == self.stream_count and where["seq_len"] == cfg.seq_len
                and position.window < layout(len(self.ids), cfg.seq_len, self.stream_count,
                                             position.epoch).windows)
        self.position = position if fits else StreamPosition(position.epoch)
        if not (fits and states):
            return
        zeros = self._logits.initial_state(cfg.batch)
        if len(states) != len(zeros) or any(
                s.shape != tuple(z.shape) or s.dtype != cfg.dtype or not np.isfinite(s).all()
                for s, z in zip(states, zeros, strict=False)):
            raise TextError(f"the checkpoint's carried states ({len(states)}) do not fit the "
                            f"network's {len(zeros)} recurrent layers at batch {cfg.batch}, or "
                            "hold NaN; the file was edited or damaged")
        self.carried = [from_host(s, self.backend) for s in states]

    def stream_extra(self) -> dict[str, Any]:
        """A stateful run's position and carried states, as a checkpoint's ``extra`` holds
        them; the states only when this process reads every stream (a distributed run's
        ranks each carry their own, and a resumed one begins them from the initial state)."""
        if not self.config.stateful:
            return {}
        extra: dict[str, Any] = {"streams": {**self.position._asdict(),
                                             "count": self.stream_count,
                                             "seq_len": self.config.seq_len}}
        if self.carried is not None and self.stream_count == self.config.batch:
            for k, state in enumerate(self.carried):
                extra[f"{STREAM_STATE}{k}"] = to_numpy(state)
        return extra

    def rng_states(self) -> dict[str, Any]:
        """Every generator's state, as a checkpoint's ``extra["rng"]`` holds them."""
        states: dict[str, Any] = {"windows": self.window_rng.bit_generator.state,
                                  "samples": self.sample_rng.bit_generator.state}
        if self.dropout_rngs:
            states[DROPOUT] = [rng.bit_generator.state for rng in self.dropout_rngs]
        return states

    @classmethod
    def new(cls, text: str, config: TrainConfig, backend: Backend) -> TextTrainer:
        """A fresh model for ``text`` on ``backend``, initialised from ``config.seed``."""
        vocab = Vocabulary.build(text, config.vocab, config.annotate_capitals)
        ids = check_length(vocab.encode(text), config.seq_len)
        check_memory(config, len(vocab), backend)
        with use_backend(backend.name, backend.device):
            net = build_text_network(len(vocab), config.hidden, seed=config.seed,
                                     dtype=config.dtype, cell=config.cell,
                                     dropout=config.dropout)
        return cls(net, vocab, config, make_optimizer(config), ids)

    @property
    def rate(self) -> float:
        """The learning rate of the last step (``--schedule``'s; ``--rate`` before the
        first)."""
        return self._rated.rate

    @property
    def chars_per_step(self) -> int:
        """Characters (predicted symbols) per training step: ``seq_len · batch``."""
        return self.config.seq_len * self.config.batch

    def step(self) -> None:
        """One update on a batch of random windows; the loss stays on the device."""
        drawn_from = self.window_rng.bit_generator.state
        try:
            ends = self._step()
        except BaseException:
            self.window_rng.bit_generator.state = drawn_from  # as if the step never began
            raise
        cfg = self.config
        if cfg.stateful:
            self.position = advance(len(self.ids), cfg.seq_len, self.stream_count, self.position)
            self.carried = None if self.position.window == 0 else [
                self.xp.asarray(s, copy=True) for s in ends]  # not views of the tape
        self._loss_count += 1
        self.step_count += 1

    def _windows(self) -> tuple[np.ndarray, list[Array] | None]:
        """The step's windows of symbol ids and the states they begin from (None: zeros)."""
        cfg = self.config
        if not cfg.stateful:
            return random_windows(self.ids, cfg.seq_len, cfg.batch, self.window_rng), None
        starts = stream_starts(len(self.ids), cfg.seq_len, self.stream_count,
                               self.stream_first, cfg.batch, self.position)
        return windows_at(self.ids, starts, cfg.seq_len), self.carried

    @held
    def _step(self) -> list[Array]:
        """One update (the switches read once for all of it: ``switches.held``); returns the
        states the windows ended in."""
        window, states = self._windows()
        with device_context(self.backend):
            ids = from_host(window, self.backend)
            found = backpropagate_sequence(self._logits, ids[:-1, ...],
                                           ids[1:, ...], state=states,
                                           loss=self._window_loss)
            grads = found.grads
            if self.config.clip > 0:
                grads, _ = clip_gradients(grads, self.config.clip, in_place=True)
            self.optimizer.step(self._logits.params, grads)
            total = self._loss_sum
            self._loss_sum = found.loss if total is None else total + found.loss
        return found.state

    def route(self) -> Route:
        """The route a step's ``backpropagate_sequence`` takes now (``dualtape.route``: no
        window drawn, nothing moved), for the header and ``dualtape info``."""
        cfg = self.config
        ids = from_host(np.zeros((cfg.seq_len, cfg.batch), np.int64), self.backend)
        return route(self._logits, ids, ids, verb="backpropagate_sequence",
                     state=self.carried, loss=self._window_loss)

    def _window_loss(self, xp: Any, ys: Array, targets: Array) -> tuple[Array, Array]:
        """``softmax_cross_entropy`` per character: divided by ``seq_len``."""
        value, dys = softmax_cross_entropy(xp, ys, targets)
        scale = 1.0 / self.config.seq_len
        return value * scale, dys * scale

    def read_loss(self) -> float | None:
        """The mean loss (nats/char) of the steps since the last read, read from the device;
        None if there were none. A NaN or infinite loss raises ``DivergedError``."""
        if self._loss_sum is None:
            return None
        value = float(to_numpy(self._loss_sum)) / self._loss_count
        value = mean_over_processes(self.optimizer, [value])[0]  # over all ranks: all raise or none
        self._loss_sum, self._loss_count = None, 0
        if not math.isfinite(value):
            raise self._diverged(f"the loss is {value} near step {self.step_count}")
        return value

    def held_out_loss(self) -> float | None:
        """The loss per character (nats) of the network as it is now on the held-out text
        (None when there is none), recorded in ``held_out``: its first ``HELD_OUT_CHARS``
        symbols read as up to ``batch`` streams of at least ``HELD_OUT_STREAM`` from the
        initial state, without a tape, dropout off; the same symbols every time."""
        if self.held_ids is None:
            return None
        held = self.held_ids[:HELD_OUT_CHARS + 1]
        streams = max(1, min(self.config.batch, (len(held) - 1) // HELD_OUT_STREAM))
        span = (len(held) - 1) // streams
        window = windows_at(held, np.arange(streams, dtype=np.int64) * span, span)
        window = from_host(window, self.backend)  # one transfer, sliced on the device
        core, states, total = self._logits, None, 0.0
        with device_context(self.backend), evaluating(core):
            for start in range(0, span, HELD_OUT_CHUNK):
                stop = min(start + HELD_OUT_CHUNK, span) + 1  # the standard leaves stops past
                ids = window[start:stop, ...]  # the end open
                states, ys = core.predict_sequence(states, ids[:-1, ...])
                total = total + softmax_cross_entropy(self.xp, ys, ids[1:, ...])[0]
        nats = float(to_numpy(total)) / span
        self.held_out["last"] = [self.step_count, nats]
        if nats < self.held_out.get("best", [0, math.inf])[1]:  # NaN is never best
            self.held_out["best"] = [self.step_count, nats]
        return nats

    def _diverged(self, what: str) -> DivergedError:
        return DivergedError(f"training diverged: {what}; lower --rate (now "
                             f"{self.config.rate:g}) or --clip (now {self.config.clip:g})")

    def check_finite(self, state: dict[str, np.ndarray] | None = None) -> None:
        """``DivergedError`` unless every parameter and every array of the optimizer's state
        (``state``: its ``state_dict()``, taken when not given) is finite, and the network's
        loss on ``batch`` windows spread evenly through the corpus is at most
        ``DIVERGED_FACTOR · ln V``: one step can leave weights that are finite but so large
        that the network is useless (``--rate 1e30``). Every rank of a distributed run holds
        the same parameters and corpus, so every rank decides alike without communicating."""
        xp = self.xp
        with device_context(self.backend):
            finite = all(bool(xp.all(xp.isfinite(p))) for group in self.net.params
                         for p in group.values())
        what = "the parameters hold NaN or infinity"
        if finite:
            state = self.optimizer.state_dict() if state is None else state
            finite = all(np.isfinite(v).all() for v in state.values() if v.dtype.kind == "f")
            what = "the optimizer state holds NaN or infinity"
        if finite:
            loss, bound = self.spread_loss(), DIVERGED_FACTOR * math.log(len(self.vocab))
            finite = loss <= bound  # False for NaN too
            what = (f"the network's loss is {loss:.3g} nats per character (more than "
                    f"{DIVERGED_FACTOR} x ln {len(self.vocab)} = {bound:.0f}, a hundred uniform "
                    "guesses)")
        if not finite:
            raise self._diverged(f"{what} at step {self.step_count}")

    def spread_loss(self) -> float:
        """The loss per character of the network as it is now (a forward pass only) on
        ``batch`` windows whose starts are spread evenly through the corpus, with dropout off."""
        cfg, xp, core = self.config, self.xp, self._logits
        starts = np.linspace(0, len(self.ids) - cfg.seq_len - 1, cfg.batch).astype(np.int64)
        window = windows_at(self.ids, starts, cfg.seq_len)
        with device_context(self.backend), evaluating(core):
            ids = from_host(window, self.backend)
            _, ys = core.predict_sequence(None, ids[:-1, ...], chunk=cfg.seq_len)
            value, _ = softmax_cross_entropy(xp, ys, ids[1:, ...])
            return float(to_numpy(value)) / cfg.seq_len

    def sample(self, chars: int, temperature: float, prime: str = "") -> str:
        """Text from the current network, drawn with the trainer's sample generator (with
        dropout off)."""
        return sample(self.net, self.vocab, chars, temperature=temperature,
                      rng=self.sample_rng, prime=prime)

    def save(self, path: str | Path, *, replace: bool = True) -> None:
        """Write a checkpoint: network, vocabulary, config, step, optimizer and RNG state
        (``replace`` as in ``dualtape.save``). A model that is not finite is not written
        (``DivergedError``); a file that cannot be written raises ``TextError``."""
        state = self.optimizer.state_dict()
        self.check_finite(state)
        extra: dict[str, Any] = {
            "text_format": TEXT_FORMAT,
            "vocabulary": self.vocab.to_json(),
            "config": dataclasses.asdict(self.config),
            "step": self.step_count,
            "rng": self.rng_states(),
            **self.stream_extra(),
        }
        if self.held_out:
            extra["held_out"] = self.held_out
        for key, value in state.items():
            extra[f"optimizer/{key}"] = np.asarray(value)
        try:
            save(self.net, path, extra=extra, replace=replace)
        except OSError as exc:
            raise TextError(f"cannot write checkpoint {path}: {exc.strerror or exc}") from None
        except ValueError as exc:  # a destination io refuses
            raise TextError(f"cannot write checkpoint {path}: {exc}") from None
        self.saved = (str(path), self.step_count)

    def save_or_fall_back(self, path: str | Path, warn: Callable[[str], None]) -> str:
        """``save`` to ``path`` (a symlink there is followed: the user named it); when that
        fails, to a new ``NAME.stepN.XXXXXXXX.npz`` (XXXXXXXX random) next to it, then to
        ``NAME.stepN.npz`` in a new private folder (``tempfile.mkdtemp()``, mode 0700), passing
        each failure to ``warn``. The fallbacks never replace a file nor follow a link
        (``replace=False``). The path written; ``TextError`` naming every try when all fail."""
        path = Path(path)
        name, suffix = f"{path.stem}.step{self.step_count}", path.suffix or ".npz"
        errors: list[str] = []

        def failed(message: str) -> None:
            errors.append(message)
            warn(f"warning: {message}")

        def saved(where: Path, replace: bool) -> bool:
            try:
                self.save(where, replace=replace)
                return True
            except TextError as exc:
                failed(str(exc))
                return False

        nearby = path.with_name(f"{name}.{secrets.token_hex(4)}{suffix}")
        for where, replace in ((path, True), (nearby, False)):
            if saved(where, replace):
                return str(where)
        try:
            folder = Path(tempfile.mkdtemp(prefix=f"dualtape-{name}."))
        except OSError as exc:
            failed(f"cannot make a temporary folder: {exc.strerror or exc}")
        else:
            if saved(folder / f"{name}{suffix}", False):
                return str(folder / f"{name}{suffix}")
            with contextlib.suppress(OSError):
                folder.rmdir()  # empty: a failed save leaves nothing in it
        raise TextError("; ".join(errors) + "; nothing was saved")
