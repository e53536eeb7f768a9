"""A schedule kept in an optimizer's state (``state_dict``, ``dualtape.save``/``load``) as plain
data: restored, continued, and refused when it is not one."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dualtape
from dualtape.schedules import (
    CosineRate,
    LambdaRate,
    LinearRate,
    SequentialRate,
    StepRate,
    describe,
    restore,
)

BUILT_IN = [StepRate(3, 0.25), CosineRate(9, 1e-3), LinearRate(0.5, 0.75, 4),
            SequentialRate([LinearRate(0.1, total_iters=2), StepRate(2),
                            SequentialRate([CosineRate(4), StepRate(1, 0.9)], [4])], [2, 5])]


def stepped(optimizer, steps=2):
    params = [{"w": dualtape.asarray(np.ones(4))}]
    for _ in range(steps):
        optimizer.step(params, [{"w": dualtape.asarray(np.full(4, 0.5))}])
    return params


@pytest.mark.parametrize("schedule", BUILT_IN, ids=repr)
def test_a_built_in_schedule_is_plain_data_and_back(schedule):
    text = json.dumps(describe(schedule))
    back = restore(json.loads(text), None)
    assert back == schedule and back is not schedule
    assert [back(0.1, t) for t in range(12)] == [schedule(0.1, t) for t in range(12)]
    assert schedule != StepRate(3, 0.5) and repr(back) == repr(schedule)


@pytest.mark.parametrize("schedule", BUILT_IN[:2], ids=repr)
def test_the_state_restores_the_saved_schedule_over_the_optimizers_own(backend, schedule):
    saved = dualtape.Adam(0.1, schedule=schedule)
    params = stepped(saved)
    assert json.loads(str(saved.state_dict()["schedule"])) == describe(schedule)
    other = dualtape.Adam(0.1, schedule=StepRate(1))
    other.load_state_dict(saved.state_dict(), params)
    assert other.schedule == schedule and other.steps == 2


def test_a_constant_rate_is_saved_as_none_and_replaces_a_schedule():
    saved = dualtape.SGD(0.1)
    params = stepped(saved)
    assert str(saved.state_dict()["schedule"]) == "null"
    other = dualtape.SGD(0.1, schedule=StepRate(1))
    other.load_state_dict(saved.state_dict(), params)
    assert other.schedule is None


def test_a_state_saved_before_schedules_keeps_the_optimizers_own(tmp_path):
    """A checkpoint of an older dualtape holds no ``optimizer/schedule``: it still loads."""
    net = dualtape.Network([dualtape.FullyConnected(2, 2, seed=1, dtype="float64")])
    dualtape.save(net, tmp_path / "old.npz", extra={
        "optimizer/steps": np.asarray(7), "optimizer/kind": np.asarray("SGD")})
    optimizer = dualtape.SGD(0.1, schedule=StepRate(5, 0.5))
    dualtape.load(tmp_path / "old.npz", optimizer=optimizer)
    assert optimizer.schedule == StepRate(5, 0.5) and optimizer.steps == 7
    stepped(optimizer, 1)
    assert optimizer.rate == 0.05


def test_a_lambda_schedule_saves_its_place_and_needs_the_same_schedule_to_load():
    def factor(t):
        return 0.5**t

    schedule = SequentialRate([LinearRate(0.5, total_iters=2), LambdaRate(factor)], [2])
    saved = dualtape.SGD(0.1, schedule=schedule)
    params = stepped(saved, 3)
    state = saved.state_dict()
    assert json.loads(str(state["schedule"]))["schedules"][1] == {"kind": "LambdaRate"}
    same = SequentialRate([LinearRate(0.5, total_iters=2), LambdaRate(factor)], [2])
    resumed = dualtape.SGD(0.1, schedule=same)
    resumed.load_state_dict(state, params)
    assert resumed.schedule is same and resumed.steps == 3
    for other in (None, LambdaRate(factor), SequentialRate(
            [LinearRate(0.25, total_iters=2), LambdaRate(factor)], [2])):
        refused = dualtape.SGD(0.1, schedule=other)
        with pytest.raises(ValueError) as info:
            refused.load_state_dict(state, params)
        assert str(info.value) == (
            f"SGD: state 'schedule': the saved schedule {describe(schedule)} holds a LambdaRate, "
            "whose function cannot be saved: build the optimizer with the same schedule before "
            f"loading (it has {other!r})")
        assert refused.schedule is other and refused.steps == 0


KNOWN = "is not a saved schedule (known: StepRate, CosineRate, LinearRate, SequentialRate)"
ONE_STEP = '{"kind": "StepRate", "step_size": 1}'


@pytest.mark.parametrize(("text", "why"), [
    ("cosine", "Expecting value: line 1 column 1 (char 0)"),
    ('{"kind": "Nope"}', f"{{'kind': 'Nope'}} {KNOWN}"),
    ('{"kind": "LambdaRate!"}', f"{{'kind': 'LambdaRate!'}} {KNOWN}"),
    ("[1, 2]", f"[1, 2] {KNOWN}"),
    ('"StepRate"', f"'StepRate' {KNOWN}"),
    ('{"kind": "StepRate", "step_size": 0}', "StepRate: step_size must be a positive integer, "
     "got 0"),
    ('{"kind": "StepRate", "step_size": 2, "bogus": 1}', "{'kind': 'StepRate', 'step_size': 2, "
     "'bogus': 1} is not a saved schedule: StepRate"),  # then Python's words, which vary
    ('{"kind": "CosineRate", "t_max": "ten"}', "CosineRate: t_max must be a positive integer, "
     "got 'ten'"),
    (f'{{"kind": "SequentialRate", "schedules": [null, {ONE_STEP}], "milestones": [3]}}',
     "{'kind': 'SequentialRate', 'schedules': [None, {'kind': 'StepRate', 'step_size': 1}], "
     "'milestones': [3]} is not a saved schedule: SequentialRate: schedules must be a list of "
     "schedules, got [None, StepRate(step_size=1, gamma=0.1)]"),
    (f'{{"kind": "SequentialRate", "schedules": [{ONE_STEP}], "milestones": [3]}}',
     "SequentialRate: milestones must be 0 increasing steps, one fewer than schedules, got [3]"),
    ('{"kind": "SequentialRate", "milestones": []}', "{'kind': 'SequentialRate', 'milestones': "
     "[]} is not a saved schedule: SequentialRate: schedules must be a list of schedules, got "
     "[]"),
    (np.asarray(["{}", "{}"]), "Expecting value: line 1 column 2 (char 1)"),
], ids=repr)
def test_a_saved_schedule_that_is_not_one_is_refused_changing_nothing(text, why):
    optimizer = dualtape.SGD(0.1, schedule=StepRate(4))
    params = stepped(optimizer)
    state = {**optimizer.state_dict(), "schedule": np.asarray(text)}
    fresh = dualtape.SGD(0.1, schedule=CosineRate(3))
    with pytest.raises(ValueError) as info:
        fresh.load_state_dict(state, params)
    assert str(info.value).startswith(f"SGD: state 'schedule': {why}")
    assert "\n" not in str(info.value)
    assert fresh.schedule == CosineRate(3) and fresh.steps == 0 and not fresh.state
