"""What each rank runs in the MPI tests: ``mpiexec -n N python -m tests.mpi_worker CASE OUT``.

The problems are defined here once, for the ranks and for the single-process oracle in
``test_distributed.py``. Every rank writes ``OUT/rank<r>.npz`` (parameters, losses, flags).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import dualtape
from dualtape import distributed

PER_RANK = 3  # examples per rank and step
STEPS = 3


def make_optimizer(kind: str):
    """SGD with momentum and L2, or Adam."""
    if kind == "sgd":
        return dualtape.SGD(0.1, momentum=0.9, regulariser=0.01)
    return dualtape.Adam(0.01)


def make_net(kind: str, seed: int):
    """A small float64 network: feed-forward or recurrent."""
    if kind == "recurrent":
        return dualtape.RecurrentNetwork([
            dualtape.LSTM(3, 4, seed=seed, dtype="float64"),
            dualtape.FullyConnected(4, 2, seed=seed + 1, dtype="float64"), dualtape.Logit()])
    return dualtape.Network([
        dualtape.FullyConnected(3, 5, seed=seed, dtype="float64"), dualtape.Tanh(),
        dualtape.FullyConnected(5, 2, seed=seed + 1, dtype="float64"), dualtape.Logit()])


def batch(kind: str, step: int, examples: slice):
    """Inputs and targets of ``step`` for the global batch's ``examples``."""
    rng = np.random.default_rng(step)
    if kind == "recurrent":
        xs = rng.uniform(-1, 1, (5, 64, 3))
        return xs[:, examples], rng.uniform(0, 1, (5, 64, 2))[:, examples]
    return rng.uniform(-1, 1, (64, 3))[examples], rng.uniform(0, 1, (64, 2))[examples]


def train_steps(net, optimizer, kind: str, examples: slice) -> list[float]:
    """``STEPS`` training calls on ``examples`` of each step's global batch; the losses."""
    losses = []
    for step in range(STEPS):
        x, t = batch(kind, step, examples)
        if kind == "recurrent":
            losses.append(dualtape.train_recurrent(net, x, t, optimizer)[0])
        else:
            losses.append(dualtape.train(net, x, t, optimizer))
    return losses


def flat_params(net) -> dict[str, np.ndarray]:
    """The parameters as host arrays named ``"k/name"``."""
    return {f"{k}/{name}": dualtape.to_numpy(v).copy()
            for k, group in enumerate(net.params) for name, v in group.items()}


def equivalence(rank: int, size: int, kind: str, optimizer: str) -> dict:
    """Ranks start from different seeds, broadcast rank 0's, then train on their slice."""
    net = make_net(kind, seed=1 if rank == 0 else 100 + rank)
    distributed.broadcast_parameters(net)
    own = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
    losses = train_steps(net, distributed.DataParallel(make_optimizer(optimizer)), kind, own)
    return {**flat_params(net), "losses": np.asarray(losses)}


def broadcast(rank: int, size: int) -> dict:
    """Rank 1 broadcasts its parameters (as root) to every rank."""
    net = make_net("feedforward", seed=10 + rank)
    distributed.broadcast_parameters(net, root=1)
    return flat_params(net)


def nan_on_one_rank(rank: int, size: int) -> dict:
    """The last rank's input holds NaN; then one good step to show the ranks stay in step."""
    net = make_net("feedforward", seed=1)
    optimizer = distributed.DataParallel(make_optimizer("sgd"))
    x, t = batch("feedforward", 0, slice(rank * PER_RANK, (rank + 1) * PER_RANK))
    if rank == size - 1:
        x = x.copy()
        x[0, 0] = np.nan
    before = flat_params(net)
    try:
        dualtape.train(net, x, t, optimizer)
        message = ""
    except FloatingPointError as exc:
        message = str(exc)
    unchanged = all(np.array_equal(v, before[k]) for k, v in flat_params(net).items())
    x, t = batch("feedforward", 1, slice(rank * PER_RANK, (rank + 1) * PER_RANK))
    dualtape.train(net, x, t, optimizer)
    return {**flat_params(net), "message": np.asarray(message), "unchanged": unchanged}


def other_optimizer_on_one_rank(rank: int, size: int) -> dict:
    """The last rank wraps SGD at another rate: every rank's first step must refuse."""
    net = make_net("feedforward", seed=1)
    optimizer = make_optimizer("sgd")
    if rank == size - 1:
        optimizer.rate = 0.2
    before = flat_params(net)
    x, t = batch("feedforward", 0, slice(rank * PER_RANK, (rank + 1) * PER_RANK))
    try:
        dualtape.train(net, x, t, distributed.DataParallel(optimizer))
        message = ""
    except ValueError as exc:
        message = str(exc)
    unchanged = all(np.array_equal(v, before[k]) for k, v in flat_params(net).items())
    return {"message": np.asarray(message), "unchanged": unchanged}


def crash_on_one_rank(rank: int, size: int) -> dict:
    """The last rank raises before its step; the others would wait in the collective."""
    if rank == size - 1:
        raise RuntimeError(f"planned failure on rank {rank}")
    net = make_net("feedforward", seed=1)
    x, t = batch("feedforward", 0, slice(0, PER_RANK))
    dualtape.train(net, x, t, distributed.DataParallel(make_optimizer("sgd")))
    return {}


def main(argv: list[str]) -> None:
    case, out, *options = argv
    rank, size = distributed.rank(), distributed.world_size()
    cases = {"equivalence": equivalence, "broadcast": broadcast, "nan": nan_on_one_rank,
             "optimizers": other_optimizer_on_one_rank, "crash": crash_on_one_rank}
    result = cases[case](rank, size, *options)
    np.savez(Path(out) / f"rank{rank}.npz", size=size, **result)


if __name__ == "__main__":
    main(sys.argv[1:])
