"""The committed torch numbers for the spatial layers (``fixtures/spatial_golden.npz``) and the
dualtape layers that should reproduce them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import dualtape

from .fixtures.make_spatial_golden import CONV_CASES, DECONV_CASES, DTYPES, PAD_CASES, POOL_CASES

GOLDEN = Path(__file__).resolve().parent / "fixtures" / "spatial_golden.npz"
TOLERANCE = {"float64": 1e-10, "float32": 2e-5}


def golden_case(name: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(inputs, torch's results)`` of case ``name`` (``conv-basic-float64``)."""
    with np.load(GOLDEN) as data:
        inputs = {k.split("/in/")[1]: data[k] for k in data.files if k.startswith(f"{name}/in/")}
        found = {k.split("/torch/")[1]: data[k] for k in data.files
                 if k.startswith(f"{name}/torch/")}
    assert inputs and found, f"no case {name} in {GOLDEN.name}"
    return inputs, found


def case_names(cases: dict) -> list[str]:
    """Every case of ``cases`` in both dtypes."""
    return [f"{name}-{dtype}" for name in cases for dtype in DTYPES]


def dualtape_network(name: str, inputs: dict[str, np.ndarray]) -> dualtape.Network:
    """The dualtape network torch's case ``name`` computed, with the case's weights, on the
    selected backend."""
    kind, case = name.split("-")[0], _case(name)
    dtype = str(inputs["x"].dtype)
    if kind in ("conv", "deconv"):
        _, c_in, c_out, _, kernel, stride, pad = case
        kind_of = dualtape.Convolution if kind == "conv" else dualtape.Deconvolution
        layer = kind_of(c_in, c_out, kernel, stride, dtype=dtype)
        layer.params.update({"W": dualtape.asarray(inputs["W"]),
                             "b": dualtape.asarray(inputs["b"])})
        layers = [dualtape.Pad(pad, pad, pad, pad), layer] if pad else [layer]
    elif kind == "pool":
        layers = [dualtape.Pooling(case[3], case[4])]
    else:
        layers = [dualtape.Pad(*case[-1])]
    return dualtape.Network(layers)


def _case(name: str) -> tuple:
    base = name.rsplit("-", 1)[0]
    return {**CONV_CASES, **DECONV_CASES, **POOL_CASES, **PAD_CASES}[base]


ALL_CASES = (case_names(CONV_CASES) + case_names(DECONV_CASES) + case_names(POOL_CASES)
             + case_names(PAD_CASES))
