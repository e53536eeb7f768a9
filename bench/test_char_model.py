"""The main job's workload and its references compute train-text's step.

- The workload is train-text's default model with Adam 0.01 and no clipping; dualtape's row is
  ``TextTrainer.step`` itself, on the data every row shares.
- JAX's and torch autograd's numbers for a small float64 case (``fixtures/
  char_model_golden.npz``) are dualtape's: the loss of every step, the first gradients and the
  parameters after the last step, on every backend, with neither library installed.
- Where a library is installed, its reference still gives the committed numbers, and at the
  main job's own sizes its first loss is dualtape's; torch.nn.LSTM (another cell) gives
  dualtape's loss and top gradients where both models reduce to their linear top.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bench.fixtures import make_char_model_golden as golden
from dualtape.backend import resolve_backend, to_numpy
from dualtape.benchmarks import char_model
from dualtape.benchmarks.measure import Result
from dualtape.benchmarks.runners import BackendRunner
from dualtape.benchmarks.workloads import SEED, WORKLOADS
from dualtape.text.config import TrainConfig
from dualtape.text.model import random_windows
from dualtape.text.trainer import TextTrainer

MAIN_JOB = next(w for w in WORKLOADS if w.op == "text")


@pytest.fixture(scope="module")
def stored() -> dict[str, np.ndarray]:
    with np.load(golden.PATH, allow_pickle=False) as archive:
        return {k: archive[k] for k in archive.files}


def host(groups) -> list[dict[str, np.ndarray]]:
    """Parameter groups (any backend) as float64 host copies (the trainer reuses its gradient
    buffers), the empty ones left out."""
    return [{k: np.array(to_numpy(v), dtype=np.float64) for k, v in g.items()}
            for g in groups if g]


def close(got: list[dict], want: list[dict], rtol: float = 1e-10) -> None:
    """Every array of ``got`` equals ``want``'s within ``rtol`` of the array's largest value."""
    assert [sorted(g) for g in got] == [sorted(w) for w in want]
    for g, w in zip(got, want, strict=True):
        for key in w:
            scale = float(np.max(np.abs(w[key]))) or 1.0
            np.testing.assert_allclose(g[key], w[key], rtol=0, atol=rtol * scale, err_msg=key)


def train_recording(backend, data, steps: int):
    """dualtape's trainer on ``data``: the loss of each step, the first step's gradients (as
    the optimizer receives them) and the parameters after the last step."""
    trainer = char_model.trainer(backend, data)
    seen = []
    update = trainer.optimizer.step

    def recording(params, grads):
        seen.append(host(grads))
        return update(params, grads)

    trainer.optimizer.step = recording
    losses = []
    for _ in range(steps):
        trainer.step()
        losses.append(trainer.read_loss())
    return np.asarray(losses), seen[0], host(trainer.net.params)


# --- the workload ---------------------------------------------------------------------------


def test_the_main_job_is_train_texts_default_model_with_adam_and_no_clipping():
    assert MAIN_JOB.key == "text/char-model-80x80-batch-32"
    assert MAIN_JOB.chars_per_call == 50 * 32
    cfg = char_model.config(MAIN_JOB, "float32", SEED)
    assert cfg == TrainConfig(hidden=[80, 80], seq_len=50, batch=32, optimizer="adam",
                              rate=0.01, clip=0.0, dtype="float32", seed=SEED)
    data = MAIN_JOB.host_data("float32")
    assert len(data["vocab"]) == 57 and data["config"] == cfg
    shapes = [{k: v.shape for k, v in g.items()} for g in data["params"]]
    assert shapes == [{"W": (320, 57), "U": (240, 80), "b": (320,)},
                      {"W": (320, 80), "U": (240, 80), "b": (320,)}, {"W": (57, 80), "b": (57,)}]
    assert all(v.dtype == np.float32 for g in data["params"] for v in g.values())


def test_the_workload_is_drawn_from_the_seed_the_same_every_time():
    first, second = (MAIN_JOB.host_data("float64") for _ in range(2))
    close(second["params"], first["params"], rtol=0)
    np.testing.assert_array_equal(first["ids"], second["ids"])


def test_a_corpus_of_another_vocabulary_is_refused():
    other = dataclasses.replace(MAIN_JOB, n_in=58)
    with pytest.raises(ValueError, match="the built-in corpus has 57 symbols, not 58"):
        other.host_data("float32")


def test_only_the_text_group_counts_characters():
    assert [w.key for w in WORKLOADS if w.chars_per_call] == [MAIN_JOB.key]
    result = Result(MAIN_JOB, "numpy", False, "float32", samples=[0.016, 0.02, 0.018])
    assert result.chars_per_second == pytest.approx(1600 / 0.018)
    record = result.as_dict()
    assert record["chars_per_call"] == 1600
    assert record["chars_per_s"] == pytest.approx(1600 / 0.018)
    assert Result(WORKLOADS[0], "numpy", False, "float32", [1.0]).as_dict()["chars_per_s"] is None


def test_dualtapes_row_runs_train_texts_own_step(bench_backend):
    run = BackendRunner(bench_backend).prepare(MAIN_JOB.smoke(), "float32")
    assert run.__func__ is TextTrainer.step
    trainer = run.__self__
    assert trainer.backend == bench_backend and trainer.config.seq_len == 2
    run()
    assert trainer.step_count == 1 and np.isfinite(trainer.read_loss())


def test_dualtapes_row_starts_from_the_datas_parameters(bench_backend):
    data = golden.case()
    data["params"] = [{k: 0.5 * v for k, v in g.items()} for g in data["params"]]
    trainer = char_model.trainer(bench_backend, data)
    close(host(trainer.net.params), data["params"], rtol=0)


def test_every_row_draws_the_windows_the_trainer_draws():
    data = golden.case()
    trainer = char_model.trainer(resolve_backend("numpy"), data)
    draw = char_model.windows(data)
    cfg = data["config"]
    for _ in range(3):
        expected = random_windows(data["ids"], cfg.seq_len, cfg.batch, trainer.window_rng)
        np.testing.assert_array_equal(draw(), expected)


# --- the committed numbers --------------------------------------------------------------------


def test_the_committed_windows_are_the_ones_drawn(stored):
    draw = char_model.windows(golden.case(stored))
    for window in stored["windows"]:
        np.testing.assert_array_equal(draw(), window)


@pytest.mark.parametrize("reference", golden.REFERENCES)
def test_dualtape_gives_the_references_committed_numbers(bench_backend, stored, reference):
    data = golden.case(stored)
    losses, grads, after = train_recording(bench_backend, data, golden.STEPS)
    np.testing.assert_allclose(losses, stored[f"{reference}/loss"], rtol=1e-12)
    close(grads, golden.unflatten(stored, f"{reference}/grads", data["params"]))
    close(after, golden.unflatten(stored, f"{reference}/after", data["params"]))


def test_the_committed_case_is_a_real_test(stored):
    """The case moves most parameters (the first layer's columns of symbols no window holds
    stay), not all by Adam's first-step size (±rate per step), and every step's loss differs."""
    data = golden.case(stored)
    after = golden.unflatten(stored, "jax/after", data["params"])
    for start, end in zip(data["params"], after, strict=True):
        for key in start:
            moved = np.abs(end[key] - start[key])
            assert np.mean(moved > 0) > 0.5
            assert not np.allclose(moved[moved > 0], golden.STEPS * 0.01)
    assert len(set(stored["jax/loss"])) == golden.STEPS


# --- the live libraries ---------------------------------------------------------------------


@pytest.mark.parametrize("reference", golden.REFERENCES)
def test_the_library_still_gives_the_committed_numbers(stored, reference):
    pytest.importorskip("jax" if reference == "jax" else "torch")
    data = golden.case(stored)
    run = golden.run_jax if reference == "jax" else golden.run_torch
    found = run(data)
    np.testing.assert_allclose(found["loss"], stored[f"{reference}/loss"], rtol=1e-12)
    close(found["grads"], golden.unflatten(stored, f"{reference}/grads", data["params"]))
    close(found["after"], golden.unflatten(stored, f"{reference}/after", data["params"]))


def main_job_loss() -> float:
    """dualtape's first loss on the main job's data (float32)."""
    run = BackendRunner(resolve_backend("numpy")).prepare(MAIN_JOB, "float32")
    run()
    return run.__self__.read_loss()


def test_at_the_main_jobs_sizes_jax_gives_dualtapes_first_loss():
    pytest.importorskip("jax")
    from dualtape.benchmarks.jax_text import JaxCharModel

    value = float(JaxCharModel(MAIN_JOB.host_data("float32")).step())
    assert value == pytest.approx(main_job_loss(), rel=1e-5)


def test_at_the_main_jobs_sizes_torch_autograd_gives_dualtapes_first_loss():
    pytest.importorskip("torch")
    from dualtape.benchmarks.torch_text import GrenadeCharModel

    value = GrenadeCharModel(MAIN_JOB.host_data("float32")).step()
    assert value == pytest.approx(main_job_loss(), rel=1e-5)


def test_torch_nn_lstm_computes_dualtapes_loss_where_both_reduce_to_the_top(stored):
    """With every LSTM weight 0 both cells output 0 (Grenade's: ĉ = 0, so c = 0; torch's: g =
    0), so both models are their linear top on zeros: the same loss and top gradients test
    the windows, the one-hot inputs, the targets and the loss's scale."""
    torch = pytest.importorskip("torch")
    from dualtape.benchmarks.torch_text import NNCharModel

    data = golden.case(stored)
    *lstms, top = data["params"]
    data["params"] = [*({k: np.zeros_like(v) for k, v in g.items()} for g in lstms), top]
    losses, grads, _ = train_recording(resolve_backend("numpy"), data, 1)
    model = NNCharModel(data)
    with torch.no_grad():
        for lstm in model.lstms:
            for p in lstm.parameters():
                p.zero_()
        model.top.weight.copy_(torch.tensor(top["W"]))
        model.top.bias.copy_(torch.tensor(top["b"]))
    model.optimizer.zero_grad()
    value = model.loss(model.next_window())
    value.backward()
    assert value.item() == pytest.approx(losses[0], rel=1e-12)
    close([{"W": model.top.weight.grad.numpy(), "b": model.top.bias.grad.numpy()}], grads[-1:])
