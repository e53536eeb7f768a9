"""``DUALTAPE_JIT`` and ``DUALTAPE_FUSED``: the usual spellings of off and on, an unknown value
refused in one line naming the variable, read at each call."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape import kernels
from dualtape.switches import OFF, ON, switched_on

OFF_SPELLINGS = [*OFF, "FALSE", " 0", "Off\n", "No"]
ON_SPELLINGS = [*ON, "TRUE", " 1 ", "Yes"]
UNKNOWN = ["2", "disable", "o", "0 0", "-1"]


@pytest.mark.parametrize("value", OFF_SPELLINGS)
def test_off_spellings_turn_the_switch_off(monkeypatch, value):
    monkeypatch.setenv("DUALTAPE_JIT", value)
    assert switched_on("DUALTAPE_JIT") is False


@pytest.mark.parametrize("value", ON_SPELLINGS)
def test_on_spellings_and_unset_leave_it_on(monkeypatch, value):
    monkeypatch.setenv("DUALTAPE_FUSED", value)
    assert switched_on("DUALTAPE_FUSED") is True
    monkeypatch.delenv("DUALTAPE_FUSED")
    assert switched_on("DUALTAPE_FUSED") is True


@pytest.mark.parametrize("value", UNKNOWN)
def test_an_unknown_value_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv("DUALTAPE_JIT", value)
    with pytest.raises(ValueError, match=r"environment variable DUALTAPE_JIT=.*use one of 0"):
        switched_on("DUALTAPE_JIT")


@pytest.mark.parametrize("value", ["off", "false", " 0", "no"])
def test_the_cpu_path_follows_every_spelling_of_off(monkeypatch, value):
    monkeypatch.setenv("DUALTAPE_FUSED", value)
    assert kernels.cpu_path()[0] == "generic"
    monkeypatch.setenv("DUALTAPE_FUSED", "on")
    monkeypatch.setenv("DUALTAPE_JIT", value)
    assert kernels.cpu_path()[0] == "ufuncs"


def test_an_unknown_value_stops_the_optimizer_before_any_update(monkeypatch):
    with dualtape.use_backend("numpy"):
        layer = dualtape.FullyConnected(2, 3, seed=0, dtype="float64")
    before = np.array(layer.params["W"])
    monkeypatch.setenv("DUALTAPE_FUSED", "maybe")
    grads = {k: np.ones_like(v) for k, v in layer.params.items()}
    with pytest.raises(ValueError, match="DUALTAPE_FUSED='maybe'"):
        dualtape.SGD(0.1).step([layer.params], [grads])
    np.testing.assert_array_equal(layer.params["W"], before)


def test_off_spelled_otherwise_takes_the_generic_optimizer(monkeypatch):
    """``DUALTAPE_FUSED=off`` puts a new array into the dict, as ``0`` does."""
    with dualtape.use_backend("numpy"):
        layer = dualtape.FullyConnected(2, 3, seed=0, dtype="float64")
    W = layer.params["W"]
    grads = {k: np.ones_like(v) for k, v in layer.params.items()}
    monkeypatch.setenv("DUALTAPE_FUSED", "off")
    dualtape.SGD(0.1).step([layer.params], [grads])
    assert layer.params["W"] is not W
    monkeypatch.setenv("DUALTAPE_FUSED", "yes")
    W = layer.params["W"]
    dualtape.SGD(0.1).step([layer.params], [grads])
    assert layer.params["W"] is W  # in place
