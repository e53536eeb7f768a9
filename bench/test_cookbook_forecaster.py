"""The cookbook's forecaster reaches torch's held-out error from the same weights at the same
number of epochs (``bench/cookbook_forecaster.py``; its speed is the bench's, never a test's)."""

from __future__ import annotations

import pytest

from bench.cookbook_forecaster import check, recipe, torch_fit


def test_the_cookbooks_forecaster_reaches_torchs_held_out_error():
    torch = pytest.importorskip("torch")
    found = recipe()
    assert check(torch, found).startswith("one epoch: held-out MSE")
    ours = found["fit"](found["series"], epochs=8, patience=8)[1]
    theirs, _ = torch_fit(torch, found["series"], epochs=8)
    assert ours <= theirs * (1 + 1e-3), (ours, theirs)
