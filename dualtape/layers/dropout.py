"""Dropout: inverted dropout with a seeded mask, kept on the tape."""

from __future__ import annotations

from typing import Any, NamedTuple

from ..backend import backend_of, dtype_name, from_host, host_rng, zeros_like_place
from .base import Array, Layer
from .edges import check_real


class DropoutTape(NamedTuple):
    """The ``mask`` the output was made with, in the input's dtype and place: ``keep / (1 −
    rate)`` per element (0 where dropped), or ones of shape ``(1, features)`` when the layer
    passed its input through; ``rows``, the output's number of rows."""

    mask: Array
    rows: int


class Dropout(Layer):
    """Inverted dropout: while ``training``, each element is zeroed with probability ``rate``
    and the others are scaled by ``1/(1 − rate)``, so the expected output is the input; not
    training (``net.set_training(False)``, for evaluation and generation), or at rate 0, the
    layer is the identity. Any number of features.

    Each forward pass draws a fresh mask on the host from a generator seeded with ``seed``
    (``None``: fresh OS entropy) and moves it to the input's backend, so a seed gives the same
    masks on every backend; the tape keeps the mask and backward multiplies by it
    (``dx = dy·mask``). The generator is the attribute ``rng`` (a ``numpy.random.Generator``):
    assign one to choose the masks to come, e.g. to resume a run where it stopped.

    Grenade's ``Dropout`` passes its input through unchanged (its forward pass is a stub);
    this one drops. ``save`` keeps ``rate`` and ``seed``, not how far the
    generator has run: a loaded layer draws its masks from the seed's start again (save
    ``rng.bit_generator.state`` beside it, as train-text's checkpoints do, to continue).
    """

    kind = "Dropout"
    keeps_input = False

    def __init__(self, rate: float, *, seed: int | None = None) -> None:
        super().__init__()
        self.rate, self.seed = rate, seed
        self.training = True
        self.rng = host_rng(seed)

    @property
    def rate(self) -> float:
        """The probability of dropping an element; assigning checks it (a number in [0, 1),
        numpy's too), so a layer never drops with a rate ``load`` would refuse."""
        return self._rate

    @rate.setter
    def rate(self, rate: float) -> None:
        self._rate = check_real("Dropout", "rate", rate, "[0, 1)")

    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"rate": self.rate}
        if self.seed is not None:
            config["seed"] = int(self.seed)
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any], dtype: str) -> Layer:
        return cls(**config)

    def _forward(self, xp: Any, x: Array) -> tuple[DropoutTape, Array]:
        if not self.training or self.rate == 0.0:
            return DropoutTape(zeros_like_place((1, x.shape[-1]), x) + 1.0, x.shape[0]), x
        keep = self.rng.random(tuple(x.shape)) >= self.rate
        scale = 1.0 / (1.0 - self.rate)
        mask = from_host((keep * scale).astype(dtype_name(x.dtype)), backend_of(x))
        return DropoutTape(mask, x.shape[0]), x * mask

    def _backward(self, xp: Any, tape: DropoutTape, dy: Array) -> tuple[dict[str, Array], Array]:
        return {}, dy * tape.mask

    def _output_shape(self, tape: DropoutTape) -> tuple[int, ...]:
        return (tape.rows, tape.mask.shape[-1])
