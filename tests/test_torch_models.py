"""Whole torch models and nn.Linear, both ways: ``from_torch`` of a state dict with its layout
against torch's committed outputs (``fixtures/torch_models_golden.npz``) on every backend, so CI
checks them without torch; ``to_torch(..., like=...)`` giving the state dict back bit for bit;
the refusals; and live runs of torch modules where torch is installed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dualtape

from .conftest import np64
from .fixtures import make_torch_models_golden as golden
from .test_cells_torch import assert_close, need_torch

RECURRENT = {"lstm", "gru"}
FORECASTER_LAYERS = ["StandardLSTM", "StandardLSTM", "FullyConnected"]
LAYERS = {"forecaster": FORECASTER_LAYERS, "forecaster-float32": FORECASTER_LAYERS,
          "classifier": ["Embedding", "GRU", "FullyConnected", "Softmax"],
          "mlp": ["FullyConnected", "Relu", "FullyConnected", "Tanh", "FullyConnected", "Elu",
                  "FullyConnected", "Logit"]}
"""Each case's dualtape layers."""


@pytest.fixture(scope="module")
def stored() -> dict[str, np.ndarray]:
    with np.load(golden.PATH, allow_pickle=False) as archive:
        return {k: archive[k] for k in archive.files}


def case(stored: dict[str, np.ndarray], name: str) -> tuple[dict[str, np.ndarray], Any, Any]:
    """A case's state dict (copies), input and torch's output."""
    prefix = f"{name}/sd/"
    sd = {k[len(prefix):]: v.copy() for k, v in stored.items() if k.startswith(prefix)}
    return sd, stored[f"{name}/x"], stored[f"{name}/y"]


def outputs(net: Any, x: Any) -> Any:
    """The network's output for ``x`` (every step's, for a recurrent one)."""
    if isinstance(net, dualtape.RecurrentNetwork):
        return net.predict_sequence(None, x)[1]
    return net.predict(x)


# --- committed numbers, every backend --------------------------------------------------------


@pytest.mark.parametrize("name", sorted(golden.CASES))
def test_models_give_torchs_outputs_from_a_state_dict_and_its_layout(backend, stored, name):
    layout, _, dtype = golden.CASES[name]
    sd, x, y = case(stored, name)
    net = dualtape.from_torch(sd, layout=layout)
    kind = dualtape.RecurrentNetwork if RECURRENT & set(layout) else dualtape.Network
    assert type(net) is kind
    assert [type(layer).__name__ for layer in net.layers] == LAYERS[name]
    found = outputs(net, dualtape.asarray(x))
    assert dualtape.to_numpy(found).dtype == dtype
    assert_close(found, y, dtype, name)


@pytest.mark.parametrize("name", sorted(golden.CASES))
def test_to_torch_like_the_state_dict_gives_it_back_bit_for_bit(backend, stored, name):
    layout = golden.CASES[name][0]
    sd, _, _ = case(stored, name)
    back = dualtape.to_torch(dualtape.from_torch(sd, layout=layout), like=sd, layout=layout)
    assert list(back) == list(sd)
    for key, value in back.items():
        assert type(value) is np.ndarray and value.dtype == sd[key].dtype, key
        assert np.array_equal(value, sd[key]), key


def test_the_fixture_holds_every_case(stored):
    assert {key.split("/")[0] for key in stored if "/" in key} == set(golden.CASES)
    assert stored["mlp/sd/tail.0.weight"].shape == (6, 8) and "mlp/sd/tail.2.bias" not in stored
    assert golden.PATH.stat().st_size < 100_000


def linear_dict(out: int = 3, n_in: int = 5, dtype: str = "float64") -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {"weight": rng.normal(size=(out, n_in)).astype(dtype),
            "bias": rng.normal(size=out).astype(dtype)}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_linear_state_dict_is_a_fully_connected_layer_in_torchs_layout(backend, dtype):
    """torch's ``y = x Wᵀ + b`` with ``weight`` ``(out, in)``: ``FullyConnected(in, out)``."""
    sd = linear_dict(dtype=dtype)
    (layer,) = dualtape.from_torch(sd)
    assert type(layer) is dualtape.FullyConnected and (layer.n_in, layer.n_out) == (5, 3)
    assert layer.dtype == dtype
    x = np.random.default_rng(4).normal(size=(4, 5)).astype(dtype)
    _, y = layer.forward(dualtape.asarray(x))
    assert_close(y, x.astype(np.float64) @ sd["weight"].T + sd["bias"], dtype, "y")
    for made in (layer, [layer]):
        back = dualtape.to_torch(made)
        assert list(back) == ["weight", "bias"]
        assert all(np.array_equal(back[k], v) and back[k].dtype == v.dtype for k, v in sd.items())


