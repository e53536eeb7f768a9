"""The compiled loops and numba's disk cache: an unsafe folder is never read, a damaged cache is
rebuilt (each in fresh processes with ``NUMBA_CACHE_DIR`` in a temporary folder)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("numba")
ROOT = Path(__file__).resolve().parents[1]

FIRST_USE = """
import json, sys, warnings
import numpy as np
from dualtape import kernels
from dualtape.kernels import numba_cache, numba_lstm, numba_standard_lstm_gru
from dualtape.layers import gru, lstm, standard_lstm
DTYPES = ("float32", "float64")
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    if sys.argv[2:] == ["warm-up"]:  # as train-text does, before any self-check
        (numba_lstm if sys.argv[1] == "_numba_lstm" else numba_standard_lstm_gru).warm_up("float32")
    if sys.argv[1] == "_numba_lstm":
        cells = [type(kernels.sequence_path(np, np.zeros((2, 5), d), lstm.fused_disagreement)
                      .cell).__name__ for d in DTYPES]
    else:
        cells = [type(kernels.cell_loops(name, np.zeros(1, d), lambda loops, m=m, d=d:
                      m.fast_disagreement(loops, np.zeros(1, d)))).__name__
                 for name, m in (("StandardLSTM", standard_lstm), ("GRU", gru)) for d in DTYPES]
functions = numba_cache.dispatchers(numba_cache.load(sys.argv[1]))
print(json.dumps({"cells": cells, "warnings": [str(w.message) for w in seen],
                  "from_cache": not any(sum(f.stats.cache_misses.values()) for f in functions)}))
