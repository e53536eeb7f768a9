"""``dualtape train-text --distributed``: one trainer per MPI rank, gradients averaged.

``mpiexec -n N dualtape train-text --distributed ...`` starts N copies of the command. They all
read the corpus and build (or resume) the same model; rank 0's parameters are broadcast and the
optimizer becomes a ``DataParallel``. ``--batch`` is per rank (the global batch is N times it);
rank r draws its windows from the window generator jumped r times (PCG64 ``jumped``: streams
2^127 draws apart), so rank 0 draws what a single process would. Only rank 0 prints, samples
and writes checkpoints, which hold the wrapped optimizer's state and rank 0's generators, so
they resume with any number of ranks (rank r > 0 jumps again from rank 0's stored stream).
Each rank clips its own gradient (``--clip``) before the average.

The ranks stay in step: the loss is read as a mean over all ranks (a divergence anywhere stops
every rank), and Ctrl-C and ``--time-limit`` are agreed in one small allreduce per step, so all
ranks stop after the same step. Any other error on one rank (a full disk at rank 0's save)
aborts every rank through ``MPI_Abort`` rather than leaving them waiting.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import secrets
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import distributed
from .model import TextError
from .trainer import Reporter, RunLimits, RunResult, TextTrainer, run_training

Prepared = tuple[TextTrainer, str, str | None]
Runner = Callable[[TextTrainer, RunLimits, Reporter, Callable[[], bool]], RunResult]
LAUNCHER_SIZES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")  # set by MPICH's and Open MPI's mpiexec
STOP_REASONS = {1: "interrupted", 2: "time"}


def _communicator() -> Any:
    """COMM_WORLD, checked to match the mpiexec that started this process."""
    mpi = distributed._mpi()
    if mpi is None:
        raise TextError("--distributed needs mpi4py: pip install 'dualtape[mpi]'")
    comm = mpi.COMM_WORLD
    for variable in LAUNCHER_SIZES:
        launched = os.environ.get(variable, "1")
        if launched.isdigit() and int(launched) > comm.Get_size():
            raise TextError(f"mpiexec started {launched} processes but mpi4py sees "
                            f"{comm.Get_size()}: mpi4py uses another MPI than this mpiexec; "
                            "run the mpiexec of the MPI it was built with")
    return comm


def prepare_distributed(args: argparse.Namespace,
                        prepare: Callable[[argparse.Namespace], Prepared]) -> tuple[
                            TextTrainer, str, str, Runner]:
    """``prepare(args)`` on every rank, then the trainer made data-parallel; returns the
    trainer, the text, a header note (resume note, ranks and global batch) and the loop to
    run. Rank 0 raises the ``TextError`` when any rank fails; the other ranks then exit with
    status 1 quietly, and from here on print nothing on stdout."""
    comm = _communicator()
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank != 0:
        sys.stdout = open(os.devnull, "w")  # for the life of this process
    if args.seed is None and args.resume is None:  # one random seed for all ranks
        args.seed = comm.bcast(secrets.randbelow(2**31) if rank == 0 else None, root=0)
    if args.backend in ("auto", "cupy") and _has_gpu():
        distributed.select_gpu(comm)
    try:
        trainer, text, resumed = prepare(args)
        error = None
    except TextError as exc:
        error = str(exc)
    errors = comm.allgather(error)
    if any(errors):
        if rank != 0:
            raise SystemExit(1)
        failed = next(r for r, e in enumerate(errors) if e)
        raise TextError(errors[failed] if failed == 0 else f"rank {failed}: {errors[failed]}")
    distributed.broadcast_parameters(trainer.net, comm=comm)
    trainer.optimizer = distributed.DataParallel(trainer.optimizer, comm)
    if rank:
        trainer.window_rng = np.random.Generator(trainer.window_rng.bit_generator.jumped(rank))
    batch = trainer.config.batch
    note = f"distributed: {size} ranks x batch {batch} = global batch {size * batch}"
    return trainer, text, note if resumed is None else f"{resumed}; {note}", _runner(comm)


def _has_gpu() -> bool:
    from ..backend import available_backends

    return "cupy" in available_backends()


class GlobalSpeed:
    """A reporter that reports every rank's characters, not only this one's."""

    def __init__(self, reporter: Reporter, size: int) -> None:
        self.reporter, self.size = reporter, size

    def advance(self) -> None:
        self.reporter.advance()

    def progress(self, step: int, loss: float, chars_per_second: float) -> None:
        self.reporter.progress(step, loss, chars_per_second * self.size)

    def text(self, message: str) -> None:
        self.reporter.text(message)


def _runner(comm: Any) -> Runner:
    """``run_training`` with the stops agreed over ``comm`` and only rank 0 sampling/saving."""
    mpi = distributed._mpi()
    rank, size = comm.Get_rank(), comm.Get_size()

    def run(trainer: TextTrainer, limits: RunLimits, reporter: Reporter,
            stop_requested: Callable[[], bool]) -> RunResult:
        began = time.perf_counter()
        agreed = np.zeros(1, dtype=np.int64)

        def stop() -> bool:
            timed_out = limits.time_limit is not None and (
                time.perf_counter() - began >= limits.time_limit)
            agreed[0] = 2 if timed_out else int(stop_requested())
            comm.Allreduce(mpi.IN_PLACE, agreed, op=mpi.MAX)
            return bool(agreed[0])

        own = dataclasses.replace(limits, time_limit=None)
        if rank:
            own = dataclasses.replace(own, save=None, sample_chars=0)
        try:
            result = run_training(trainer, own, GlobalSpeed(reporter, size), stop)
        except FloatingPointError:  # raised on every rank in the same call
            if rank:
                raise SystemExit(1) from None
            raise
        except BaseException as exc:  # this rank alone: stop them all rather than hang
            print(f"dualtape train-text: error on rank {rank}: {exc!r}; stopping every rank",
                  file=sys.stderr, flush=True)
            comm.Abort(1)
            raise
        return dataclasses.replace(result, reason=STOP_REASONS.get(int(agreed[0]), result.reason),
                                   chars_per_second=result.chars_per_second * size)

    return run
