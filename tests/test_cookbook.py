"""docs/cookbook.md beyond what tests/test_readme.py runs: the forecaster's ``fit`` under every
backend (the recipe's one-line move), and the torch recipe where torch is installed."""

from __future__ import annotations

import contextlib
import io
import math

import pytest

import dualtape as dt
from bench.cookbook_forecaster import PAGE, recipe
from tests.test_readme import snippets


@pytest.fixture(scope="module")
def forecaster() -> dict:
    """The recipe's namespace (``series``, ``fit``) and ``fit``'s held-out error on numpy."""
    found = recipe()
    with dt.use_backend("numpy"):
        found["numpy_error"] = found["fit"](found["series"][-200:], epochs=1)[1]
    return found


def test_the_forecasters_loop_runs_on_every_backend(backend, forecaster):
    net, error, epochs = forecaster["fit"](forecaster["series"][-200:], epochs=1)
    assert net.backend == backend
    assert epochs == 1
    assert math.isclose(error, forecaster["numpy_error"], rel_tol=1e-5)


def test_the_torch_recipe_prints_what_the_page_shows():
    pytest.importorskip("torch")
    found = snippets(PAGE.read_text(), "python torch")
    assert found, "the cookbook's torch recipe is fenced ```python torch"
    for number, (code, shown) in enumerate(found, 1):
        printed = io.StringIO()
        with dt.use_backend("numpy"), contextlib.redirect_stdout(printed):
            exec(compile(code, f"{PAGE.name} python torch block {number}", "exec"), {})
        assert printed.getvalue() == shown
