"""``TextTrainer.route`` (what ``dualtape info`` and train-text's header say) is the route its
steps take, on every backend, with random windows and with streams carrying their states."""

from __future__ import annotations

import dataclasses

import pytest

from dualtape.routes import last_route
from dualtape.text.trainer import TextTrainer

from .test_text import TEXT, TINY


@pytest.mark.parametrize("stateful", [False, True], ids=["windows", "streams"])
def test_the_route_told_is_the_route_each_step_takes(backend, stateful):
    trainer = TextTrainer.new(TEXT, dataclasses.replace(TINY, stateful=stateful), backend)
    for _ in range(2):  # the second stateful step begins from carried states
        told = trainer.route()
        trainer.step()
        assert told == last_route(trainer._logits, "backpropagate_sequence")
