"""Compiling the CPU loops ahead, in a child process, while the first steps run on the ufunc
loops (issue 53 item 5: a fresh install's first run trains at once).

``Background(command)`` starts ``command`` (a process that runs what the caller is about to
run, on the compiled loops, so that numba compiles it into its disk cache) in its own
session, and until it ends ``waiting()`` says why: ``kernels.cpu_path`` then gives the ufunc
loop with that reason, as ``DUALTAPE_JIT=0`` does. Its ``poll()``, between steps, reaps the
child once it ended and says so in one line: on success the kept fast-path choices are
dropped (``switches.forget_choices``), so the next call takes the compiled loops, which load
from the disk cache; a child that failed or was killed leaves the ufunc loops for the rest of
the process. ``leave()`` at the end of a run lets a child still compiling finish filling the
cache for the next run (the child is in its own session: a Ctrl-C does not reach it).

``cached(module, dtype)`` says whether the compiled ``module`` (``_numba_lstm``, ...) was
once compiled for ``dtype`` into its disk cache folder, by a mark (an empty file) that
``mark`` leaves there after a run or warm-up that used them; the mark's name holds numba's and
Python's versions and the module source's size and time, so a new version is not taken for
cached.
"""

from __future__ import annotations

import hashlib
import os
import platform
import signal
import subprocess
import tempfile
import time
from typing import IO

from ..switches import forget_choices

_WAITING: str | None = None
"""Why the compiled loops wait, while a ``Background`` runs or after it failed."""


def waiting() -> str | None:
    """Why the compiled loops are not taken now (a background compile runs, or failed), or
    None."""
    return _WAITING


def _set_waiting(why: str | None) -> None:
    global _WAITING
    _WAITING = why
    forget_choices()  # a choice made while waiting is not kept, nor one made before it


class Background:
    """A child process compiling into numba's disk cache; the compiled loops wait for it."""

    def __init__(self, command: list[str], env: dict[str, str] | None = None) -> None:
        self._log = tempfile.TemporaryFile()  # its stderr: read back if it fails
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=self._log, env=env,
                                        start_new_session=True)
        self.began = time.perf_counter()
        self.ended = False
        _set_waiting(f"the compiled loops are compiling in a background process (pid "
                     f"{self.process.pid}) into numba's disk cache")

    def poll(self) -> str | None:
        """One line once the child has ended (reaped here), None before and after."""
        status = None if self.ended else self.process.poll()
        if status is None:
            return None
        self.ended, seconds = True, time.perf_counter() - self.began
        if status == 0:
            _set_waiting(None)
            return (f"the compiled CPU loops are ready (compiled in a background process in "
                    f"{seconds:.1f} s); the steps from here on run them (their results differ "
                    "from the ufunc loops' by float rounding)")
        why = f"ended by {signal.Signals(-status).name}" if status < 0 else (
            f"exit status {status}{_last_line(self._log)}")
        _set_waiting(f"the background compile failed ({why})")
        return f"the background compile failed ({why}); the run keeps the ufunc loops"

    def leave(self) -> str | None:
        """One line when the child still compiles (it goes on, for the next run), else
        None; the child is reaped if it ended."""
        self.poll()
        if self.ended:
            return None
        return (f"the background compile (pid {self.process.pid}) goes on filling numba's disk "
                "cache: the next run starts on the compiled loops")


def _last_line(log: IO[bytes]) -> str:
    """``: <the last line the child wrote to stderr>``, or nothing when it wrote none."""
    log.seek(0)
    lines = log.read().decode(errors="replace").strip().splitlines()
    return f": {lines[-1].strip()}" if lines else ""


def cached(module: str, dtype: str) -> bool | None:
    """Whether the compiled ``module`` of this package was marked compiled for ``dtype`` in
    its disk cache folder (``mark``); None where numba's disk cache is not used (a folder
    ``numba_cache`` refuses: then every process compiles in memory)."""
    path = _mark_path(module, dtype)
    return None if path is None else os.path.isfile(path)


def mark(module: str, dtype: str) -> None:
    """Leave the mark that ``module`` is compiled for ``dtype`` in its disk cache folder
    (nothing where that cache is not used or cannot be written)."""
    path = _mark_path(module, dtype)
    if path is not None:
        try:
            with open(path, "a"):
                pass
        except OSError:  # a read-only cache folder: the next run compiles ahead again
            pass


def _mark_path(module: str, dtype: str) -> str | None:
    import numba

    from . import numba_cache

    functions = numba_cache.dispatchers(numba_cache.load(module))
    folder = functions[0].stats.cache_path  # None where numba_cache refused the folder
    if folder is None:
        return None
    source = os.stat(functions[0].py_func.__code__.co_filename)
    stamp = f"{numba.__version__} {platform.python_version()} {source.st_size} " \
            f"{source.st_mtime_ns} {dtype}"
    digest = hashlib.sha256(stamp.encode()).hexdigest()[:16]
    return os.path.join(folder, f"{module}.{dtype}.{digest}.ready")
