"""StandardLSTM and GRU against torch.nn.LSTM / nn.GRU: the committed numbers of
``fixtures/cells_golden.npz`` on every backend, through the sequence and step APIs and over 20
training steps (so CI checks them without torch); ``torch_weights``' round trip and errors; and
live runs where torch is installed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dualtape

from .conftest import np64
from .fixtures import make_cells_golden as golden

CELLS = golden.cell_cases()
TRAINING = golden.train_cases()
TOLERANCE = {"float64": 1e-12, "float32": 1e-5}
"""Of each array's largest magnitude."""
TRAIN_TOLERANCE = 1e-9
NO_TORCH = "torch is not installed: the live comparisons need it (the golden ones ran)"


@pytest.fixture(scope="module")
def stored() -> dict[str, np.ndarray]:
    with np.load(golden.PATH, allow_pickle=False) as archive:
        return {k: archive[k] for k in archive.files}


def need_torch() -> Any:
    try:
        import torch
    except ImportError:
        pytest.skip(NO_TORCH)
    return torch


def part(stored: dict[str, np.ndarray], name: str, which: str) -> dict[str, np.ndarray]:
    """Copies of a case's ``in`` or ``torch`` arrays, keyed without the ``name/which/`` prefix
    (copies: on numpy ``dualtape.asarray`` keeps the array, which an optimizer updates)."""
    prefix = f"{name}/{which}/"
    return {k[len(prefix):]: v.copy() for k, v in stored.items() if k.startswith(prefix)}


def state_dict_of(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k[3:]: v for k, v in inputs.items() if k.startswith("sd/")}


def assert_close(actual: Any, expected: np.ndarray, dtype: str, what: str,
                 tolerance: float | None = None) -> None:
    """Within ``tolerance`` (by default ``TOLERANCE[dtype]``) of ``expected``'s largest
    magnitude, element by element."""
    actual, expected = np64(actual), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, torch's {expected.shape}"
    scale = float(np.max(np.abs(expected)))
    np.testing.assert_allclose(actual, expected, rtol=0, err_msg=what,
                               atol=(tolerance or TOLERANCE[dtype]) * scale)


