"""``dualtape.check_no_recompute``: a backward pass that evaluates again a function its forward
pass evaluated is named; every recurrent cell's step passes, on every backend. (Each
feed-forward layer: ``test_layers.py``.)"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import dualtape
from dualtape.recompute_check import CountingNamespace, RecomputeError

CELLS = (dualtape.LSTM, dualtape.StandardLSTM, dualtape.GRU, dualtape.BasicRecurrent)


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.__name__)
def test_a_recurrent_steps_backward_reads_the_tape(backend, cell):
    found = dualtape.check_no_recompute(cell(3, 4, dtype="float64"),
                                        np.random.default_rng(0).normal(size=(2, 3)))
    assert all(backward == 0 for _, backward in found.values())
    assert (found.get("tanh", (0, 0))[0] > 0) == (cell is not dualtape.BasicRecurrent)


class RecomputingTanh(dualtape.Tanh):
    """A planted bug: the derivative from tanh(x) evaluated again, not from the tape's y."""

    keeps_input = True

    def _forward(self, xp: Any, x: Any) -> tuple[Any, Any]:
        y = xp.tanh(x)
        return self.tape_class(x), y

    def _backward(self, xp: Any, tape: Any, dy: Any) -> tuple[dict, Any]:
        return {}, dy * (1 - xp.tanh(tape.y) ** 2)


def test_a_backward_that_recomputes_is_named(backend):
    with pytest.raises(RecomputeError, match=r"^check_no_recompute: Tanh\(\): backward "
                       r"evaluates tanh 1 time, which the forward pass evaluated"):
        dualtape.check_no_recompute(RecomputingTanh(), np.ones((2, 3)))


class RecomputingCell(dualtape.layers.RecurrentLayer):
    """A planted bug in a recurrent step, ``y = tanh(x + state)``: the derivative from
    tanh evaluated again in ``_backward_step``, not kept on the tape."""

    kind = "RecomputingCell"

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n_in = self.n_out = self.state_size = n

    def _forward_step(self, xp: Any, state: Any, x: Any) -> tuple[Any, Any, Any]:
        y = xp.tanh(x + state)
        return (x, state), y, y

    def _backward_step(self, xp: Any, tape: Any, dstate: Any, dy: Any) -> tuple[dict, Any, Any]:
        x, state = tape
        d = (dy + dstate) * (1 - xp.tanh(x + state) ** 2)
        return {}, d, d


def test_a_recurrent_step_that_recomputes_is_named(backend):
    x = dualtape.asarray(np.full((2, 3), 0.5), dtype="float64")
    with pytest.raises(RecomputeError, match=r"^check_no_recompute: RecomputingCell\(\): "
                       r"backward evaluates tanh 1 time"):
        dualtape.check_no_recompute(RecomputingCell(3), x)


def test_what_it_cannot_check_is_refused():
    with pytest.raises(TypeError, match="takes a layer, got Network"):
        dualtape.check_no_recompute(dualtape.Network([dualtape.Tanh()]), np.ones((2, 3)))
    with pytest.raises(ValueError, match="is a composite; check its parts"):
        dualtape.check_no_recompute(dualtape.Sequential([dualtape.Tanh()]), np.ones((2, 3)))
    with pytest.raises(ValueError, match="input must have shape"):
        dualtape.check_no_recompute(dualtape.FullyConnected(3, 2), np.ones((2, 5)))


def test_only_what_the_forward_pass_evaluated_is_reported():
    assert dualtape.check_no_recompute(dualtape.FullyConnected(3, 2), np.ones((2, 3))) == {}
    assert dualtape.check_no_recompute(dualtape.Softmax(), np.ones((2, 3))) == {"exp": (1, 0)}


def test_an_embedding_takes_its_integer_ids(backend):
    layer = dualtape.Embedding(5, 3, dtype="float64", seed=1)
    assert dualtape.check_no_recompute(layer, np.array([1, 4, 0])) == {}
    with pytest.raises(TypeError, match=r"^check_no_recompute: Embedding\(5, 3\): input must "
                       r"hold integer ids for Embedding\(5, 3\), got .*float64; convert with "
                       r"ids.astype\(int\)"):
        dualtape.check_no_recompute(layer, np.array([1.0, 4.0]))
    with pytest.raises(ValueError, match=r"holds ids from 1 to 5, but Embedding\(5, 3\) takes "
                       r"ids in \[0, 5\)"):
        dualtape.check_no_recompute(layer, np.array([1, 5]))


class RecomputingSoftplus(dualtape.Tanh):
    """A planted bug counted twice: softplus's backward evaluates ``exp`` and ``log1p`` of
    its input again (``log1p`` twice), as its forward did once each."""

    keeps_input = True

    def _forward(self, xp: Any, x: Any) -> tuple[Any, Any]:
        return self.tape_class(x), xp.log1p(xp.exp(x))

    def _backward(self, xp: Any, tape: Any, dy: Any) -> tuple[dict, Any]:
        again = xp.log1p(xp.exp(tape.y)) - xp.log1p(xp.exp(tape.y))
        return {}, dy * (1 + again) / (1 + xp.exp(-tape.y))


def test_each_function_evaluated_again_is_counted_in_one_line(backend):
    with pytest.raises(RecomputeError, match=r"^check_no_recompute: Tanh\(\): backward "
                       r"evaluates exp 3 times, log1p 2 times, which the forward pass "
                       r"evaluated: keep what the derivative needs of it on the tape$"):
        dualtape.check_no_recompute(RecomputingSoftplus(), np.ones((2, 3)))


def test_a_host_input_or_list_goes_to_the_layers_backend(backend):
    """A layer off the current backend takes a host array (or a list) of its input, in its
    own dtype (float64 given to a float32 layer), as ``forward`` does."""
    layer = dualtape.GRU(3, 4, dtype="float32", seed=1)
    x = np.random.default_rng(0).normal(size=(2, 3))
    expected = dualtape.check_no_recompute(layer, x)
    assert list(expected) == ["tanh"] and expected["tanh"][1] == 0
    with dualtape.use_backend("numpy"):
        assert dualtape.check_no_recompute(layer, x) == expected
        assert dualtape.check_no_recompute(layer, x.tolist()) == expected


def test_the_counting_namespace_passes_every_argument_through():
    xp = SimpleNamespace(exp=lambda *args, **kwargs: (args, kwargs), pi=3.0)
    counting = CountingNamespace(xp)
    assert counting.exp(1, base=2) == ((1,), {"base": 2}) and counting.pi == 3.0
    assert counting.calls["exp"] == 1 and counting.total == 1


def test_a_bad_input_is_named_with_the_layer():
    with pytest.raises(ValueError, match=r"^check_no_recompute: FullyConnected\(3, 2\): input "
                       r"must have shape"):
        dualtape.check_no_recompute(dualtape.FullyConnected(3, 2), np.ones((2, 5)))
