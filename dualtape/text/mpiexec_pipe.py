"""Rank 0 writing straight into ``mpiexec``'s stdout pipe, so that ``mpiexec ... | head`` saves.

MPICH's ``mpiexec`` (Hydra) relays what the ranks print through its proxy
(``hydra_pmi_proxy``). When its stdout is a pipe whose reader has left, the next line it
relays kills it (SIGPIPE), and the proxy then kills every rank (SIGKILL: nothing to catch), so
a run would end unsaved and silent. When rank 0 runs on ``mpiexec``'s host (its parent is the
proxy, the proxy's parent ``mpiexec`` or ``mpirun``), ``mpiexec``'s stdout is a pipe or FIFO
and no output option of ``mpiexec``'s shapes it (``-outfile-pattern``, ``-prepend-rank``,
...), rank 0 opens that pipe itself (``/proc/PID/fd/1``, Linux) and puts it at its own
stdout. A reader that leaves then fails rank 0's own write, which stops the run as a lost
stdout does (``console.Output``: after the step, saved, exit status 74), and ``mpiexec``,
relaying nothing more on stdout, lives to pass the status on. Anywhere else (another MPI,
another host, a terminal or a file at ``mpiexec``'s stdout) nothing changes.
"""

from __future__ import annotations

import os
import stat
import sys

PROXY = "hydra_pmi_proxy"
LAUNCHERS = ("mpiexec", "mpirun")
"""The names MPICH's launcher runs under (``mpiexec.hydra`` included)."""
OUTPUT_OPTIONS = ("-outfile", "-errfile", "-prepend", "-output")
"""``mpiexec`` options that send or shape the ranks' output: with one, it stays relayed."""


def write_into_mpiexecs_pipe() -> bool:
    """Put ``mpiexec``'s stdout pipe at this process's stdout, where the module docstring
    says it may; whether it did (never raises)."""
    try:
        proxy = os.getppid()
        launcher = _parent(proxy)
        if _name(proxy) != PROXY or not _name(launcher).startswith(LAUNCHERS):
            return False
        if any(arg.startswith(OUTPUT_OPTIONS) for arg in _arguments(launcher)):
            return False
        pipe = f"/proc/{launcher}/fd/1"
        if not stat.S_ISFIFO(os.stat(pipe).st_mode):
            return False
        # a named FIFO with no reader fails here (ENXIO); an anonymous pipe opens, and the
        # first write to it fails (EPIPE), as a write to mpiexec's own stdout would
        fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError, IndexError):  # no /proc, another user's, gone meanwhile
        return False
    try:
        os.set_blocking(fd, True)  # a slow reader makes rank 0 wait, as mpiexec's relay does
        sys.stdout.flush()
        os.dup2(fd, sys.stdout.fileno())
        return True
    except (OSError, ValueError, AttributeError):  # a stdout without a descriptor: leave it
        return False
    finally:
        os.close(fd)


def _name(pid: int) -> str:
    with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
        return f.read().strip()


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])  # the name may hold ") "


def _arguments(pid: int) -> list[str]:
    """``pid``'s arguments, its program's included (telling where ``mpiexec``'s options end
    needs its grammar; train-text has no option that looks like ``OUTPUT_OPTIONS``)."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [os.fsdecode(a) for a in f.read().split(b"\0")[1:]]
