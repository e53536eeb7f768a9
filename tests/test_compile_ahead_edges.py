"""``compile_ahead`` in this process, edge by edge: how the child is started (its environment,
its own session, no stdin or stdout), the lines ``poll`` says, and the mark's name (what makes
a new one, where it goes, nothing where the cache is off or cannot be written).
``test_compile_ahead.py`` runs the whole of it through train-text."""

from __future__ import annotations

import os
import platform
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

numba = pytest.importorskip("numba")
from dualtape.kernels import compile_ahead, numba_cache  # noqa: E402 - after the skip


@pytest.fixture(autouse=True)
def nothing_waits(monkeypatch):
    """Whatever a test's child leaves, nothing waits for a compile afterwards."""
    monkeypatch.setattr(compile_ahead, "_WAITING", None)


def child(code: str, **env: str) -> compile_ahead.Background:
    """A ``Background`` running ``code``, ended before it is returned (not yet polled)."""
    started = compile_ahead.Background([sys.executable, "-c", code],
                                       env={**os.environ, **env} if env else None)
    started.process.wait(timeout=60)
    return started


def test_the_child_gets_the_environment_its_own_session_and_no_stdin_or_stdout(tmp_path,
                                                                                 capfd):
    out = tmp_path / "out"
    code = ("import os, sys; print(os.environ['GIVEN'], os.getsid(0) == os.getpid(), "
            f"repr(sys.stdin.read()), file=open({str(out)!r}, 'w')); print('to stdout')")
    fed, feeder = os.pipe()  # this process's stdin, which the child must not inherit
    os.write(feeder, b"fed")
    os.close(feeder)
    stdin = os.dup(0)
    os.dup2(fed, 0)
    try:
        done = child(code, GIVEN="here")
    finally:
        os.dup2(stdin, 0)
        os.close(stdin)
        os.close(fed)
    assert out.read_text() == "here True ''\n"
    assert capfd.readouterr().out == ""
    assert done.poll().startswith("the compiled CPU loops are ready")


def test_the_ready_line_says_the_seconds(monkeypatch):
    done = child("pass")
    monkeypatch.setattr(compile_ahead.time, "perf_counter", lambda: done.began + 12.345)
    assert done.poll() == (
        "the compiled CPU loops are ready (compiled in a background process in 12.3 s); the "
        "steps from here on run them (their results differ from the ufunc loops' by float "
        "rounding)")
    assert compile_ahead.waiting() is None


@pytest.mark.parametrize("code, why", [
    ("import sys; sys.exit(4)", "exit status 4"),
    ("import sys; sys.stderr.write('only'); sys.exit(6)", "exit status 6: only"),
    ("import sys; sys.stderr.buffer.write(b'one\\n  two \\xff \\n\\n'); sys.exit(5)",
     "exit status 5: two \ufffd"),
])
def test_a_failure_names_the_status_and_the_last_line_written(code, why):
    done = child(code)
    assert done.poll() == f"the background compile failed ({why}); the run keeps the ufunc loops"
    assert compile_ahead.waiting() == f"the background compile failed ({why})"


@pytest.fixture
def one_function(monkeypatch, tmp_path) -> SimpleNamespace:
    """A compiled module of one function, its source ``tmp_path/source.py``, cached in
    ``tmp_path/cache`` (None: the cache is refused)."""
    source = tmp_path / "source.py"
    source.write_text("x = 1\n")
    (tmp_path / "cache").mkdir()
    function = SimpleNamespace(stats=SimpleNamespace(cache_path=str(tmp_path / "cache")),
                               py_func=SimpleNamespace(__code__=SimpleNamespace(
                                   co_filename=str(source))))
    monkeypatch.setattr(numba_cache, "load", {"_numba_x": "module"}.__getitem__)
    monkeypatch.setattr(numba_cache, "dispatchers", {"module": [function]}.__getitem__)
    return function


def test_the_mark_is_named_by_module_dtype_and_a_digest_in_the_cache_folder(one_function,
                                                                             tmp_path):
    path = compile_ahead._mark_path("_numba_x", "float32")
    assert os.path.dirname(path) == str(tmp_path / "cache")
    assert re.fullmatch(r"_numba_x\.float32\.[0-9a-f]{16}\.ready", os.path.basename(path))
    assert compile_ahead.cached("_numba_x", "float32") is False
    compile_ahead.mark("_numba_x", "float32")
    assert compile_ahead.cached("_numba_x", "float32") is True
    assert Path(path).read_bytes() == b""


@pytest.mark.parametrize("change", ["source size", "source time", "numba", "python", "dtype"])
def test_a_new_version_is_a_new_mark(one_function, tmp_path, monkeypatch, change):
    before = compile_ahead._mark_path("_numba_x", "float32")
    source = tmp_path / "source.py"
    if change == "source size":
        stat = source.stat()
        source.write_text("x = 10\n")
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    elif change == "source time":
        os.utime(source, ns=(0, source.stat().st_mtime_ns + 1))
    elif change == "numba":
        monkeypatch.setattr(numba, "__version__", numba.__version__ + "x")
    elif change == "python":
        monkeypatch.setattr(platform, "python_version", lambda: "3.99.0")
    dtype = "float64" if change == "dtype" else "float32"
    assert compile_ahead._mark_path("_numba_x", dtype).split(".")[-2] != before.split(".")[-2]


def test_no_mark_where_the_cache_is_off_or_cannot_be_written(one_function, tmp_path):
    one_function.stats.cache_path = None
    assert compile_ahead.cached("_numba_x", "float32") is None
    compile_ahead.mark("_numba_x", "float32")  # nothing to do, nothing raised
    one_function.stats.cache_path = str(tmp_path / "gone")
    compile_ahead.mark("_numba_x", "float32")  # the next run compiles ahead again
    assert compile_ahead.cached("_numba_x", "float32") is False
