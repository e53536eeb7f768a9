"""train-text's threads (``dualtape/text/threads.py``): the rule on fake sizes, cores, loads and
environments, ``--threads`` parsing, the header line, the count actually set while training,
and the cores shared among the ranks of ``--distributed``."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest

from dualtape import cli
from dualtape.kernels import cpu_path
from dualtape.text import threads
from dualtape.text.threads import PER_THREAD_WORK, ThreadChoice, choose_threads, product_work

from .test_distributed import run_ranks

MAIN_JOB = ([80, 80], 32)
LARGE = ([512, 512], 128)  # 100,663,296 multiply-adds: 25 threads' worth


def auto(sizes, cores, **kwargs) -> ThreadChoice:
    """``--threads auto`` for ``sizes`` ``(hidden, batch)`` on ``cores`` cores, no
    environment setting, threadpoolctl present."""
    return choose_threads("auto", *sizes, cores=cores, environ=kwargs.pop("environ", {}),
                          **kwargs)


# --- parsing ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "value"), [
    ("auto", "auto"), ("AUTO", "auto"), (" unset ", "unset"), ("1", 1), (" 2", 2), ("64", 64),
])
def test_threads_takes_auto_unset_or_a_count(text, value):
    assert threads.parse_threads(text) == value


@pytest.mark.parametrize("text", ["0", "-1", "x", "1.5", "", "none"])
def test_anything_else_is_refused_with_what_it_takes(text):
    with pytest.raises(ValueError, match=f"^--threads must be auto, unset or a whole number of "
                                         f"threads, 1 or more, got {text}$"):
        threads.parse_threads(text)


# --- the rule ---------------------------------------------------------------------------------


def test_the_work_is_the_widest_layers_recurrent_product():
    assert product_work(*MAIN_JOB) == 32 * 80 * 240
    assert product_work([512, 80], 10) == 10 * 512 * 3 * 512  # the widest, not the sum
    assert product_work(*MAIN_JOB, gates=4) == 32 * 80 * 320  # torch's LSTM: W_hh (4o, o)
    assert threads.RECURRENT_GATES == {"LSTM": 3, "StandardLSTM": 4, "GRU": 3}


@pytest.mark.parametrize("cores", [1, 2, 16, 64])
@pytest.mark.parametrize("load", [None, 0.0, 40.0])
def test_the_main_job_gets_one_thread_on_any_machine_idle_or_loaded(cores, load):
    """And a free core, where there is one, for the weight gradients' products."""
    chosen = auto(MAIN_JOB, cores, load=load)
    assert chosen.count == 1
    free = cores - (0 if load is None else round(load))  # 16 cores under load 40 have none
    assert chosen.overlap == (free > 1)
    extra = " + 1 for the weight gradients" if chosen.overlap else ""
    assert chosen.line == (f"threads: 1{extra} (auto: the time loop's products are small, "
                           "614,400 multiply-adds; a second thread pays from 8,000,000; "
                           "--threads N overrides)")


@pytest.mark.parametrize(("cores", "ranks", "load", "overlap"), [
    (64, 1, None, True), (16, 1, None, False), (16, 1, 6.6, False), (64, 2, None, True),
    (64, 3, 20.0, False),
])
def test_large_products_leave_a_core_for_the_weight_gradients_only_when_one_is_free(
        cores, ranks, load, overlap):
    """25 threads' worth: 64 cores leave some free, 16 do not, nor 44 free among 3 ranks."""
    assert auto(LARGE, cores, ranks=ranks, load=load).overlap == overlap


def test_an_explicit_count_or_the_libraries_own_never_overlap():
    for option in (1, 3, "unset"):
        assert not choose_threads(option, *MAIN_JOB, cores=64).overlap
    assert not choose_threads("auto", *MAIN_JOB, cores=64,
                              environ={"OMP_NUM_THREADS": "1"}).overlap


def test_a_second_thread_comes_at_two_threads_worth_of_work():
    below, above = ([100], 266), ([100], 267)  # 7,980,000 and 8,010,000 multiply-adds
    assert product_work(*below) < 2 * PER_THREAD_WORK < product_work(*above)
    assert auto(below, 16).count == 1 and auto(above, 16).count == 2


@pytest.mark.parametrize(("cores", "count"), [(1, 1), (2, 2), (16, 16), (64, 25)])
def test_large_products_take_the_cores_up_to_one_per_share(cores, count):
    chosen = auto(LARGE, cores)
    assert chosen.count == count
    assert chosen.why == (f"auto: the time loop's products, 100,663,296 multiply-adds, are "
                          f"large enough for 25 threads; {cores} cores; --threads N overrides")


