"""Mutants of ``dualtape/descent.py`` and ``dualtape/kernels/numba_descent.py``: plain SGD
fused into an LSTM stack's backward pass."""

from run_mutants import Mutant

D, K = "dualtape/descent.py", "dualtape/kernels/_numba_descent.py"
W = "dualtape/kernels/numba_descent.py"
TESTS = ("tests/test_descent.py",)
MUTANTS = [
    Mutant(D, "    if type(optimizer) is not SGD or optimizer.momentum or optimizer.regulariser:",
           "    if type(optimizer) is not SGD or optimizer.regulariser:",
           "SGD with momentum fused as plain SGD", TESTS),
    Mutant(D, "    if type(optimizer) is not SGD or", "    if not isinstance(optimizer, SGD) or",
           "a subclass of SGD, which may step otherwise, fused", TESTS),
    Mutant(D, "    if not isinstance(tape, RecurrentNetworkTape) or not all(",
           "    if not all(", "a checkpointed tape taken for a full one", TESTS),
    Mutant(D, "[type(layer) is LSTM for layer in layers]", "[True for layer in layers]",
           "a FullyConnected layer taken for an LSTM", TESTS),
    Mutant(D, "    if path is None or not isinstance(path.cell, NumbaLSTM) or (",
           "    if path is None or (", "fused under DUALTAPE_JIT=0 (the ufunc loop)", TESTS),
    Mutant(D, "    optimizer.steps += 1  # optim.Optimizer.step's bookkeeping, before any weight "
              "moves\n", "", "the fused step is not counted", TESTS),
    Mutant(D, "    optimizer._stamp(params)\n", "",
           "a tape made before the fused step stays usable", TESTS),
    Mutant(D, "    scratch = _scratch(layers, tape, dtype)\n",
           "    scratch = None\n", "a failure in allocating leaves a half-moved network",
           TESTS),
    Mutant(D, "            carry[...] = 0\n", "",
           "the last cell's gradient read from a buffer never cleared", TESTS),
    Mutant(D, "            inputs = xs if k == 0 else layer_tape.xs",
           "            inputs = xs", "every layer's weights moved by the first one's inputs",
           TESTS),
    Mutant(D, "    at = (5 * rows + 3 * batch) * cells\n", "    at = 0\n",
           "the input gradient written over the blocks of the layer below", TESTS),
    Mutant(K, "rows, n_in, n, one, dg.ctypes", "rows, n_in, n, zero, dg.ctypes",
           "the candidates' input gradient replaces the others'", TESTS),
    Mutant(K, "            sums[3 * n + j] += dg[r, j]",
           "            sums[3 * n + j] += da_o[r, j]",
           "the candidates' bias moved by the output gate's gradient", TESTS),
    Mutant(K, "        if first < 3 * n:  # U has no ĉ rows", "        if first < 2 * n:",
           "the output gate's recurrent weights never move", TESTS),
    Mutant(W, "    if shapes != want or (dxs is not None and dxs.shape != (rows, i)):",
           "    if shapes != want:", "an input gradient buffer of another shape written", TESTS),
    Mutant(W, "    for rows in (5, 1):", "    for rows in (5,):",
           "the self-check never tries the rank-1 updates", TESTS),
    Mutant(K, "        factor = scale * a[j]", "        factor = a[j]",
           "the rank-1 update forgets the rate", TESTS),
    Mutant(W, "    eps = 8 * rows * np.finfo(like.dtype).eps",
           "    eps = 8e6 * rows * np.finfo(like.dtype).eps",
           "the self-check passes a step off by far more than rounding", TESTS),
]
