"""train-text's ``--schedule``: its grammar, the refusals, and a run that resumes its
schedule (and its log's rates)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dualtape
from dualtape.schedules import CosineRate, LinearRate, SequentialRate, StepRate
from dualtape.text.checkpoint import load_checkpoint
from dualtape.text.config import OPTIMIZERS, TrainConfig, make_optimizer
from dualtape.text.record import read_log
from dualtape.text.schedule_option import is_schedule, parse_schedule

from .test_text import SMALL, corpus, fails, run  # noqa: F401 (corpus: a fixture)


@pytest.mark.parametrize(("text", "expected"), [
    ("constant", None),
    ("step:100", StepRate(100)),
    ("step:100:0.5", StepRate(100, 0.5)),
    ("cosine:50", CosineRate(50)),
    ("cosine:50:1e-3", CosineRate(50, 1e-3)),
    ("warmup:20", LinearRate(total_iters=20)),
    ("warmup:20:0.1", LinearRate(0.1, 1.0, 20)),
    ("warmup:20+cosine:80", SequentialRate([LinearRate(total_iters=20), CosineRate(80)], [20])),
    ("warmup:5:0.5+step:10:0.5+cosine:30",
     SequentialRate([LinearRate(0.5, 1.0, 5), StepRate(10, 0.5), CosineRate(30)], [5, 15])),
])
def test_the_schedule_grammar(text, expected):
    assert parse_schedule(text) == expected


@pytest.mark.parametrize("bad", [
    "", "cos:5", "step", "step:", "step:0", "step:2.5", "step:10:0", "step:1:2:3",
    "cosine:10:-1", "cosine:10:nan", "warmup:10:0", "warmup:10:2", "constant+cosine:5",
    "cosine:5+", "Cosine:5",
])
def test_a_schedule_that_is_not_one_is_refused_in_one_line(capsys, corpus, bad):  # noqa: F811
    fails(capsys, "train-text", str(corpus), *SMALL, "--steps", "1", "--schedule", bad,
          match=f"--schedule must be constant, or parts joined by + of step:N[:GAMMA], "
          f"cosine:N[:MIN] and warmup:N[:START] (N a whole number of steps), got {bad}")


@pytest.mark.parametrize(("text", "part"), [("cos:5", "cos:5"), ("cosine:5+step", "step"),
                                            ("step:1:2:3", "step:1:2:3")])
def test_a_schedule_part_that_is_not_one_is_named(text, part):
    """In this process (the command's refusal above runs in a child): ``is_schedule`` says no,
    ``parse_schedule`` names the part."""
    assert not is_schedule(text) and not is_schedule(5) and is_schedule("warmup:5+cosine:10")
    with pytest.raises(ValueError, match=f"^{part!r} is not a schedule part$"):
        parse_schedule(text)


def logged_rates(path):
    return {row.step: row.learning_rate for row in read_log(path).rows}


def test_a_resumed_run_continues_its_schedule(capsys, corpus, tmp_path):  # noqa: F811
    """Four steps, saved, and four more resumed give a straight run's weights and log; the
    log's rates are the schedule's; another --schedule on resume takes over from there."""
    schedule = "warmup:2:0.5+cosine:6"
    args = [str(corpus), *SMALL, "--sample-chars", "0", "--log-every", "1", "--optimizer",
            "adam", "--rate", "0.02", "--schedule", schedule]
    straight, halves = tmp_path / "straight.npz", tmp_path / "halves.npz"
    code, out, err = run(capsys, "train-text", *args, "--steps", "8", "--save", str(straight))
    assert code == 0, err
    assert f"Adam rate 0.02, schedule {schedule}, clip" in out
    assert run(capsys, "train-text", *args, "--steps", "4", "--save", str(halves))[0] == 0
    assert load_checkpoint(halves, dualtape.get_backend()).config.schedule == schedule
    resumed = [str(corpus), *SMALL[:-2], "--sample-chars", "0", "--log-every", "1"]  # no seed
    code, _, err = run(capsys, "train-text", *resumed, "--steps", "4", "--resume", str(halves))
    assert code == 0, err
    want = parse_schedule(schedule)
    assert want is not None
    expected = {t: want(0.02, t - 1) for t in range(1, 9)}
    assert logged_rates(f"{straight}.log.csv") == pytest.approx(expected, abs=1e-9)
    assert logged_rates(f"{halves}.log.csv") == pytest.approx(expected, abs=1e-9)
    for a, b in zip(dualtape.load(straight).params, dualtape.load(halves).params, strict=True):
        for k in a:
            np.testing.assert_array_equal(dualtape.to_numpy(a[k]), dualtape.to_numpy(b[k]))
    code, _, err = run(capsys, "train-text", *resumed, "--steps", "2", "--resume", str(halves),
                       "--schedule", "step:1:0.5")
    assert code == 0, err
    rates = logged_rates(f"{halves}.log.csv")
    assert [rates[9], rates[10]] == pytest.approx([0.02 * 0.5**8, 0.02 * 0.5**9], abs=1e-9)


def test_a_checkpoint_saved_before_schedules_resumes_at_a_constant_rate(
        capsys, corpus, tmp_path):  # noqa: F811
    """Its configuration has no ``schedule`` and its optimizer state none either."""
    model = tmp_path / "old.npz"
    args = [str(corpus), *SMALL, "--sample-chars", "0", "--log-every", "1", "--rate", "0.3"]
    assert run(capsys, "train-text", *args, "--steps", "2", "--save", str(model))[0] == 0
    net, extra = dualtape.load_with_extra(model)
    del extra["config"]["schedule"], extra["optimizer/schedule"]
    dualtape.save(net, model, extra=extra)
    code, _, err = run(capsys, "train-text", *args, "--steps", "2", "--resume", str(model))
    assert code == 0, err
    assert load_checkpoint(model, dualtape.get_backend()).config.schedule == "constant"
    assert set(logged_rates(f"{model}.log.csv").values()) == {0.3}
    assert not math.isnan(read_log(f"{model}.log.csv").rows[-1].train_loss)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_each_optimizer_takes_the_configured_schedule(optimizer):
    made = make_optimizer(TrainConfig(optimizer=optimizer, schedule="cosine:9:0.01"))
    assert made.schedule == CosineRate(9, 0.01)
