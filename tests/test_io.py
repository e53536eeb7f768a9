"""save/load: round trips across backends, the file format, and corrupted or mismatched files."""

from __future__ import annotations

import json
import pydoc
import typing
import zipfile

import numpy as np
import pytest

import dualtape
from dualtape.backend import backend_of, resolve_backend
from dualtape.distributed import DataParallel
from dualtape.optim import BOOKKEEPING

from .conftest import np64
from .helpers import assert_params_equal, deep_net, host_params

TARGETS = [("numpy", None), ("array_api_strict", None), ("array_api_strict", "device1"),
           ("cupy", None), ("torch", None)]


def usable_targets():
    for name, device in TARGETS:
        try:
            yield resolve_backend(name, device)
        except dualtape.BackendUnavailable:
            continue


def read_archive(path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def header_of(arrays: dict[str, np.ndarray]) -> dict:
    return json.loads(arrays["__header__"].tobytes().decode())


def rewrite(path, arrays: dict[str, np.ndarray], header: dict | None = None) -> None:
    """Write ``arrays`` (with ``header`` as the JSON header, if given) back to ``path``."""
    arrays = dict(arrays)
    if header is not None:
        arrays["__header__"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


@pytest.fixture
def path(tmp_path):
    """A numpy float64 network saved at ``tmp_path / "net.npz"``."""
    target = tmp_path / "net.npz"
    with dualtape.use_backend("numpy"):
        dualtape.save(deep_net(), target)
    return target


@pytest.fixture
def saved(backend, tmp_path):
    """A float64 network saved from the selected backend, and the path of its file."""
    net = deep_net()
    path = tmp_path / "net.npz"
    dualtape.save(net, path)
    return net, path


# --- round trips -----------------------------------------------------------------------------


def test_saved_on_one_backend_loads_on_every_other_with_the_same_outputs(saved):
    net, path = saved
    x = np.random.default_rng(0).normal(size=(3, 3))
    y = np64(net.predict(dualtape.asarray(x)))
    for target in usable_targets():
        loaded = dualtape.load(path, backend=target.name, device=target.device)
        assert type(loaded) is dualtape.Network
        assert [repr(layer) for layer in loaded.layers] == [repr(layer) for layer in net.layers]
        for group in loaded.params:
            for p in group.values():
                assert backend_of(p).name == target.name
                assert str(backend_of(p).device) == str(target.device)
        assert_params_equal(host_params(loaded), host_params(net))
        with dualtape.use_backend(target.name, target.device):
            np.testing.assert_allclose(np64(loaded.predict(dualtape.asarray(x))), y,
                                       rtol=1e-13, atol=1e-15)


def test_load_without_a_backend_uses_the_selected_one(saved, backend):
    _, path = saved
    loaded = dualtape.load(path)
    assert loaded.backend.name == backend.name
    assert str(loaded.backend.device) == str(backend.device)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dtype_survives_the_round_trip(backend, tmp_path, dtype):
    net = deep_net(dtype)
    dualtape.save(net, tmp_path / "net.npz")
    loaded = dualtape.load(tmp_path / "net.npz")
    assert loaded.dtype == dtype
    assert_params_equal(host_params(loaded), host_params(net))


def test_a_network_without_parameters_round_trips(backend, tmp_path):
    net = dualtape.Network([dualtape.Tanh(), dualtape.Softmax()])
    dualtape.save(net, tmp_path / "net.npz")
    loaded = dualtape.load(tmp_path / "net.npz")
    assert [layer.kind for layer in loaded.layers] == ["Tanh", "Softmax"]


def test_file_is_a_plain_npz_with_a_json_header(saved):
    net, path = saved
    arrays = read_archive(path)
    header = header_of(arrays)
    assert header["format"] == "dualtape" and isinstance(header["version"], int)
    assert header["dtype"] == "float64"
    assert [spec["kind"] for spec in header["layers"]] == [layer.kind for layer in net.layers]
    assert all(a.dtype != object for a in arrays.values())
    np.testing.assert_array_equal(arrays["layer0/W"], np64(net.params[0]["W"]))


def test_save_leaves_no_temporary_files(saved):
    _, path = saved
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_extra_values_round_trip(backend, tmp_path):
    path = tmp_path / "net.npz"
    dualtape.save(deep_net(), path, extra={"epoch": 3, "note": "hi", "vocab": np.arange(4)})
    extra = dualtape.load_extra(path)
    assert extra["epoch"] == 3 and extra["note"] == "hi"
    np.testing.assert_array_equal(extra["vocab"], np.arange(4))
    net, extra_too = dualtape.load_with_extra(path, backend="numpy")
    assert extra_too.keys() == extra.keys() and extra_too["epoch"] == 3
    assert net.backend.name == "numpy" and len(net.layers) == len(deep_net().layers)


def test_save_rejects_what_is_not_a_network(backend, tmp_path):
    with pytest.raises(TypeError, match="Network"):
        dualtape.save(dualtape.FullyConnected(2, 2), tmp_path / "net.npz")
    assert list(tmp_path.iterdir()) == []


# --- corrupted and mismatched files ----------------------------------------------------------


def truncated(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def random_bytes(path):
    path.write_bytes(np.random.default_rng(0).bytes(2000))


def empty(path):
    path.write_bytes(b"")


def other_zip(path):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("hello.txt", "not a network")


def npz_without_header(path):
    arrays = read_archive(path)
    del arrays["__header__"]
    rewrite(path, arrays)


def header_not_json(path):
    arrays = read_archive(path)
    arrays["__header__"] = np.frombuffer(b"{not json", dtype=np.uint8)
    rewrite(path, arrays)


def header_not_utf8(path):
    arrays = read_archive(path)
    arrays["__header__"] = np.frombuffer(b"\xff\xfe\xfa", dtype=np.uint8)
    rewrite(path, arrays)


def header_edit(**changes):
    def corrupt(path):
        arrays = read_archive(path)
        header = header_of(arrays)
        header.update(changes)
        rewrite(path, arrays, header)

    return corrupt


def layer_edit(k: int, **changes):
    def corrupt(path):
        arrays = read_archive(path)
        header = header_of(arrays)
        header["layers"][k].update(changes)
        rewrite(path, arrays, header)

    return corrupt


def parameter_edit(name: str, make):
    def corrupt(path):
        arrays = read_archive(path)
        if make is None:
            del arrays[name]
        else:
            arrays[name] = make(arrays[name])
        rewrite(path, arrays)

    return corrupt


def sizes_that_do_not_chain(path):
    """Layer 8 becomes FullyConnected(4, 3) with a matching W, after a layer that gives 3."""
    arrays = read_archive(path)
    header = header_of(arrays)
    header["layers"][8]["config"] = {"n_in": 4, "n_out": 3}
    header["layers"][8]["params"]["W"] = [3, 4]
    arrays["layer8/W"] = np.zeros((3, 4))
    rewrite(path, arrays, header)


CORRUPTIONS = [
    pytest.param(truncated, "not a dualtape file", id="truncated"),
    pytest.param(random_bytes, "not a dualtape file", id="random-bytes"),
    pytest.param(empty, "not a dualtape file", id="empty"),
    pytest.param(other_zip, "not a dualtape file", id="zip-not-npz"),
    pytest.param(npz_without_header, "not a dualtape file", id="npz-without-header"),
    pytest.param(header_not_json, "not a dualtape file", id="header-not-json"),
    pytest.param(header_not_utf8, "not a dualtape file", id="header-not-utf8"),
    pytest.param(header_edit(format="keras"), "not a dualtape file", id="other-format"),
    pytest.param(header_edit(version=2), "version 2.*upgrade", id="newer-version"),
    pytest.param(header_edit(network="Sequential"), "no known network", id="unknown-network"),
    pytest.param(header_edit(dtype="float16"), "no known network, dtype", id="unknown-dtype"),
    pytest.param(header_edit(layers="all of them"), "layer list", id="layers-not-a-list"),
    pytest.param(layer_edit(0, kind="Conv2D"), "unknown kind", id="unknown-layer-kind"),
    pytest.param(layer_edit(0, config={"n_in": 3, "n_out": 5, "bias": True}),
                 "settings .* invalid", id="unknown-config-key"),
    pytest.param(layer_edit(0, config={"n_in": -3, "n_out": 5}), "positive integer",
                 id="negative-size"),
    pytest.param(layer_edit(1, config={"alpha": 2}), "settings .* invalid",
                 id="activation-with-config"),
    pytest.param(layer_edit(2, config={"n_in": 6, "n_out": 4}),
                 r"layer 2 \(FullyConnected\(6, 4\)\) parameter W should be float64 \(4, 6\)",
                 id="sizes-disagree-with-parameters"),
    pytest.param(sizes_that_do_not_chain, "takes 4 features", id="sizes-do-not-chain"),
    pytest.param(parameter_edit("layer2/W", lambda w: w.T),
                 r"parameter W should be float64 \(4, 5\), found float64 \(5, 4\)",
                 id="wrong-parameter-shape"),
    pytest.param(parameter_edit("layer4/b", lambda b: b[:-1]),
                 r"parameter b should be float64 \(4,\)", id="short-bias"),
    pytest.param(parameter_edit("layer0/W", lambda w: w.astype(np.float32)), "found float32",
                 id="wrong-parameter-dtype"),
    pytest.param(parameter_edit("layer6/b", None), "missing", id="missing-parameter"),
]


@pytest.mark.parametrize("corrupt, reason", CORRUPTIONS)
def test_corrupted_or_mismatched_file_raises_value_error_with_the_reason(saved, corrupt, reason):
    _, path = saved
    corrupt(path)
    with pytest.raises(ValueError, match=reason) as info:
        dualtape.load(path)
    assert str(path) in str(info.value)


def test_corrupted_file_raises_for_load_extra_too(saved):
    _, path = saved
    truncated(path)
    with pytest.raises(ValueError, match="not a dualtape file"):
        dualtape.load_extra(path)


def test_a_bad_last_layer_gives_no_network_at_all(saved):
    # Everything up to the last parameter is fine; load must still fail as a whole.
    _, path = saved
    parameter_edit("layer8/b", lambda b: b[:-1])(path)
    with pytest.raises(ValueError, match="layer 8"):
        dualtape.load(path)


def test_a_missing_file_raises_file_not_found(backend, tmp_path):
    with pytest.raises(FileNotFoundError):
        dualtape.load(tmp_path / "nothing.npz")


def test_format_version_0_and_other_non_versions_are_refused(saved):
    _, path = saved
    arrays = read_archive(path)
    for version in (0, -1, True, 1.0, "1", None):
        rewrite(path, arrays, {**header_of(arrays), "version": version})
        with pytest.raises(ValueError, match="no valid format version") as info:
            dualtape.load(path)
        assert str(path) in str(info.value)
    rewrite(path, arrays, {**header_of(arrays), "version": dualtape.io.FORMAT_VERSION})
    assert len(dualtape.load(path).layers) == len(deep_net().layers)


# --- the types load returns ------------------------------------------------------------------


@pytest.mark.parametrize("read", [dualtape.load, dualtape.load_with_extra])
def test_load_is_documented_and_annotated_with_the_network_classes(read):
    hints = typing.get_type_hints(read, vars(dualtape.io))
    returned = hints["return"]
    expected = dualtape.Network | dualtape.RecurrentNetwork
    assert returned == expected or typing.get_args(returned)[0] == expected
    assert "Chain" not in pydoc.render_doc(read)


def test_a_recurrent_network_round_trips_as_one(backend, tmp_path):
    net = dualtape.RecurrentNetwork([dualtape.LSTM(3, 4, seed=1), dualtape.FullyConnected(4, 2,
                                                                                    seed=2)])
    dualtape.save(net, tmp_path / "rnn.npz")
    loaded = dualtape.load(tmp_path / "rnn.npz")
    assert type(loaded) is dualtape.RecurrentNetwork
    assert_params_equal(host_params(loaded), host_params(net))


# --- what save refuses, before touching the destination ---------------------------------------


class Doubling(dualtape.layers.Activation):
    """A user's own layer kind, which load cannot rebuild."""

    kind = "Doubling"

    def activate(self, xp, x):
        return 2 * x


class WiderTanh(dualtape.Tanh):
    """A user's subclass of a dualtape layer, which load would rebuild as a plain Tanh."""


class Network(dualtape.Network):
    """A user's subclass (of the same name), which load would rebuild as a plain Network."""


def replace_param(k: int, name: str, make):
    def edit(net):  # a whole new dict: params[name] = ... would refuse it at once
        params = net.layers[k].params
        net.layers[k].params = {**params, name: make(params[name])}

    return edit


def layer_at(k: int, layer):
    def edit(net):
        net.layers[k] = layer

    return edit


def params_edit(k: int, change):
    def edit(net):
        change(net.layers[k].params)

    return edit


UNLOADABLE = [
    pytest.param(layer_at(1, Doubling()), TypeError, "layer 1 is a Doubling", id="unknown-kind"),
    pytest.param(layer_at(1, WiderTanh()), TypeError, "layer 1 is a WiderTanh.*register_layer",
                 id="layer-subclass"),
    pytest.param(replace_param(2, "W", lambda w: dualtape.asarray(np.zeros((5, 4)))), ValueError,
                 r"layer 2 \(FullyConnected\(5, 4\)\) parameter W is float64 \(5, 4\); load "
                 r"expects float64 \(4, 5\)", id="other-shape"),
    pytest.param(replace_param(0, "b", lambda b: dualtape.asarray(np.zeros(5, np.float32))),
                 ValueError, r"layer 0 .* parameter b is float32 \(5,\); load expects float64",
                 id="other-dtype"),
    pytest.param(replace_param(0, "b", lambda b: [0.0] * 5), ValueError,
                 "parameter b is list", id="not-an-array"),
    pytest.param(params_edit(4, lambda p: p.update(extra_bias=p["b"])), ValueError,
                 r"layer 4 .* has parameters \['W', 'b', 'extra_bias'\]", id="extra-parameter"),
    pytest.param(params_edit(4, lambda p: p.pop("b")), ValueError,
                 r"layer 4 .* has parameters \['W'\]; load expects \['W', 'b'\]",
                 id="missing-parameter"),
    pytest.param(lambda net: net.layers.insert(2, dualtape.FullyConnected(7, 7, dtype="float64")),
                 ValueError, "load could not rebuild this network.*takes 7 features",
                 id="sizes-no-longer-chain"),
    pytest.param(lambda net: net.layers.append(dualtape.LSTM(3, 3, dtype="float64")), TypeError,
                 "load could not rebuild this network.*recurrent", id="recurrent-in-network"),
]


@pytest.mark.parametrize("edit, error, message", UNLOADABLE)
def test_save_refuses_what_load_would_refuse_and_keeps_the_old_file(saved, edit, error,
                                                                     message):
    _, path = saved
    before = path.read_bytes()
    net = deep_net()
    edit(net)
    with pytest.raises(error, match=message):
        dualtape.save(net, path)
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_save_refuses_a_network_subclass(backend, tmp_path):
    with pytest.raises(TypeError, match="expected a Network or RecurrentNetwork, got Network"):
        dualtape.save(Network(deep_net().layers), tmp_path / "net.npz")
    assert list(tmp_path.iterdir()) == []


# --- extra values ----------------------------------------------------------------------------


class Tagged(tuple):
    """A tuple subclass: JSON writes it as a list."""


NOT_JSON = [
    pytest.param({"optimizer": {"0/W/velocity": np.zeros(2)}},
                 r"extra\['optimizer'\]\['0/W/velocity'\] is a numpy array.*optimizer=",
                 id="nested-array"),
    pytest.param({"a": [1, {"b": (2, {3, 4})}]}, r"extra\['a'\]\[1\]\['b'\]\[1\] is a set",
                 id="set-in-a-tuple"),
    pytest.param({"a": Tagged([1, object()])}, r"extra\['a'\]\[1\] is a object",
                 id="object-in-a-tuple-subclass"),
    pytest.param({"a": {3: "x"}}, r"extra\['a'\] has the key 3, which is not a string",
                 id="integer-key"),
    pytest.param({"n": np.int64(3)}, r"extra\['n'\] is a int64", id="numpy-integer"),
    pytest.param({"big": 10**5000}, "cannot be written as JSON", id="integer-too-long"),
    pytest.param({"m": np.ma.masked_array([1, 2], mask=[0, 1])}, r"extra\['m'\] is a "
                 "MaskedArray", id="masked-array"),
    pytest.param({"r": np.zeros(2, dtype=[("a", "<f8")])}, r"extra\['r'\] is a .* array",
                 id="structured-array"),
    pytest.param({"a\0b": 1}, "without NUL", id="name-with-nul"),
    pytest.param({3: 1}, "extra names must be strings", id="integer-name"),
]


@pytest.mark.parametrize("extra, message", NOT_JSON)
def test_extra_values_load_could_not_read_raise_type_error_naming_the_key(saved, extra,
                                                                        message):
    _, path = saved
    before = path.read_bytes()
    with pytest.raises(TypeError, match=message):
        dualtape.save(deep_net(), path, extra=extra)
    assert path.read_bytes() == before


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_extra_values_may_nest_to_the_limit_and_no_deeper(tmp_path):
    limit = dualtape.io.JSON_DEPTH
    dualtape.save(deep_net(), tmp_path / "net.npz", extra={"deep": nested(limit)})
    assert dualtape.load_extra(tmp_path / "net.npz")["deep"] == nested(limit)
    with pytest.raises(TypeError, match=rf"extra\['deep'\]\[0\].* more than {limit}"):
        dualtape.save(deep_net(), tmp_path / "net.npz", extra={"deep": nested(limit + 1)})
    loop: list = []
    loop.append(loop)
    with pytest.raises(TypeError, match="holds itself"):
        dualtape.save(deep_net(), tmp_path / "net.npz", extra={"loop": loop})


def test_extra_must_be_a_mapping(tmp_path):
    with pytest.raises(TypeError, match="extra must be a dict"):
        dualtape.save(deep_net(), tmp_path / "net.npz", extra=[("epoch", 3)])


def test_tuples_and_json_subclasses_come_back_as_plain_json(tmp_path):
    extra = {"t": (1, (2.5, "x")), "tagged": Tagged([1]), "f": np.float64(0.5), "none": None}
    dualtape.save(deep_net(), tmp_path / "net.npz", extra=extra)
    loaded = dualtape.load_extra(tmp_path / "net.npz")
    assert loaded == {"t": [1, [2.5, "x"]], "tagged": [1], "f": 0.5, "none": None}


# --- optimizer state -------------------------------------------------------------------------


def trained(opt, steps: int = 2):
    """``deep_net()`` after ``steps`` updates by ``opt`` on a fixed batch."""
    net = deep_net()
    x = dualtape.asarray(np.random.default_rng(0).normal(size=(4, 3)))
    t = dualtape.asarray(np.full((4, 3), 1 / 3))
    for _ in range(steps):
        dualtape.train(net, x, t, opt)
    return net, x, t


OPTIMIZERS = [
    pytest.param(lambda: dualtape.SGD(0.1, momentum=0.9, regulariser=1e-3), id="sgd"),
    pytest.param(lambda: dualtape.Adam(rate=0.01), id="adam"),
    pytest.param(lambda: DataParallel(dualtape.Adam(rate=0.01)), id="data-parallel"),
]


@pytest.mark.parametrize("make", OPTIMIZERS)
def test_optimizer_state_round_trips_and_training_continues_identically(backend, tmp_path,
                                                                        make):
    opt = make()
    net, x, t = trained(opt)
    path = tmp_path / "net.npz"
    dualtape.save(net, path, optimizer=opt)
    restored = make()
    loaded = dualtape.load(path, optimizer=restored)
    for (key, a), (key_too, b) in zip(sorted(opt.state_dict().items()),
                                      sorted(restored.state_dict().items()), strict=True):
        assert key == key_too
        np.testing.assert_array_equal(a, b)
    for group in restored.state_dict().keys() - set(BOOKKEEPING):
        slot = restored.optimizer if isinstance(restored, DataParallel) else restored
        k, name, s = group.split("/")
        assert backend_of(slot.state[(int(k), name)][s]).name == backend.name
    dualtape.train(net, x, t, opt)
    dualtape.train(loaded, x, t, restored)
    assert_params_equal(host_params(loaded), host_params(net))


def test_train_text_checkpoints_restore_their_optimizer_through_load(tmp_path):
    opt = dualtape.SGD(0.1, momentum=0.9)
    net, _, _ = trained(opt)
    extra = {f"optimizer/{key}": np.asarray(v) for key, v in opt.state_dict().items()}
    dualtape.save(net, tmp_path / "net.npz", extra=extra)  # as TextTrainer.save writes them
    restored = dualtape.SGD(0.1, momentum=0.9)
    dualtape.load(tmp_path / "net.npz", optimizer=restored)
    assert restored.steps == 2 and restored.state.keys() == opt.state.keys()


def test_loading_optimizer_state_that_is_not_there_or_of_another_kind_names_the_path(saved):
    net, path = saved
    with pytest.raises(ValueError, match="holds no optimizer state") as info:
        dualtape.load(path, optimizer=dualtape.SGD(0.1))
    assert str(path) in str(info.value)
    opt = dualtape.Adam()
    dualtape.save(trained(opt)[0], path, optimizer=opt)
    sgd = dualtape.SGD(0.1, momentum=0.9)
    with pytest.raises(ValueError, match="belongs to a Adam optimizer") as info:
        dualtape.load(path, optimizer=sgd)
    assert str(path) in str(info.value) and sgd.steps == 0 and not sgd.state


@pytest.mark.parametrize("call", [
    lambda path: dualtape.save(deep_net(), path, optimizer="sgd"),
    lambda path: dualtape.load(path, optimizer="sgd"),
    lambda path: dualtape.load_with_extra(path, optimizer=dualtape.SGD),
], ids=["save", "load", "load-with-extra-class"])
def test_an_optimizer_argument_that_is_not_an_optimizer_is_a_type_error(saved, call):
    _, path = saved
    before = path.read_bytes()
    with pytest.raises(TypeError, match="optimizer must be an optimizer"):
        call(path)
    assert path.read_bytes() == before


def test_save_refuses_another_networks_optimizer_and_state_given_twice(saved):
    _, path = saved
    before = path.read_bytes()
    opt = dualtape.SGD(0.1, momentum=0.9)
    dualtape.train(dualtape.Network([dualtape.FullyConnected(3, 2, dtype="float64")]),
                   dualtape.asarray(np.ones((1, 3))), dualtape.asarray(np.ones((1, 2))), opt)
    with pytest.raises(ValueError, match=r"state '0/W/\w+' \(2, 3\) fits no parameter"):
        dualtape.save(deep_net(), path, optimizer=opt)
    longer = dualtape.Network([*deep_net().layers, dualtape.FullyConnected(3, 3, seed=6,
                                                                           dtype="float64")])
    past = dualtape.SGD(0.1, momentum=0.9)  # its state reaches one group past deep_net's
    dualtape.train(longer, dualtape.asarray(np.ones((1, 3))), dualtape.asarray(np.ones((1, 3))),
                   past)
    with pytest.raises(ValueError, match=r"state '10/W/m' \(3, 3\) fits no parameter"):
        dualtape.save(deep_net(), path, optimizer=past)
    mine = dualtape.SGD(0.1)
    with pytest.raises(ValueError, match=r"extra\['optimizer/steps'\] would be overwritten"):
        dualtape.save(deep_net(), path, optimizer=mine, extra={"optimizer/steps": 3})
    assert path.read_bytes() == before
