"""The compiled CPU loops (numba): their exp, their agreement with the ufunc loop and the generic
code on every shape the ufunc loop is tested on, their refusals, and their cache on disk."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import dualtape
from dualtape.kernels import SequencePath, blas, cpu_path, numba_lstm, selfcheck, sequence_path
from dualtape.kernels import lstm_sequence as loops
from dualtape.kernels.numba_lstm import NumbaLSTM
from dualtape.kernels.numpy_lstm import NumpyLSTM
from dualtape.layers.lstm import fused_disagreement

from .helpers import libm_calls

WHY_NOT = numba_lstm.unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no compiled loops: {WHY_NOT}")
ROOT = Path(__file__).resolve().parent.parent


def exp_of(x: np.ndarray) -> np.ndarray:
    """``fast_exp`` of every element, computed in compiled code."""
    from numba import njit

    from dualtape.kernels._numba_lstm import fast_exp

    @njit
    def apply(x, out):
        for k in range(x.size):
            out[k] = fast_exp(x[k])

    out = np.empty_like(x)
    apply(x, out)
    return out


@pytest.mark.parametrize("dtype, low, high", [("float32", -87.3, 88.3),
                                              ("float64", -708.3, 709.0)])
def test_fast_exp_is_within_two_ulp_of_exp_over_its_whole_range(dtype, low, high):
    x = np.concatenate([np.linspace(low, high, 200_001), np.linspace(-1, 1, 20_001),
                        np.array([0.0, -0.0, 1e-30, -1e-30])]).astype(dtype)
    exact = np.exp(x.astype(np.longdouble))
    ulps = np.abs(exp_of(x) - exact) / np.spacing(exact.astype(dtype))
    assert float(ulps.max()) <= 2.0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fast_exp_keeps_nan_and_saturates_infinities(dtype):
    got = exp_of(np.array([np.nan, np.inf, -np.inf, 1e30, -1e30], dtype=dtype))
    tiny, huge = exp_of(np.array([-1e30, 1e30], dtype=dtype))
    assert np.isnan(got[0]) and got[1] == got[3] == huge and got[2] == got[4] == tiny
    assert huge > np.finfo(dtype).max / 4 and 0 < tiny <= 2 * np.finfo(dtype).tiny


def sequence(cell, U, c0, projected, dhs, dc_last):
    """Everything the two loops and the work around them give, through ``lstm_sequence.py``."""
    cells, gates, hs = loops.forward_sequence(np, cell, U, c0, projected.copy())
    blocks, dc0 = loops.backward_sequence(np, cell, U, cells, gates, dhs, dc_last)
    return cells, gates, hs, *blocks, dc0


SHAPES = [(batch, n, steps) for batch in (1, 3, 64) for n in (1, 5, 512) for steps in (1, 3, 50)
          if (batch, n, steps) != (64, 512, 50)]  # that one takes 10 s; (64, 512, 3) is here
"""Every combination of the sizes the ufunc loop is tested on: batch, cells, time steps."""


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch, n, steps", SHAPES)
def test_compiled_loops_equal_the_ufunc_loops(batch, n, steps, dtype):
    rng = np.random.default_rng(batch * 1000 + n + steps)
    U = (rng.uniform(-1, 1, (3 * n, n)) / np.sqrt(n)).astype(dtype)
    c0, dc_last = (rng.uniform(-1, 1, (batch, n)).astype(dtype) for _ in range(2))
    projected = rng.uniform(-3, 3, (steps, batch, 4 * n)).astype(dtype)
    dhs = rng.uniform(-1, 1, (steps, batch, n)).astype(dtype)
    compiled = sequence(NumbaLSTM(), U, c0, projected, dhs, dc_last)
    ufuncs = sequence(NumpyLSTM(), U, c0, projected, dhs, dc_last)
    tolerance = 2e-6 if dtype == "float32" else 1e-13
    for name, a, b in zip(("cells", "gates", "hs", "dfi", "da_o", "da_g", "dc0"), compiled,
                          ufuncs, strict=True):
        scale = 1.0 + float(np.abs(b).max())
        assert float(np.abs(a - b).max()) <= tolerance * scale, name


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_compiled_path_is_numpys_default_and_passes_its_self_check(monkeypatch, dtype):
    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    monkeypatch.delenv("DUALTAPE_FUSED", raising=False)
    like = np.ones((2, 3), dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fused_disagreement(SequencePath(np, NumbaLSTM()), like) is None
        assert isinstance(sequence_path(np, like, fused_disagreement).cell, NumbaLSTM)
    monkeypatch.setenv("DUALTAPE_JIT", "0")
    assert cpu_path() == ("ufuncs", "DUALTAPE_JIT=0 asks for the ufunc loop")
    assert isinstance(sequence_path(np, like, fused_disagreement).cell, NumpyLSTM)


def test_the_compiled_loops_check_themselves_once_for_each_dtype(monkeypatch):
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})
    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    checked = []

    def check(path, like):
        checked.append(like.dtype.name)
        return None

    for dtype in ("float32", "float64", "float32", "float64"):
        assert isinstance(sequence_path(np, np.ones((1, 2), dtype=dtype), check).cell, NumbaLSTM)
    assert checked == ["float32", "float64"]


class OffByOneStep(NumbaLSTM):
    """A planted bug in the compiled forward loop's inputs: each step reads the next step's
    projection (the last reads its own)."""

    def forward_sequence(self, mod, U, c0, projected):
        shifted = np.concatenate([projected[1:], projected[-1:]])
        return super().forward_sequence(mod, U, c0, shifted)


def test_a_compiled_loop_that_disagrees_is_not_used(monkeypatch):
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})
    like = np.ones((2, 3), dtype="float64")
    path = SequencePath(np, OffByOneStep())
    with pytest.warns(RuntimeWarning, match=r"compiled CPU LSTM loops disagree .* \(float64\)"):
        assert not selfcheck.verified(("numba", "float64"), "compiled CPU LSTM loops",
                                      "the CPU (float64)", lambda: fused_disagreement(path, like))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_compiled_code_calls_no_transcendental_function(dtype):
    """The backward functions read the gates the forward pass kept: no exp, tanh or log in
    their machine code (the forward functions' exp is written out, so their IR is checked for
    the same calls: a libm exp there would mean a scalar, unvectorized loop)."""
    numba_lstm.warm_up(dtype)
    for function in numba_lstm._functions():
        assert not libm_calls(function, dtype), function.__name__


@pytest.mark.parametrize("operand", ["strided", "float16", "mixed", "list", "state"])
def test_compiled_loops_refuse_operands_they_cannot_index(operand):
    U, c0, projected = np.ones((6, 2)), np.zeros((1, 2)), np.zeros((1, 1, 8))
    if operand == "state":  # a state of another dtype than the projections' and U's
        c0 = c0.astype(np.float32)
    elif operand == "strided":
        projected = np.zeros((1, 1, 16))[..., ::2]
    elif operand == "float16":
        U, c0, projected = (a.astype(np.float16) for a in (U, c0, projected))
    elif operand == "mixed":  # the projections of another dtype than the state's and U's
        projected = projected.astype(np.float32)
    else:
        projected = projected.tolist()
    with pytest.raises(ValueError, match="NumbaLSTM: "):
        NumbaLSTM().forward_sequence(np, U, c0, projected)


def strided(*shape: int) -> np.ndarray:
    """Zeros of ``shape`` whose last axis has a stride of two elements."""
    return np.zeros((*shape[:-1], 2 * shape[-1]))[..., ::2]


@pytest.mark.parametrize("call", ["backward_sequence"])
def test_the_passes_refuse_a_strided_buffer_rather_than_write_into_a_copy(call):
    cell = NumbaLSTM()
    calls = {"backward_sequence": lambda gates: cell.backward_sequence(
                 np, np.zeros((6, 2)), np.zeros((4, 2, 2)), gates, np.zeros((3, 2, 2)),
                 np.zeros((2, 2)))}
    calls[call](np.zeros((3, 2, 8)))  # C order: taken
    with pytest.raises(ValueError, match="NumbaLSTM: operands must be C-contiguous"):
        calls[call](strided(3, 2, 8))


@pytest.mark.parametrize("batch", [1, 2])  # gemv at batch 1, gemm above
def test_a_non_contiguous_recurrent_matrix_is_copied_not_refused(batch):
    rng = np.random.default_rng(4)
    U = np.asfortranarray(rng.uniform(-1, 1, (15, 5)))
    c0, dc_last = rng.uniform(-1, 1, (batch, 5)), rng.uniform(-1, 1, (batch, 5))
    projected = rng.uniform(-1, 1, (3, batch, 20))
    dhs = rng.uniform(-1, 1, (3, batch, 5))
    expected = sequence(NumpyLSTM(), U, c0, projected, dhs, dc_last)
    got = sequence(NumbaLSTM(), U, c0, projected, dhs, dc_last)
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-13)


@pytest.mark.parametrize("missing", ["numba", "gemm", "gemv"])
def test_without_numba_or_numpys_openblas_the_reason_is_given(monkeypatch, missing):
    if missing == "numba":
        real = numba_lstm.importlib.util.find_spec
        monkeypatch.setattr(numba_lstm.importlib.util, "find_spec",
                            lambda name: None if name == "numba" else real(name))
        assert numba_lstm.unavailable() == "numba is not installed (pip install 'dualtape[jit]')"
    else:
        monkeypatch.setattr(numba_lstm.blas, missing, lambda dtype: None)
        assert "bundles no OpenBLAS" in numba_lstm.unavailable()


def test_training_gives_the_same_numbers_on_both_cpu_loops(monkeypatch):
    """A whole train_recurrent run (two LSTMs, a dense top) on the compiled and on the ufunc
    loop: the same losses and weights to float64 rounding."""

    def train():
        with dualtape.use_backend("numpy"):
            rng = np.random.default_rng(3)
            net = dualtape.RecurrentNetwork([
                dualtape.LSTM(4, 9, seed=1, dtype="float64", init="scaled"),
                dualtape.LSTM(9, 3, seed=2, dtype="float64", init="scaled"),
                dualtape.FullyConnected(3, 4, seed=3, dtype="float64"), dualtape.Logit()])
            xs = rng.uniform(-1, 1, (20, 5, 4))
            optimizer = dualtape.Adam(0.01)
            losses = [dualtape.train_recurrent(net, xs, (xs + 1) / 2, optimizer)[0]
                      for _ in range(5)]
            return losses, [np.array(p) for group in net.params for p in group.values()]

    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    compiled = train()
    monkeypatch.setenv("DUALTAPE_JIT", "0")
    ufuncs = train()
    np.testing.assert_allclose(compiled[0], ufuncs[0], rtol=1e-12)
    for a, b in zip(compiled[1], ufuncs[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-11)


WARM_UP = ("import json, sys; from dualtape.kernels import numba_lstm as c; c.warm_up('float32');"
           " fs = c._functions(); print(json.dumps([min(sum(f.stats.cache_hits.values())"
           " for f in fs), sum(sum(f.stats.cache_misses.values()) for f in fs), len(fs)]))")


def warm_up_in_a_new_process(env: dict[str, str], path: Path | None = None) -> list[int]:
    """``[the fewest cache hits of a compiled function, all misses, how many functions]`` of a
    fresh process's warm-up."""
    env = {**os.environ, **env, "PYTHONDONTWRITEBYTECODE": "1"}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    done = subprocess.run([sys.executable, "-c", WARM_UP], capture_output=True, text=True,
                          env=env, cwd=path or ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    return [int(v) for v in done.stdout.split("[")[1].split("]")[0].split(",")]


def test_a_second_process_loads_the_compiled_loops_from_the_disk_cache(tmp_path):
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    warm_up_in_a_new_process(env)
    hits, misses, functions = warm_up_in_a_new_process(env)
    assert hits >= 1 and misses == 0 and functions == len(numba_lstm.COMPILED)
    assert any((tmp_path / "cache").rglob("*.nbc")), "the cache is where NUMBA_CACHE_DIR says"


def test_a_read_only_install_compiles_into_the_users_cache_folder(tmp_path):
    """Where the package's folder takes no ``__pycache__`` (site-packages not writable; here a
    file stands where the folder would be, which even root cannot write through), numba caches
    in the user's cache folder, and the next process loads from there."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "dualtape", site / "dualtape",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (site / "dualtape" / "kernels" / "__pycache__").write_text("not a folder")
    env = {"XDG_CACHE_HOME": str(tmp_path / "user-cache"), "NUMBA_CACHE_DIR": ""}
    warm_up_in_a_new_process(env, site)
    hits, misses, _ = warm_up_in_a_new_process(env, site)
    assert hits >= 1 and misses == 0
    assert any((tmp_path / "user-cache").rglob("*.nbc"))


class Lines:
    """A stand-in for train-text's ``Output``: the lines it was given."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def line(self, text: str) -> None:
        self.lines.append(text)


def ready_loops(monkeypatch, warm_up, notice_s: float, backend: str = "numpy",
                cell: str = "LSTM") -> list[str]:
    """What ``train-text``'s compile step prints when ``warm_up`` stands for the compile (of
    Grenade's loops, or of the standard cells' for another ``cell``)."""
    from types import SimpleNamespace

    from dualtape.kernels import numba_standard_lstm_gru
    from dualtape.text import cli as text_cli

    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    monkeypatch.setattr(text_cli, "COMPILE_NOTICE_S", notice_s)
    monkeypatch.setattr(numba_standard_lstm_gru if cell != "LSTM" else numba_lstm, "warm_up",
                        warm_up)
    trainer = SimpleNamespace(backend=SimpleNamespace(name=backend),
                              config=SimpleNamespace(dtype="float32", cell=cell))
    output = Lines()
    text_cli._ready_cpu_loops(trainer, output)
    return output.lines


def test_train_text_says_once_that_it_is_compiling_when_that_takes_long(monkeypatch):
    import time

    def slow(dtype):
        time.sleep(0.5)
        return 0.5

    assert ready_loops(monkeypatch, slow, notice_s=0.01) == [
        "compiling the CPU LSTM loops for float32 (cached on disk with those the first steps "
        "compile: later runs of this model and optimizer load them) ...", "compiled in 0.5 s"]


def test_the_standard_cells_compile_their_own_loops(monkeypatch):
    import time

    def slow(dtype):
        time.sleep(0.2)
        return 0.2

    assert ready_loops(monkeypatch, slow, notice_s=0.01, cell="GRU")[0].startswith(
        "compiling the CPU GRU loops for float32")
    calls = []
    assert ready_loops(monkeypatch, calls.append, notice_s=30, cell="StandardLSTM") == []
    assert calls == ["float32"]


def test_a_quick_load_from_the_cache_is_not_announced(monkeypatch):
    calls = []
    assert ready_loops(monkeypatch, lambda dtype: calls.append(dtype) or 0.0, notice_s=30) == []
    assert calls == ["float32"], "the loops are made ready before the first step"


def test_a_failed_compile_is_left_to_the_self_check(monkeypatch):
    def fails(dtype):
        raise RuntimeError("LLVM is broken")

    assert ready_loops(monkeypatch, fails, notice_s=30) == []


def test_other_backends_compile_nothing(monkeypatch):
    calls = []
    assert ready_loops(monkeypatch, calls.append, notice_s=30, backend="array_api_strict") == []
    assert calls == []


def test_train_text_makes_the_loops_ready_before_its_first_step(monkeypatch, capsys, tmp_path):
    from dualtape import cli
    from dualtape.text import trainer

    events = []
    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    monkeypatch.setattr(numba_lstm, "warm_up", lambda dtype: events.append(f"ready {dtype}"))
    real_step = trainer.TextTrainer.step
    monkeypatch.setattr(trainer.TextTrainer, "step",
                        lambda self: events.append("step") or real_step(self))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    assert cli.main(["train-text", str(corpus), "--hidden", "8", "--seq-len", "8", "--batch",
                     "2", "--steps", "2", "--dtype", "float64", "--seed", "4"]) == 0, \
        capsys.readouterr().err
    assert events[:2] == ["ready float64", "step"]


@pytest.mark.parametrize("buffers, matrix", [("float64", "float32"), ("float32", "float64")])
def test_a_recurrent_matrix_of_another_dtype_than_the_buffers_is_refused(buffers, matrix):
    """The loops read ``U`` as raw memory of the buffers' dtype: one of the other dtype (either
    way round) is refused, forwards and backwards, before anything is written."""
    U, c0 = np.ones((6, 2), matrix), np.ones((1, 2), buffers)
    projected = np.ones((1, 1, 8), buffers)
    with pytest.raises(ValueError, match=f"NumbaLSTM: U must be a {buffers} numpy array"):
        NumbaLSTM().forward_sequence(np, U, c0, projected)
    assert (projected == 1).all() and (c0 == 1).all()
    cells, gates = np.zeros((2, 1, 2), buffers), np.zeros((1, 1, 8), buffers)
    dhs, dc = np.zeros((1, 1, 2), buffers), np.ones((1, 2), buffers)
    with pytest.raises(ValueError, match=f"NumbaLSTM: U must be a {buffers} numpy array"):
        NumbaLSTM().backward_sequence(np, U, cells, gates, dhs, dc)


@pytest.mark.parametrize(("steps", "batch"), [(1, 1), (4, 1), (4, 3)])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_loops_products_alone_are_their_products(steps, batch, dtype):
    """The structural bound's per-step products (``recurrent_products``) compute what the
    loops' products do, in both forms: ``c_t U_fiᵀ`` at every step, ``dfi_t U_fi`` from the
    last step down to the second."""
    rng = np.random.default_rng(steps + batch)
    n = 5
    U = rng.standard_normal((3 * n, n)).astype(dtype)
    cells = rng.standard_normal((steps + 1, batch, n)).astype(dtype)
    dfi = rng.standard_normal((steps, batch, 2 * n)).astype(dtype)
    r, rec = np.full((batch, 2 * n), np.nan, dtype), np.full((batch, n), np.nan, dtype)
    numba_lstm._compiled().recurrent_products(
        *blas.addresses(U.dtype), U, np.ascontiguousarray(U[: 2 * n].T), cells, r, dfi, rec,
        U.dtype.type(1))
    tolerance = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(r, cells[steps - 1] @ U[: 2 * n].T, rtol=tolerance)
    if steps > 1:  # the last product back is the second step's
        np.testing.assert_allclose(rec, dfi[1] @ U[: 2 * n], rtol=tolerance)
    else:
        assert np.isnan(rec).all()
    numba_lstm.recurrent_products(U, steps, batch)()  # its own operands: runs
