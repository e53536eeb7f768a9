"""Learning-rate schedules (``dualtape.schedules``) on ``SGD`` and ``Adam``: the rate of every
step on every backend and update path, torch's rates (``fixtures/schedule_golden.npz``, and
live where torch is installed), and the refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dualtape
from dualtape import optim
from dualtape.schedules import (
    CosineRate,
    LambdaRate,
    LinearRate,
    SequentialRate,
    StepRate,
)

from .conftest import np64
from .fixtures import make_schedule_golden as golden
from .helpers import assert_refused_word_for_word, refusal_id

CASES = golden.cases()


def build(parts):
    """The dualtape schedule of a golden case."""
    made = [getattr(dualtape.schedules, kind)(**{k: v for k, v in args.items()
                                                 if k != "milestone"}) for kind, args in parts]
    if len(made) == 1:
        return made[0]
    return SequentialRate(made, [args["milestone"] for _, args in parts[:-1]])


@pytest.fixture(scope="module")
def stored() -> dict[str, np.ndarray]:
    with np.load(golden.PATH, allow_pickle=False) as archive:
        return {k: archive[k] for k in archive.files}


def stepped_rates(optimizer, steps):
    """``optimizer``'s rate at each of ``steps`` steps of a parameter of ones with gradient
    ones, read twice: from ``rate`` and from how far the parameter moved (plain SGD)."""
    params = [{"w": dualtape.asarray(np.ones(3))}]
    rates, moves = [], []
    for _ in range(steps):
        before = np64(params[0]["w"]).copy()
        optimizer.step(params, [{"w": dualtape.asarray(np.ones(3))}])
        rates.append(optimizer.rate)
        moves.append(before - np64(params[0]["w"]))
    return np.asarray(rates), np.asarray(moves)


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_schedule_gives_torchs_rates(backend, stored, name):
    """The committed torch rates, step by step, as ``rate`` and as the move of plain SGD."""
    optimizer = dualtape.SGD(golden.RATE, schedule=build(CASES[name]))
    rates, moves = stepped_rates(optimizer, golden.STEPS)
    np.testing.assert_allclose(rates, stored[name], rtol=1e-13, atol=1e-17)
    np.testing.assert_allclose(moves, np.repeat(stored[name][:, None], 3, axis=1), rtol=1e-12,
                               atol=1e-15)


def test_the_fixture_holds_every_case_and_is_what_torch_computes_today(stored):
    assert set(stored) - {"torch_version"} == set(CASES)
    assert all(stored[name].shape == (golden.STEPS,) for name in CASES)
    pytest.importorskip("torch", reason="torch is not installed: the committed rates stand")
    for name, rates in golden.golden().items():
        np.testing.assert_allclose(rates, stored[name], rtol=1e-15, atol=0, err_msg=name)


@pytest.mark.parametrize("parts", [
    (("CosineRate", {"t_max": 7, "eta_min": 0.003}),),
    (("StepRate", {"step_size": 3, "gamma": 0.7}),),
    (("LinearRate", {"start_factor": 0.2, "total_iters": 9, "milestone": 9}),
     ("CosineRate", {"t_max": 51})),
], ids=["cosine", "step", "warmup-cosine"])
def test_adam_under_a_schedule_follows_torch_live_over_sixty_steps(parts):
    """The parameters of torch's Adam with its scheduler, from the same gradients."""
    torch = pytest.importorskip("torch", reason="torch is not installed: the rates are golden")
    rng = np.random.default_rng(11)
    w0, grads = rng.normal(size=(4, 3)), rng.normal(size=(60, 4, 3))
    w = torch.tensor(w0.copy(), requires_grad=True)
    theirs = torch.optim.Adam([w], lr=0.01)
    made = [golden.torch_scheduler(theirs, kind, args) for kind, args in parts]
    scheduler = made[0] if len(made) == 1 else torch.optim.lr_scheduler.SequentialLR(
        theirs, made, milestones=[args["milestone"] for _, args in parts[:-1]])
    ours = dualtape.Adam(0.01, schedule=build(parts))
    params = [{"w": w0.copy()}]
    for g in grads:
        w.grad = torch.tensor(g.copy())
        theirs.step()
        scheduler.step()
        ours.step(params, [{"w": g.copy()}])
        np.testing.assert_allclose(params[0]["w"], w.detach().numpy(), rtol=1e-12, atol=1e-14)


