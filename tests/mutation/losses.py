"""Mutants of ``dualtape/losses.py``."""

from run_mutants import Mutant

TESTS = ("tests/test_losses.py", "tests/test_recurrent.py")
MUTANTS = [
    Mutant("dualtape/losses.py", "xp.all((mask == 0) | (mask == 1))",
           "xp.all((mask >= 0) & (mask <= 1))", "fractional masks accepted", TESTS),
    Mutant("dualtape/losses.py",
           "return xp.sum(per_example) / batch, diff / batch\n\n\ndef softmax",
           "return xp.sum(per_example) / batch, diff\n\n\ndef softmax",
           "squared error's gradient not averaged over the batch", TESTS),
]
