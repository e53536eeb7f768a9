"""Mutants of ``dualtape/checkpointing.py`` (checkpointed tapes)."""

from run_mutants import Mutant

CK = "dualtape/checkpointing.py"
TESTS = ("tests/test_checkpointing.py",)
MUTANTS = [
    Mutant(CK, "                    layer.rng.bit_generator.state = state\n                segment",
           "                    pass\n                segment",
           "the recomputed segments draw new Dropout masks", TESTS),
    Mutant(CK, "            layer.rng.bit_generator.state = state\n    assert grads",
           "            pass\n    assert grads",
           "the Dropout generators left where the recomputation left them", TESTS),
    Mutant(CK, "                mod.add(group[name], g, out=group[name])",
           "                pass", "only the first segment's weight gradients kept", TESTS),
    Mutant(CK, "                group[name] = group[name] + g", "                pass",
           "only the first segment's weight gradients kept off numpy and CuPy", TESTS),
    Mutant(CK, "            dxs.insert(0, dx)", "            dxs.append(dx)",
           "the input gradients' segments in reverse order", TESTS),
    Mutant(CK, "        starts.append([xp.asarray(s, copy=True) for s in states])",
           "        starts.append(list(states))",
           "the checkpoints keep views that pin each segment's tape", TESTS),
    Mutant(CK, "        return max(1, math.isqrt(steps - 1) + 1) if steps > 1 else 1",
           "        return steps", "'sqrt' keeps the whole tape", TESTS),
    Mutant(CK, "need_dstates or k > 0)", "need_dstates)",
           "the state gradient stops at the last segment's start in training", TESTS),
]
MUTANTS += [
    Mutant("dualtape/layers/base.py",
           "        kept, states, ys = sequence_forward([self], xp, [state], xs, every)",
           "        kept, states, ys = sequence_forward([self], xp, [state], xs, every and "
           "every + 1)", "a layer's segments one step longer than its policy says",
           ("tests/test_checkpointing.py",)),
    Mutant(CK, "            return stack_forward(layers, xp, states, xs, fuse)\n",
           "            return checkpointed_forward(layers, xp, states, xs, 1)\n",
           "the full tape policy checkpoints every step", ("tests/test_checkpointing.py",)),
    Mutant(CK, "    if len(tape.last.tapes) != len(layers) or (wanted is not None and example != "
               "wanted):",
           "    if wanted is not None and example != wanted:",
           "another network's checkpointed tape accepted", ("tests/test_checkpointing.py",)),
]
MUTANTS.append(Mutant(CK, "            if k < len(tape.states) - 1:\n",
                      "            if True:\n",
                      "the last segment recomputed from the parameters as they are now: a "
                      "tape made with other parameters accepted",
                      (*TESTS, "tests/test_stale_tapes.py")))
