"""Mutants of ``dualtape/losses.py``."""

from run_mutants import Mutant

P = "dualtape/losses.py"
TESTS = ("tests/test_losses.py", "tests/test_recurrent.py")
MUTANTS = [
    Mutant(P, "xp.all((mask == 0) | (mask == 1))",
           "xp.all((mask >= 0) & (mask <= 1))", "fractional masks accepted", TESTS),
    Mutant(P,
           "return xp.sum(per_example) / batch, diff / batch\n\n\ndef softmax",
           "return xp.sum(per_example) / batch, diff\n\n\ndef softmax",
           "squared error's gradient not averaged over the batch", TESTS),
    Mutant(P, "    if bool(xp.any((labels < 0) | (labels >= n))):",
           "    if bool(xp.any((labels < 0) | (labels > n))):", "label n accepted", TESTS),
    Mutant(P, "    safe = xp.where(t > 0, y, xp.ones_like(y))", "    safe = y",
           "cross entropy takes log 0 where the target is 0", TESTS),
    Mutant(P, "    keep = weights > 0\n", "    keep = weights >= 0\n",
           "masked-out steps still count", TESTS),
    Mutant(P, "        if host.dtype.kind not in \"biuf\":",
           "        if host.dtype.kind not in \"iuf\":", "a list of booleans refused as a mask",
           TESTS),
    Mutant(P, "    allowed = [shape] + ([shape[:-1]] if shape[-1] == 1 else [])",
           "    allowed = [shape, shape[:-1]]", "labels of another batch accepted", TESTS),
    Mutant(P, "    if not txp.isdtype(target.dtype, \"integral\"):",
           "    if txp.isdtype(target.dtype, \"complex floating\"):",
           "boolean labels accepted", TESTS),
    Mutant(P, "        if _is_integer_array(target):", "        if False:",
           "integer labels reach squared error's generic cast message", TESTS),
    Mutant(P, "    if isinstance(target, list | tuple):\n"
              "        return from_host(np.asarray(target), backend_of(y))\n", "",
           "a list of labels is not taken", TESTS),
    Mutant(P, "    if y.shape[-1] > 1 and shape == tuple(y.shape[:-1]):", "    if False:",
           "float labels get a shape error, not how to convert them", TESTS),
    Mutant(P, "    softmax = getattr(last, \"kind\", None) == \"Softmax\"",
           "    softmax = isinstance(last, type)", "the final Softmax not recognised", TESTS),
    Mutant(P, "    if name != \"squared_error\" and n_out == 1:",
           "    if name == \"cross_entropy\" and n_out == 1:",
           "a softmax cross entropy over one output accepted", TESTS),
    # class labels without a one-hot target
    Mutant(P, "xp.where(_hits(xp, y, t), p - 1, p)", "p - 1",
           "the label's 1 subtracted from every class", TESTS),
    Mutant(P, "        grad = xp.where(hits, -1 / safe, xp.zeros_like(y))",
           "        grad = -1 / safe", "cross entropy's label gradient leaks into other classes",
           TESTS),
]