def test_a_linear_without_bias_loads_with_a_zero_bias_and_keeps_it(backend):
    """``nn.Linear(bias=False)``'s ``{"weight"}`` is an Embedding's too: the layout tells."""
    weight = {"weight": linear_dict()["weight"]}
    net = dualtape.from_torch(weight, layout=["linear"])
    (layer,) = net.layers
    assert type(layer) is dualtape.FullyConnected and not np64(layer.params["b"]).any()
    assert type(dualtape.from_torch(weight)[0]) is dualtape.Embedding
    back = dualtape.to_torch(net, like=weight, layout=["linear"])
    assert list(back) == ["weight"] and np.array_equal(back["weight"], weight["weight"])
    layer.params = {"W": layer.params["W"], "b": layer.params["b"] + 1}
    with pytest.raises(ValueError, match=r"^to_torch: FullyConnected\(5, 3\)'s bias is not "
                                         r"zero, but the model in like has none \(bias=False\)"):
        dualtape.to_torch(net, like=weight, layout=["linear"])


def test_one_wide_layers_load():
    """An embedding of one column, and a linear layer of one input and one output."""
    (embedding,) = dualtape.from_torch({"weight": np.ones((4, 1))})
    assert (embedding.vocab, embedding.n) == (4, 1)
    (layer,) = dualtape.from_torch({"weight": np.ones((1, 1)), "bias": np.ones(1)})
    assert (layer.n_in, layer.n_out) == (1, 1)


def test_a_whole_model_takes_one_dtype(stored):
    sd, x, y = case(stored, "forecaster")
    sd["head.bias"] = sd["head.bias"].astype(np.float32)
    with pytest.raises(ValueError, match="^from_torch: the state dict mixes float32 and float64"):
        dualtape.from_torch(sd, layout=["lstm", "linear"])
    net = dualtape.from_torch(sd, layout=["lstm", "linear"], dtype="float32")
    assert {dualtape.to_numpy(p).dtype for layer in net.layers for p in layer.params.values()
            } == {np.dtype("float32")}
    assert_close(outputs(net, x.astype(np.float32)), y, "float32", "y")


def test_a_models_layers_hold_copies_of_its_arrays(stored):
    sd, x, y = case(stored, "mlp")
    net = dualtape.from_torch(sd, layout=golden.CASES["mlp"][0])
    for value in sd.values():
        value += 1.0
    assert_close(outputs(net, x), y, "float64", "y")


# --- refusals without torch ------------------------------------------------------------------

FORECASTER = {"lstm.weight_ih_l0": np.zeros((8, 1)), "lstm.weight_hh_l0": np.zeros((8, 2)),
              "lstm.bias_ih_l0": np.zeros(8), "lstm.bias_hh_l0": np.zeros(8),
              "head.weight": np.zeros((1, 2)), "head.bias": np.zeros(1)}

