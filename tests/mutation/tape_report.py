"""Mutants of ``dualtape/tape_report.py`` and ``dualtape/tape_command.py`` (the tape report)."""

from run_mutants import Mutant

TR = "dualtape/tape_report.py"
TESTS = ("tests/test_tape_report.py",)
MUTANTS = [
    Mutant(TR, "            if rest or intercept + slope * t3 != s3:",
           "            if rest:", "the affine fit not checked on the third probe", TESTS),
    Mutant(TR, "            return [_Entry(e.layer, e.path, tuple(a + b * t for a, b in dims),",
           "            return [_Entry(e.layer, e.path, tuple(a + b * (t - 1) for a, b in dims),",
           "the sizes scaled to one step fewer than asked", TESTS),
    Mutant(TR, "    return e.shared is not None and e.shared != \"input\"",
           "    return False", "memory two fields share counted twice", TESTS),
    Mutant(TR, "        last_steps = steps - (segments - 1) * every",
           "        last_steps = every", "the last segment taken as a whole one", TESTS),
    Mutant(TR, "        return self.checkpoint_bytes + (self.segment_bytes if self.segments > 1 "
               "else 0)",
           "        return self.checkpoint_bytes",
           "the recomputed segment left out of backward's peak", TESTS),
    Mutant(TR, "                kept += segments * next(pending)",
           "                kept += next(pending)", "one checkpointed state, not one per segment",
           TESTS),
    Mutant(TR, "    if getattr(optimizer, \"momentum\", None) == 0:",
           "    if False:", "plain SGD counted with a momentum slot", TESTS),
    Mutant(TR, "            layer.rng.bit_generator.state = state\n",
           "            pass\n", "the probes draw the network's Dropout masks", TESTS),
    Mutant("dualtape/tape_command.py", "    if value < 1:", "    if value < 0:",
           "--batch 0 accepted", TESTS),
]
