"""windows and batches: against a loop over indices, on every backend; numpy's windows are
read-only views, the other backends' copies; one seed gives one order everywhere."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape.backend import backend_of

from .conftest import np64
from .helpers import other_backend_array

SERIES = np.random.default_rng(0).normal(size=(23, 2))


def windows_by_loop(series: np.ndarray, length: int, horizon: int, stride: int,
                    every_step: bool) -> tuple[np.ndarray, np.ndarray]:
    """The oracle: each window and its targets picked one index at a time."""
    columns = series.reshape(len(series), -1)
    starts = range(0, len(series) - length - horizon + 1, stride)
    inputs = np.stack([[columns[s + t] for s in starts] for t in range(length)])
    if every_step:
        return inputs, np.stack([[columns[s + t + horizon] for s in starts]
                                 for t in range(length)])
    return inputs, np.stack([columns[s + length - 1 + horizon] for s in starts])


# --- windows ---------------------------------------------------------------------------------


@pytest.mark.parametrize("every_step", [False, True], ids=["last", "every"])
@pytest.mark.parametrize("length, horizon, stride", [
    (5, 1, 1), (4, 3, 2), (3, 2, 5), (22, 1, 1), (20, 3, 4), (1, 1, 1), (1, 22, 1),
])
@pytest.mark.parametrize("features", [None, 2], ids=["1-D", "2-D"])
def test_windows_match_the_loop_over_indices(backend, features, length, horizon, stride,
                                              every_step):
    series = SERIES[:, 0] if features is None else SERIES
    inputs, targets = dualtape.windows(dualtape.asarray(series), length, horizon=horizon,
                                       stride=stride, every_step=every_step)
    expected_inputs, expected_targets = windows_by_loop(series, length, horizon, stride,
                                                        every_step)
    assert tuple(inputs.shape) == expected_inputs.shape
    assert tuple(targets.shape) == expected_targets.shape
    np.testing.assert_array_equal(np64(inputs), expected_inputs)
    np.testing.assert_array_equal(np64(targets), expected_targets)


@pytest.mark.parametrize("length, horizon", [(21, 2), (1, 22), (22, 1)])
def test_a_series_of_exactly_length_plus_horizon_steps_gives_one_window(backend, length,
                                                                        horizon):
    series = dualtape.asarray(SERIES[:length + horizon])
    inputs, targets = dualtape.windows(series, length, horizon=horizon, stride=3)
    assert tuple(inputs.shape) == (length, 1, 2)
    np.testing.assert_array_equal(np64(targets), SERIES[[length - 1 + horizon]])


def test_last_step_targets_are_the_every_step_targets_last_row_and_train(backend):
    """The two target forms agree, and a batch of either trains a forecaster as it is."""
    series = dualtape.asarray(SERIES)
    inputs, last = dualtape.windows(series, 6, horizon=2, stride=3)
    same_inputs, every = dualtape.windows(series, 6, horizon=2, stride=3, every_step=True)
    np.testing.assert_array_equal(np64(inputs), np64(same_inputs))
    np.testing.assert_array_equal(np64(last), np64(every)[-1])
    net = dualtape.RecurrentNetwork([dualtape.LSTM(2, 3, seed=1),
                                     dualtape.FullyConnected(3, 2, seed=2)])
    for targets in (last, every):
        x, y = next(dualtape.batches(inputs, targets, batch_size=4, axes=(1, targets.ndim - 2),
                                     seed=0))
        loss, _ = dualtape.train_recurrent(net, x, y, dualtape.SGD(rate=0.1))
        assert np.isfinite(loss)


def test_windows_default_to_the_next_value_after_every_start(backend):
    inputs, targets = dualtape.windows(dualtape.asarray(SERIES), 4)
    expected_inputs, expected_targets = windows_by_loop(SERIES, 4, 1, 1, False)
    np.testing.assert_array_equal(np64(inputs), expected_inputs)
    np.testing.assert_array_equal(np64(targets), expected_targets)


def test_windows_and_batches_stay_on_the_arrays_backend_whichever_is_selected(backend):
    """Their indices go where the arrays live, not to the backend selected for new arrays."""
    series, ids = dualtape.asarray(SERIES), dualtape.asarray(np.arange(23))
    with dualtape.use_backend("array_api_strict" if backend.name == "numpy" else "numpy"):
        cuts = dualtape.windows(series, 5, every_step=True) + dualtape.windows(series, 5)
        (batch,) = next(dualtape.batches(ids, batch_size=23, axes=0, seed=1))
    for cut in (*cuts, batch):
        assert backend_of(cut) == backend_of(series)
    np.testing.assert_array_equal(np64(batch), np.random.default_rng(1).permutation(23))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_windows_keep_the_series_dtype(backend, dtype):
    series = dualtape.asarray(np.arange(12), dtype=dtype)
    for cut in dualtape.windows(series, 4, every_step=True) + dualtape.windows(series, 4):
        assert cut.dtype == series.dtype


@pytest.mark.parametrize("every_step", [False, True], ids=["last", "every"])
def test_numpy_windows_are_read_only_views_the_others_copies(backend, every_step):
    """numpy: no copy, and the user cannot write through the windows into the series;
    elsewhere: a later write to the series leaves the windows as they were."""
    series = dualtape.asarray(SERIES.copy())  # array_api_strict's may share SERIES' memory
    inputs, targets = dualtape.windows(series, 6, horizon=2, stride=2, every_step=every_step)
    before = np64(inputs), np64(targets)
    if backend.name == "numpy":
        for cut in (inputs, targets):
            assert np.shares_memory(cut, series)
            assert not cut.flags.writeable
            with pytest.raises(ValueError, match="read-only"):
                cut[0, ...] = 0
        assert series.flags.writeable
    else:
        series[...] = -1.0
        np.testing.assert_array_equal(np64(inputs), before[0])
        np.testing.assert_array_equal(np64(targets), before[1])


@pytest.mark.parametrize("kwargs, message", [
    ({"length": 0}, "windows: length must be a positive integer, got 0"),
    ({"length": 2.0}, "windows: length must be a positive integer, got 2.0"),
    ({"length": True}, "windows: length must be a positive integer, got True"),
    ({"horizon": 0}, "windows: horizon must be a positive integer, got 0"),
    ({"horizon": -1}, "windows: horizon must be a positive integer, got -1"),
    ({"stride": 0}, "windows: stride must be a positive integer, got 0"),
    ({"length": 23}, r"windows: length \+ horizon \(23 \+ 1\) is longer than the series' 23 "
                     r"steps"),
    ({"length": 20, "horizon": 4}, r"windows: length \+ horizon \(20 \+ 4\) is longer than the "
                                   r"series' 23 steps"),
])
def test_bad_window_settings_are_refused_naming_the_argument(backend, kwargs, message):
    settings = {"length": 5, **kwargs}
    with pytest.raises(ValueError, match=f"^{message}$"):
        dualtape.windows(dualtape.asarray(SERIES), **settings)


def test_a_series_not_one_or_two_dimensional_or_not_an_array_is_refused(backend):
    with pytest.raises(ValueError, match=r"^windows: series must have shape \(N,\) or "
                                         r"\(N, features\), got \(23, 2, 1\)$"):
        dualtape.windows(dualtape.asarray(SERIES[..., None]), 3)
    with pytest.raises(ValueError, match=r"got \(\)$"):
        dualtape.windows(dualtape.asarray(1.0), 1)
    with pytest.raises(TypeError, match=r"^windows: series must be an array \(dualtape.asarray "
                                        r"makes one\), got list$"):
        dualtape.windows([1.0, 2.0, 3.0], 1)
    with pytest.raises(TypeError, match="^windows: every_step must be True or False, got 1$"):
        dualtape.windows(dualtape.asarray(SERIES), 3, every_step=1)


# --- batches ---------------------------------------------------------------------------------

XS = np.random.default_rng(1).normal(size=(5, 11, 3))  # (T, B, f): batch axis 1
YS = np.random.default_rng(2).normal(size=(11, 2))  # (B, o): batch axis 0


def batches_on(backend_arrays, **kwargs) -> list[list[np.ndarray]]:
    """``dualtape.batches`` of the arrays, each batch's arrays as numpy float64."""
    return [[np64(a) for a in batch] for batch in dualtape.batches(*backend_arrays, **kwargs)]