LAYOUT_ERRORS = {
    "a string": (FORECASTER, "lstm", TypeError, "layout must be a list of module kinds"),
    "empty": (FORECASTER, [], TypeError, r"layout must be a list .* got \[\]"),
    "a list of pairs": ([("w", np.zeros(2))], ["linear"], TypeError,
                        "layout= goes with a state dict, got a list"),
    "an unknown kind": (FORECASTER, ["lstm", "dense"], ValueError,
                        r"layout\[1\] is 'dense'; the kinds are embedding, lstm, gru, linear"),
    "too few modules": (FORECASTER, ["lstm", "tanh"], ValueError,
                        r"layout names 1 modules with weights \(lstm\) but the state dict "
                        r"holds 2 \('lstm', 'head'\)"),
    "too many modules": (FORECASTER, ["lstm", "linear", "linear"], ValueError,
                         "layout names 3 modules"),
    "kinds swapped": (FORECASTER, ["linear", "lstm"], ValueError,
                      r"module 'lstm' \(nn.Linear\): an nn.Linear's state dict is weight and "
                      r"bias .*got \['weight_ih_l0'"),
    "a GRU for an LSTM": (FORECASTER, ["gru", "linear"], ValueError,
                          r"module 'lstm' \(nn.GRU\): its weights are a StandardLSTM's, not "
                          r"an nn.GRU's"),
    "an embedding for a linear": (FORECASTER, ["lstm", "embedding"], ValueError,
                                  r"module 'head' \(nn.Embedding\): an nn.Embedding's state "
                                  r"dict is its weight alone, got \['weight', 'bias'\]"),
    "modules that do not chain": ({**FORECASTER, "head.weight": np.zeros((1, 3))},
                                  ["lstm", "linear"], ValueError,
                                  r"the modules do not chain: RecurrentNetwork: layer 1 "
                                  r"FullyConnected\(3, 1\) takes 3 features"),
    "an integer weight": ({**FORECASTER, "head.bias": np.zeros(1, dtype=int)},
                          ["lstm", "linear"], TypeError, "head.bias holds int64 numbers"),
    "one module's integer weight": ({"weight": np.zeros((2, 3), dtype=int)}, ["linear"],
                                    TypeError, "^from_torch: weight holds int64 numbers"),
    "a 1-d linear weight": ({"weight": np.zeros(3), "bias": np.zeros(3)}, ["linear"],
                            ValueError, r"nn.Linear's weight is \(out_features, in_features\), "
                                        r"got \(3,\)"),
    "an empty linear weight": ({"weight": np.zeros((0, 3))}, ["linear"], ValueError,
                               r"got \(0, 3\)"),
    "a bias too long": ({"weight": np.zeros((2, 3)), "bias": np.zeros(3)}, ["linear"],
                        ValueError, r"bias is \(out_features,\) = \(2,\) for weight \(2, 3\), "
                                    r"got \(3,\)"),
    "a linear's extra key": ({"weight": np.zeros((2, 3)), "bias": np.zeros(2),
                              "scale": np.zeros(2)}, ["linear"], ValueError,
                             r"weight and bias .*got \['weight', 'bias', 'scale'\]"),
    "a linear without weight": ({"bias": np.zeros(2)}, ["linear"], ValueError,
                                r"got \['bias'\]"),
}


@pytest.mark.parametrize("name", sorted(LAYOUT_ERRORS))
def test_from_torch_refuses_a_layout_in_one_line(name):
    state_dict, layout, kind, match = LAYOUT_ERRORS[name]
    with pytest.raises(kind, match=match) as caught:
        dualtape.from_torch(state_dict, layout=layout)
    assert str(caught.value).startswith("from_torch: ") and "\n" not in str(caught.value)


STATE_DICT_ERRORS = {
    "a batch norm's key": ({"running_mean": np.zeros(3)}, r"unexpected key 'running_mean': .*"
                           r"nn.Embedding \(weight\) or nn.Linear \(weight, bias\) loads"),
    "a linear's bias shape": ({"weight": np.zeros((2, 3)), "bias": np.zeros((2, 1))},
                              r"bias is \(out_features,\)"),
    "an empty embedding": ({"weight": np.zeros((0, 3))},
                           r"an nn.Embedding's weight is \(vocab, n\), got \(0, 3\)$"),
    "a whole model without its layout": (FORECASTER, "unexpected key 'lstm.weight_ih_l0'.*"
                                                     "a whole model's with layout="),
}


@pytest.mark.parametrize("name", sorted(STATE_DICT_ERRORS))
def test_from_torch_refuses_a_state_dict_it_cannot_map_in_one_line(name):
    state_dict, match = STATE_DICT_ERRORS[name]
    with pytest.raises(ValueError, match=match) as caught:
        dualtape.from_torch(state_dict)
    assert str(caught.value).startswith("from_torch: ") and "\n" not in str(caught.value)


def forecaster_net() -> Any:
    return dualtape.from_torch(FORECASTER, layout=["lstm", "linear"])


def biased_forecaster() -> Any:
    """``forecaster_net()`` with a bias of ones in its head."""
    net = forecaster_net()
    head = net.layers[-1]
    head.params = {"W": head.params["W"], "b": head.params["b"] + 1.0}
    return net


NO_HEAD_BIAS = {k: v for k, v in FORECASTER.items() if k != "head.bias"}
"""The forecaster's state dict with an ``nn.Linear(2, 1, bias=False)`` head."""


