"""The text trainer's losses are bit-identical to the committed golden run
(``fixtures/text_golden.npz``) on numpy, on each CPU loop: a refactor of the training step
must not move a single bit."""

from __future__ import annotations

import numpy as np
import pytest

from dualtape.kernels import cpu_path

from .fixtures import make_text_golden as golden


@pytest.fixture(scope="module")
def stored() -> dict[str, np.ndarray]:
    with np.load(golden.PATH, allow_pickle=False) as archive:
        return {k: archive[k] for k in archive.files}


@pytest.mark.parametrize("loop", sorted(golden.LOOPS))
@pytest.mark.parametrize("name", sorted(golden.cases()))
def test_the_text_trainers_losses_equal_the_golden_run(stored, name, loop):
    if loop == "compiled" and cpu_path()[0] != "compiled":
        pytest.skip(f"numpy has no compiled loop here: {cpu_path()[1]}")
    got = golden.losses(golden.cases()[name], loop)
    assert got.tolist() == stored[f"{name}/{loop}"].tolist()


def test_the_golden_covers_every_case_and_loop(stored):
    assert sorted(stored) == sorted(f"{n}/{loop}" for n in golden.cases() for loop in golden.LOOPS)
    assert all(v.shape == (golden.STEPS,) and np.isfinite(v).all() for v in stored.values())
