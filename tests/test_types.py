"""The package type-checks: ``python -m mypy`` with pyproject.toml's ``[tool.mypy]`` (which
names ``dualtape/``) finds no error. The code is annotated and ``py.typed`` ships, so the
annotations are a promise to users' type checkers."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_finds_no_error_in_the_package(tmp_path):
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed: pip install -e '.[test]'")
    # the cache in tmp_path: no .mypy_cache left in the checkout, none shared between runs
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "MYPY_FORCE_COLOR": "0"},
    )
    assert result.returncode == 0, (
        f"mypy found errors (exit {result.returncode}):\n{result.stdout}{result.stderr}")