TO_TORCH_ERRORS = {
    "a network without like": (lambda: dualtape.to_torch(forecaster_net()), TypeError,
                               "got a RecurrentNetwork, whose keys are its torch model's: "
                               "pass like="),
    "layout without like": (lambda: dualtape.to_torch(forecaster_net(), layout=["lstm"]),
                            TypeError, "layout= describes like=, which is missing"),
    "like without layout": (lambda: dualtape.to_torch(forecaster_net(), like=FORECASTER),
                            TypeError, "like: expected the torch model, or its state dict with "
                                       "layout=, got a dict"),
    "like's layout refused": (lambda: dualtape.to_torch(forecaster_net(), like=FORECASTER,
                                                        layout=["gru", "linear"]),
                              ValueError, r"^to_torch: like: module 'lstm' \(nn.GRU\)"),
    "not a network": (lambda: dualtape.to_torch(3, like=FORECASTER, layout=["lstm", "linear"]),
                      TypeError, "expected a network or a list of layers, got a int"),
    "not layers": (lambda: dualtape.to_torch([dualtape.StandardLSTM(1, 2), 2], like=FORECASTER,
                                             layout=["lstm", "linear"]),
                   TypeError, "expected a network or a list of layers, got a list$"),
    "a layer count": (lambda: dualtape.to_torch(forecaster_net().layers[:1], like=FORECASTER,
                                                layout=["lstm", "linear"]),
                      ValueError, "1 layers, but like's model maps to 2"),
    "a layer's kind": (lambda: dualtape.to_torch(
        [dualtape.GRU(1, 2), dualtape.FullyConnected(2, 1)], like=FORECASTER,
        layout=["lstm", "linear"]), ValueError,
        r"layer 0 \(GRU\(1, 2\)\) is not like's StandardLSTM\(1, 2\) \(module 'lstm'\)"),
    "a layer's shape": (lambda: dualtape.to_torch(
        [dualtape.StandardLSTM(1, 2), dualtape.FullyConnected(2, 2)], like=FORECASTER,
        layout=["lstm", "linear"]), ValueError,
        r"layer 1 \(FullyConnected\(2, 2\)\) is not like's FullyConnected\(2, 1\) "
        r"\(module 'head'\)"),
    "an activation for a layer": (lambda: dualtape.to_torch(
        [dualtape.StandardLSTM(1, 2), dualtape.Tanh()], like={"weight_ih_l0": np.zeros((8, 1)),
         "weight_hh_l0": np.zeros((8, 2))}, layout=["lstm", "sigmoid"]), ValueError,
        r"layer 1 \(Tanh\(\)\) is not like's Logit\(\)$"),
    "a stack's zero bias": (lambda: dualtape.to_torch(
        [dualtape.StandardLSTM(1, 2, seed=1)], like={"weight_ih_l0": np.zeros((8, 1)),
                                                      "weight_hh_l0": np.zeros((8, 2))},
        layout=["lstm"]), ValueError,
        r"StandardLSTM\(1, 2\)'s bias_hh_l0 is not zero, but the model in like"),
    "a head's bias": (lambda: dualtape.to_torch(biased_forecaster(), like=NO_HEAD_BIAS,
                                                layout=["lstm", "linear"]), ValueError,
                      r"FullyConnected\(2, 1\)'s bias is not zero, but module 'head' in like "
                      r"has none \(bias=False\)$"),
}


@pytest.mark.parametrize("name", sorted(TO_TORCH_ERRORS))
def test_to_torch_refuses_a_model_it_does_not_match_in_one_line(name):
    call, kind, match = TO_TORCH_ERRORS[name]
    with pytest.raises(kind, match=match) as caught:
        call()
    assert str(caught.value).startswith("to_torch: ") and "\n" not in str(caught.value)


def test_to_torch_takes_a_like_of_any_float_dtypes():
    """``like`` gives the keys and shapes: its dtypes, even two, do not matter."""
    like = {**FORECASTER, "head.bias": FORECASTER["head.bias"].astype(np.float32)}
    back = dualtape.to_torch(forecaster_net(), like=like, layout=["lstm", "linear"])
    assert list(back) == list(like) and {v.dtype for v in back.values()} == {np.dtype("float64")}


def test_a_models_stack_and_cells_go_back_under_their_own_keys():
    """An LSTM loaded from a cell's keys (``weight_ih``) goes back under them; one built
    without biases, whose biases stayed zero, gives none back."""
    cell = {k.replace("_l0", ""): v for k, v in FORECASTER.items() if k.startswith("lstm.")}
    net = dualtape.from_torch(cell, layout=["lstm"])
    assert list(dualtape.to_torch(net, like=cell, layout=["lstm"])) == list(cell)
    no_bias = {k: v for k, v in FORECASTER.items() if "weight" in k}
    net = dualtape.from_torch(no_bias, layout=["lstm", "linear"])
    assert list(dualtape.to_torch(net, like=no_bias, layout=["lstm", "linear"])) == list(no_bias)


