"""Mutants of ``dualtape/training.py`` (gradient clipping)."""

from run_mutants import Mutant

TRAINING = "dualtape/training.py"
TESTS = ("tests/test_training.py",)
MUTANTS = [
    Mutant(TRAINING, "    norm = scale * xp.sqrt(total)", "    norm = scale * total",
           "the squared norm taken for the norm", TESTS),
    Mutant(TRAINING, "factor = xp.where(norm > limit,", "factor = xp.where(norm < limit,",
           "small gradients scaled up, large ones left", TESTS),
    Mutant(TRAINING, "    total = sum(xp.sum((g * inverse) ** 2) for g in arrays)",
           "    total = xp.sum((arrays[-1] * inverse) ** 2)",
           "only the last array measured", TESTS),
    Mutant(TRAINING, "    limit = min(float(max_norm), float(xp.finfo(norm.dtype).max))",
           "    limit = float(max_norm)", "an infinite max_norm warns of inf / inf",
           TESTS),
    Mutant(TRAINING, "    scale = xp.where(xp.isfinite(largest) & (largest > 0), largest,",
           "    scale = xp.where(largest < 0, largest,",
           "the largest magnitude not factored out: a float32 norm overflows", TESTS),
    Mutant(TRAINING, "        check_same_place(a, arrays[0], f\"gradient {k}\", "
                     "\"clip_gradients\")\n", "", "gradients of two backends mixed", TESTS),
    Mutant(TRAINING, "    peaks = [xp.max(xp.abs(a)) if", "    peaks = [xp.max(a) if",
           "the largest value taken for the largest magnitude: negative float32 gradients "
           "of -1e30 overflow the norm", TESTS),
]
