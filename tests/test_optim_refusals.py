"""SGD's and Adam's refusals word for word (the owner, the argument, the interval) and their
defaults, and what ``load_state_dict`` takes and refuses at its edges (generated mutants of
``optim.py`` lived there)."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape.optim import Optimizer

from .conftest import np64
from .helpers import assert_refused_word_for_word, refusal_id

REAL = "must be a real number in"


@pytest.mark.parametrize(("make", "message"), [
    (lambda: dualtape.SGD(0), f"SGD: rate {REAL} (0, inf), got 0"),
    (lambda: dualtape.SGD(0.1, momentum=1), f"SGD: momentum {REAL} [0, 1), got 1"),
    (lambda: dualtape.SGD(0.1, regulariser=-1), f"SGD: regulariser {REAL} [0, inf), got -1"),
    (lambda: dualtape.Adam(0), f"Adam: rate {REAL} (0, inf), got 0"),
    (lambda: dualtape.Adam(beta1=1), f"Adam: beta1 {REAL} [0, 1), got 1"),
    (lambda: dualtape.Adam(beta2=-0.5), f"Adam: beta2 {REAL} [0, 1), got -0.5"),
    (lambda: dualtape.Adam(eps=0), f"Adam: eps {REAL} (0, inf), got 0"),
], ids=refusal_id)
def test_bad_hyperparameters_are_refused_word_for_word(make, message):
    assert_refused_word_for_word(make, message)


def test_adams_defaults_are_torchs():
    adam = dualtape.Adam()
    assert (adam.rate, adam.beta1, adam.beta2, adam.eps) == (1e-3, 0.9, 0.999, 1e-8)
    assert adam.base_rate == adam.rate and adam.schedule is None


def stepped(optimizer, dtype="float64"):
    params = [{"w": dualtape.asarray(np.ones(3, dtype=dtype))}]
    optimizer.step(params, [{"w": dualtape.asarray(np.full(3, 0.5, dtype=dtype))}])
    return params


def test_a_state_without_steps_starts_at_step_0():
    optimizer = dualtape.SGD(0.1)
    params = stepped(optimizer)
    optimizer.load_state_dict({"kind": np.asarray("SGD")}, params)
    assert optimizer.steps == 0


@pytest.mark.parametrize(("edit", "message"), [
    (lambda s: [s], "SGD: state must be a dict, got list"),
    (lambda s: {**s, "steps": np.asarray(-1)}, "SGD: state 'steps' must be an integer >= 0, "
     "got array(-1)"),
    (lambda s: {**s, "0/w/v": s["0/w/m"]}, "SGD: state '0/w/v' has an unknown slot 'v' (this "
     "SGD keeps: m)"),
    (lambda s: {**s, "1/w/m": s["0/w/m"]}, "SGD: state '1/w/m' of shape (3,) fits no "
     "parameter of the network"),
], ids=["not-a-dict", "steps", "slot", "group-past-the-end"])
def test_state_that_does_not_fit_is_refused_word_for_word(edit, message):
    optimizer = dualtape.SGD(0.1, momentum=0.5)
    params = stepped(optimizer)
    with pytest.raises(ValueError) as info:
        optimizer.load_state_dict(edit(optimizer.state_dict()), params)
    assert str(info.value) == message


def test_adam_names_both_of_its_slots():
    optimizer = dualtape.Adam()
    params = stepped(optimizer)
    with pytest.raises(ValueError) as info:
        optimizer.load_state_dict({**optimizer.state_dict(), "0/w/s": np.zeros(3)}, params)
    assert str(info.value) == ("Adam: state '0/w/s' has an unknown slot 's' (this Adam keeps: "
                               "m, v)")


def test_an_optimizer_without_slots_says_it_keeps_none():
    class Stateless(Optimizer):
        """Keeps no state."""

    with pytest.raises(ValueError) as info:
        Stateless().load_state_dict({"0/w/m": np.zeros(3)}, [{"w": np.zeros(3)}])
    assert str(info.value) == ("Stateless: state '0/w/m' has an unknown slot 'm' (this "
                               "Stateless keeps: none)")


def test_adams_second_moment_may_be_zero_but_not_negative():
    optimizer = dualtape.Adam()
    params = stepped(optimizer)
    state = optimizer.state_dict()
    optimizer.load_state_dict({**state, "0/w/v": np.zeros(3)}, params)
    with pytest.raises(ValueError) as info:
        optimizer.load_state_dict({**state, "0/w/v": np.full(3, -1.0)}, params)
    assert str(info.value) == ("Adam: state '0/w/v' holds negative values; it can only be "
                               ">= 0")


def test_loaded_state_takes_the_parameters_dtype_and_backend(backend):
    """Saved in float64 from numpy, loaded for float32 parameters on the selected backend
    while numpy is selected: the slots are the parameters'."""
    saved = dualtape.Adam()
    with dualtape.use_backend("numpy"):
        stepped(saved)
    params = [{"w": dualtape.asarray(np.ones(3, dtype="float32"))}]
    optimizer = dualtape.Adam()
    with dualtape.use_backend("numpy"):
        optimizer.load_state_dict(saved.state_dict(), params)
    for name, slot in optimizer.state[(0, "w")].items():
        assert type(slot) is type(params[0]["w"]) and slot.dtype == params[0]["w"].dtype
        np.testing.assert_allclose(np64(slot), saved.state_dict()[f"0/w/{name}"], rtol=1e-6)
