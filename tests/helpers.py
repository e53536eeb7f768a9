"""Helpers shared by the test modules: inputs, networks, misplaced arrays (finite differences:
``dualtape.check_gradients`` and ``dualtape.gradcheck.numeric_gradient``)."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape


def away_from_kinks(shape, seed: int) -> np.ndarray:
    """Inputs in ±[0.1, 2]: no Relu/Elu kink within a finite-difference step."""
    rng = np.random.default_rng(seed)
    return rng.choice([-1.0, 1.0], size=shape) * rng.uniform(0.1, 2.0, size=shape)


def deep_net(dtype: str = "float64") -> dualtape.Network:
    """A seeded 3 -> 3 network through every feed-forward layer kind."""
    return dualtape.Network([
        dualtape.FullyConnected(3, 5, seed=1, dtype=dtype), dualtape.Tanh(),
        dualtape.FullyConnected(5, 4, seed=2, dtype=dtype), dualtape.Elu(),
        dualtape.FullyConnected(4, 4, seed=3, dtype=dtype), dualtape.Logit(),
        dualtape.FullyConnected(4, 3, seed=4, dtype=dtype), dualtape.Relu(),
        dualtape.FullyConnected(3, 3, seed=5, dtype=dtype), dualtape.Softmax(),
    ])


def host_params(net: dualtape.Network) -> list[dict[str, np.ndarray]]:
    """Copies of the network's parameters as numpy arrays."""
    return [{k: dualtape.to_numpy(v).copy() for k, v in group.items()} for group in net.params]


def assert_params_equal(a: list[dict], b: list[dict]) -> None:
    """Two ``host_params`` results hold bit-identical arrays of the same dtypes."""
    assert [sorted(g) for g in a] == [sorted(g) for g in b]
    for ga, gb in zip(a, b, strict=True):
        for key in ga:
            assert ga[key].dtype == gb[key].dtype
            np.testing.assert_array_equal(ga[key], gb[key])


def other_backend_array(backend, host: np.ndarray):
    """``host`` on a backend other than the selected one."""
    other = "array_api_strict" if backend.name == "numpy" else "numpy"
    with dualtape.use_backend(other):
        return dualtape.asarray(host), other


def other_device_array(backend, host: np.ndarray):
    """``host`` on the selected backend but another device (skips when there is none)."""
    if backend.name == "array_api_strict":
        xp = backend.xp
        other = "device1" if backend.device == xp.Device("CPU_DEVICE") else "CPU_DEVICE"
        return xp.asarray(host, device=xp.Device(other)), other
    if backend.name == "torch":
        import torch

        return torch.empty(host.shape, dtype=torch.float64, device="meta"), "meta"
    if backend.name == "cupy":
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
        if count < 2:
            pytest.skip("only one CUDA device")
        other = (backend.device.id + 1) % count
        with cupy.cuda.Device(other):
            return cupy.asarray(host), f"CUDA Device {other}"
    pytest.skip(f"backend {backend.name!r} has a single device")


def libm_calls(function, dtype: str) -> set[str]:
    """The libm exp, tanh and log calls in the LLVM IR of a numba-compiled ``function``'s
    ``dtype`` signature (compiled afresh: code loaded from the disk cache has no IR to show).
    A libm exp in a loop would mean a scalar, unvectorized loop."""
    from numba import njit

    fresh = njit(boundscheck=False, error_model="numpy")(function.py_func)
    signature = next(s for s in function.signatures
                     if str(next(a for a in s if hasattr(a, "dtype")).dtype) == dtype)
    fresh.compile(signature)
    ir = fresh.inspect_llvm(signature)
    assert "define" in ir
    return {name for name in ("@exp", "@expf", "@tanh", "@tanhf", "@log", "@logf", "llvm.exp")
            if name in ir}


def peak_bytes(call) -> int:
    """The peak of the memory Python's allocator (numpy's arrays included) handed out while
    ``call()`` ran (tracemalloc): ``dualtape bench``'s measure, ``traced_peak``."""
    from dualtape.meters import traced_peak

    return traced_peak(call)


HOLD_LOCK = ("import sys, time; from dualtape.text.lock import lock_checkpoint; "
             "held = lock_checkpoint(sys.argv[1]); print('held', flush=True); time.sleep(60)")
"""A ``python -c`` program that locks the checkpoint ``argv[1]``, says ``held``, and waits."""


def refusal_id(entry) -> str:
    """A ``(make, message)`` refusal table's pytest id: the message up to its " must"."""
    return entry.split(" must")[0] if isinstance(entry, str) else ""


def assert_refused_word_for_word(make, message: str) -> None:
    """``make()`` raises ``ValueError`` saying exactly ``message``."""
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value) == message
