"""LSTM's ``init`` option: Grenade's uniform [-1, 1] draws, optionally scaled by 1/√fan-in."""

from __future__ import annotations

import math
import pydoc

import numpy as np
import pytest

import dualtape
from dualtape import LSTM, RecurrentNetwork

from .conftest import np64
from .helpers import assert_params_equal, host_params
from .test_io import header_of, read_archive, rewrite


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_scaled_inits_are_grenades_draws_times_the_factor_in_the_dtype(dtype):
    grenade, scaled, recurrent = (
        {k: np.asarray(v) for k, v in LSTM(5, 7, seed=3, dtype=dtype, init=init).params.items()}
        for init in ("grenade", "scaled", "scaled_recurrent")
    )
    # What train-text did by hand on the device: the parameter times a Python float.
    assert np.array_equal(scaled["W"], grenade["W"] * (1 / math.sqrt(5)))
    assert np.array_equal(scaled["U"], grenade["U"] * (1 / math.sqrt(7)))
    assert np.array_equal(recurrent["W"], grenade["W"])
    assert np.array_equal(recurrent["U"], scaled["U"])
    assert np.array_equal(scaled["b"], grenade["b"])
    assert np.array_equal(recurrent["b"], grenade["b"])
    assert scaled["W"].dtype == grenade["W"].dtype == np.dtype(dtype)


@pytest.mark.parametrize("init", LSTM.INITS)
def test_a_seed_gives_the_same_bits_on_every_backend_for_every_init(backend, init):
    here = LSTM(6, 4, seed=11, init=init)
    with dualtape.use_backend("numpy"):
        oracle = LSTM(6, 4, seed=11, init=init)
    for name, value in here.params.items():
        assert np.array_equal(np64(value), np64(oracle.params[name])), name


def test_scaled_init_keeps_wide_gates_out_of_saturation():
    # The docstring's claim, measured: gates within 0.02 of 0 or 1 on inputs uniform in [-1, 1].
    xs = np.random.default_rng(0).uniform(-1, 1, (20, 8, 80))

    def saturated(init: str) -> float:
        layer = LSTM(80, 80, seed=1, dtype="float64", init=init)
        tape, _, _ = layer.forward_sequence(layer.initial_state(8), xs)
        gates = np.asarray(tape.gates[..., : 3 * 80])
        return float(np.mean((gates < 0.02) | (gates > 0.98)))

    assert saturated("grenade") > 0.3
    assert saturated("scaled") < 0.01


def test_save_and_load_keep_the_init(backend, tmp_path):
    net = RecurrentNetwork([LSTM(3, 4, seed=1, init="scaled_recurrent"),
                            LSTM(4, 2, seed=2, init="scaled"), LSTM(2, 2, seed=3)])
    dualtape.save(net, tmp_path / "net.npz")
    loaded = dualtape.load(tmp_path / "net.npz")
    assert [layer.init for layer in loaded.layers] == ["scaled_recurrent", "scaled", "grenade"]
    assert repr(loaded) == repr(net) == (
        "RecurrentNetwork([LSTM(3, 4, init='scaled_recurrent'), LSTM(4, 2, init='scaled'), "
        "LSTM(2, 2)])")
    assert_params_equal(host_params(loaded), host_params(net))


def test_an_unknown_init_is_refused_by_the_constructor_and_by_load(tmp_path):
    with pytest.raises(ValueError, match=r"init must be one of 'grenade', 'scaled', "
                                         r"'scaled_recurrent', got 'xavier'"):
        LSTM(2, 3, init="xavier")
    path = tmp_path / "net.npz"
    dualtape.save(RecurrentNetwork([LSTM(2, 3, init="scaled")]), path)
    arrays = read_archive(path)
    header = header_of(arrays)
    header["layers"][0]["config"]["init"] = "xavier"
    rewrite(path, arrays, header)
    with pytest.raises(ValueError, match=f"{path}.*init must be one of"):
        dualtape.load(path)


def test_help_of_lstm_gives_equations_shapes_tape_seed_and_init():
    text = pydoc.render_doc(LSTM, renderer=pydoc.plaintext)
    for needed in ("c' = f*c + i*ĉ", "h = o*c'", "(4·n_out, n_in)", "(3·n_out, n_out)",
                   "(4·n_out,)", "gate activations", "``None`` draws fresh entropy", "saturated",
                   "1/√n_in", "scaled_recurrent", "backward_sequence(tape, dstate_T, dys)"):
        assert needed in text, needed