def test_a_constant_rate_is_no_schedule_and_rate_stays_settable():
    optimizer = dualtape.SGD(0.5)
    assert optimizer.schedule is None and optimizer.base_rate == 0.5
    optimizer.rate = 0.25  # a hand-made schedule, as before schedules
    _, moves = stepped_rates(optimizer, 2)
    assert moves.tolist() == [[0.25] * 3] * 2


def test_the_schedule_counts_the_optimizers_steps_from_the_constructor_rate():
    """``rate`` is the constructor's until the first step, then the last step's; changing
    ``base_rate`` moves the schedule."""
    optimizer = dualtape.SGD(1.0, schedule=LambdaRate(lambda t: 10.0 ** -t))
    assert optimizer.rate == 1.0
    rates, _ = stepped_rates(optimizer, 3)
    assert rates.tolist() == [1.0, 0.1, 0.01] and optimizer.steps == 3
    optimizer.base_rate = 1000.0
    assert stepped_rates(optimizer, 1)[0].tolist() == [1.0]


def test_a_rate_of_zero_is_allowed_and_moves_nothing(backend):
    optimizer = dualtape.SGD(0.1, schedule=LinearRate(1.0, 0.0, total_iters=2))
    _, moves = stepped_rates(optimizer, 4)
    np.testing.assert_allclose(moves[:, 0], [0.1, 0.05, 0.0, 0.0], rtol=1e-15)


def test_cosine_past_t_max_rises_again_as_torchs_does():
    cosine = CosineRate(t_max=4, eta_min=0.1)
    assert [cosine(1.0, t) for t in (0, 4, 8)] == [1.0, pytest.approx(0.1), 1.0]
    assert cosine(1.0, 2) == pytest.approx(0.55) == cosine(1.0, 6)


def test_a_sequence_starts_each_schedule_at_its_milestone_from_step_0():
    sequence = SequentialRate([LinearRate(0.5, total_iters=2), StepRate(1, 0.5), CosineRate(8)],
                              [3, 5])
    got = [sequence(8.0, t) for t in range(7)]
    assert got == [4.0, 6.0, 8.0, 8.0, 4.0, 8.0, pytest.approx(8.0 * (1 + math.cos(math.pi / 8))
                                                                / 2)]


# --- every update path -------------------------------------------------------------------


OPTIMIZERS = {
    "sgd": lambda s: dualtape.SGD(0.1, schedule=s),
    "sgd-momentum-l2": lambda s: dualtape.SGD(0.1, momentum=0.9, regulariser=0.01, schedule=s),
    "adam": lambda s: dualtape.Adam(0.01, schedule=s),
}
SIZES = {"small": 5, "compiled": optim.COMPILED_FROM, "passes": 2 * optim.CHUNK + 1}


@pytest.mark.parametrize("fused", ["1", "0"])
@pytest.mark.parametrize("size", sorted(SIZES))
@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_every_update_path_takes_the_scheduled_rate(backend, monkeypatch, kind, size, fused):
    """Five steps given the same arrays (from the third, the kept step, ``held_update``) under
    a schedule are bit for bit those of the same optimizer whose ``rate`` is set by hand
    before each step; on the in-place, compiled, passes and generic code."""
    monkeypatch.setenv("DUALTAPE_FUSED", fused)
    schedule = StepRate(1, gamma=0.5)
    rng = np.random.default_rng(2)
    w0 = rng.normal(size=SIZES[size])
    runs = []
    for scheduled in (True, False):
        optimizer = OPTIMIZERS[kind](schedule if scheduled else None)
        params = [{"w": dualtape.asarray(w0.copy())}]
        rng = np.random.default_rng(3)  # the same gradients for both runs
        grads = [{"w": dualtape.asarray(rng.normal(size=SIZES[size]))}]
        for t in range(5):
            if not scheduled:
                optimizer.rate = optimizer.base_rate * 0.5**t
            optimizer.step(params, grads)
        runs.append(np64(params[0]["w"]).copy())
    np.testing.assert_array_equal(*runs)
    assert not np.array_equal(runs[0], w0)