@pytest.mark.parametrize(("cores", "ranks", "count"), [(16, 4, 4), (16, 3, 5), (2, 4, 1)])
def test_the_ranks_on_one_machine_share_its_cores(cores, ranks, count):
    chosen = auto(LARGE, cores, ranks=ranks)
    assert chosen.count == count and f"{cores} cores shared by {ranks} ranks" in chosen.why


@pytest.mark.parametrize(("cores", "ranks", "load", "count"), [
    (16, 1, 6.4, 10), (16, 1, 6.6, 9), (4, 1, 1.6, 2), (16, 2, 6.6, 4), (2, 1, 20.0, 1),
])
def test_other_work_takes_the_cores_it_keeps_busy(cores, ranks, load, count):
    chosen = auto(LARGE, cores, ranks=ranks, load=load)
    assert chosen.count == count and f"; other work busy on {load:.1f} cores; " in chosen.why


def test_other_work_that_leaves_enough_cores_is_not_mentioned():
    assert "other work" not in auto(LARGE, 2, load=0.2).why
    assert "other work" not in auto(LARGE, 64, load=30.0).why  # 34 free: 25 threads' worth


def test_a_count_set_in_the_environment_is_kept():
    chosen = auto(LARGE, 16, environ={"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "2"})
    assert chosen == ThreadChoice(None, "as OMP_NUM_THREADS=4, MKL_NUM_THREADS=2 in the "
                                        "environment sets them; --threads N overrides")
    assert chosen.line.startswith("threads: the libraries' own (as OMP_NUM_THREADS=4")
    assert auto(LARGE, 16, environ={"OPENBLAS_NUM_THREADS": ""}).count == 16


def test_without_threadpoolctl_auto_says_it_cannot_set_them():
    chosen = auto(MAIN_JOB, 2, can_limit=False)
    assert chosen.count is None and "threadpoolctl is not installed" in chosen.why


@pytest.mark.parametrize(("option", "expected"), [
    (3, ThreadChoice(3, "--threads 3")), ("unset", ThreadChoice(None, "--threads unset")),
])
def test_an_explicit_choice_is_taken_whatever_the_sizes_and_environment(option, expected):
    assert choose_threads(option, *LARGE, cores=2, load=9.0, environ={"OMP_NUM_THREADS": "8"},
                          can_limit=False) == expected


# --- the machine ----------------------------------------------------------------------------


def test_the_cores_are_those_of_the_affinity_mask(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 5, 7}, raising=False)
    assert threads.usable_cores() == 3
    monkeypatch.delattr(os, "sched_getaffinity")
    assert threads.usable_cores() == 64


def test_no_load_average_is_none(monkeypatch):
    def unavailable():
        raise OSError("no load average")

    monkeypatch.setattr(os, "getloadavg", unavailable)
    assert threads.load_average() is None


class Clock:
    """``time`` for ``busy_cores``: ``sleep`` writes the second reading of the CPUs' ticks
    and moves the clocks on (this process's CPU time by ``own`` seconds a second)."""

    def __init__(self, stat, second: str, own: float = 0.0) -> None:
        self.stat, self.second, self.own, self.now = stat, second, own, 0.0

    def sleep(self, seconds: float) -> None:
        self.stat.write_text(self.second)
        self.now += seconds

    def perf_counter(self) -> float:
        return self.now

    def process_time(self) -> float:
        return self.own * self.now


def stat_lines(*cpus: tuple[int, ...]) -> str:
    """A ``/proc/stat`` with the all-CPU line and one per CPU: user nice system idle iowait
    irq softirq steal guest guest_nice."""
    rows = [" ".join(map(str, ticks)) for ticks in cpus]
    total = " ".join(str(sum(column)) for column in zip(*cpus, strict=True))
    return "\n".join([f"cpu  {total}", *(f"cpu{k} {row}" for k, row in enumerate(rows)),
                      "intr 1 2 3", "ctxt 99"]) + "\n"


@pytest.mark.parametrize(("usable", "own", "busy"), [
    ({0, 1, 2}, 0.0, 1.5), ({0, 1, 2}, 1.0, 0.5), ({1, 2}, 0.0, 0.5), ({2}, 0.0, 0.0),
    (None, 0.0, 1.5)], ids=["all", "less-own", "two-cpus", "idle-cpu", "no-affinity-mask"])
def test_the_busy_cores_are_the_usable_cpus_busy_time_less_this_process(
        monkeypatch, tmp_path, usable, own, busy):
    """Over the window: cpu0 busy throughout (user), cpu1 half the time (half of it steal,
    a hypervisor's other guests), cpu2 idle or waiting on I/O; guest time is in user's."""
    stat = tmp_path / "stat"
    stat.write_text(stat_lines((100, 0, 50, 500, 10, 0, 0, 0, 40, 0),
                               (100, 0, 50, 500, 10, 0, 0, 0, 0, 0),
                               (100, 0, 50, 500, 10, 0, 0, 0, 0, 0)))
    clock = Clock(stat, stat_lines((107, 0, 53, 500, 10, 0, 0, 0, 45, 0),
                                   (101, 0, 51, 503, 12, 1, 0, 2, 0, 0),
                                   (100, 0, 50, 505, 15, 0, 0, 0, 0, 0)), own)
    monkeypatch.setattr(threads, "time", clock)
    if usable is None:
        monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    else:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: usable, raising=False)
    assert threads.busy_cores(0.1, str(stat)) == pytest.approx(busy)