def torch_names(grads: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-layer gradients keyed as torch's parameters: ``W_ih`` of layer 1 -> ``weight_ih_l1``."""
    return {f"{'weight' if n[0] == 'W' else 'bias'}_{n[2:]}_l{k}": v
            for k, layer in enumerate(grads) for n, v in layer.items()}


def in_torch_form(layers: list, finals: list, d0: list, grads: list) -> dict[str, Any]:
    """dualtape's results keyed as ``run_torch_cell``'s: ``hT``, ``cT``, ``dh0``, ``dc0``,
    ``grad/<key>``."""
    found = dict(zip(("hT", "cT"), dualtape.state_to_torch(layers, finals), strict=False))
    found.update(zip(("dh0", "dc0"), dualtape.state_to_torch(layers, d0), strict=False))
    found.update({f"grad/{k}": v for k, v in torch_names(grads).items()})
    return found


def states(layers: list, inputs: dict[str, np.ndarray], h: str, c: str) -> list:
    return dualtape.state_from_torch(layers, inputs[h], inputs.get(c))


def run_sequence(inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    """``forward_sequence`` / ``backward_sequence`` of the loaded weights: the layer alone
    when there is one, else a ``RecurrentNetwork``."""
    layers = dualtape.from_torch(state_dict_of(inputs))
    start, dend = states(layers, inputs, "h0", "c0"), states(layers, inputs, "dhT", "dcT")
    xs, dys = dualtape.asarray(inputs["xs"]), dualtape.asarray(inputs["dys"])
    if len(layers) == 1:
        tape, final, ys = layers[0].forward_sequence(start[0], xs)
        grads, d0, dxs = layers[0].backward_sequence(tape, dend[0], dys)
        finals, d0s, all_grads = [final], [d0], [grads]
    else:
        net = dualtape.RecurrentNetwork(layers)
        tape, finals, ys = net.forward_sequence(start, xs)
        all_grads, d0s, dxs = net.backward_sequence(tape, dend, dys)
    return {"ys": ys, "dxs": dxs, **in_torch_form(layers, finals, d0s, all_grads)}


def run_steps(inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    """The same through the step API, ``layer.forward(state, x)`` and ``layer.backward``: each
    layer over all steps, then back from the top layer down, each in reverse time."""
    layers = dualtape.from_torch(state_dict_of(inputs))
    start, dend = states(layers, inputs, "h0", "c0"), states(layers, inputs, "dhT", "dcT")
    hs = [dualtape.asarray(x) for x in inputs["xs"]]
    tapes, finals = [], []
    for layer, state in zip(layers, start, strict=True):
        taped, out = [], []
        for x in hs:
            tape, state, y = layer.forward(state, x)
            taped.append(tape)
            out.append(y)
        tapes.append(taped)
        finals.append(state)
        hs = out
    ys = hs
    dhs = [dualtape.asarray(dy) for dy in inputs["dys"]]
    grads: list[dict] = [{} for _ in layers]
    d0s = list(dend)
    for k in reversed(range(len(layers))):
        dxs = [None] * len(dhs)
        for t in reversed(range(len(dhs))):
            g, d0s[k], dxs[t] = layers[k].backward(tapes[k][t], d0s[k], dhs[t])
            grads[k] = {n: grads[k][n] + v if n in grads[k] else v for n, v in g.items()}
        dhs = dxs
    stack = lambda arrays: np.stack([dualtape.to_numpy(a) for a in arrays])  # noqa: E731
    return {"ys": stack(ys), "dxs": stack(dhs),
            **in_torch_form(layers, finals, d0s, grads)}


def assert_like_torch(found: dict[str, Any], expected: dict[str, np.ndarray], dtype: str) -> None:
    assert found.keys() == expected.keys()
    for key, value in found.items():
        assert dualtape.to_numpy(value).dtype == dtype, key
        assert_close(value, expected[key], dtype, key)


@pytest.mark.parametrize("name", sorted(CELLS))
def test_sequences_give_torchs_outputs_states_and_gradients(backend, stored, name):
    found = run_sequence(part(stored, name, "in"))
    assert_like_torch(found, part(stored, name, "torch"), CELLS[name][4])


@pytest.mark.parametrize("name", sorted(CELLS))
def test_steps_give_torchs_outputs_states_and_gradients(backend, stored, name):
    found = run_steps(part(stored, name, "in"))
    assert_like_torch(found, part(stored, name, "torch"), CELLS[name][4])


def train(inputs: dict[str, np.ndarray], kind: str, hyper: dict[str, float]
          ) -> tuple[list[float], dict[str, Any]]:
    """``train_recurrent`` with ``kind(**hyper)`` over the case's steps: the losses and the
    final parameters, keyed as torch's (the head's ``head/W``, ``head/b``)."""
    layers = dualtape.from_torch(state_dict_of(inputs))
    head = dualtape.FullyConnected(golden.HIDDEN, golden.OUTPUT, dtype="float64")
    head.params = {k: dualtape.asarray(inputs[f"head/{k}"]) for k in ("W", "b")}
    rnet = dualtape.RecurrentNetwork([*layers, head])
    start = states(layers, inputs, "h0", "c0")
    optimizer = getattr(dualtape, kind)(**hyper)
    losses = [dualtape.train_recurrent(rnet, dualtape.asarray(xs), dualtape.asarray(t),
                                       optimizer, state=start)[0]
              for xs, t in zip(inputs["xs"], inputs["targets"], strict=True)]
    final = {**dualtape.to_torch(layers), **{f"head/{k}": v for k, v in head.params.items()}}
    return losses, final


@pytest.mark.parametrize("name", sorted(TRAINING))
def test_training_gives_torchs_losses_over_twenty_steps(backend, stored, name):
    cell, kind, hyper = TRAINING[name]
    expected = part(stored, name, "torch")
    losses, final = train(part(stored, f"train-{cell}", "in"), kind, hyper)
    assert len(losses) == golden.TRAIN_STEPS
    np.testing.assert_allclose(losses, expected["losses"], rtol=TRAIN_TOLERANCE, atol=0)
    for key, value in final.items():
        assert_close(value, expected[f"final/{key}"], "float64", key, TRAIN_TOLERANCE)


@pytest.mark.parametrize("name", sorted(CELLS))
def test_to_torch_of_from_torch_gives_the_state_dict_back_bit_for_bit(backend, stored, name):
    sd = state_dict_of(part(stored, name, "in"))
    back = dualtape.to_torch(dualtape.from_torch(sd))
    assert list(back) == list(sd)
    for key, value in back.items():
        assert type(value) is np.ndarray and value.dtype == sd[key].dtype, key
        assert np.array_equal(value, sd[key]), key


@pytest.mark.parametrize("cell", sorted(golden.GATES))
def test_cell_keys_load_as_one_layer_and_missing_biases_as_zeros(backend, stored, cell):
    """An ``nn.LSTMCell`` / ``nn.GRUCell`` dict (``weight_ih``, no ``_l0``) is the
    ``num_layers=1`` module's; a ``bias=False`` one's biases are zeros (to_torch writes them)."""
    name = f"{cell}-T7-B4-L1-float64"
    inputs, expected = part(stored, name, "in"), part(stored, name, "torch")
    cell_keys = {k.replace("_l0", ""): v for k, v in inputs.items()}
    assert "sd/weight_ih" in cell_keys
    assert_like_torch(run_sequence(cell_keys), expected, "float64")
    (layer,) = dualtape.from_torch({k: v for k, v in state_dict_of(inputs).items()
                                    if k.startswith("weight")})
    back = dualtape.to_torch(layer)
    assert not back["bias_ih_l0"].any() and not back["bias_hh_l0"].any()
    assert back["bias_ih_l0"].shape == inputs["sd/bias_ih_l0"].shape


def test_from_torch_casts_to_the_dtype_asked_for(stored):
    inputs = part(stored, "gru-T7-B1-L2-float64", "in")
    layers = dualtape.from_torch(state_dict_of(inputs), dtype="float32")
    assert {dualtape.to_numpy(p).dtype for layer in layers for p in layer.params.values()} == {
        np.dtype("float32")}


@pytest.mark.parametrize("dtype", ["float16", "longdouble"])
def test_other_floats_load_as_float32_unless_a_dtype_is_asked_for(backend, dtype):
    """torch's half-precision weights (``.numpy()`` of a float16 tensor), or numpy's long
    double, give float32 layers, as the embedding's weight does."""
    layers = dualtape.from_torch({k: v.astype(dtype) for k, v in torch_dict().items()})
    (embedding,) = dualtape.from_torch({"weight": np.ones((4, 3), dtype=dtype)})
    for layer in (*layers, embedding):
        assert layer.dtype == "float32"
        assert {dualtape.to_numpy(p).dtype for p in layer.params.values()} == {
            np.dtype("float32")}


def test_to_torch_gives_copies_of_the_live_parameters(backend):
    """Changing to_torch's arrays (torch.from_numpy shares them) leaves the layers as they
    were."""
    layers = dualtape.from_torch(torch_dict(layers=2))
    (embedding,) = dualtape.from_torch({"weight": np.ones((4, 3))})
    for made in (layers, embedding):
        before = {k: v.copy() for k, v in dualtape.to_torch(made).items()}
        for array in dualtape.to_torch(made).values():
            array += 1.0
        assert all(np.array_equal(v, before[k]) for k, v in dualtape.to_torch(made).items())


def test_the_fixture_holds_every_case(stored):
    names = {key.split("/")[0] for key in stored if "/" in key}
    assert names == {*CELLS, *TRAINING, *(f"train-{cell}" for cell in golden.GATES)}
    sizes = {(t, b, n) for _, t, b, n, _ in CELLS.values()}
    assert {t for t, _, _ in sizes} == {1, 7, 50} and {b for _, b, _ in sizes} == {1, 4}
    assert {n for _, _, n in sizes} == {1, 2}
    assert all(stored[f"{n}/in/xs"].dtype == CELLS[n][4] for n in CELLS)
    assert golden.PATH.stat().st_size < 500_000


# --- torch_weights' errors -------------------------------------------------------------------


def torch_dict(gates: int = 4, layers: int = 1, n_in: int = 3, hidden: int = 5) -> dict:
    """A state dict of torch's names and shapes for ``gates`` gates (4 LSTM, 3 GRU, 1 RNN)."""
    rng, rows, sd = np.random.default_rng(0), gates * hidden, {}
    for k in range(layers):
        sd[f"weight_ih_l{k}"] = rng.normal(size=(rows, n_in if k == 0 else hidden))
        sd[f"weight_hh_l{k}"] = rng.normal(size=(rows, hidden))
        sd[f"bias_ih_l{k}"] = rng.normal(size=rows)
        sd[f"bias_hh_l{k}"] = rng.normal(size=rows)
    return sd


def edited(change: dict, drop: tuple[str, ...] = (), **shape: int) -> dict:
    sd = {**torch_dict(**shape), **change}
    return {k: v for k, v in sd.items() if k not in drop}


FROM_TORCH_ERRORS = {
    "a list": ([("weight_ih_l0", np.zeros((20, 3)))], TypeError,
               r"expected a state dict \(a mapping of names to arrays\) or a torch module, got "
               "a list$"),
    "empty": ({}, ValueError, "holds no weights"),
    "unknown key": (edited({"running_mean": np.zeros(5)}), ValueError,
                    "unexpected key 'running_mean'"),
    "bidirectional": (edited({"weight_ih_l0_reverse": np.zeros((20, 3))}), ValueError,
                      r"unexpected key 'weight_ih_l0_reverse': the state dict of one nn.LSTM or "
                      r"nn.GRU \(weight_ih_l0, ...\), nn.Embedding \(weight\) or nn.Linear "
                      r"\(weight, bias\) loads, a whole model's with layout=; bidirectional "
                      r"modules \(_reverse\) and LSTMs with proj_size \(weight_hr\) have no "
                      r"dualtape layer$"),
    "proj_size": (edited({"weight_hr_l0": np.zeros((2, 5))}), ValueError,
                  r"unexpected key 'weight_hr_l0'.*proj_size"),
    "nn.RNN": (torch_dict(gates=1), ValueError, r"\(5, 3\) and \(5, 5\) are neither an LSTM"),
    "weight_hh rows": (edited({"weight_hh_l0": np.zeros((15, 5))}), ValueError,
                       r"\(20, 3\) and \(15, 5\) are neither"),
    "3-d weight": (edited({"weight_ih_l0": np.zeros((20, 3, 1))}), ValueError, "are neither"),
    "1-d weight_hh": (edited({"weight_hh_l0": np.zeros(20)}), ValueError, "are neither"),
    "bias shape": (edited({"bias_hh_l0": np.zeros(15)}), ValueError,
                   r"bias_hh has shape \(15,\), expected \(20,\)"),
    "layer 1's input": (edited({"weight_ih_l1": np.zeros((20, 4))}, layers=2), ValueError,
                        r"layer 1 \(StandardLSTM\(4, 5\)\) does not follow layer 0 "
                        r"\(StandardLSTM\(3, 5\)\)$"),
    "LSTM on GRU": ({**torch_dict(gates=3), **{k.replace("l0", "l1"): v for k, v in
                                                  torch_dict(hidden=5, n_in=5).items()}},
                    ValueError, r"layer 1 \(StandardLSTM\(5, 5\)\) does not follow"),
    "integers": (edited({"bias_ih_l0": np.zeros(20, dtype=np.int64)}), TypeError,
                 "bias_ih_l0 holds int64 numbers, not floating point"),
    "ragged": (edited({"weight_ih_l0": [[1.0, 2.0], [3.0]]}), TypeError,
               "weight_ih_l0 is not an array on the host"),
    "gap": ({k.replace("_l1", "_l2"): v for k, v in torch_dict(layers=2).items()}, ValueError,
            r"numbered \[0, 2\]; expected 0 to 1"),
    "no weight_hh": (edited({}, drop=("weight_hh_l0",)), ValueError,
                     "layer 0 lacks weight_ih or weight_hh"),
    "repeated": (edited({"weight_ih": np.zeros((20, 3))}), ValueError,
                 "'weight_ih' repeats a weight"),
    "leading zero": (edited({"weight_ih_l01": np.zeros((20, 3))}), ValueError,
                     "unexpected key 'weight_ih_l01'"),
    "cell and module keys": ({**{k.replace("_l0", ""): v for k, v in torch_dict().items()},
                              **{k.replace("l0", "l1"): v for k, v in
                                 torch_dict(n_in=5).items()}},
                             ValueError, r"mixes a cell's keys \(weight_ih\) with a module's "
                                         r"\(weight_ih_l0\)$"),
    "one bias": (edited({}, drop=("bias_hh_l0",)), ValueError,
                 r"layer 0 has only one of bias_ih and bias_hh; a torch module has both, or "
                 r"neither \(bias=False\)$"),
    "hidden sizes differ": ({**torch_dict(), **{k.replace("l0", "l1"): v for k, v in
                                                torch_dict(hidden=6, n_in=5).items()}},
                            ValueError, r"layer 1 \(StandardLSTM\(5, 6\)\) does not follow"),
}


@pytest.mark.parametrize("name", sorted(FROM_TORCH_ERRORS))
def test_from_torch_refuses_in_one_line(name):
    state_dict, kind, match = FROM_TORCH_ERRORS[name]
    with pytest.raises(kind, match=match) as caught:
        dualtape.from_torch(state_dict)
    assert str(caught.value).startswith("from_torch: ") and "\n" not in str(caught.value)


@pytest.mark.parametrize("key", ["weight_hh_l0", "bias_ih_l1"])
def test_from_torch_refuses_weights_of_two_dtypes_unless_one_is_asked_for(key):
    state_dict = torch_dict(layers=2)
    state_dict[key] = np.asarray(state_dict[key], dtype=np.float32)
    with pytest.raises(ValueError, match=r"^from_torch: the state dict mixes float32 and "
                                         r"float64 weights; pass dtype='float32' or 'float64' "
                                         r"to cast them all$"):
        dualtape.from_torch(state_dict)
    layers = dualtape.from_torch(state_dict, dtype="float64")
    assert {layer.dtype for layer in layers} == {"float64"}


def test_from_torch_refuses_a_dtype_it_cannot_make():
    with pytest.raises(ValueError, match="^from_torch: dtype must be 'float32' or 'float64', "
                                         "got 'float16'"):
        dualtape.from_torch(torch_dict(), dtype="float16")


LSTMS = dualtape.from_torch(torch_dict(layers=2))
GRUS = dualtape.from_torch(torch_dict(gates=3))
H, C = np.zeros((2, 4, 5)), np.zeros((2, 4, 5))

OTHER_ERRORS = {
    "to_torch of nothing": (lambda: dualtape.to_torch([]), TypeError, r"got \[\]"),
    "to_torch of a network": (lambda: dualtape.to_torch(dualtape.RecurrentNetwork(LSTMS)),
                              TypeError, "got a RecurrentNetwork"),
    "to_torch of an int": (lambda: dualtape.to_torch(3), TypeError,
                           "GRU layers, an Embedding or a FullyConnected, got an int"),
    "to_torch of an Elu": (lambda: dualtape.to_torch(dualtape.Elu()), TypeError,
                           "got an Elu$"),
    "to_torch of Grenade's LSTM": (lambda: dualtape.to_torch([dualtape.LSTM(3, 5)]), TypeError,
                                   r"got \['LSTM'\]"),
    "to_torch of a mix": (lambda: dualtape.to_torch([LSTMS[0], dualtape.GRU(5, 5)]), ValueError,
                          r"layer 1 \(GRU\(5, 5\)\) does not stack on layer 0 "
                          r"\(StandardLSTM\(3, 5\)\) as one torch module's layers do$"),
    "to_torch of two widths": (lambda: dualtape.to_torch([LSTMS[0], dualtape.StandardLSTM(5, 6)]),
                               ValueError, "does not stack"),
    "state of one layer": (lambda: dualtape.state_from_torch(LSTMS[0], H[:1], C[:1]), TypeError,
                           "got a StandardLSTM"),
    "state without c": (lambda: dualtape.state_from_torch(LSTMS, H), ValueError,
                        "an LSTM's state needs c as well as h"),
    "GRU state with c": (lambda: dualtape.state_from_torch(GRUS, H[:1], C[:1]), ValueError,
                         "a GRU's has h only"),
    "state of 1 layer for 2": (lambda: dualtape.state_from_torch(LSTMS, H[:1], C[:1]),
                               ValueError, r"h must be \(num_layers=2, batch, hidden\)"),
    "state of 4-d h": (lambda: dualtape.state_from_torch(LSTMS, H[None], C[None]), ValueError,
                       r"h must be .* got \(1, 2, 4, 5\)"),
    "c of another width": (lambda: dualtape.state_from_torch(LSTMS, H, np.zeros((2, 4, 6))),
                           ValueError, r"c must have h's shape \(2, 4, 5\), got \(2, 4, 6\)"),
    "c of another batch": (lambda: dualtape.state_from_torch(LSTMS, H, C[:, :3]), ValueError,
                           r"got \(2, 3, 5\)"),
    "c of one layer": (lambda: dualtape.state_from_torch(LSTMS, H, C[:1]), ValueError,
                       r"got \(1, 4, 5\)"),
    "h of another width": (lambda: dualtape.state_from_torch(GRUS, np.zeros((1, 4, 6))),
                           ValueError, r"GRU\(3, 5\)\) has 5 units, the state 6"),
    "integer h": (lambda: dualtape.state_from_torch(GRUS, np.zeros((1, 4, 5), dtype=int)),
                  TypeError, "state_from_torch: h holds int64 numbers"),
    "states for 2 layers, 1 given": (lambda: dualtape.state_to_torch(LSTMS, [np.zeros((4, 10))]),
                                     ValueError, "2 layers but 1 states"),
    "integer c": (lambda: dualtape.state_from_torch(LSTMS, H, C.astype(int)), TypeError,
                  "^state_from_torch: c holds int64 numbers"),
    "states of an int": (lambda: dualtape.state_to_torch(3, []), TypeError,
                         "^state_to_torch: expected a list of StandardLSTM or GRU layers, got an "
                         "int$"),
}


@pytest.mark.parametrize("dtype", golden.DTYPES)
def test_states_from_torch_go_where_the_layers_are_in_their_dtype(backend, dtype):
    """Batched ``(num_layers, batch, hidden)`` and unbatched ``(num_layers, hidden)`` states,
    made while another backend is selected, are on the layers' backend, in their dtype."""
    layers = dualtape.from_torch(torch_dict(layers=2), dtype=dtype)
    reference = layers[0].params["W_ih"]
    rng = np.random.default_rng(2)
    for shape in ((2, 4, 5), (2, 5)):
        h, c = rng.normal(size=shape), rng.normal(size=shape)
        with dualtape.use_backend("numpy"):
            states = dualtape.state_from_torch(layers, h, c)
        for k, state in enumerate(states):
            assert type(state) is type(reference) and state.dtype == reference.dtype
            assert getattr(state, "device", None) == getattr(reference, "device", None)
            np.testing.assert_array_equal(np64(state), np.concatenate([h[k], c[k]], axis=-1)
                                          .astype(dtype))
        back = dualtape.state_to_torch(layers, states)
        assert all(np.array_equal(b, a.astype(dtype)) for a, b in zip((h, c), back, strict=True))


@pytest.mark.parametrize("name", sorted(OTHER_ERRORS))
def test_to_torch_and_the_state_functions_refuse_in_one_line(name):
    call, kind, match = OTHER_ERRORS[name]
    with pytest.raises(kind, match=match) as caught:
        call()
    assert str(caught.value).split(": ")[0] in ("to_torch", "state_from_torch", "state_to_torch")
    assert "\n" not in str(caught.value)


# --- live, where torch is installed ----------------------------------------------------------


def test_the_fixture_is_what_torch_computes_today(stored):
    need_torch()
    fresh = golden.golden()
    assert fresh.keys() == stored.keys() - {"torch_version"}
    for key, value in fresh.items():
        if "/in/" in key:
            assert np.array_equal(value, stored[key]) and value.dtype == stored[key].dtype, key
        else:
            tolerance = TRAIN_TOLERANCE if key.startswith("train") else None
            assert_close(value, stored[key], str(value.dtype), key, tolerance)


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("dtype", golden.DTYPES)
@pytest.mark.parametrize("cell", sorted(golden.GATES))
def test_fresh_weights_follow_torch_live(backend, cell, dtype, layers):
    need_torch()
    inputs = golden.cell_inputs(4242 + layers, cell, 9, 3, layers, dtype, n_in=4, hidden=6)
    expected = golden.run_torch_cell(cell, inputs)
    assert_like_torch(run_sequence(inputs), expected, dtype)
    assert_like_torch(run_steps(inputs), expected, dtype)


@pytest.mark.parametrize("cell", sorted(golden.GATES))
def test_to_torch_loads_into_a_torch_module_that_then_computes_the_same(cell):
    torch = need_torch()
    kind = dualtape.StandardLSTM if cell == "lstm" else dualtape.GRU
    layers = [kind(4, 6, seed=1, dtype="float64"), kind(6, 6, seed=2, dtype="float64")]
    module = getattr(torch.nn, cell.upper())(4, 6, num_layers=2, dtype=torch.float64)
    sd = dualtape.to_torch(layers)
    module.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=True)
    for key, value in module.state_dict().items():
        assert np.array_equal(value.numpy(), sd[key]), key
    xs = np.random.default_rng(5).normal(size=(6, 2, 4))
    _, _, ys = dualtape.RecurrentNetwork(layers).forward_sequence(None, xs)
    assert_close(ys, module(torch.from_numpy(xs))[0].detach().numpy(), "float64", "ys")


@pytest.mark.parametrize("cell", sorted(golden.GATES))
def test_cell_modules_load_and_step_as_torch_does(cell):
    torch = need_torch()
    module = getattr(torch.nn, f"{cell.upper()}Cell")(3, 5, dtype=torch.float64)
    sd = {k: v.numpy() for k, v in module.state_dict().items()}
    (layer,) = dualtape.from_torch(sd)
    assert set(dualtape.to_torch(layer)) == {f"{k}_l0" for k in sd}
    rng = np.random.default_rng(6)
    x, dy = rng.normal(size=(4, 3)), rng.normal(size=(4, 5))
    hc = [rng.normal(size=(4, 5)) for _ in range(2 if cell == "lstm" else 1)]
    tx, *thc = (torch.tensor(a, requires_grad=True) for a in (x, *hc))
    out = module(tx, tuple(thc)) if cell == "lstm" else module(tx, thc[0])
    h1 = out[0] if cell == "lstm" else out
    (h1 * torch.from_numpy(dy)).sum().backward()
    (state,) = dualtape.state_from_torch([layer], *(a[None] for a in hc))
    tape, _, y = layer.forward(state, x)
    grads, dstate, dx = layer.backward(tape, None, dy)
    assert_close(y, h1.detach().numpy(), "float64", "h'")
    assert_close(dx, tx.grad.numpy(), "float64", "dx")
    for name, d in zip(("dh", "dc"), dualtape.state_to_torch([layer], [dstate]), strict=False):
        assert_close(d[0], thc[name == "dc"].grad.numpy(), "float64", name)
    for key, g in torch_names([grads]).items():
        assert_close(g, dict(module.named_parameters())[key[:-3]].grad.numpy(), "float64", key)


@pytest.mark.parametrize("cell", sorted(golden.GATES))
def test_modules_without_biases_load_with_zero_biases(cell):
    torch = need_torch()
    module = getattr(torch.nn, cell.upper())(3, 5, num_layers=2, bias=False, dtype=torch.float64)
    layers = dualtape.from_torch({k: v.numpy() for k, v in module.state_dict().items()})
    for layer in layers:
        assert all(not np64(layer.params[b]).any() for b in ("b_ih", "b_hh"))
    xs = np.random.default_rng(7).normal(size=(5, 2, 3))
    _, _, ys = dualtape.RecurrentNetwork(layers).forward_sequence(None, xs)
    assert_close(ys, module(torch.from_numpy(xs))[0].detach().numpy(), "float64", "ys")


def test_tensors_load_directly_unless_they_need_their_gradients():
    torch = need_torch()
    module = torch.nn.GRU(3, 5, dtype=torch.float64)
    (layer,) = dualtape.from_torch(module.state_dict())
    assert dualtape.to_torch(layer).keys() == module.state_dict().keys()
    with pytest.raises(TypeError, match="weight_ih_l0 is not an array on the host") as caught:
        dualtape.from_torch(dict(module.named_parameters()))
    assert "\n" not in str(caught.value)
