"""``dualtape train-text --distributed``: one trainer per MPI rank, gradients averaged.

``mpiexec -n N dualtape train-text --distributed ...`` starts N copies of the command. They
all read the corpus and build (or resume) the same model, then check that they agree on
everything the ranks must share (``shared_settings``: every option but the few
``MAY_DIFFER`` lists, the configuration as resumed, the backend, the corpus's fingerprint,
the vocabulary and the model itself); a rank that differs is named, with how, before any
training. Rank 0's parameters are broadcast and the optimizer becomes a ``DataParallel``.
``--batch`` is per rank (the global batch is N times it); rank r draws its windows from the
window generator jumped r times (PCG64 ``jumped``: streams 2^127 draws apart), so rank 0
draws what a single process would; the Dropout layers' generators are jumped alike. Only
rank 0 prints, samples and writes checkpoints, which hold the wrapped optimizer's state and
rank 0's generators, so they resume with any number of ranks (rank r > 0 jumps again from
rank 0's stored stream). Each rank clips its own gradient (``--clip``) before the average.

The ranks stay in step: the loss is read as a mean over all ranks and every rank checks the
(identical) parameters at every save point, so a divergence stops every rank at the same
step; stop requests (Ctrl-C, SIGTERM, SIGHUP, rank 0's lost stdout) and ``--time-limit`` (on
rank 0's seconds of training) are agreed in one small allreduce per step, so all ranks stop
after the same step and exit with the same status. Any other error on one rank (a failed
sample on rank 0, out of memory) aborts every rank through ``MPI_Abort`` rather than leaving
them waiting; rank 0 saves first when the error is its own. ``mpiexec`` relays the ranks'
output and dies of SIGPIPE when its
stdout's reader leaves (``mpiexec ... | head``), killing every rank at once (SIGKILL); so on
MPICH, rank 0 on ``mpiexec``'s host writes into ``mpiexec``'s stdout pipe itself
(``mpiexec_pipe.py``): its own write fails instead, and the run stops after the step, saves
and exits 74 as a single process does. Where that cannot be done (another MPI, rank 0 on
another host) the launcher's death still loses the run since its last ``--save-every``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import secrets
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import distributed
from ..backend import to_numpy
from .console import StopRequest
from .lock import hold_run_lock
from .loop import Reporter, RunLimits, RunResult, run_training
from .model import TextError, fingerprint
from .mpiexec_pipe import write_into_mpiexecs_pipe
from .prepare import Prepared, prepare
from .trainer import DivergedError, TextTrainer

Runner = Callable[[TextTrainer, RunLimits, Reporter, StopRequest], RunResult]
LAUNCHER_SIZES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")  # set by MPICH's and Open MPI's mpiexec
TIME_UP = 1
"""The stop code of a reached ``--time-limit``; a stop request's code is its exit status."""
MAY_DIFFER = {
    "help": "never reaches a run", "file": "compared by the corpus's fingerprint",
    "max_corpus_mb": "bounds the reading only", "threads": "each host its own cores",
    "log": "rank 0 alone writes", "no_log": "rank 0 alone writes",
    "save": "rank 0 alone writes (whether the run saves is compared)",
    "resume": "compared by the model's digest and step", "overwrite": "rank 0 alone writes",
    "command": "not an option: the subcommand", "run": "not an option: the subcommand",
}
"""The options of ``train-text`` the ranks may give differently, and why; every other option
must agree (``shared_settings`` compares them all, a new one included)."""


def _communicator() -> Any:
    """COMM_WORLD, checked to match the mpiexec that started this process."""
    mpi = distributed.mpi_module()
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


def prepare_distributed(args: argparse.Namespace, held: contextlib.ExitStack
                        ) -> tuple[Prepared, Runner]:
    """``prepare(args)`` (``prepare.py``) on every rank, checked to agree, then the trainer
    made data-parallel; returns what ``prepare`` did (its note telling the ranks and the global
    batch) and the loop to run. Rank 0, which writes, first locks the checkpoint until
    ``held`` closes (``lock.py``). Rank 0 raises the ``TextError`` when any rank fails or
    differs; the other ranks then exit with status 1 quietly, and from here on print nothing
    on stdout."""
    comm = _communicator()
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank != 0:
        sys.stdout = open(os.devnull, "w")  # for the life of this process
    else:
        write_into_mpiexecs_pipe()  # so that `mpiexec ... | head` stops rank 0, not mpiexec
    if args.seed is None and args.resume is None:  # one random seed for all ranks
        args.seed = comm.bcast(secrets.randbelow(2**31) if rank == 0 else None, root=0)
    if args.backend in ("auto", "cupy") and _has_gpu():
        distributed.select_gpu(comm)
    try:
        if rank == 0:
            hold_run_lock(args.save, args.resume, held)
        prepared = prepare(args)
        error = None
    except TextError as exc:
        error = str(exc)
    except Exception as exc:  # out of memory, a bug: every rank must still hear of it
        error = f"{type(exc).__name__}: {exc}"
    _raise_on_rank_0(comm, comm.allgather(error))
    trainer = prepared.trainer
    everyone = comm.allgather(shared_settings(args, trainer, prepared.text))
    _raise_on_rank_0(comm, [_difference(theirs, everyone[0]) for theirs in everyone])
    distributed.broadcast_parameters(trainer.net, comm=comm)
    trainer.optimizer = distributed.DataParallel(trainer.optimizer, comm)
    if rank:  # each rank its own windows and dropout masks
        trainer.window_rng = np.random.Generator(trainer.window_rng.bit_generator.jumped(rank))
        trainer.dropout_rngs = [np.random.Generator(rng.bit_generator.jumped(rank))
                                for rng in trainer.dropout_rngs]
    batch = trainer.config.batch
    if trainer.config.stateful:  # rank r reads streams r·batch ... of all ranks' size·batch
        try:
            trainer.share_streams(rank * batch, size * batch)
            error = None
        except TextError as exc:
            error = str(exc)
        _raise_on_rank_0(comm, comm.allgather(error))
    note = f"distributed: {size} ranks x batch {batch} = global batch {size * batch}"
    note = note if prepared.note is None else f"{prepared.note}; {note}"
    return prepared._replace(note=note), _runner(comm)


