"""Mutants of ``dualtape/training.py``: gradient clipping, and the two verbs ``backpropagate``
and ``backpropagate_sequence``."""

from run_mutants import Mutant

TRAINING = "dualtape/training.py"
TESTS = ("tests/test_training.py",)
VERBS = ("tests/test_backpropagate.py",)
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
    Mutant(TRAINING, "    return xp.where(found.finite, found.loss, "
                     "xp.full_like(found.loss, math.nan))",
           "    return found.loss",
           "a non-finite input's finite loss passes a custom loop's check", VERBS),
    Mutant(TRAINING, "    if callable(loss):\n        return LossCall(loss, where, batch_axis)\n",
           "",
           "a callable loss looked up by name", VERBS),
    Mutant(TRAINING, "    grads, dstates = _sequence_gradients(rnet, found, need_dstate)",
           "    grads, dstates = _sequence_gradients(rnet, found, False)",
           "need_dstate=True gives no initial states' gradient", VERBS),
    Mutant(TRAINING, "    return Backprop(_flagged(found), grads, [restore(s, found.single) "
                     "for s in found.state],",
           "    return Backprop(_flagged(found), grads, found.state,",
           "one sequence's final states come back as a batch of one", VERBS),
    Mutant(TRAINING, " " * 48 + "grads_out=gradient_buffers(rnet),",
           " " * 48 + "grads_out=None,",
           "the gradient buffers no longer reused", VERBS),
    Mutant(TRAINING, "        value, dys = objective(xp, ys, targets, mask_weights(mask, steps, "
                     "batch, ys))",
           "        value, dys = objective(xp, ys, targets)", "the mask ignored",
           ("tests/test_recurrent.py",)),
    Mutant("dualtape/checkpointing.py", "        if isinstance(tape, CheckpointedTape):\n"
           "            return checkpointed_backward(",
           "        if False:\n            return checkpointed_backward(",
           "a checkpointed tape taken for a full one", VERBS),
    Mutant(TRAINING, " or g.base is not None or ", " or ",
           "in-place clipping scales a view of an array it also scales", TESTS),
    Mutant(TRAINING, "                    new[id(g)] = g * factor",
           "                    new[id(g)] = g",
           "in-place clipping leaves the arrays it cannot write unscaled", TESTS),
    Mutant(TRAINING, "                owners[id(g)] = mod, g",
           "                owners[id(g)] = mod, g\n                mod.multiply(g, factor, out=g)",
           "in-place clipping scales an array once per name", TESTS),
    Mutant("dualtape/text/trainer.py", "clip_gradients(grads, self.config.clip, in_place=True)",
           "clip_gradients(grads, self.config.clip)",
           "train-text's clipping copies every gradient, so its steps are never kept",
           ("tests/test_text.py",)),
]
