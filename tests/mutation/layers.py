"""Mutants of ``dualtape/layers/``."""

from run_mutants import Mutant

LINEAR_ALGEBRA = "dualtape/layers/linear_algebra.py"
PARAMS = "dualtape/layers/params.py"
EDGES = "dualtape/layers/edges.py"
BASE, LSTM_PY = "dualtape/layers/base.py", "dualtape/layers/lstm.py"
FC = "dualtape/layers/fully_connected.py"
EMBEDDING, SCATTER = "dualtape/layers/embedding.py", "dualtape/kernels/scatter.py"
EMB = ("tests/test_embedding.py",)
FF = ("tests/test_layers.py", "tests/test_aliasing.py", "tests/test_network.py")
RNN = ("tests/test_lstm.py", "tests/test_kernels.py", "tests/test_aliasing.py",
       "tests/test_recurrent.py")
STALE = ("tests/test_stale_tapes.py",)
MUTANTS = [
    # the fast path's products
    Mutant(LSTM_PY, "if len(blocks) > 1 and rows * 4 * n <= JOIN_UP_TO:", "if False:",
           "small pre-activation gradients kept in three blocks (the golden bits move)",
           ("tests/test_text_golden.py",)),
    Mutant(LINEAR_ALGEBRA, "    projected += b\n", "",
           "the fast input projection drops its bias", RNN),
    # the public edge
    Mutant(EDGES, "    if copy and not fresh:", "    if copy and fresh:",
           "an input the tape keeps is not copied", FF),
    Mutant(EDGES, "        view.flags.writeable = False\n", "",
           "outputs handed out writable on numpy", FF),
    Mutant(EDGES, "if given is None and not xp.isdtype(x.dtype, \"real floating\"):",
           "if given is None and xp.isdtype(x.dtype, \"bool\"):",
           "integer input cast instead of refused", FF),
    Mutant(EDGES, "    if (dstate_T is not None and np.ndim(dstate_T) == 3) or np.ndim(dys) == 1:",
           "    if dstate_T is not None and np.ndim(dstate_T) == 3:",
           "swapped single-example sequence gradients go unnoticed", RNN),
    Mutant(BASE, "            or (self.n_in is not None and tape[0].shape[-1] != self.n_in)\n", "",
           "a tape of another input size is accepted", FF + RNN),
    Mutant(EDGES, "    if tuple(a.shape) != tuple(shape):\n        got = ",
           "    if False:\n        got = ", "a state or gradient of another batch is accepted",
           RNN),
    Mutant(EDGES, "    return y[0, ...] if batch_axis == 0 else y[..., 0, :]", "    return y",
           "a single example comes back with a batch axis", FF),
    Mutant(BASE, "        if state is None:\n            return zeros_like_place(",
           "        if state is None and False:\n            return zeros_like_place(",
           "a state of None is refused instead of zeros", RNN),
    # versions
    Mutant(BASE, "        if tape.version != self.params.version:", "        if False:",
           "a stale tape is used", STALE),
    Mutant(PARAMS, "        super().update(new)\n        self.touch()",
           "        super().update(new)", "update leaves the version", STALE),
    Mutant(PARAMS, "        super().__setitem__(key, value)\n        self.touch()",
           "        super().__setitem__(key, value)", "params[k] = ... leaves the version",
           STALE),
    Mutant(PARAMS, "    def __ior__(self, other: Any) -> Self:  # type: ignore[misc]\n"
                 "        self.update(other)\n        return self\n\n", "",
           "|= leaves the version", STALE),
    Mutant(PARAMS, "        self.version = next(_STAMPS)", "        self.version += 1",
           "versions count per dict: another network's tape matches", STALE),
    Mutant(PARAMS, "        super().__init__(*args, **kwargs)\n        self.touch()",
           "        super().__init__(*args, **kwargs)",
           "a new dict starts at 0: a fresh network accepts another's tapes", STALE),
    Mutant(PARAMS, "        self.__dict__.update(state)\n        self.touch()",
           "        self.__dict__.update(state)",
           "a copy keeps the original's stamp and accepts its tapes", STALE),
    Mutant(PARAMS, " == shape and dtype_name(value.dtype) == dtype", " == shape",
           "params[k] = a of another dtype taken", STALE),
    Mutant(PARAMS, "fits = tuple(value.shape) == shape and dtype_name",
           "fits = True and dtype_name",
           "params[k] = a of another shape taken", STALE),
    Mutant(PARAMS, "        if place:\n            check_same_place(",
           "        if not place:\n            check_same_place(",
           "params[k] = a of another backend taken (and net.to refused)", STALE),
    Mutant(PARAMS, "            self._check_replacement(key, value, place=False)\n", "",
           "update takes any array", STALE),
    Mutant(FC, "        self._check_version(tape)\n", "",
           "FullyConnected's backward takes a stale tape", STALE),
    Mutant(LSTM_PY, "``need_dstate`` (each saves a product).\"\"\"\n"
                    "        self._check_version(tape)",
           "``need_dstate`` (each saves a product).\"\"\"",
           "the training path's LSTM backward takes a stale tape", STALE),
    Mutant(LSTM_PY, "return LSTMSequenceTape(xs, cells, gates, p.version), cells[-1, ...], hs",
           "return LSTMSequenceTape(xs, cells, gates, 0), cells[-1, ...], hs",
           "the sequence tape records no version", STALE + RNN),
    # the maths
    Mutant(LSTM_PY, "dc * i * (1.0 - g * g)", "dc * i * (1.0 - g)",
           "the candidate's derivative is not tanh's", RNN),
    Mutant(LSTM_PY, "    return da, dc * f\n", "    return da, dc\n",
           "the cell gradient skips the forget gate", RNN),
    Mutant(LSTM_PY, "dc = dc_direct + da[:, : 3 * n] @ U if t or need_dc0 else None",
           "dc = dc_direct + da[:, : 3 * n] @ U", "generic loop: dc_0 given when not asked for",
           RNN),
    Mutant(LSTM_PY, '"b": np.concatenate([np.ones(n_out), '
                    'rng.uniform(-1.0, 1.0, size=3 * n_out)]),',
           '"b": rng.uniform(-1.0, 1.0, size=4 * n_out),', "no forget bias of 1", RNN),
    Mutant("dualtape/layers/relu.py", "xp.where(y > 0, dy, xp.zeros_like(dy))",
           "xp.where(y >= 0, dy, xp.zeros_like(dy))", "Relu passes gradient where y = 0", FF),
    Mutant("dualtape/layers/softmax.py",
           "return y * (dy - xp.sum(y * dy, axis=-1, keepdims=True))",
           "return y * (dy - xp.sum(dy, axis=-1, keepdims=True))",
           "Softmax backward forgets the weights", FF),
    # the first-use self-check
    Mutant(LSTM_PY, "        if not error <= tolerance:", "        if error > tolerance:",
           "the self-check accepts a NaN disagreement", RNN),
    Mutant(LSTM_PY, 'tolerance = 1e-4 if dtype == "float32" else 1e-10',
           'tolerance = 1e-4', "the self-check's float64 tolerance is float32's", RNN),
    Mutant(LSTM_PY, "for name, x, y in zip(names, fused, generic, strict=True):",
           "for name, x, y in zip(names[:3], fused, generic):",
           "the self-check compares only the forward pass", RNN),
    Mutant(LINEAR_ALGEBRA, "np.matmul(np.ones(a.shape[0], dtype=a.dtype), a, out=out)",
           "np.matmul(np.ones(a.shape[0], dtype=a.dtype)[:-1], a[1:], out=out)",
           "the bias gradient's BLAS sum skips the first row", (*FF, *RNN)),
    # Embedding
    Mutant(SCATTER, "np.add.reduceat(rows[order], starts, axis=0)", "rows[order][starts]",
           "numpy's row sums keep the first row of each id, dropping repeats", EMB),
    Mutant(SCATTER, "return out.index_add_(0, ids, rows)", "return out.index_copy_(0, ids, rows)",
           "torch's row sums keep one row of each id, dropping repeats", EMB),
    Mutant(EMBEDDING, "pieces.append(xp.sum(sorted_rows[start:stop, ...], axis=0, keepdims=True))",
           "pieces.append(sorted_rows[start:start + 1, ...])",
           "the generic row sums drop repeated ids", EMB),
    Mutant(EMBEDDING, "        if row > filled:\n", "        if row > filled + 1:\n",
           "the generic row sums drop a gap of one absent id", EMB),
    Mutant(EDGES, "(ids < 0) | (ids >= vocab)", "(ids < 0) | (ids > vocab)",
           "id vocab accepted (off by one)", EMB),
    Mutant(EDGES, "(ids < 0) | (ids >= vocab)", "(ids >= vocab)", "negative ids accepted", EMB),
    Mutant(EDGES, "    if not xp.isdtype(ids.dtype, \"integral\"):",
           "    if xp.isdtype(ids.dtype, \"real floating\"):", "boolean ids accepted", EMB),
    Mutant(EDGES, "    if not fresh and copy:", "    if False:",
           "the tape shares the caller's ids", EMB),
    Mutant("dualtape/stack.py", "(steps * batch, *h.shape[2:])", "(steps * batch, h.shape[-1])",
           "ids (T, B) reshaped as if they had a feature axis", EMB),
]
