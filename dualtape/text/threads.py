"""How many CPU threads train-text gives BLAS, OpenMP and torch (``--threads``).

``--threads auto`` (the default) chooses from the run's sizes: a time loop is a chain of small
matrix products with single-threaded elementwise work between them, and a product shared by
threads waits for the slowest one. So the count is one thread per ``PER_THREAD_WORK``
multiply-adds of the loop's largest product (``product_work``: ``c Uᵀ`` of the widest LSTM,
``batch · o · 3o``; ``h W_hhᵀ``, ``batch · o · 4o`` for torch's LSTM, ``3o`` for the GRU), at
least 1, at most this process's share of the usable cores (divided
among the ranks of a distributed run on this machine), and no more than the cores other work
leaves free now (``busy_cores``: their busy time over a tenth of a second; the 1-minute load
average where that cannot be read). A thread count set in the environment
(``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``) is left as it is.
``--threads N`` sets N; ``--threads unset`` leaves the libraries at their own defaults.
Under ``auto``, when the free cores outnumber the threads chosen, one more takes the weight
gradients' products beside the backward pass (``ThreadChoice.overlap``:
``dualtape.overlap_gradients``, 0.86x the main job's step on 2 cores).

How ``PER_THREAD_WORK`` was chosen (2-core AMD EPYC, OpenBLAS 0.3.31, float32; the machine
was never idle: load average 2.6-4.7 from other work): the product ``c Uᵀ`` alone, timed
back to back at raised priority, gains from a second thread from about 1-3 M multiply-adds
(0.79x at 0.6 M, 1.41x at 3.1 M, 1.69x at 12.6 M, 1.86x at 100 M). Inside the training loop
(``bench/threads_crossover.py``, 1 vs 2 threads interleaved) the second thread lost at every
size under that load (0.07x at the main job's 80x32, 0.16x at 512x128), which is what the
load check is for. 4 M per thread keeps the main job (0.6 M) at one thread with a margin of
13 and gives 256x64 (12.6 M) two threads on an idle machine, where the product alone gains.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from ..kernels.overlap import overlap_gradients

AUTO, UNSET = "auto", "unset"
REQUIREMENT = f"{AUTO}, {UNSET} or a whole number of threads, 1 or more"
PER_THREAD_WORK = 4_000_000
"""Multiply-adds of the time loop's largest product each thread must have (see above)."""
ENVIRONMENT = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
"""Variables that set the libraries' thread counts; ``auto`` leaves a set one alone."""


def parse_threads(text: str) -> int | str:
    """``--threads``: ``auto``, ``unset`` or a count >= 1; ``ValueError`` otherwise."""
    word = text.strip().lower()
    if word in (AUTO, UNSET):
        return word
    try:
        count = int(word)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"--threads must be {REQUIREMENT}, got {text}")
    return count


RECURRENT_GATES = {"LSTM": 3, "StandardLSTM": 4, "GRU": 3}
"""Rows of the recurrent weights per unit, by ``--cell``: Grenade's ``U`` (3o, o), torch's
LSTM ``W_hh`` (4o, o), the GRU's (3o, o)."""


def product_work(hidden: Sequence[int], batch: int, gates: int = 3) -> int:
    """Multiply-adds of the largest matrix product inside a time loop: ``c Uᵀ`` of the widest
    LSTM, ``batch · o · 3o`` (``gates · o`` for a cell with other recurrent weights); 0 for no
    LSTM."""
    return max((batch * n * gates * n for n in hidden), default=0)


def usable_cores() -> int:
    """How many CPUs this process may run on (its affinity mask where the system has one)."""
    cpus = _usable_cpus()
    return len(cpus) if cpus is not None else os.cpu_count() or 1


