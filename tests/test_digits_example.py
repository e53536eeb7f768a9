"""examples/digits.py (Grenade's MNIST example on scikit-learn's digits), quickly: a tiny
subset, one seed, one epoch; the networks it compares have the sizes it states."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="the digits example needs scikit-learn (the examples "
                    "extra)")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "digits.py"


@pytest.fixture(scope="module")
def digits():
    spec = importlib.util.spec_from_file_location("digits_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_networks_take_digits_and_have_the_stated_sizes(digits):
    conv, dense = digits.conv_net(0, "float64"), digits.dense_net(0, "float64")
    image = np.zeros((1, 8, 8))
    assert conv.predict(image).shape == dense.predict(image).shape == (10,)
    assert dense.in_shape == (1, 8, 8) and conv.out_shape == dense.out_shape == (10,)
    assert digits.parameter_count(conv) == 2730 and digits.parameter_count(dense) == 3010


def test_the_split_is_stratified_and_fixed(digits):
    a, b = digits.digits_split(), digits.digits_split()
    assert a.x_train.shape == (1347, 1, 8, 8) and a.x_test.shape == (450, 1, 8, 8)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    assert 0.0 <= a.x_train.min() and a.x_train.max() <= 1.0
    assert np.bincount(a.y_test).min() >= 43  # every digit in proportion (43-46 of each)


def test_a_quick_run_reports_every_model(digits, capsys):
    assert digits.main(["--seeds", "0", "1", "--epochs", "2", "--limit", "300"]) == 0
    report = capsys.readouterr().out
    rows = [line for line in report.splitlines() if line.startswith("| ") and "%" not in line
            and "---" not in line]
    assert [row.split(" | ")[0] for row in rows] == [
        "| dualtape convolutional", "| dualtape dense", "| scikit-learn MLPClassifier (64-40-10)"]
    for row in rows:
        mean = float(re.search(r"\| ([\d.]+) ± ", row).group(1))
        assert 20.0 < mean <= 100.0  # two epochs on 225 images: far above chance (10%)
    assert "225 training and 75 test images" in report and "scikit-learn 1." in report