# --- live, where torch is installed ----------------------------------------------------------


def test_the_fixture_is_what_torch_computes_today(stored):
    need_torch()
    fresh = golden.golden()
    assert fresh.keys() == stored.keys() - {"torch_version"}
    for key, value in fresh.items():
        if key.endswith("/y"):
            assert_close(value, stored[key], str(value.dtype), key)
        else:
            assert np.array_equal(value, stored[key]) and value.dtype == stored[key].dtype, key


def torch_outputs(torch: Any, model: Any, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


@pytest.mark.parametrize("name", sorted(golden.CASES))
def test_torch_models_move_both_ways_live(backend, name):
    """A fresh torch model in one call, its outputs torch's; its state dict back bit for bit;
    then changed weights loaded into the torch model give dualtape's outputs there."""
    torch = need_torch()
    model, (_, shape, dtype) = golden.model(torch, name, seed=7), golden.CASES[name]
    rng = np.random.default_rng(8)
    x = (rng.integers(0, golden.VOCAB, size=shape) if name == "classifier"
         else rng.normal(size=shape).astype(dtype))
    net = dualtape.from_torch(model)
    assert_close(outputs(net, dualtape.asarray(x)), torch_outputs(torch, model, x), dtype, "y")
    back = dualtape.to_torch(net, like=model)
    assert list(back) == list(model.state_dict())
    assert all(np.array_equal(back[k], v.numpy()) for k, v in model.state_dict().items())
    for layer in net.layers:  # the weights changed, the biases kept (zero where torch has none)
        layer.params = {k: v if k.startswith("b") else v * 0.5 + 0.125
                        for k, v in layer.params.items()}
    model.load_state_dict({k: torch.from_numpy(v) for k, v in
                           dualtape.to_torch(net, like=model).items()})
    ours = dualtape.to_numpy(outputs(net, dualtape.asarray(x)))
    assert_close(torch_outputs(torch, model, x), ours, dtype, "y'")


@pytest.mark.parametrize("bias", [True, False])
def test_linear_modules_compute_as_fully_connected_layers_live(backend, bias):
    torch = need_torch()
    torch.manual_seed(2)
    module = torch.nn.Linear(5, 3, bias=bias).double()
    net = dualtape.from_torch(module)
    assert type(net) is dualtape.Network and type(net.layers[0]) is dualtape.FullyConnected
    x = np.random.default_rng(9).normal(size=(4, 5))
    assert_close(outputs(net, dualtape.asarray(x)), torch_outputs(torch, module, x), "float64",
                 "y")
    assert list(dualtape.to_torch(net, like=module)) == list(module.state_dict())
    if bias:
        (layer,) = dualtape.from_torch({k: v.numpy() for k, v in module.state_dict().items()})
        twin = torch.nn.Linear(5, 3).double()
        twin.load_state_dict({k: torch.from_numpy(v) for k, v in
                              dualtape.to_torch(layer).items()})
        assert torch.equal(twin.weight, module.weight) and torch.equal(twin.bias, module.bias)


def test_the_forecaster_a_user_writes_loads_in_one_call():
    """The module a torch user has (its own forward, its children in registration order)."""
    torch = need_torch()
    nn = torch.nn

    class Forecaster(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(1, 32)
            self.head = nn.Linear(32, 1)

        def forward(self, x: Any) -> Any:
            return self.head(self.lstm(x)[0])

    torch.manual_seed(3)
    model = Forecaster().double()
    net = dualtape.from_torch(model)
    assert repr(net) == "RecurrentNetwork([StandardLSTM(1, 32), FullyConnected(32, 1)])"
    x = np.random.default_rng(1).normal(size=(52, 4, 1))
    assert_close(outputs(net, x), torch_outputs(torch, model, x), "float64", "y")


def test_half_precision_models_load_as_float32():
    torch = need_torch()
    model = golden.model(torch, "mlp").half()
    net = dualtape.from_torch(model)
    assert {dualtape.to_numpy(p).dtype for layer in net.layers for p in layer.params.values()
            } == {np.dtype("float32")}
    assert all(layer.dtype == "float32" for layer in net.layers if layer.params)


def test_a_softmax_over_the_features_by_its_positive_index_maps_live():
    torch = need_torch()
    nn = torch.nn
    assert type(dualtape.from_torch(nn.Sequential(nn.Linear(2, 3), nn.Softmax(dim=1))
                                    ).layers[1]) is dualtape.Softmax
    rnn = golden.chain(torch, {"gru": nn.GRU(2, 3), "p": nn.Softmax(dim=2)})
    assert type(dualtape.from_torch(rnn).layers[1]) is dualtape.Softmax


def module_errors(torch: Any) -> dict[str, tuple[Any, str]]:
    """``name -> (model, what the refusal says)``."""
    nn = torch.nn

    class Linear(nn.Linear):
        """A subclass: its forward may differ, so it is refused even under torch's name."""

    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.ones(1))
            self.head = nn.Linear(2, 2)

    supported = r"supported: nn.Embedding, nn.LSTM, nn.GRU, nn.Linear, .*nn.Softmax\(dim=-1\)"
    return {
        "dropout": (nn.Sequential(nn.Linear(2, 3), nn.Dropout(0.1)),
                    rf"module '1' is a Dropout, which has no dualtape layer; {supported}"),
        "an LSTM cell": (golden.chain(torch, {"cell": nn.LSTMCell(2, 3)}),
                         "module 'cell' is a LSTMCell"),
        "a subclass": (nn.Sequential(Linear(2, 2)), "module '0' is a Linear, which has no"),
        "own weights": (Scaled(), r"the model \(Scaled\) holds weights of its own \(scale\)"),
        "batch_first": (nn.LSTM(2, 3, batch_first=True),
                        r"the model \(nn.LSTM\) has batch_first=True: dualtape's sequences are "
                        r"\(time, batch, features\); its weights alone load from its "
                        r"state_dict\(\) with layout="),
        "a GRU batch_first": (golden.chain(torch, {"g": nn.GRU(2, 3, batch_first=True)}),
                              r"module 'g' \(nn.GRU\) has batch_first=True"),
        "bidirectional": (nn.GRU(2, 3, bidirectional=True),
                          "bidirectional=True, proj_size=0: dualtape's cells run one way"),
        "proj_size": (nn.LSTM(2, 3, proj_size=2), "bidirectional=False, proj_size=2"),
        "dropout between layers": (nn.LSTM(2, 3, num_layers=2, dropout=0.2),
                                   "dropout=0.2 between its layers"),
        "padding_idx": (nn.Embedding(5, 2, padding_idx=0), "padding_idx=0; its weights alone"),
        "max_norm": (nn.Embedding(5, 2, max_norm=1.0), "max_norm=1.0"),
        "scale_grad_by_freq": (nn.Embedding(5, 2, scale_grad_by_freq=True),
                               "scale_grad_by_freq=True"),
        "an ELU's alpha": (nn.ELU(alpha=0.5), "alpha=0.5: dualtape's Elu has alpha=1"),
        "a softmax without dim": (nn.Softmax(), r"dim=None \(torch picks the axis"),
        "a softmax over the batch": (nn.Sequential(nn.Linear(2, 2), nn.Softmax(dim=0)),
                                     r"module '1' \(nn.Softmax\(dim=0\)\) normalises another "
                                     r"axis than the features'"),
        "a softmax over time": (golden.chain(torch, {"g": nn.GRU(2, 3), "p": nn.Softmax(1)}),
                                r"nn.Softmax\(dim=1\)\) normalises another axis"),
        "modules that do not chain": (nn.Sequential(nn.Linear(2, 3), nn.Linear(4, 1)),
                                      "the modules do not chain: Network: layer 1"),
        "a layout with a module": (nn.Linear(2, 2),
                                   "layout= goes with a state dict; a module gives its own$"),
    }


def test_from_torch_refuses_modules_it_cannot_map_in_one_line():
    torch = need_torch()
    for name, (model, match) in module_errors(torch).items():
        layout = ["linear"] if name == "a layout with a module" else None
        with pytest.raises((ValueError, TypeError), match=match) as caught:
            dualtape.from_torch(model, layout=layout)
        assert str(caught.value).startswith("from_torch: ") and "\n" not in str(caught.value), name


def test_to_torch_refuses_a_network_unlike_the_torch_model_in_one_line():
    torch = need_torch()
    model = golden.model(torch, "classifier")
    unlike = dualtape.from_torch(golden.model(torch, "mlp"))
    with pytest.raises(ValueError, match=r"^to_torch: 8 layers, but like's model maps to 4$"):
        dualtape.to_torch(unlike, like=model)
    with pytest.raises(ValueError, match=r"^to_torch: like: module '1' is a Dropout"):
        dualtape.to_torch(unlike, like=torch.nn.Sequential(torch.nn.Linear(4, 8),
                                                           torch.nn.Dropout()))
