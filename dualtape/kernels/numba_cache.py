"""The compiled loops' use of numba's disk cache: refused where others could plant code,
rebuilt when damaged (imports numba).

``load(name)`` imports a module of ``@njit(cache=True)`` functions (``_numba_lstm``,
``_numba_standard_lstm_gru``, ``_numba_flush``, ...) and, before anything is read from disk, checks
the folder numba caches them in (``cache_folder``'s rule). A folder others could write to is
refused with one warning naming it, and the functions compile in memory for the process: their
dispatchers get the ``NullCache`` that one made with ``cache=False`` holds, so numba neither
reads nor writes there. In a safe folder each index (``.nbi``) or data (``.nbc``) file is checked
just before numba reads it (``cache_folder.file_problem``): one that is a link, not a regular
file, another user's, or writable by others is not read (one warning per folder names the first
such file); numba compiles afresh, and its save replaces the file.

``checked(name, check)`` runs a self-check of those functions. When it fails after something
was loaded from the cache, or raises while the cache is in use (a truncated, garbled or
swapped ``.nbi``/``.nbc`` file), the cache is taken to be damaged: every function is compiled
afresh with numba's ``Dispatcher.recompile`` (an empty index, then new entries, written as
numba writes any miss: to a temporary file, then renamed), the check runs again, and a warning
names the folder and files. A fresh compile that still fails is no cache problem: its result
goes to ``selfcheck.verified`` as it is.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

from numba.core.caching import IndexDataCacheFile, NullCache
from numba.core.dispatcher import Dispatcher

from . import cache_folder


@functools.cache
def load(name: str) -> ModuleType:
    """The compiled module ``name`` of this package, its disk cache off if its folder is not
    safe and each cache file checked before it is read; so too every compiled module it
    imported (whose functions its own call, and so load with theirs), before any is compiled."""
    module = importlib.import_module(f"{__package__}.{name}")
    compiled = [m for n, m in list(sys.modules.items()) if n.startswith(f"{__package__}._numba_")]
    for function in (f for m in compiled for f in dispatchers(m)):
        folder = function.stats.cache_path
        if folder is not None and _refused(folder):
            function._cache = NullCache()  # what a dispatcher made with cache=False holds
        elif folder is not None:
            function._cache._cache_file.__class__ = CheckedCacheFile  # same state, checked reads
    return module


class CheckedCacheFile(IndexDataCacheFile):
    """numba's index and data files of one function, each read only when
    ``cache_folder.file_problem`` passes it; a refused one reads as missing."""

    def _load_index(self) -> dict:
        return {} if _unsafe(self._index_path) else super()._load_index()

    def _load_data(self, name: str) -> Any:
        path = self._data_path(name)
        if _unsafe(path):
            raise FileNotFoundError(path)  # numba's load then compiles, and its save replaces it
        return super()._load_data(name)


def checked(name: str, check: Callable[[], str | None]) -> str | None:
    """``check()`` (how module ``name``'s functions disagree with the generic code, or None),
    run again after a fresh compile when the disk cache looks damaged; a raise from the fresh
    compile's check propagates."""
    functions = dispatchers(load(name))
    try:
        problem = check()
    except Exception as exc:  # noqa: BLE001 - a damaged cache raises anything unpickling does
        if all(f.stats.cache_path is None for f in functions):
            raise
        problem = f"the check raised {type(exc).__name__}: {exc}"
    else:
        if problem is None or not any(sum(f.stats.cache_hits.values()) for f in functions):
            return problem
    for function in functions:
        function.recompile()
    fresh = check()
    if fresh is None:
        folder = functions[0].stats.cache_path
        warnings.warn(
            f"dualtape: numba's disk cache in {folder} is damaged ({problem}); the compiled "
            f"loops are compiled afresh, which rewrote its {name}.*.nbi and .nbc files; if "
            "this warning comes back, delete those files (cache files are code: if you did not "
            "expect this, find out who writes there)", RuntimeWarning, stacklevel=2)
    return fresh


def dispatchers(module: ModuleType) -> list[Any]:
    """The numba-compiled functions ``module`` defines, in their order there."""
    return [value for value in vars(module).values()
            if isinstance(value, Dispatcher) and value.py_func.__module__ == module.__name__]


@functools.cache
def _refused(folder: str) -> bool:
    """Whether ``cache_folder`` refuses ``folder``, with one warning saying why."""
    problem = cache_folder.path_problem(folder)
    if problem:
        warnings.warn(f"dualtape: not using numba's disk cache in {folder}: {problem}; "
                      "compiling the CPU loops in memory for this process (set NUMBA_CACHE_DIR "
                      "to a folder only you can write to)", RuntimeWarning, stacklevel=2)
    return problem is not None


_WARNED: set[str] = set()
"""The folders in which a refused cache file was named (one warning per folder)."""


def _unsafe(path: str) -> bool:
    """Whether ``cache_folder.file_problem`` refuses the cache file ``path``, warning the first
    time in its folder."""
    problem = cache_folder.file_problem(path)
    folder = os.path.dirname(path)
    if problem and folder not in _WARNED:
        _WARNED.add(folder)
        warnings.warn(f"dualtape: not loading {path} from numba's disk cache: it {problem}; "
                      "compiling afresh, which replaces it (any other such file in that folder "
                      "too, without a further warning; a cache file is code: if you did not "
                      "expect this, find out who writes there)", RuntimeWarning, stacklevel=2)
    return problem is not None
