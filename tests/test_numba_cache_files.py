"""numba_cache's per-file rule in this process (issue 52 item 4): ``CheckedCacheFile`` reads a
safe index and data file, reads an unsafe one as missing with one warning per folder, and
``dispatchers`` lists a module's own compiled functions. ``test_numba_cache.py`` checks the same
rule end to end in fresh processes."""

from __future__ import annotations

import types
import warnings
from pathlib import Path

import pytest

pytest.importorskip("numba")
from dualtape.kernels import numba_cache  # noqa: E402 - after the skip

STAMP = ("source stamp", 1)


@pytest.fixture(autouse=True)
def no_folder_warned(monkeypatch):
    """Each test starts with no folder warned about."""
    monkeypatch.setattr(numba_cache, "_WARNED", set())


def cache_file(folder: Path) -> numba_cache.CheckedCacheFile:
    """A checked cache file of one function in ``folder``, holding one entry (files 0644)."""
    folder.mkdir(mode=0o755)
    file = numba_cache.CheckedCacheFile(str(folder), "mod.f-1", STAMP)
    file.save("key", {"entry": [1, 2]})
    for made in folder.iterdir():  # whatever the umask
        made.chmod(0o644)
    return file


def loaded(file: numba_cache.CheckedCacheFile) -> tuple[object, list[str]]:
    """What ``file.load("key")`` gives, and the warnings it gave (each a RuntimeWarning)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        entry = file.load("key")
    assert all(w.category is RuntimeWarning for w in seen)
    return entry, [str(w.message) for w in seen]


def test_safe_files_are_read(tmp_path):
    assert loaded(cache_file(tmp_path / "cache")) == ({"entry": [1, 2]}, [])


@pytest.mark.parametrize("pattern", ["*.nbi", "*.nbc"])
def test_a_file_others_can_write_reads_as_missing_with_a_warning(tmp_path, pattern):
    file = cache_file(tmp_path / "cache")
    [unsafe] = (tmp_path / "cache").glob(pattern)
    unsafe.chmod(0o666)
    entry, [warning] = loaded(file)
    assert entry is None
    assert warning == (
        f"dualtape: not loading {unsafe} from numba's disk cache: it can be written by anyone "
        "(mode 0666); compiling afresh, which replaces it (any other such file in that folder "
        "too, without a further warning; a cache file is code: if you did not expect this, "
        "find out who writes there)")


def test_one_warning_per_folder(tmp_path):
    first, second = cache_file(tmp_path / "a"), cache_file(tmp_path / "b")
    for folder in ("a", "b"):
        for unsafe in (tmp_path / folder).iterdir():
            unsafe.chmod(0o666)
    assert [len(loaded(f)[1]) for f in (first, second, first, second)] == [1, 1, 0, 0]


def test_the_data_file_is_checked_by_its_own_path(tmp_path, monkeypatch):
    file = cache_file(tmp_path / "cache")
    asked = []
    monkeypatch.setattr(numba_cache.cache_folder, "file_problem",
                        lambda path: asked.append(Path(path).name))
    assert loaded(file) == ({"entry": [1, 2]}, [])
    assert asked == ["mod.f-1.nbi", "mod.f-1.1.nbc"]


def test_dispatchers_are_the_modules_own_in_order():
    other = types.ModuleType("elsewhere")
    exec("from numba import njit\n@njit\ndef imported(x):\n    return x\n", vars(other))
    module = types.ModuleType("compiled")
    exec("from numba import njit\n@njit\ndef second(x):\n    return x\n"
         "@njit\ndef first(x):\n    return x\ndef plain(x):\n    return x\n", vars(module))
    vars(module)["imported"] = other.imported
    assert [f.py_func.__name__ for f in numba_cache.dispatchers(module)] == ["second", "first"]


def test_a_damaged_cache_of_one_function_is_named_in_full(monkeypatch):
    """``checked`` loads the module it is given, and a module of one compiled function names
    its folder too."""
    stats = types.SimpleNamespace(cache_path="/c", cache_hits={"sig": 1})
    function = types.SimpleNamespace(stats=stats, recompile=lambda: None)
    answers = ["h differ by 0.5", None]
    monkeypatch.setattr(numba_cache, "load", {"_numba_x": "module"}.__getitem__)
    monkeypatch.setattr(numba_cache, "dispatchers", {"module": [function]}.__getitem__)
    with pytest.warns(RuntimeWarning) as seen:
        assert numba_cache.checked("_numba_x", lambda: answers.pop(0)) is None
    assert [str(w.message) for w in seen] == [
        "dualtape: numba's disk cache in /c is damaged (h differ by 0.5); the compiled loops are "
        "compiled afresh, which rewrote its _numba_x.*.nbi and .nbc files; if this warning comes "
        "back, delete those files (cache files are code: if you did not expect this, find out "
        "who writes there)"]
