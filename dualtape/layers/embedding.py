"""Embedding: integer ids in, the rows of a weight matrix out, as ``torch.nn.Embedding``."""

from __future__ import annotations

from typing import Any, NamedTuple

from ..backend import host_rng
from .base import Array, Layer
from .edges import check_size, prepare_ids, prepare_like, read_only, restore
from .initial import initial_params
from .linear_algebra import TableGradient, TableRows, reshape, rows_by_id


class EmbeddingTape(NamedTuple):
    """The ids looked up (int64, one per row of the output) and the ``version`` of the
    parameters they were looked up in: all the weight gradient needs."""

    ids: Array
    version: int


class Embedding(Layer):
    """Row ``i`` of ``weight`` ``(vocab, n)`` for each id ``i``: ids ``(batch,)`` (or one id)
    in, ``(batch, n)`` (or ``(n,)``) out; in a ``RecurrentNetwork``, ids ``(T, batch)`` in,
    ``(T, batch, n)`` out. It goes first in a network, whose input then is ids: integers in
    ``[0, vocab)`` (floats, booleans, ids out of range and other shapes raise, naming it).

    ``weight`` has ``torch.nn.Embedding``'s layout and initialisation, N(0, 1), drawn on the
    host from ``seed``, in ``dtype``. ``backward`` gives the weight gradient (the rows of
    ``dy`` summed into the rows their ids name, the rest zero) and ``None`` for the input's:
    ids have no gradient.
    """

    kind = "Embedding"
    takes_ids = True
    vocab: int
    n: int

    def __init__(self, vocab: int, n: int, *, dtype: str = "float32", seed: int | None = None):
        super().__init__()
        shapes = self.param_shapes({"vocab": vocab, "n": n})
        self.vocab, self.n = shapes["weight"]
        self.n_out = self.n
        rng = host_rng(seed)
        self.params = initial_params(shapes, self._checked_dtype(dtype), lambda: {
            "weight": rng.standard_normal(size=shapes["weight"])})

    def config(self) -> dict[str, Any]:
        return {"vocab": self.vocab, "n": self.n}

    @classmethod
    def param_shapes(cls, config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        return {"weight": (check_size(cls.kind, "vocab", config["vocab"]),
                           check_size(cls.kind, "n", config["n"]))}

    @property
    def input_shape(self) -> tuple:
        """``()``: an example is one id."""
        return ()

    def output_shape(self, shape: tuple | None) -> tuple:
        return (self.n,)

    def forward(self, x: Any) -> tuple[EmbeddingTape, Array]:
        """``(tape, y)`` for ids ``x`` ``(batch,)`` or one id."""
        xp, ids, single = prepare_ids(x, vocab=self.vocab, reference=self.params["weight"],
                                      owner=repr(self), taker=repr(self), copy=True)
        tape, y = self._forward(xp, ids)
        return tape, read_only(restore(y, single, batch_axis=0))

    def backward(self, tape: Any, dy: Any) -> tuple[dict[str, Array], None]:
        """``({"weight": ...}, None)`` from a tape of ``forward`` and the output's gradient."""
        self._check_tape(tape, repr(self))
        xp, dy, _ = prepare_like(dy, self._output_shape(tape), self.params["weight"],
                                 repr(self), "dy", batch_axis=0)
        return self._backward(xp, tape, dy)

    def _forward(self, xp: Any, x: Array) -> tuple[EmbeddingTape, Array]:
        p = self.params
        return EmbeddingTape(x, p.version), xp.take(p["weight"], x, axis=0)

    def _backward(self, xp: Any, tape: EmbeddingTape, dy: Array
                  ) -> tuple[dict[str, Array], None]:
        self._check_version(tape)
        return {"weight": rows_by_id(xp, tape.ids, dy, self.vocab)}, None

    def _forward_rows(self, xp: Any, ids: Array) -> tuple[EmbeddingTape, TableRows]:
        """The tape of a sequence of ids ``(T, B)`` and, in place of the rows they name, the
        ids and the weight, for a recurrent layer after this one to look up (``stack.py``)."""
        p = self.params
        flat = reshape(xp, ids, (ids.shape[0] * ids.shape[1],))
        return EmbeddingTape(flat, p.version), TableRows(ids, p["weight"])

    def _backward_summed(self, xp: Any, tape: EmbeddingTape, dy: TableGradient
                         ) -> tuple[dict[str, Array], None]:
        """``_backward`` from the weight's gradient already summed by id (by the layer
        ``_forward_rows`` handed the weight)."""
        self._check_version(tape)
        return {"weight": dy.summed}, None

    def _output_shape(self, tape: EmbeddingTape) -> tuple[int, ...]:
        return (tape.ids.shape[0], self.n)

