"""train-text's step, before and after: chars/s of two checkouts interleaved process by process.

    git worktree add /tmp/dualtape-before <commit>
    python bench/text_step_rate.py /tmp/dualtape-before . --rounds 10

Each round runs one child per checkout (alternating which goes first); a child trains
train-text's default model (LSTM 80 → LSTM 80 → FC, batch 32 × 50, float32, SGD; ``--cell``
``StandardLSTM`` or ``GRU`` for those cells) on the bundled
corpus for ``--steps`` steps after 5 unmeasured ones, on one BLAS thread and with freed memory
kept as ``train-text`` keeps it, through ``TextTrainer.new`` (so any version since the text
trainer has it can be measured). Prints each pair and the median after/before ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
import dualtape
from threadpoolctl import threadpool_limits
from dualtape.backend import resolve_backend
try:
    from dualtape.text.config import TrainConfig
except ImportError:  # before the configuration had a file of its own
    from dualtape.text.trainer import TrainConfig
from dualtape.text.trainer import TextTrainer
text = (dualtape.__spec__.submodule_search_locations[0] + "/data/corpus.txt")
dualtape.keep_freed_memory()
with threadpool_limits(1):
    config = TrainConfig(cell=sys.argv[3]) if sys.argv[3] != "LSTM" else TrainConfig()
    trainer = TextTrainer.new(open(text).read(), config, resolve_backend("numpy"))
    for _ in range(5):
        trainer.step()
    trainer.read_loss()
    steps = int(sys.argv[2])
    start = time.perf_counter()
    for _ in range(steps):
        trainer.step()
    trainer.read_loss()
print(steps * 32 * 50 / (time.perf_counter() - start))
"""


ENV = {**{k: v for k, v in os.environ.items()
          if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}, "PYTHONDONTWRITEBYTECODE": "1"}
"""The children's environment: OpenBLAS's own kernel choice, as users' machines make it."""


def rate(checkout: Path, steps: int, cell: str) -> float:
    """Chars/s of one child process on ``checkout``."""
    done = subprocess.run([sys.executable, "-c", CHILD, str(checkout.resolve()), str(steps),
                           cell],
                          capture_output=True, text=True, check=True,
                          env=ENV)
    return float(done.stdout)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--cell", choices=("LSTM", "StandardLSTM", "GRU"), default="LSTM")
    args = parser.parse_args(argv)
    ratios = []
    for i in range(args.rounds):
        order = (args.before, args.after) if i % 2 else (args.after, args.before)
        found = {side: rate(side, args.steps, args.cell) for side in order}
        ratios.append(found[args.after] / found[args.before])
        print(f"before {found[args.before]:,.0f} after {found[args.after]:,.0f} chars/s, "
              f"ratio {ratios[-1]:.3f}", flush=True)
    print(f"after/before: median {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {args.rounds} rounds)")


if __name__ == "__main__":
    main()