@pytest.mark.parametrize("size, drop_last, sizes", [
    (4, False, [4, 4, 3]), (4, True, [4, 4]), (11, False, [11]), (11, True, [11]),
    (12, False, [11]), (12, True, []), (1, False, [1] * 11),
])
def test_shuffled_batches_follow_the_seeded_permutation(backend, size, drop_last, sizes):
    got = batches_on((dualtape.asarray(XS), dualtape.asarray(YS)), batch_size=size,
                     axes=(1, 0), seed=7, drop_last=drop_last)
    order = np.random.default_rng(7).permutation(11)
    assert [len(ys) for _, ys in got] == sizes
    for k, (xs, ys) in enumerate(got):
        rows = order[k * size:(k + 1) * size]
        np.testing.assert_array_equal(xs, XS[:, rows])
        np.testing.assert_array_equal(ys, YS[rows])


def test_one_seed_gives_the_same_batches_on_every_backend_and_seeds_differ(backend):
    on_backend = batches_on((dualtape.asarray(XS), dualtape.asarray(YS)), batch_size=3,
                            axes=(1, 0), seed=3)
    on_numpy = batches_on((XS, YS), batch_size=3, axes=(1, 0), seed=3)
    other_seed = batches_on((XS, YS), batch_size=3, axes=(1, 0), seed=4)
    for mine, theirs in zip(on_backend, on_numpy, strict=True):
        for a, b in zip(mine, theirs, strict=True):
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(on_numpy[0][1], other_seed[0][1])


