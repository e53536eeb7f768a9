"""An optimizer of your own, written as ``Optimizer``'s docstring says (``slots``, ``_update``
and, optionally, ``_update_in_place``): every step follows its rule, at every size and on every
backend, never the compiled updates or kept step of another rule."""

from __future__ import annotations

from typing import Any

import array_api_compat
import numpy as np
import pytest

import dualtape
from dualtape.optim import CHUNK, COMPILED_FROM, Optimizer

from .conftest import np64

RATE, DECAY = 0.1, 0.5


class Averaged(Optimizer):
    """``s = decay·s + g``; ``w -= rate·s`` (``s = g`` at the first step)."""

    slots = ("s",)

    def __init__(self, rate: float, decay: float) -> None:
        super().__init__()
        self.rate, self.decay = rate, decay

    def _update(self, w: Any, g: Any, slot: dict) -> tuple[Any, dict]:
        s = self.decay * slot["s"] + g if "s" in slot else 1.0 * g  # never g itself
        return w - self.rate * s, {"s": s}

    def _update_in_place(self, mod: Any, w: Any, g: Any, slot: dict, scratch: Any) -> None:
        if "s" in slot:
            mod.add(mod.multiply(slot["s"], self.decay, out=slot["s"]), g, out=slot["s"])
        else:
            slot["s"] = g.copy()
        mod.subtract(w, mod.multiply(slot["s"], self.rate, out=scratch), out=w)


class AveragedGeneric(Averaged):
    """The same rule with ``_update`` alone: every step takes the generic path."""

    _update_in_place = Optimizer._update_in_place


class AveragedAdam(dualtape.Adam):
    """Adam's class with ``Averaged``'s rule: Adam's compiled update is not this rule's."""

    slots = ("s",)
    non_negative = ()
    _update, _update_in_place = Averaged._update, Averaged._update_in_place

    def __init__(self, rate: float, decay: float) -> None:
        super().__init__(rate)
        self.decay = decay


def by_hand(w: np.ndarray, grads: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The rule written out in float64: the weights and ``s`` after one step per gradient."""
    s = np.zeros_like(w)
    for t, g in enumerate(grads):
        s = g if t == 0 else DECAY * s + g
        w = w - RATE * s
    return w, s


@pytest.mark.parametrize("fused", ["", "0"], ids=["fused", "DUALTAPE_FUSED=0"])
@pytest.mark.parametrize("size", [5, COMPILED_FROM, CHUNK + 3],
                         ids=["small", "compiled-size", "passes-size"])
@pytest.mark.parametrize("make", [Averaged, AveragedGeneric, AveragedAdam])
def test_an_optimizer_of_your_own_follows_its_rule_at_every_step(backend, monkeypatch, make,
                                                                size, fused):
    """Five steps given the same arrays (the second keeps a step for the next where the rule
    allows it), their gradients' values changed in place between steps."""
    monkeypatch.setenv("DUALTAPE_FUSED", fused)
    rng = np.random.default_rng(size)
    w0 = rng.normal(size=(size,))
    host_grads = [rng.normal(size=(size,)) for _ in range(5)]
    params = [{"w": dualtape.asarray(w0.copy())}]
    grads = [{"w": dualtape.asarray(host_grads[0].copy())}]
    optimizer = make(RATE, DECAY)
    for t, g in enumerate(host_grads):
        grads[0]["w"][...] = dualtape.asarray(g)
        optimizer.step(params, grads)
        w, s = by_hand(w0, host_grads[: t + 1])
        np.testing.assert_allclose(np64(params[0]["w"]), w, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(np64(optimizer.state[(0, "w")]["s"]), s, rtol=1e-14,
                                   atol=1e-15)
        assert optimizer.steps == t + 1
    assert set(optimizer.state_dict()) == {"0/w/s", "steps", "kind", "schedule"}


class Normalised(Optimizer):
    """``w -= rate·g/‖g‖``: a rule over the whole parameter, which no pass of a part of it
    may compute."""

    def __init__(self, rate: float) -> None:
        super().__init__()
        self.rate = rate

    def _update(self, w: Any, g: Any, slot: dict) -> tuple[Any, dict]:
        xp = array_api_compat.array_namespace(w)
        return w - (self.rate / xp.sqrt(xp.sum(g * g))) * g, {}

    def _update_in_place(self, mod: Any, w: Any, g: Any, slot: dict, scratch: Any) -> None:
        norm = mod.sqrt(mod.sum(mod.multiply(g, g, out=scratch)))
        mod.subtract(w, mod.multiply(g, self.rate / norm, out=scratch), out=w)


@pytest.mark.parametrize("size", [5, CHUNK + 3], ids=["small", "passes-size"])
def test_a_rule_over_the_whole_parameter_is_given_the_whole_parameter(backend, size):
    rng = np.random.default_rng(size)
    w0, g = rng.normal(size=(size,)), rng.normal(size=(size,))
    params, grads = [{"w": dualtape.asarray(w0.copy())}], [{"w": dualtape.asarray(g)}]
    optimizer = Normalised(RATE)
    for t in range(1, 4):
        optimizer.step(params, grads)
        np.testing.assert_allclose(np64(params[0]["w"]), w0 - t * RATE * g / np.linalg.norm(g),
                                   rtol=1e-12, atol=1e-15)
    assert not optimizer.state and optimizer.steps == 3


def test_only_a_rule_that_brings_its_own_compiled_update_takes_the_fast_paths():
    assert dualtape.SGD._fast_paths and dualtape.Adam._fast_paths
    assert type("Renamed", (dualtape.Adam,), {})._fast_paths  # Adam's rule, Adam's paths
    assert Averaged._in_place and not Averaged._fast_paths
    assert not AveragedGeneric._in_place and not AveragedAdam._fast_paths
