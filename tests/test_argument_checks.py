"""The public edge's checks of numbers given as arguments: ``check_real`` at both ends of
its intervals, open and closed, and through the names that use it."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest

import dualtape
from dualtape.layers.edges import check_real


@pytest.mark.parametrize("interval, value, inside", [
    ("[0, 1)", 0, True), ("[0, 1)", 1, False), ("(0, 1]", 0, False), ("(0, 1]", 1, True),
    ("(0, inf)", math.inf, False), ("(0, inf]", math.inf, True), ("[0, 1)", -1e-300, False),
    ("[0, 1)", math.nextafter(1, 0), True), ("(0, inf)", 5e-324, True),
])
def test_each_end_of_an_interval_is_open_or_closed_as_written(interval, value, inside):
    if inside:
        assert check_real("owner", "x", value, interval) == value
    else:
        with pytest.raises(ValueError, match=f"^owner: x must be a real number in "
                                             f"{re.escape(interval)}, got "):
            check_real("owner", "x", value, interval)


@pytest.mark.parametrize("value", [np.float32(0.5), np.int64(0), Fraction(1, 3), 0.25])
def test_numpy_and_other_real_numbers_are_taken_as_floats(value):
    checked = check_real("owner", "x", value, "[0, 1)")
    assert type(checked) is float and checked == float(value)


@pytest.mark.parametrize("value", [True, False, np.bool_(False), math.nan, "0.5", None, 0.5j])
def test_bools_nan_strings_and_complex_numbers_are_refused(value):
    with pytest.raises(ValueError, match=r"^owner: x must be a real number in \[0, 1\], got "):
        check_real("owner", "x", value, "[0, 1]")  # True and False would fit as 1 and 0


@pytest.mark.parametrize("make, message", [
    (lambda: dualtape.SGD(0.0), r"SGD: rate must be a real number in \(0, inf\)"),
    (lambda: dualtape.SGD(0.1, momentum=1.0), r"SGD: momentum must be a real number in \[0, 1\)"),
    (lambda: dualtape.Adam(beta2=1.0), r"Adam: beta2 must be a real number in \[0, 1\)"),
    (lambda: dualtape.Dropout(1.0), r"Dropout: rate must be a real number in \[0, 1\)"),
    (lambda: dualtape.clip_gradients([], 0), r"clip_gradients: max_norm must be a real number "
                                             r"in \(0, inf\]"),
])
def test_the_names_that_check_numbers_say_their_interval(make, message):
    with pytest.raises(ValueError, match=f"^{message}, got "):
        make()


def test_the_closed_ends_the_names_promise_are_accepted():
    assert dualtape.SGD(0.1, momentum=0.0, regulariser=0.0).momentum == 0.0
    assert dualtape.Dropout(0.0).rate == 0.0
    assert dualtape.clip_gradients([{"W": np.ones(2)}], math.inf)[1] == pytest.approx(math.sqrt(2))