def test_unseeded_shuffles_cover_every_row_once(backend):
    got = batches_on((dualtape.asarray(np.arange(11)),), batch_size=4, axes=0)
    assert sorted(np.concatenate([ids for (ids,) in got])) == list(range(11))


def test_unshuffled_batches_are_slices_in_order(backend):
    xs, ys = dualtape.asarray(XS), dualtape.asarray(YS)
    got = list(dualtape.batches(xs, ys, batch_size=4, axes=(-2, -2), shuffle=False))
    assert [tuple(b.shape) for _, b in got] == [(4, 2), (4, 2), (3, 2)]
    for k, (x, y) in enumerate(got):
        np.testing.assert_array_equal(np64(x), XS[:, 4 * k:4 * k + 4])
        np.testing.assert_array_equal(np64(y), YS[4 * k:4 * k + 4])
        if backend.name == "numpy":
            assert np.shares_memory(x, xs) and np.shares_memory(y, ys)


def test_one_axis_serves_every_array(backend):
    (a, b), = batches_on((dualtape.asarray(YS), dualtape.asarray(YS[:, :1])), batch_size=11,
                         axes=0, shuffle=False)
    np.testing.assert_array_equal(a, YS)
    np.testing.assert_array_equal(b, YS[:, :1])


@pytest.mark.parametrize("kwargs, error, message", [
    ({"batch_size": 0}, ValueError, "batches: batch_size must be a positive integer, got 0"),
    ({"batch_size": 2.5}, ValueError, "batches: batch_size must be a positive integer, got 2.5"),
    ({"axes": (1,)}, ValueError, r"batches: axes must be an integer or a tuple of one per "
                                 r"array \(2\), got \(1,\)"),
    ({"axes": "1"}, ValueError, r"batches: axes must be an integer or a tuple of one per "
                                r"array \(2\), got '1'"),
    ({"axes": (1, 2)}, ValueError, r"batches: axes\[1\] = 2 is not an axis of arrays\[1\], of "
                                   r"shape \(11, 2\)"),
    ({"axes": (-4, 0)}, ValueError, r"batches: axes\[0\] = -4 is not an axis of arrays\[0\], "
                                    r"of shape \(5, 11, 3\)"),
    ({"axes": (1, 1.0)}, ValueError, r"batches: axes\[1\] = 1.0 is not an axis of arrays\[1\], "
                                    r"of shape \(11, 2\)"),
    ({"axes": 0}, ValueError, r"batches: arrays\[1\] has 11 along its batch axis 0 but "
                              r"arrays\[0\] has 5 along axis 0"),
    ({"axes": (2, 0)}, ValueError, r"batches: arrays\[1\] has 11 along its batch axis 0 but "
                                   r"arrays\[0\] has 3 along axis 2"),
    ({"shuffle": False}, ValueError, "batches: seed is given but shuffle=False: nothing is "
                                     "drawn"),
    ({"seed": -1}, ValueError, "batches: seed must be None or an integer >= 0, got -1"),
    ({"shuffle": 1}, TypeError, "batches: shuffle must be True or False, got 1"),
    ({"drop_last": None}, TypeError, "batches: drop_last must be True or False, got None"),
])
def test_bad_batch_settings_are_refused_before_the_first_batch(backend, kwargs, error,
                                                               message):
    settings = {"batch_size": 4, "axes": (1, 0), "seed": 0, **kwargs}
    with pytest.raises(error, match=f"^{message}$"):
        dualtape.batches(dualtape.asarray(XS), dualtape.asarray(YS), **settings)


@pytest.mark.parametrize("rows", [10, 12])
def test_arrays_of_other_batch_lengths_are_refused(backend, rows):
    with pytest.raises(ValueError, match=rf"^batches: arrays\[2\] has {rows} along its batch "
                                         r"axis 0 but arrays\[0\] has 11 along axis 1$"):
        dualtape.batches(dualtape.asarray(XS), dualtape.asarray(YS),
                         dualtape.asarray(np.zeros((rows, 1))), batch_size=2, axes=(1, 0, 0))


def test_mixed_backends_and_no_arrays_are_refused(backend):
    other, name = other_backend_array(backend, YS)
    with pytest.raises(TypeError, match=rf"^batches: arrays\[1\] is a {name} array .* but "
                                        rf"arrays\[0\] lives on {backend.name} array"):
        dualtape.batches(dualtape.asarray(XS), other, batch_size=2, axes=(1, 0))
    with pytest.raises(TypeError, match=r"^batches: arrays\[0\] must be an array, got list$"):
        dualtape.batches([1, 2], batch_size=2, axes=0)
    with pytest.raises(TypeError, match="^batches: give at least one array$"):
        dualtape.batches(batch_size=2, axes=0)
