"""``dualtape`` itself in this process: ``info``'s every line (each piece it reads replaced by a
stand-in), the parser's usage, version and missing command, and an unset ``DUALTAPE_BACKEND``
(``test_switches.py`` checks the bad values, ``test_text.py`` what escapes a command)."""

from __future__ import annotations

import platform
from types import SimpleNamespace

import numpy as np
import pytest

from dualtape import __version__, cli
from dualtape.backend import BackendUnavailable
from dualtape.kernels import numba_lstm
from dualtape.text import tape as text_tape


def resolve(name: str) -> SimpleNamespace:
    """A stand-in for ``resolve_backend``: cupy unavailable, auto choosing numpy."""
    if name == "cupy":
        raise BackendUnavailable("no CuPy here")
    return SimpleNamespace(name="numpy" if name == "auto" else name, device=f"{name}-device")


@pytest.mark.parametrize("blas", [True, False])
def test_info_prints_each_line(monkeypatch, capsys, blas):
    monkeypatch.setattr(cli, "available_backends", lambda: ["numpy"])
    monkeypatch.setattr(cli, "resolve_backend", resolve)
    monkeypatch.setattr(cli, "KNOWN_BACKENDS", ("numpy", "cupy", "torch"))
    monkeypatch.setattr(cli, "_cpu_loops", lambda: "LOOPS")
    monkeypatch.setattr(cli, "_main_job_route", lambda: "ROUTE")
    monkeypatch.setattr(cli.blas, "available", lambda: blas)
    assert cli.main(["info"]) == 0
    sgd = ("one BLAS pass per large parameter (numpy's OpenBLAS)" if blas else
           "two numpy passes per parameter (numpy bundles no OpenBLAS here)")
    assert capsys.readouterr().out == (
        f"dualtape {__version__} on Python {platform.python_version()} ({platform.machine()})\n"
        f"numpy {np.__version__}\n"
        "  numpy             available, default device numpy-device\n"
        "  cupy              unavailable: no CuPy here\n"
        "  torch             unavailable, default device torch-device\n"
        "auto selects: numpy\n"
        "LSTM loops on numpy: LOOPS\n"
        "train-text's step on numpy: ROUTE\n"
        f"SGD on numpy: {sgd}\n")


@pytest.mark.parametrize("path, words", [("ufuncs", "ufunc loop (the reason)"),
                                         ("generic", "generic code (the reason)")])
def test_info_names_the_loop_numpy_runs_and_why(monkeypatch, path, words):
    monkeypatch.setattr(cli.kernels, "cpu_path", lambda: (path, "the reason"))
    assert cli._cpu_loops() == words


@pytest.mark.parametrize("cached, how", [
    (True, "loaded from the disk cache"),
    (False, "compiled now and cached on disk: later runs load it")])
def test_info_says_how_long_the_compiled_loops_took_and_where_from(monkeypatch, cached, how):
    warmed = []
    monkeypatch.setattr(cli.kernels, "cpu_path", lambda: ("compiled", None))
    monkeypatch.setattr(numba_lstm, "warm_up", lambda dtype: warmed.append(dtype) or 0.125)
    monkeypatch.setattr(numba_lstm, "loaded_from_cache", lambda: cached)
    monkeypatch.setattr(numba_lstm, "version", lambda: "9.9")
    assert cli._cpu_loops() == f"compiled (numba 9.9; ready in 0.2 s, {how})"
    assert warmed == ["float32", "float64"]


def test_info_says_the_loops_fail_to_compile_in_one_line(monkeypatch):
    def broken(dtype):
        raise RuntimeError("no LLVM here")

    monkeypatch.setattr(cli.kernels, "cpu_path", lambda: ("compiled", None))
    monkeypatch.setattr(numba_lstm, "warm_up", broken)
    monkeypatch.setattr(numba_lstm, "version", lambda: "9.9")
    assert cli._cpu_loops() == (
        "compiled (numba 9.9), but it fails to compile here even afresh (RuntimeError: no LLVM "
        "here); its first use falls back to the ufunc loop with a warning")


def test_the_version_and_the_usage(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"dualtape {__version__}\n"
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and out.startswith("usage: dualtape [-h] [--version]")
    assert "\n\nGrenade-style neural networks on numpy, CuPy and PyTorch.\n\n" in out
    assert " ".join(out.split()).count("info versions and available backends") == 1


def test_a_missing_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([])
    assert done.value.code == 2
    assert capsys.readouterr().err.endswith(
        "dualtape: error: the following arguments are required: command\n")


def test_a_command_is_given_its_arguments(capsys):
    assert cli.main(["tape", "FILE", "--seq-len", "0"]) == 1
    assert capsys.readouterr().err == (
        "dualtape tape: error: --seq-len must be an integer >= 1, got '0'\n")


def test_dualtape_tape_reads_a_file_as_train_text_would_train_it():
    args = cli.build_parser().parse_args(["tape", "FILE"])
    assert args.read_call is text_tape.training_call


def test_an_unset_backend_is_no_problem(monkeypatch):
    for name in ("DUALTAPE_BACKEND", "DUALTAPE_JIT", "DUALTAPE_FUSED", "DUALTAPE_TRACE"):
        monkeypatch.delenv(name, raising=False)
    assert cli.environment_problem() is None