# --- refusals ----------------------------------------------------------------------------


INTEGER = "must be a positive integer, got"
REAL = "must be a real number in"


@pytest.mark.parametrize(("make", "message"), [
    (lambda: StepRate(0), f"StepRate: step_size {INTEGER} 0"),
    (lambda: StepRate(2.5), f"StepRate: step_size {INTEGER} 2.5"),
    (lambda: StepRate(2, gamma=0), f"StepRate: gamma {REAL} (0, inf), got 0"),
    (lambda: StepRate(2, gamma=-0.5), f"StepRate: gamma {REAL} (0, inf), got -0.5"),
    (lambda: StepRate(2, gamma=math.inf), f"StepRate: gamma {REAL} (0, inf), got inf"),
    (lambda: CosineRate(0), f"CosineRate: t_max {INTEGER} 0"),
    (lambda: CosineRate(5, eta_min=-1e-3), f"CosineRate: eta_min {REAL} [0, inf), got -0.001"),
    (lambda: CosineRate(5, eta_min=math.nan), f"CosineRate: eta_min {REAL} [0, inf), got nan"),
    (lambda: LinearRate(start_factor=0), f"LinearRate: start_factor {REAL} (0, 1], got 0"),
    (lambda: LinearRate(start_factor=1.5), f"LinearRate: start_factor {REAL} (0, 1], got 1.5"),
    (lambda: LinearRate(end_factor=-0.1), f"LinearRate: end_factor {REAL} [0, 1], got -0.1"),
    (lambda: LinearRate(end_factor=1.01), f"LinearRate: end_factor {REAL} [0, 1], got 1.01"),
    (lambda: LinearRate(total_iters=0), f"LinearRate: total_iters {INTEGER} 0"),
    (lambda: SequentialRate([StepRate(1)], [3]), "SequentialRate: milestones must be 0 "
     "increasing steps, one fewer than schedules, got [3]"),
    (lambda: SequentialRate([StepRate(1), StepRate(2)], [0]),
     f"SequentialRate: milestones {INTEGER} 0"),
    (lambda: SequentialRate([StepRate(1), StepRate(2), StepRate(3)], [5, 5]),
     "SequentialRate: milestones must be 2 increasing steps, one fewer than schedules, got "
     "[5, 5]"),
    (lambda: SequentialRate([StepRate(1), StepRate(2), StepRate(3)], [5, 4]),
     "SequentialRate: milestones must be 2 increasing steps, one fewer than schedules, got "
     "[5, 4]"),
], ids=refusal_id)
def test_bad_schedule_arguments_are_refused_in_one_line(make, message):
    assert_refused_word_for_word(make, message)


def test_the_defaults_are_torchs_and_a_schedule_shows_its_arguments():
    assert StepRate(3) == StepRate(3, 0.1) != StepRate(3, 0.5)
    assert CosineRate(3) == CosineRate(3, 0.0)
    assert LinearRate() == LinearRate(1 / 3, 1.0, 5)
    assert repr(StepRate(3, 0.5)) == "StepRate(step_size=3, gamma=0.5)"
    assert repr(SequentialRate([CosineRate(2)], [])) == (
        "SequentialRate(schedules=[CosineRate(t_max=2, eta_min=0.0)], milestones=[])")


NOT_A_SCHEDULE = ("schedule must be a schedule (StepRate, CosineRate, LinearRate, LambdaRate, "
                  "SequentialRate) or None, got ", "; a function of the step is "
                  "LambdaRate(function), which multiplies the rate")


