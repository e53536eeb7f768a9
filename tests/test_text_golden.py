"""The text trainer's losses against the committed golden run (``fixtures/text_golden.npz``) on
numpy, on each CPU loop: bit-identical on a machine whose numerics were recorded (a refactor of
the training step must not move a single bit), and within a float tolerance everywhere (another
OpenBLAS kernel or SIMD level rounds differently; ``make_text_golden.numerics``)."""

from __future__ import annotations

import numpy as np
import pytest

from dualtape.kernels import cpu_path

from .fixtures import make_text_golden as golden

RTOL = {"float32": 1e-4, "float64": 1e-12}
"""How far another machine's losses may be from a recorded one: 20 steps of training let the
last-bit differences between kernels grow to 1e-5 (float32) and 3e-16 (float64) relative."""


@pytest.fixture(scope="module")
def stored() -> dict[str, dict[str, np.ndarray]]:
    """``numerics -> {case/loop: losses}``."""
    found: dict[str, dict[str, np.ndarray]] = {}
    with np.load(golden.PATH, allow_pickle=False) as archive:
        for key in archive.files:
            numerics, run = key.split(" | ")
            found.setdefault(numerics, {})[run] = archive[key]
    return found


@pytest.fixture(scope="module")
def here() -> str:
    return golden.numerics()


def losses(name: str, loop: str) -> np.ndarray:
    if loop == "compiled" and cpu_path()[0] != "compiled":
        pytest.skip(f"numpy has no compiled loop here: {cpu_path()[1]}")
    return golden.losses(golden.cases()[name], loop)


@pytest.mark.parametrize("loop", sorted(golden.LOOPS))
@pytest.mark.parametrize("name", sorted(golden.cases()))
def test_the_text_trainers_losses_equal_the_golden_run_bit_for_bit(stored, here, name, loop):
    if here not in stored:
        pytest.skip(f"this machine's numerics ({here}) were not recorded; recorded: "
                    f"{'; '.join(sorted(stored))} (the tolerance test below still runs)")
    assert losses(name, loop).tolist() == stored[here][f"{name}/{loop}"].tolist()


@pytest.mark.parametrize("loop", sorted(golden.LOOPS))
@pytest.mark.parametrize("name", sorted(golden.cases()))
def test_the_text_trainers_losses_are_close_to_the_golden_run_anywhere(stored, name, loop):
    got = losses(name, loop)
    rtol = RTOL[golden.cases()[name]["dtype"]]
    for numerics, runs in stored.items():
        np.testing.assert_allclose(got, runs[f"{name}/{loop}"], rtol=rtol, atol=0,
                                   err_msg=f"against the run recorded for {numerics}")


def test_the_golden_covers_every_case_and_loop_for_each_machine(stored):
    assert len(stored) >= 2, "recorded for more than one kind of machine"
    for runs in stored.values():
        assert sorted(runs) == sorted(f"{n}/{loop}" for n in golden.cases()
                                      for loop in golden.LOOPS)
        assert all(v.shape == (golden.STEPS,) and np.isfinite(v).all() for v in runs.values())
