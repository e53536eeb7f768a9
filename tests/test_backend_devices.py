"""Devices are checked when they are chosen: a device this machine lacks raises
``BackendUnavailable`` saying why, what is not a device of the backend raises ``ValueError``.

torch's own checks run on the torch installed here (a CPU build in CI's sibling venvs, absent
in CI itself: those tests skip, saying so); a CUDA torch and CuPy are stood in for by fakes that
report GPUs, so the index checks run on a machine without one.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import dualtape
from dualtape import backend as bk

from .helpers import deep_net

SELECTORS = {
    "resolve_backend": bk.resolve_backend,
    "set_backend": dualtape.set_backend,
    "use_backend": lambda name, device: dualtape.use_backend(name, device).__enter__(),
}


@pytest.fixture
def fresh_selection(monkeypatch: pytest.MonkeyPatch):
    """No process-wide choice yet and no DUALTAPE_BACKEND; both come back after the test."""
    monkeypatch.setattr(bk, "_global_choice", None)
    monkeypatch.delenv("DUALTAPE_BACKEND", raising=False)


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="torch is not installed: its device checks skip")


@pytest.fixture
def cpu_torch(torch):
    """torch, when it is a build without CUDA (as the one in this project's venvs)."""
    if torch.backends.cuda.is_built():
        pytest.skip("this torch is built with CUDA: the CPU-only refusal cannot be seen here")
    return torch


@pytest.fixture
def allocated(torch, monkeypatch: pytest.MonkeyPatch) -> list:
    """torch made to report a CUDA build with two GPUs, current device 1: the devices it was
    asked to allocate on (recorded, not done)."""
    devices: list = []
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch, "empty", lambda *shape, device: devices.append(device))
    return devices


@pytest.mark.parametrize("select", SELECTORS.values(), ids=SELECTORS.keys())
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:7", 0])
def test_cuda_on_a_cpu_only_torch_is_refused_at_once_saying_why(cpu_torch, fresh_selection,
                                                                select, device):
    dualtape.set_backend("array_api_strict")
    with pytest.raises(dualtape.BackendUnavailable) as info:
        select("torch", device)
    message = str(info.value)
    assert "was built without CUDA" in message and "'cuda" in message, message
    assert dualtape.get_backend().name == "array_api_strict"


def test_loading_onto_cuda_on_a_cpu_only_torch_is_refused(cpu_torch, tmp_path):
    path = tmp_path / "net.npz"
    dualtape.save(deep_net(), path)
    with pytest.raises(dualtape.BackendUnavailable, match="built without CUDA"):
        dualtape.load(path, backend="torch", device="cuda")
    with pytest.raises(dualtape.BackendUnavailable, match="built without CUDA"):
        deep_net().to("torch", "cuda")


def test_a_torch_without_gpus_says_there_is_no_cuda_device(torch, allocated, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(dualtape.BackendUnavailable, match="finds no CUDA device"):
        bk.resolve_backend("torch", "cuda")


def test_cuda_becomes_the_current_device_and_indices_are_checked(torch, allocated):
    assert bk.resolve_backend("torch", "cuda").device == torch.device("cuda", 1)
    assert bk.resolve_backend("torch", "cuda:0").device == torch.device("cuda", 0)
    assert bk.resolve_backend("torch", 1).device == torch.device("cuda", 1)
    assert bk.resolve_backend("torch", np.int64(0)).device == torch.device("cuda", 0)
    assert allocated == [torch.device("cuda", k) for k in (1, 0, 1, 0)]
    for device in ("cuda:2", 2, "cuda:7"):
        with pytest.raises(dualtape.BackendUnavailable, match="torch sees 2 CUDA devices"):
            bk.resolve_backend("torch", device)


def test_mps_where_there_is_none_is_refused_saying_why(torch, monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: False)
    with pytest.raises(dualtape.BackendUnavailable, match="torch was built without MPS"):
        bk.resolve_backend("torch", "mps")
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    with pytest.raises(dualtape.BackendUnavailable, match="this machine has no MPS device"):
        bk.resolve_backend("torch", "mps")


def test_a_device_type_torch_cannot_use_here_is_unavailable(torch):
    if getattr(torch, "xpu", None) is not None and torch.xpu.is_available():
        pytest.skip("an XPU works here")
    with pytest.raises(dualtape.BackendUnavailable, match="'xpu' does not work here"):
        bk.resolve_backend("torch", "xpu")


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "", " cpu", "cpu:1", "meta", -1, 3.5, True],
                         ids=repr)
def test_what_is_not_a_torch_device_is_a_value_error(torch, fresh_selection, device):
    with pytest.raises(ValueError, match="backend 'torch'"):
        dualtape.set_backend("torch", device)
    assert dualtape.get_backend().name == "numpy"


def test_the_torch_cpu_is_accepted_however_it_is_written(torch):
    for device in ("cpu", "cpu:0", torch.device("cpu")):
        assert bk.resolve_backend("torch", device).device == torch.device("cpu")


# --- CuPy, through a stand-in module that reports two GPUs ---------------------------------


class FakeDevice:
    """Stands in for ``cupy.cuda.Device``."""

    def __init__(self, device: int | None = None) -> None:
        self.id = 0 if device is None else device

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeDevice) and other.id == self.id

    __hash__ = object.__hash__


@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch):
    """``import cupy`` gives a module with two CUDA devices; the cupy namespace is a
    placeholder (nothing is computed)."""
    cuda = types.SimpleNamespace(Device=FakeDevice, runtime=types.SimpleNamespace(
        getDeviceCount=lambda: 2))
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    real = bk._namespace
    monkeypatch.setattr(bk, "_namespace",
                        lambda name: "cupy namespace" if name == "cupy" else real(name))


def test_a_cupy_index_past_the_device_count_is_unavailable(fake_cupy):
    assert bk.resolve_backend("cupy", 1).device == FakeDevice(1)
    assert bk.resolve_backend("cupy", FakeDevice(0)).device == FakeDevice(0)
    assert bk.resolve_backend("cupy").device == FakeDevice(0)
    for device in (2, FakeDevice(5)):
        with pytest.raises(dualtape.BackendUnavailable, match="CuPy sees 2 CUDA devices"):
            bk.resolve_backend("cupy", device)


@pytest.mark.parametrize("device", [-1, "1", "cuda:1", True, 1.0], ids=repr)
def test_what_is_not_a_cupy_device_is_a_value_error(fake_cupy, device):
    with pytest.raises(ValueError, match="backend 'cupy'"):
        bk.resolve_backend("cupy", device)


def test_auto_picks_cupy_when_a_cuda_device_works(fake_cupy, monkeypatch):
    monkeypatch.setattr(bk, "available_backends", lambda: ["numpy", "cupy"])
    assert bk.resolve_backend("auto").name == "cupy"


# --- numpy and array_api_strict -------------------------------------------------------------


@pytest.mark.parametrize("device", ["gpu", 0, "cuda:0"], ids=repr)
def test_numpy_has_only_the_cpu(device):
    with pytest.raises(ValueError, match="only the device 'cpu'"):
        bk.resolve_backend("numpy", device)


def test_array_api_strict_devices_are_its_own_and_named_in_errors():
    import array_api_strict

    chosen = bk.resolve_backend("array_api_strict", array_api_strict.Device("device1"))
    assert chosen.device == array_api_strict.Device("device1")
    with pytest.raises(ValueError, match="backend 'array_api_strict'.*'device7'"):
        bk.resolve_backend("array_api_strict", "device7")