def _raise_on_rank_0(comm: Any, errors: list[str | None]) -> None:
    """When any rank has an error: ``TextError`` on rank 0 with the first (naming its rank
    when it is not 0's), a quiet exit with status 1 on the others."""
    if not any(errors):
        return
    if comm.Get_rank() != 0:
        raise SystemExit(1)
    failed = next(r for r, e in enumerate(errors) if e)
    raise TextError(errors[failed] if failed == 0 else f"rank {failed}: {errors[failed]}")


def shared_settings(args: argparse.Namespace, trainer: TextTrainer, text: str
                    ) -> dict[str, Any]:
    """What every rank must have alike, by the option or thing a user would change: every
    option but ``MAY_DIFFER``'s (the configuration as resumed), whether it saves, the
    backend, the corpus's fingerprint, the vocabulary, and a digest of the model
    (parameters, optimizer state, generators) with its step."""
    given = {name: v for name, v in vars(args).items() if name not in MAY_DIFFER}
    given.update(dataclasses.asdict(trainer.config))  # as resumed, not only as given
    del given["corpus"], given["corpus_sha256"]  # the text: compared by its fingerprint
    shared = {f"--{name.replace('_', '-')}": value for name, value in given.items()}
    shared["saving (--save or --resume)"] = bool(args.save or args.resume)
    shared["--backend"] = trainer.backend.name
    shared["corpus's SHA-256"] = fingerprint(text)
    shared["vocabulary"] = "".join(trainer.vocab.symbols)
    shared["step"] = trainer.step_count
    shared["model digest (weights, optimizer state, generators)"] = _model_digest(trainer)
    return shared


def _model_digest(trainer: TextTrainer) -> str:
    digest = hashlib.sha256()
    for group in trainer.net.params:
        for name in sorted(group):
            digest.update(np.ascontiguousarray(to_numpy(group[name])).tobytes())
    for key, value in sorted(trainer.optimizer.state_dict().items()):
        digest.update(key.encode() + np.ascontiguousarray(value).tobytes())
    digest.update(json.dumps(trainer.rng_states(), sort_keys=True).encode())
    return digest.hexdigest()


def _difference(theirs: dict[str, Any], reference: dict[str, Any]) -> str | None:
    """How a rank's shared settings differ from rank 0's; None when they do not."""
    for what, value in reference.items():
        if theirs.get(what) != value:
            return (f"its {what} is {theirs.get(what)!r} but rank 0's is {value!r}; every "
                    "rank must run the same command")
    return None


def _has_gpu() -> bool:
    from ..backend import available_backends

    return "cupy" in available_backends()


class GlobalSpeed:
    """A reporter that reports every rank's characters, not only this one's."""

    def __init__(self, reporter: Reporter, size: int) -> None:
        self.reporter, self.size = reporter, size

    def advance(self) -> None:
        self.reporter.advance()

    def progress(self, step: int, loss: float, chars_per_second: float,
                 valid_loss: float | None = None) -> None:
        self.reporter.progress(step, loss, chars_per_second * self.size, valid_loss)

    def text(self, message: str) -> None:
        self.reporter.text(message)

    def warn(self, message: str) -> None:
        self.reporter.warn(message)


def _runner(comm: Any) -> Runner:
    """``run_training`` with the stops agreed over ``comm`` and only rank 0 sampling/saving."""
    mpi = distributed.mpi_module()
    rank, size = comm.Get_rank(), comm.Get_size()

    def run(trainer: TextTrainer, limits: RunLimits, reporter: Reporter,
            stop_requested: StopRequest) -> RunResult:
        agreed = np.zeros(1, dtype=np.int64)

        def stop() -> bool:  # rank 0's seconds of training, which alone samples and saves
            timed_out = rank == 0 and limits.time_limit is not None and (
                limits.clock.training() >= limits.time_limit)
            status = stop_requested.status  # None: not asked to stop
            agreed[0] = status if status is not None else int(timed_out) * TIME_UP
            comm.Allreduce(mpi.IN_PLACE, agreed, op=mpi.MAX)
            return bool(agreed[0])

        own = dataclasses.replace(limits, time_limit=None)
        if rank:
            own = dataclasses.replace(own, writes=False, sample_chars=0)
        try:
            result = run_training(trainer, own, GlobalSpeed(reporter, size), stop)
        except DivergedError:  # raised on every rank at the same step
            if rank:
                raise SystemExit(1) from None
            raise
        except BaseException as exc:  # this rank alone: stop them all rather than hang
            print(f"dualtape train-text: error on rank {rank}: {type(exc).__name__}: {exc}; "
                  "stopping every rank", file=sys.stderr, flush=True)
            comm.Abort(stop_requested.exit_code if isinstance(exc, KeyboardInterrupt) else 1)
            raise
        code = int(agreed[0])
        if code > TIME_UP:  # another rank's request: exit as it does
            stop_requested.ask(code, "another rank asked to stop")
        reason = {0: result.reason, TIME_UP: "time"}.get(code, "interrupted")
        return dataclasses.replace(result, reason=reason,
                                   chars_per_second=result.chars_per_second * size)

    return run
