"""The memory of ``load``: about the model it returns, no copies on the way and no weights
drawn only to be replaced (issue 28: one 100 MB layer used to peak at 4x, ``bench/load_peak.py``
measures it), and the placeholders layers are built with while ``load`` fills them."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape.layers import LAYER_KINDS, Layer
from dualtape.layers.initial import placeholder_params
from dualtape.meters import traced_peak

N = 2_900
"""One FullyConnected(N, N) in float32: about 34 MB."""


@pytest.mark.parametrize("layers", [1, 4], ids=["one-layer", "four-layers"])
def test_load_peaks_at_the_model_plus_its_read_buffers(tmp_path, layers):
    n = N if layers == 1 else N // 2
    net = dualtape.Network([dualtape.FullyConnected(n, n, seed=k) for k in range(layers)])
    path, warm = tmp_path / "big.npz", tmp_path / "warm.npz"
    dualtape.save(net, path)
    dualtape.save(dualtape.Network([dualtape.FullyConnected(2, 2)]), warm)
    del net
    dualtape.load(warm, backend="numpy")  # the modules a first load imports are not counted
    loaded = []
    peak = traced_peak(lambda: loaded.append(dualtape.load(path, backend="numpy")))
    model = sum(p.nbytes for group in loaded[0].params for p in group.values())
    assert model > 30e6
    # once the model, plus 1 MB read chunks; one more copy of a member, or weights drawn
    # before the stored ones replace them, would be 1.25x (four layers) to 2x and more
    assert peak < 1.2 * model, f"load peaked at {peak / model:.2f}x the model"
    assert loaded[0].params[0]["W"].flags.writeable  # optimizers update in place


PARAMETERISED = [
    dualtape.FullyConnected(3, 4), dualtape.LSTM(3, 4, init="scaled"),
    dualtape.StandardLSTM(3, 4), dualtape.GRU(3, 4), dualtape.BasicRecurrent(3, 4),
    dualtape.Convolution(2, 3, 2, 1), dualtape.Deconvolution(2, 3, 2, 1), dualtape.Embedding(5, 4),
]


def test_every_layer_with_parameters_is_listed_here():
    with_params = {kind for kind in LAYER_KINDS.values()  # dualtape's, not ones registered
                   if kind.__module__.startswith("dualtape.")
                   and kind.param_shapes.__func__ is not Layer.param_shapes.__func__}
    assert with_params == {type(layer) for layer in PARAMETERISED}


@pytest.mark.parametrize("layer", PARAMETERISED, ids=lambda layer: layer.kind)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_built_inside_placeholder_params_a_layer_draws_nothing(layer, dtype):
    config = layer.config()
    with placeholder_params():
        empty = type(layer).from_config(config, dtype)
    shapes = type(layer).param_shapes(config)
    assert {k: (p.shape, p.dtype, p.strides) for k, p in empty.params.items()} == {
        k: (shape, np.dtype(dtype), (0,) * len(shape)) for k, shape in shapes.items()}
    drawn = type(layer).from_config(config, dtype)  # outside, the weights are drawn again
    assert all(p.strides != (0,) * p.ndim and np.any(p != 0) for p in
               (drawn.params[k] for k in shapes if k != "b"))