def load_average() -> float | None:
    """The 1-minute load average; None where the system has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


BUSY_WINDOW = 0.1
"""Seconds ``busy_cores`` watches the CPUs for (ten of Linux's clock ticks on each)."""
PROC_STAT = "/proc/stat"


def busy_cores(window: float = BUSY_WINDOW, stat: str = PROC_STAT) -> float | None:
    """How many of this process's usable CPUs other work keeps busy now: their busy time
    (all but idle and I/O wait, steal included: a hypervisor's other guests) over ``window``
    seconds, from Linux's ``stat`` (``/proc/stat``), less this process's own CPU time; where
    that cannot be read, the 1-minute load average (``load_average``), or None. The load
    average lags: it still counted a run that had just ended as a busy core for a minute or
    more, which kept the README's first command from the free core on an idle machine."""
    cpus = _usable_cpus()
    first, own = _cpu_times(stat, cpus), time.process_time()
    if first is None:
        return load_average()
    began = time.perf_counter()
    time.sleep(window)
    second, own = _cpu_times(stat, cpus), time.process_time() - own
    elapsed = time.perf_counter() - began
    if second is None or second[1] <= first[1] or elapsed <= 0:
        return load_average()
    busy, total = second[0] - first[0], second[1] - first[1]
    return max(0.0, busy / total * second[2] - own / elapsed)


def _usable_cpus() -> set[int] | None:
    """The CPUs of this process's affinity mask; None where the system has none."""
    affinity = getattr(os, "sched_getaffinity", None)
    return set(affinity(0)) if affinity else None


def _cpu_times(stat: str, cpus: set[int] | None) -> tuple[int, int, int] | None:
    """``(busy, total, count)`` clock ticks of ``cpus`` (all, for None) so far, and how many
    CPUs they are; None where ``stat`` cannot be read or holds none of them."""
    try:
        with open(stat, encoding="ascii") as file:
            lines = file.read().splitlines()
    except (OSError, ValueError):
        return None
    busy = total = count = 0
    for line in lines:
        name, *fields = line.split() or [""]
        if not (name.startswith("cpu") and name[3:].isdigit()) or (
                cpus is not None and int(name[3:]) not in cpus):
            continue
        try:  # user nice system idle iowait irq softirq steal
            ticks = [int(f) for f in fields[:8]]
        except ValueError:
            return None
        if len(ticks) < 5:
            return None
        busy, total = busy + sum(ticks) - ticks[3] - ticks[4], total + sum(ticks)
        count += 1
    return (busy, total, count) if count else None


def ranks_on_this_host() -> int:
    """How many ranks of this MPI run share this machine (a collective: every rank calls it);
    1 without MPI."""
    try:
        from mpi4py import MPI
    except ImportError:
        return 1
    local = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return local.Get_size()
    finally:
        local.Free()


@dataclass(frozen=True)
class ThreadChoice:
    """A thread count (None: the libraries' own) and why, for the header; ``overlap``: a
    core is left free for the weight gradients' products (``dualtape.overlap_gradients``)."""

    count: int | None
    why: str
    overlap: bool = False

    @property
    def line(self) -> str:
        """The header line: ``threads: N (why)``, or ``threads: N + 1 for the weight
        gradients (why)`` with ``overlap``."""
        count = "the libraries' own" if self.count is None else str(self.count)
        extra = " + 1 for the weight gradients" if self.overlap else ""
        return f"threads: {count}{extra} ({self.why})"


def choose_threads(option: int | str, hidden: Sequence[int], batch: int, *, cores: int,
                   gates: int = 3,
                   ranks: int = 1, load: float | None = None,
                   environ: Mapping[str, str] | None = None,
                   can_limit: bool = True) -> ThreadChoice:
    """The threads for a run of LSTMs ``hidden`` at ``batch`` on ``cores`` usable cores
    shared by ``ranks`` ranks, as ``option`` (``parse_threads``) asks; ``load`` is how many
    cores other work keeps busy (``busy_cores``; None: unknown), ``environ`` the environment,
    ``can_limit`` whether threadpoolctl is here."""
    if option == UNSET:
        return ThreadChoice(None, f"--threads {UNSET}")
    if option != AUTO:
        return ThreadChoice(int(option), f"--threads {option}")
    environ = os.environ if environ is None else environ
    given = [f"{name}={environ[name]}" for name in ENVIRONMENT if environ.get(name)]
    if given:
        return ThreadChoice(None, f"as {', '.join(given)} in the environment sets them; "
                            "--threads N overrides")
    if not can_limit:
        return ThreadChoice(None, "threadpoolctl is not installed, so dualtape cannot set "
                            "them: pip install threadpoolctl")
    work = product_work(hidden, batch, gates)
    wanted = max(1, work // PER_THREAD_WORK)
    share = max(1, cores // ranks)
    free = share if load is None else max(1, min(share, (cores - math.floor(load + 0.5)) // ranks))
    count = min(wanted, free)
    if wanted == 1:
        return ThreadChoice(1, f"auto: the time loop's products are small, {work:,} "
                            f"multiply-adds; a second thread pays from {2 * PER_THREAD_WORK:,}; "
                            "--threads N overrides", overlap=free > 1)
    why = [f"auto: the time loop's products, {work:,} multiply-adds, are large enough for "
           f"{wanted} threads", f"{cores} cores" + (f" shared by {ranks} ranks" if ranks > 1
                                                   else "")]
    if count < min(wanted, share):
        why.append(f"other work busy on {load:.1f} cores")
    return ThreadChoice(count, "; ".join(why) + "; --threads N overrides", overlap=count < free)


def threadpoolctl_installed() -> bool:
    """Whether threadpoolctl, which sets the libraries' threads, can be imported."""
    import importlib.util

    return importlib.util.find_spec("threadpoolctl") is not None


@contextlib.contextmanager
def limited_threads(n: int | None, overlap: bool = False) -> Iterator[None]:
    """Limit BLAS/OpenMP pools (threadpoolctl) and torch's intra-op threads to ``n`` >= 1
    (``ValueError`` below 1); ``None``: no limit. Needs threadpoolctl for a limit. With
    ``overlap``, inside ``overlap_gradients()`` too (a free core for the weight gradients'
    products)."""
    with overlap_gradients(overlap), _limited(n):
        yield


@contextlib.contextmanager
def _limited(n: int | None) -> Iterator[None]:
    if n is None:
        yield
        return
    if n < 1:
        raise ValueError(f"a thread limit must be at least 1, got {n}")
    from threadpoolctl import threadpool_limits

    torch = sys.modules.get("torch")
    previous = torch.get_num_threads() if torch is not None else None
    with threadpool_limits(limits=n):
        if torch is not None:
            torch.set_num_threads(n)
        try:
            yield
        finally:
            if torch is not None:
                torch.set_num_threads(previous)
