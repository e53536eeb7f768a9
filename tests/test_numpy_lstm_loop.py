"""The numpy ufunc LSTM loop's costs (kernels/numpy_lstm.py): what it allocates and copies.

test_kernels.py checks its numbers against the generic code; these check that it computes
them as its docstrings promise: in the cells' dtype, with no large array beyond the tape and
``hs``, the cells copied out of the gates once. Numpy only: the loop runs on numpy arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from dualtape.kernels import lstm_sequence as loops
from dualtape.kernels import numpy_lstm
from dualtape.kernels.numpy_lstm import NumpyLSTM

from .conftest import CountingNamespace
from .helpers import peak_bytes

STEPS, BATCH, N = 40, 32, 64


def inputs(dtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(U, c0, projected)`` for a forward sequence of STEPS steps."""
    rng = np.random.default_rng(0)
    return (rng.normal(size=(3 * N, N)).astype(dtype), rng.normal(size=(BATCH, N)).astype(dtype),
            rng.normal(size=(STEPS, BATCH, 4 * N)).astype(dtype))


class Recording:
    """numpy, recording the dtype of every array a call through it returns."""

    def __init__(self) -> None:
        self.dtypes: set[np.dtype] = set()

    def __getattr__(self, name: str) -> Any:
        function = getattr(np, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            result = function(*args, **kwargs)
            if isinstance(result, np.ndarray):
                self.dtypes.add(result.dtype)
            return result

        return recorded if callable(function) else function


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_loop_makes_and_computes_only_arrays_of_the_cells_dtype(monkeypatch, dtype):
    """A float64 scratch or constant in a float32 loop casts at every step."""
    recording = Recording()
    monkeypatch.setattr(numpy_lstm, "np", recording)
    cells, gates, hs = loops.forward_sequence(np, NumpyLSTM(), *inputs(dtype))
    assert recording.dtypes == {np.dtype(dtype)}
    assert cells.dtype == gates.dtype == hs.dtype == dtype


def test_the_cells_are_copied_out_of_the_gates_once(monkeypatch):
    """``c_0`` into the gates before the loop, the cells out after its last step: not at every
    step (which would copy T² cells)."""
    counting = CountingNamespace(np, watched=("copyto",))
    monkeypatch.setattr(numpy_lstm, "np", counting)
    cells, _, _ = loops.forward_sequence(np, NumpyLSTM(), *inputs("float64"))
    assert counting.calls == {"copyto": 2}


def test_the_forward_allocates_no_large_array_beyond_the_tape_and_hs():
    """The f and i blocks of ``projected`` are negated in place (its scratch), not copied: a
    copy, freed before ``hs`` is made, would raise the peak by a quarter of ``projected``."""
    U, c0, projected = inputs("float64")
    outputs = []
    peak = peak_bytes(lambda: outputs.append(loops.forward_sequence(np, NumpyLSTM(), U, c0,
                                                                   projected)))
    kept = sum(a.nbytes for a in outputs[0])
    assert kept <= peak < kept + projected.nbytes // 8, (peak, kept, projected.nbytes)