"""
LOOPS = {"_numba_lstm": ["NumbaLSTM"] * 2, "_numba_standard_lstm_gru": ["SimpleNamespace"] * 4}
"""What ``first_use`` of each compiled module chooses when its self-checks pass."""


def first_use(cache: Path, module: str = "_numba_lstm", *warm_up: str) -> dict:
    """What a fresh process's first use of the compiled ``module``'s loops (both dtypes; after
    its ``warm_up`` with ``"warm-up"``) says: the loops chosen, its warnings, whether all came
    from the disk cache."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": str(ROOT)}
    env.pop("DUALTAPE_JIT", None)
    env.pop("DUALTAPE_FUSED", None)
    done = subprocess.run([sys.executable, "-c", FIRST_USE, module, *warm_up], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Path:
    """A cache folder holding both dtypes' compiled loops, as a first process leaves it."""
    cache = tmp_path_factory.mktemp("filled") / "cache"
    for module, cells in LOOPS.items():
        assert first_use(cache, module) == {"cells": cells, "from_cache": False, "warnings": []}
    return cache


class Plant:
    """Unpickling it creates the file ``path``: the code a planted cache file runs."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def planted_copy(filled: Path, into: Path, marker: Path) -> Path:
    """A copy of ``filled`` whose every index file runs code that creates ``marker``."""
    shutil.copytree(filled, into)
    for index in into.rglob("*.nbi"):
        index.write_bytes(pickle.dumps(Plant(marker)))
    return into


def test_planted_files_are_read_from_a_folder_only_you_can_write(filled, tmp_path):
    """The control: numba does run what is planted in its cache (here a safe folder)."""
    cache = planted_copy(filled, tmp_path / "cache", tmp_path / "ran")
    ran = first_use(cache)
    assert (tmp_path / "ran").exists()
    assert ran["cells"] == ["NumbaLSTM"] * 2


@pytest.mark.parametrize("module", LOOPS)
def test_a_world_writable_cache_folder_is_never_read(filled, tmp_path, module):
    cache = planted_copy(filled, tmp_path / "cache", tmp_path / "ran")
    cache.chmod(0o777)
    refused = first_use(cache, module, "warm-up")
    assert not (tmp_path / "ran").exists(), "a planted cache file ran"
    assert refused["cells"] == LOOPS[module] and not refused["from_cache"]
    [warning] = refused["warnings"]
    assert warning.startswith(f"dualtape: not using numba's disk cache in {cache}/kernels_")
    assert f": {cache} can be written by anyone (mode 0777); compiling" in warning
    assert "\n" not in warning
    assert [p.name for p in cache.rglob("*.tmp.*")] == [], "nothing is written there either"


def link_to_planted(file: Path) -> None:
    """``file`` becomes a link to a copy of itself outside the cache folder."""
    target = file.parent.parent.parent / f"elsewhere-{file.name}"
    target.write_bytes(file.read_bytes())
    file.unlink()
    file.symlink_to(target)


UNSAFE_FILES = {  # a cache file's pattern, and what makes it unsafe in a safe (0755) folder
    "world-writable-index": ("*.nbi", lambda f: f.chmod(0o666)),
    "world-writable-data": ("*.nbc", lambda f: f.chmod(0o666)),
    "linked-index": ("*.nbi", link_to_planted),
    "someone-elses-index": ("*.nbi", lambda f: os.chown(f, 12345, 12345)),
}


@pytest.mark.parametrize("unsafe", UNSAFE_FILES)
def test_an_unsafe_cache_file_in_a_safe_folder_is_never_read(filled, tmp_path, unsafe):
    """Issue 52 item 4: the folder rule alone let a 0666 file in a 0755 folder run its
    pickle; each file is checked too, and numba's save replaces it with one of its own."""
    pattern, make_unsafe = UNSAFE_FILES[unsafe]
    if unsafe.startswith("someone") and os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    cache = tmp_path / "cache"
    shutil.copytree(filled, cache)
    marker = tmp_path / "ran"
    for file in cache.rglob(pattern):
        file.write_bytes(pickle.dumps(Plant(marker)))
        make_unsafe(file)
    refused = first_use(cache)
    assert not marker.exists(), "a planted cache file ran"
    assert refused["cells"] == LOOPS["_numba_lstm"] and not refused["from_cache"]
    [warning] = refused["warnings"]
    assert warning.startswith(f"dualtape: not loading {cache}/kernels_")
    assert ("from numba's disk cache: it " + {
        "world": "can be written by anyone (mode 0666); compiling afresh",
        "linked": "is a symbolic link; compiling afresh",
        "someone": "is owned by uid 12345, not by you"}[unsafe.split("-")[0]]) in warning
    assert "\n" not in warning
    replaced = [f for f in cache.rglob(pattern) if "_numba_lstm.forward_sequence" in f.name]
    assert replaced and all(f.is_file() and not f.is_symlink() and f.stat().st_uid == os.getuid()
                            and not f.stat().st_mode & 0o022 for f in replaced)
    again = first_use(cache)
    assert again == {"cells": LOOPS["_numba_lstm"], "from_cache": True, "warnings": []}
    assert not marker.exists()


def test_loading_a_module_secures_the_compiled_modules_it_imports():
    """``_numba_grads`` calls ``_numba_lstm``'s and ``_numba_scatter``'s functions, which numba
    loads from their own cache files when it compiles the caller."""
    code = ("import sys; from dualtape.kernels import numba_cache; "
            "numba_cache.load('_numba_grads'); "
            "print(sorted({type(f._cache._cache_file).__name__ for n in ('_numba_lstm', "
            "'_numba_scatter') for f in numba_cache.dispatchers("
            "sys.modules['dualtape.kernels.' + n])}))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['CheckedCacheFile']"


def swap_dtypes(cache: Path) -> None:
    """Each function's float32 and float64 entries trade places."""
    for first in cache.rglob("*.1.nbc"):
        second = first.with_name(first.name.replace(".1.nbc", ".2.nbc"))
        a, b = first.read_bytes(), second.read_bytes()
        first.write_bytes(b)
        second.write_bytes(a)


DAMAGE = {
    "truncated-index": ("_numba_lstm", "*forward_sequence*.nbi", lambda b: b[:20]),
    "garbled-data": ("_numba_lstm", "*backward_sequence*.nbc", lambda b: bytes(reversed(b))),
    "swapped-dtypes": ("_numba_lstm", "*.nbc", None),
    "cells-truncated-index": ("_numba_standard_lstm_gru", "*gru_backward_loop*.nbi",
                              lambda b: b[:20]),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_cache_is_named_rebuilt_and_the_fast_loops_kept(filled, tmp_path, damage):
    module, pattern, change = DAMAGE[damage]
    cache = tmp_path / "cache"
    shutil.copytree(filled, cache)
    if change is None:
        swap_dtypes(cache)
    for damaged in cache.rglob(pattern) if change else ():
        damaged.write_bytes(change(damaged.read_bytes()))
    repaired = first_use(cache, module)
    assert repaired["cells"] == LOOPS[module], "the fresh compile passed its self-check"
    [warning] = repaired["warnings"]
    assert warning.startswith(f"dualtape: numba's disk cache in {cache}/kernels_")
    assert "is damaged (" in warning and "disagree with the generic code" not in warning
    assert "delete those files" in warning and f"{module}.*.nbi and .nbc" in warning
    again = first_use(cache, module)
    assert again == {"cells": LOOPS[module], "from_cache": True, "warnings": []}


class Function:
    """A stand-in for a numba dispatcher: its cache statistics and the recompiles asked of it."""

    def __init__(self, cache_path: str | None, hits: int) -> None:
        self.stats = SimpleNamespace(cache_path=cache_path, cache_hits=Counter(sig=hits))
        self.recompiled = 0

    def recompile(self) -> None:
        self.recompiled += 1


def check_of(*answers):
    """A self-check giving ``answers`` in turn (an exception is raised)."""
    answers = list(answers)

    def check():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return check


@pytest.fixture
def functions(monkeypatch):
    """Two stand-in functions of a compiled module that ``numba_cache.checked`` sees."""
    from dualtape.kernels import numba_cache

    made = []

    def use(cache_path: str | None, hits: int) -> list[Function]:
        made[:] = [Function(cache_path, hits), Function(cache_path, 0)]
        return made

    monkeypatch.setattr(numba_cache, "load", lambda name: name)
    monkeypatch.setattr(numba_cache, "dispatchers", lambda module: made)
    return use


def checked(check):
    from dualtape.kernels import numba_cache

    return numba_cache.checked("_numba_lstm", check)


@pytest.mark.parametrize("first", ["h differ by 0.5", ValueError("bad pickle")])
def test_a_failure_a_fresh_compile_cures_is_a_damaged_cache(functions, first):
    made = functions("/c", hits=1)
    with pytest.warns(RuntimeWarning, match=r"disk cache in /c is damaged \((h differ|the check "
                      r"raised ValueError: bad pickle)"):
        assert checked(check_of(first, None)) is None
    assert [f.recompiled for f in made] == [1, 1]


def test_a_failure_with_nothing_from_the_cache_is_the_loops_own(functions):
    made = functions("/c", hits=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert checked(check_of("h differ by 0.5")) == "h differ by 0.5"
    assert [f.recompiled for f in made] == [0, 0]


def test_a_raise_without_a_cache_propagates_uncompiled(functions):
    made = functions(None, hits=0)
    with pytest.raises(ValueError, match="no cache here"):
        checked(check_of(ValueError("no cache here")))
    assert [f.recompiled for f in made] == [0, 0]


@pytest.mark.parametrize("fresh", ["h still differ", ValueError("still raises")])
def test_a_failure_that_a_fresh_compile_keeps_is_no_cache_problem(functions, fresh):
    made = functions("/c", hits=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if isinstance(fresh, Exception):
            with pytest.raises(ValueError, match="still raises"):
                checked(check_of("h differ", fresh))
        else:
            assert checked(check_of("h differ", fresh)) == "h still differ"
    assert [f.recompiled for f in made] == [1, 1]


def test_a_passing_check_recompiles_nothing(functions):
    made = functions("/c", hits=3)
    assert checked(check_of(None)) is None
    assert [f.recompiled for f in made] == [0, 0]


@pytest.mark.parametrize("module, pattern", [
    ("_numba_lstm", "*forward_sequence*.nbi"),
    ("_numba_standard_lstm_gru", "*gru_backward_loop*.nbi")])
def test_warming_up_rebuilds_a_damaged_cache(filled, tmp_path, module, pattern):
    """``warm_up`` (``dualtape info``, train-text before its first step) goes through the
    same guard as the self-checks: a damaged cache is named and compiled afresh there."""
    cache = tmp_path / "cache"
    shutil.copytree(filled, cache)
    for index in cache.rglob(pattern):
        index.write_bytes(index.read_bytes()[:20])
    warm = "numba_lstm" if module == "_numba_lstm" else "numba_standard_lstm_gru"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    env.pop("DUALTAPE_JIT", None)
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", f"from dualtape.kernels import {warm}; "
         f"{warm}.warm_up('float32'); {warm}.warm_up('float64')"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(f"numba's disk cache in {cache}") == 1, done.stderr
    assert "is damaged (the check raised" in done.stderr
    again = first_use(cache, module)
    assert again == {"cells": LOOPS[module], "from_cache": True, "warnings": []}


RUN = """
import sys
from dualtape import cli
from dualtape.kernels import numba_cache
assert cli.main(sys.argv[1:]) == 0
compiled = [m for n, m in sys.modules.items() if n.startswith("dualtape.kernels._numba_")]
misses = sum(sum(f.stats.cache_misses.values()) for m in compiled
             for f in numba_cache.dispatchers(m))
print("compiled", misses, "in", len(compiled), "modules", file=sys.stderr)
"""


def compiles(cache: Path, cwd: Path, *args: str) -> str:
    """What a fresh process of ``dualtape *args`` compiled (the ``compiled ...`` line)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    for name in ("DUALTAPE_JIT", "DUALTAPE_FUSED"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", RUN, *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines()[-1]


def test_a_second_identical_run_compiles_nothing(tmp_path):
    """Issue 52 item 15: train-text's notice says the loops compile once, later runs loading
    them. The first run compiles every loop it uses (the LSTM's before the first step, the
    gradients', the loss's, the optimizer's and the flush's in the first steps, the held-out
    score's and the sample's later); the same command again, in a fresh process, loads them
    all from numba's disk cache. ``--threads 1``: under ``auto`` a core found free hands the
    weight gradients to it, a route (and so modules) of its own, which would make the two runs
    differ by the machine's load."""
    train = ["train-text", "--steps", "2", "--hidden", "8,8", "--seq-len", "4", "--batch", "2",
             "--valid-every", "1", "--sample-every", "1", "--sample-chars", "4", "--no-log",
             "--threads", "1"]
    first = compiles(tmp_path / "cache", tmp_path, *train)
    assert not first.startswith("compiled 0 ") and " in 0 modules" not in first
    again = compiles(tmp_path / "cache", tmp_path, *train)
    assert again.startswith("compiled 0 in ") and again.split()[3] == first.split()[3]


def test_dualtape_info_names_loops_that_fail_to_compile_in_one_line(monkeypatch, capsys):
    from dualtape import cli
    from dualtape.kernels import numba_lstm

    def broken(dtype):
        raise RuntimeError("no LLVM here")

    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    monkeypatch.setattr(numba_lstm, "warm_up", broken)
    assert cli.main(["info"]) == 0
    [line] = [x for x in capsys.readouterr().out.splitlines()
              if x.startswith("LSTM loops on numpy:")]
    assert "fails to compile here even afresh (RuntimeError: no LLVM here)" in line
