"""text/mpiexec_pipe.py in this process: reading /proc, and when rank 0 takes ``mpiexec``'s
stdout pipe (the real ``mpiexec | head`` runs are in test_distributed.py, in child processes).

The launcher stand-in is a real child process whose stdout is a pipe this test reads; the
process tree (names, parents, arguments) is faked around it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dualtape.text import mpiexec_pipe

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")

PROXY_PID = 101
"""The fake proxy's process id (never looked up for real: the tree is faked)."""
SLEEPER = ["-c", "import sys; sys.stdin.read()", "--save", "model.npz"]
"""The launcher stand-in's arguments: it waits until its stdin closes."""


@pytest.fixture
def launcher() -> Iterator[subprocess.Popen]:
    """A child whose stdout is a pipe read here (its fd 1 is what rank 0 would take)."""
    with subprocess.Popen([sys.executable, *SLEEPER], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE) as child:
        yield child
        child.stdin.close()
        child.wait(timeout=30)


def fake_tree(monkeypatch, launcher_pid: int, proxy: str = "hydra_pmi_proxy",
              name: str = "mpiexec", arguments: tuple[str, ...] = ("-n", "2", "python")) -> None:
    """This process's parent is a proxy named ``proxy`` whose parent, ``launcher_pid``, is named
    ``name`` and runs with ``arguments``."""
    monkeypatch.setattr(mpiexec_pipe.os, "getppid", lambda: PROXY_PID)
    monkeypatch.setattr(mpiexec_pipe, "_parent", {PROXY_PID: launcher_pid}.__getitem__)
    monkeypatch.setattr(mpiexec_pipe, "_name", {PROXY_PID: proxy, launcher_pid: name}.get)
    monkeypatch.setattr(mpiexec_pipe, "_arguments", {launcher_pid: list(arguments)}.__getitem__)


@pytest.fixture
def stdout(monkeypatch, tmp_path) -> Iterator:
    """A ``sys.stdout`` with a descriptor of its own (a file), as a rank's is: the test puts it
    at ``sys.stdout`` (pytest's capture puts its own back between the setup and the test)."""
    with open(tmp_path / "stdout.txt", "w") as handle:
        yield handle


def own_stdout(monkeypatch, handle) -> None:
    """``handle`` at ``sys.stdout`` for the rest of the test."""
    monkeypatch.setattr(sys, "stdout", handle)


@pytest.mark.parametrize("name", ["mpiexec", "mpirun", "mpiexec.hydra"])
def test_rank_0_writes_into_the_launchers_pipe_blocking_after_its_own_lines(
        monkeypatch, launcher, stdout, tmp_path, name):
    fake_tree(monkeypatch, launcher.pid, name=name)
    own_stdout(monkeypatch, stdout)
    stdout.write("before\n")  # still buffered: it must reach the old stdout, not the pipe
    assert mpiexec_pipe.write_into_mpiexecs_pipe() is True
    assert (tmp_path / "stdout.txt").read_text() == "before\n"
    assert os.get_blocking(stdout.fileno())  # a slow reader makes rank 0 wait
    stdout.write("after\n")
    stdout.flush()
    assert launcher.stdout.readline() == b"after\n"


@pytest.mark.parametrize("tree", [
    {"proxy": "bash"},
    {"name": "srun"},
    {"name": "xmpiexec"},
    *({"arguments": ("-n", "2", option + suffix, "out")}
      for option, suffix in zip(mpiexec_pipe.OUTPUT_OPTIONS, ["-pattern", "-pattern", "-rank",
                                                              "-filename"], strict=True)),
], ids=["not-under-a-proxy", "another-launcher", "a-name-ending-in-mpiexec", "-outfile-pattern",
        "-errfile-pattern", "-prepend-rank", "-output-filename"])
def test_stdout_stays_where_it_is_outside_mpich_or_when_mpiexec_shapes_the_output(
        monkeypatch, launcher, stdout, tree):
    fake_tree(monkeypatch, launcher.pid, **tree)
    own_stdout(monkeypatch, stdout)
    before = os.fstat(stdout.fileno()).st_ino
    assert mpiexec_pipe.write_into_mpiexecs_pipe() is False
    assert os.fstat(stdout.fileno()).st_ino == before


def taken_with_launcher_stdout(monkeypatch, out: int) -> bool:
    """``write_into_mpiexecs_pipe()`` under a launcher whose stdout is the descriptor ``out``
    (closed here once the launcher holds it)."""
    with subprocess.Popen([sys.executable, *SLEEPER], stdin=subprocess.PIPE,
                          stdout=out) as child:
        os.close(out)
        fake_tree(monkeypatch, child.pid)
        try:
            return mpiexec_pipe.write_into_mpiexecs_pipe()
        finally:
            child.stdin.close()


def test_a_launcher_whose_stdout_is_a_file_a_device_or_a_fifo_without_reader_is_left_alone(
        monkeypatch, stdout, tmp_path):
    own_stdout(monkeypatch, stdout)
    for path in (tmp_path / "out", os.devnull):
        assert not taken_with_launcher_stdout(monkeypatch, os.open(path, os.O_CREAT | os.O_WRONLY))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDWR)  # lets the writer's open return; then no reader is left
    writer = os.open(fifo, os.O_WRONLY)
    os.close(reader)
    # opening it must not wait for a reader (ENXIO; an anonymous pipe's open never waits)
    before = signal.signal(signal.SIGALRM,
                           lambda *_: pytest.fail("the open waited for a reader"))
    signal.alarm(20)
    try:
        assert not taken_with_launcher_stdout(monkeypatch, writer)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


def test_a_stdout_without_a_descriptor_is_left_and_the_pipe_closed(monkeypatch, launcher, capsys):
    fake_tree(monkeypatch, launcher.pid)
    opened: list[int] = []
    real_open = os.open

    def recorded_open(*args):
        opened.append(real_open(*args))
        return opened[-1]

    monkeypatch.setattr(mpiexec_pipe.os, "open", recorded_open)
    assert mpiexec_pipe.write_into_mpiexecs_pipe() is False  # capsys's stdout has no fileno
    with pytest.raises(OSError):
        os.fstat(opened[0])


def test_proc_is_read_for_the_name_the_parent_and_the_arguments(monkeypatch, launcher):
    assert mpiexec_pipe._parent(launcher.pid) == os.getpid()
    assert mpiexec_pipe._arguments(launcher.pid)[:len(SLEEPER)] == SLEEPER
    assert mpiexec_pipe._name(launcher.pid) == Path(sys.executable).name[:15]
    comm = Path("/proc/self/comm")
    own = comm.read_bytes()
    try:
        comm.write_bytes(b"a) 1 2 (b\xff")  # a name may hold ") ", digits, and not be UTF-8
        assert mpiexec_pipe._name(os.getpid()) == "a) 1 2 (b\ufffd"
        assert mpiexec_pipe._parent(os.getpid()) == os.getppid()
    finally:
        comm.write_bytes(own)