@pytest.mark.parametrize("stat", ["missing", "no cpu lines", "too few fields", "not numbers",
                                  "not text", "unchanged", "no time"])
def test_busy_cores_fall_back_to_the_load_average(monkeypatch, tmp_path, stat):
    """A ``stat`` that cannot be read, or read as CPU ticks, or no time passed in: the load
    average, never an error (a run must not stop over how busy the machine looks)."""
    path = tmp_path / "stat"
    first = {"missing": None, "no cpu lines": "\nintr 1 2\n", "too few fields": "cpu0 1 2 3\n",
             "not numbers": "cpu0 1 2 x 4 5\n", "not text": "cpu0 1 2 3 4 \xff\n",
             "unchanged": stat_lines((1, 0, 1, 5, 0, 0, 0, 0, 0, 0)),
             "no time": stat_lines((1, 0, 1, 5, 0, 0, 0, 0, 0, 0))}[stat]
    if first is not None:
        path.write_bytes(first.encode("latin-1"))
    clock = Clock(path, first or "", 0.0)
    if stat == "no time":  # ticks passed, the clock did not (a window of 0 s below)
        clock.second = stat_lines((2, 0, 1, 6, 0, 0, 0, 0, 0, 0))
    monkeypatch.setattr(threads, "time", clock)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.25, 1.0, 1.0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert threads.busy_cores(0.0 if stat == "no time" else 0.1, str(path)) == 1.25


def test_busy_cores_read_this_machine(monkeypatch):
    """Where ``/proc/stat`` is (Linux), a number of cores between 0 and the usable ones, and
    this process's own spinning is not counted."""
    if not os.path.exists(threads.PROC_STAT):
        pytest.skip("no /proc/stat here: busy_cores is the load average")
    monkeypatch.setattr(os, "getloadavg", lambda: pytest.fail("fell back to the load average"))
    found = threads.busy_cores(0.05)
    assert found is not None and 0.0 <= found <= threads.usable_cores()


class FakeComm:
    def __init__(self, size: int, freed: list | None = None) -> None:
        self.size, self.freed = size, freed

    def Get_size(self) -> int:
        return self.size

    def Split_type(self, kind):
        assert kind == "shared"
        return FakeComm(3, self.freed)

    def Free(self) -> None:
        self.freed.append(self.size)


def test_the_ranks_on_this_machine_come_from_a_shared_memory_split(monkeypatch):
    freed = []
    mpi = SimpleNamespace(COMM_WORLD=FakeComm(6, freed), COMM_TYPE_SHARED="shared")
    monkeypatch.setitem(sys.modules, "mpi4py", SimpleNamespace(MPI=mpi))
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", mpi)
    assert threads.ranks_on_this_host() == 3 and freed == [3]
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    assert threads.ranks_on_this_host() == 1


# --- train-text -------------------------------------------------------------------------------


SMALL = ["--hidden", "8", "--seq-len", "8", "--batch", "2", "--backend", "numpy", "--seed", "4",
         "--sample-chars", "0"]
BIG = ["--hidden", "400", "--batch", "100", "--backend", "numpy", "--seed", "4",
       "--sample-chars", "0", "--steps", "0"]  # 48,000,000 multiply-adds: 12 threads' worth


