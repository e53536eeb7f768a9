"""save/load: round trips across backends, the file format, and corrupted or mismatched files."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

import dualtape
from dualtape.backend import backend_of, resolve_backend

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
                 "sizes .* invalid", id="unknown-config-key"),
    pytest.param(layer_edit(0, config={"n_in": -3, "n_out": 5}), "positive integer",
                 id="negative-size"),
    pytest.param(layer_edit(1, config={"alpha": 2}), "sizes .* invalid",
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
