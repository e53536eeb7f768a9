"""Mutants of ``dualtape/tape_report.py``, ``dualtape/call_peak.py`` and
``dualtape/tape_command.py`` (the tape report)."""

from run_mutants import Mutant

TR = "dualtape/tape_report.py"
TESTS = ("tests/test_tape_report.py",)
CP = "dualtape/call_peak.py"
MUTANTS = [
    Mutant(TR, "            if rest or intercept + slope * t3 != s3:",
           "            if rest:", "the affine fit not checked on the third probe", TESTS),
    Mutant(TR, "            return [_Entry(e.layer, e.path, tuple(a + b * t for a, b in dims),",
           "            return [_Entry(e.layer, e.path, tuple(a + b * (t - 1) for a, b in dims),",
           "the sizes scaled to one step fewer than asked", TESTS),
    Mutant(TR, "    return e.shared is not None and e.shared != \"input\"",
           "    return False", "memory two fields share counted twice", TESTS),
    Mutant(TR, "    last_steps = steps if every is None else steps - (segments - 1) * every",
           "    last_steps = steps if every is None else every",
           "the last segment taken as a whole one", TESTS),
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
    Mutant(CP, "    scaled, off = max(lines)", "    scaled, off = lines[-1]",
           "only the backward pass's line scaled: a loss that overtakes it later missed", TESTS),
    Mutant(CP, "    last = steps - (segments - 1) * every", "    last = every",
           "the checkpointed probes' last segment a whole one, not T's", TESTS),
    Mutant(CP, "        phase_ends()  # the loss\n", "",
           "the loss and the backward pass measured as one phase", TESTS),
    Mutant(CP, "    call()\n    with meter() as m:", "    with meter() as m:",
           "no warm call: the kept gradient buffers counted in the peak", TESTS),
    Mutant(CP, "    probe = copy.deepcopy(net)", "    probe = net",
           "the probes run on the user's network (its gradient buffers made)", TESTS),
    Mutant(CP, "        return TracedMeter, \"tracemalloc\"",
           "        return None, \"not measured\"", "numpy's peak not measured", TESTS),
]