@pytest.mark.parametrize(("make", "start", "end"), [
    (lambda: LambdaRate(0.5), "LambdaRate: factor must be a function of the step, got 0.5", ""),
    (lambda: SequentialRate([], []), "SequentialRate: schedules must be a list of schedules, "
     "got []", ""),
    (lambda: SequentialRate(iter([StepRate(1)]), []), "SequentialRate: schedules must be a "
     "list of schedules, got <list_iterator", ">"),
    (lambda: SequentialRate([StepRate(1), lambda t: 1.0], [3]), "SequentialRate: schedules "
     "must be a list of schedules, got [StepRate(step_size=1, gamma=0.1), <function", ">]"),
    (lambda: dualtape.SGD(0.1, schedule=lambda t: 1.0), f"SGD: {NOT_A_SCHEDULE[0]}<function",
     NOT_A_SCHEDULE[1]),
    (lambda: dualtape.Adam(schedule="cosine"), f"Adam: {NOT_A_SCHEDULE[0]}'cosine'",
     NOT_A_SCHEDULE[1]),
], ids=["factor", "no-schedules", "an-iterator", "a-function-among-them", "sgd", "adam"])
def test_what_is_not_a_schedule_is_refused_in_one_line(make, start, end):
    with pytest.raises(TypeError) as info:
        make()
    message = str(info.value)
    assert message.startswith(start) and message.endswith(end) and "\n" not in message


@pytest.mark.parametrize("bad", [-0.1, math.nan, math.inf, "fast", None])
@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_a_bad_rate_is_refused_at_its_step_before_anything_changes(backend, kind, bad):
    """The fourth step's rate is bad: the three before ran (the third kept, ``held_update``);
    the fourth raises naming ``schedule`` and the step, leaving parameters, state and
    ``steps`` as they were."""
    optimizer = OPTIMIZERS[kind](LambdaRate(lambda t: 1.0 if t < 3 else bad))
    params = [{"w": dualtape.asarray(np.linspace(-1, 1, 6))}]
    grads = [{"w": dualtape.asarray(np.linspace(1, 2, 6))}]
    for _ in range(3):
        optimizer.step(params, grads)
    before = np64(params[0]["w"]).copy()
    state = optimizer.state_dict()
    with pytest.raises(ValueError) as info:
        optimizer.step(params, grads)
    found = optimizer.base_rate * bad if isinstance(bad, float) else bad
    assert str(info.value) == (f"{type(optimizer).__name__}: schedule gave the rate {found!r} at "
                               "step 3; a rate must be a finite number >= 0")
    np.testing.assert_array_equal(np64(params[0]["w"]), before)
    assert optimizer.steps == 3
    after = optimizer.state_dict()
    assert after.keys() == state.keys()
    for key, a in after.items():
        np.testing.assert_array_equal(a, state[key])


# --- kept in the state ---------------------------------------------------------------------


SCHEDULES = {
    "step": StepRate(2, 0.5),
    "warmup-cosine": SequentialRate([LinearRate(0.1, total_iters=3), CosineRate(10, 1e-4)],
                                    [3]),
}


def train(optimizer, params, grads, steps):
    for _ in range(steps):
        optimizer.step(params, grads)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@pytest.mark.parametrize("kind", ["SGD", "Adam"])
def test_a_resumed_run_continues_its_schedule(backend, tmp_path, kind, name):
    """Ten steps straight equal five, a save (``dualtape.save(..., optimizer=)``), and five
    more by an optimizer built without a schedule that loads it."""
    net = dualtape.Network([dualtape.FullyConnected(3, 2, seed=1, dtype="float64")])
    grads = [{k: dualtape.asarray(np.full(tuple(v.shape), 0.5)) for k, v in g.items()}
             for g in net.params]
    straight = getattr(dualtape, kind)(0.1, schedule=SCHEDULES[name])
    copy = dualtape.Network([dualtape.FullyConnected(3, 2, seed=1, dtype="float64")])
    train(straight, net.params, grads, 10)
    halves = getattr(dualtape, kind)(0.1, schedule=SCHEDULES[name])
    train(halves, copy.params, grads, 5)
    dualtape.save(copy, tmp_path / "half.npz", optimizer=halves)
    resumed = getattr(dualtape, kind)(0.1)
    loaded = dualtape.load(tmp_path / "half.npz", optimizer=resumed)
    assert resumed.schedule == SCHEDULES[name] and resumed.steps == 5
    train(resumed, loaded.params, grads, 5)
    assert resumed.rate == straight.rate
    for mine, theirs in zip(loaded.params, net.params, strict=True):
        for k in mine:
            np.testing.assert_array_equal(np64(mine[k]), np64(theirs[k]))