@pytest.fixture
def limits(monkeypatch):
    """The thread counts train-text sets (``limited_threads``' argument), recorded."""
    seen = []
    real = threads.limited_threads

    def recording(n, overlap=False):
        seen.append(n if not overlap else (n, "overlap"))
        return real(n, overlap)

    monkeypatch.setattr(threads, "limited_threads", recording)
    for name in threads.ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    return seen


def train(capsys, *argv: str) -> list[str]:
    """``dualtape train-text ARGV`` on the built-in corpus: the printed lines (it must end 0)."""
    code = cli.main(["train-text", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out.splitlines()


@pytest.mark.parametrize(("cores", "load", "overlap"), [(1, 0.0, False), (2, 0.0, True),
                                                       (2, 1.6, False)])
def test_the_header_says_the_threads_chosen_after_the_training_line(capsys, limits, monkeypatch,
                                                                    cores, load, overlap):
    """A core left free by BLAS's one thread takes the weight gradients' products."""
    pytest.importorskip("threadpoolctl")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    monkeypatch.setattr(threads, "busy_cores", lambda: load)
    lines = train(capsys, *SMALL, "--steps", "1")
    assert lines[2].startswith("training: ")
    extra = " + 1 for the weight gradients" if overlap else ""
    assert lines[3] == (f"threads: 1{extra} (auto: the time loop's products are small, 384 "
                        "multiply-adds; a second thread pays from 8,000,000; --threads N "
                        "overrides)")
    assert limits == [(1, "overlap") if overlap else 1]
    assert lines[4].startswith("route: backpropagate_sequence: ")  # the planned pass, or why not
    if cpu_path()[0] == "compiled":  # with the weight gradients on a second core or not
        assert lines[4].startswith("route: backpropagate_sequence: planned, compiled loops")


def test_train_text_counts_its_cores_and_the_busy_ones(capsys, limits, monkeypatch):
    pytest.importorskip("threadpoolctl")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(threads, "busy_cores", lambda: 1.6)
    lines = train(capsys, *BIG)
    assert lines[3] == ("threads: 2 (auto: the time loop's products, 48,000,000 multiply-adds, "
                        "are large enough for 12 threads; 4 cores; other work busy on 1.6 "
                        "cores; --threads N overrides)")
    assert limits == [2]


def test_only_auto_watches_the_cpus(capsys, limits, monkeypatch):
    """An explicit count needs no measure of the machine (a tenth of a second saved)."""
    pytest.importorskip("threadpoolctl")
    monkeypatch.setattr(threads, "busy_cores", lambda: pytest.fail("watched the CPUs"))
    assert train(capsys, *SMALL, "--steps", "1", "--threads", "1")[3].startswith("threads: 1 (")


@pytest.mark.parametrize(("option", "line", "count"), [
    ("3", "threads: 3 (--threads 3)", 3),
    ("unset", "threads: the libraries' own (--threads unset)", None),
])
def test_an_explicit_threads_option_is_set_and_said(capsys, limits, option, line, count):
    pytest.importorskip("threadpoolctl")
    assert train(capsys, *SMALL, "--steps", "1", "--threads", option)[3] == line
    assert limits == [count]


def test_a_count_in_the_environment_is_left_to_the_libraries(capsys, limits, monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    assert train(capsys, *SMALL, "--steps", "1")[3].startswith(
        "threads: the libraries' own (as OPENBLAS_NUM_THREADS=2 in the environment sets them")
    assert limits == [None]


def test_without_threadpoolctl_a_count_is_refused_and_auto_trains(capsys, limits, monkeypatch):
    monkeypatch.setattr(threads, "threadpoolctl_installed", lambda: False)
    code = cli.main(["train-text", *SMALL, "--steps", "1", "--threads", "2"])
    assert code == 1
    assert capsys.readouterr().err == ("dualtape train-text: error: --threads needs "
                                       "threadpoolctl: pip install threadpoolctl\n")
    assert "threadpoolctl is not installed, so dualtape cannot set them" in train(
        capsys, *SMALL, "--steps", "1")[3]
    assert limits == [None]


@pytest.mark.mpi
def test_the_ranks_of_one_machine_share_its_cores(tmp_path):
    done = run_ranks(["-m", "dualtape.cli", "train-text", "--distributed", *BIG])
    assert done.returncode == 0, done.stderr
    header = done.stdout.splitlines()[3]
    assert header.startswith("threads: ") and " shared by 2 ranks; " in header
