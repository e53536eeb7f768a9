"""Mutants of the standard cells, BasicRecurrent, Dropout, their fast loops and torch_weights."""

from run_mutants import Mutant

SL, GRU = "dualtape/layers/standard_lstm.py", "dualtape/layers/gru.py"
BR, DROP = "dualtape/layers/basic_recurrent.py", "dualtape/layers/dropout.py"
GATED, TW = "dualtape/layers/gated.py", "dualtape/torch_weights.py"
NUMBA = "dualtape/kernels/_numba_standard_lstm_gru.py"
CUPY = "dualtape/kernels/cupy_standard_lstm_gru.py"
KERNELS = "dualtape/kernels/__init__.py"
CELLS = ("tests/test_cells.py", "tests/test_cells_torch.py")
LOOPS = ("tests/test_numba_standard_lstm_gru.py",)
BUFFERS = ("tests/test_gradient_buffers.py",)
MUTANTS = [
    # gradient buffers
    Mutant(GATED, "                out[\"b_hh\"][...] = grads[\"b_ih\"]\n", "",
           "the standard LSTM's second bias buffer left unwritten", BUFFERS),
    Mutant(GATED, "    fills_gradient_buffers = True\n", "",
           "the standard cells ask for no gradient buffers", BUFFERS),
    Mutant(GRU, "need_dxs,\n                                        None if loops is None else "
           "grads_out)", "need_dxs,\n                                        grads_out)",
           "the GRU's generic path writes into the buffers", BUFFERS),
    Mutant("dualtape/layers/linear_algebra.py",
           "    return sequence_outer(xp, d, inputs, width, weight), batch_sum(xp, flat, bias)",
           "    return sequence_outer(xp, d, inputs, width, weight), batch_sum(xp, flat)",
           "a sequence's bias gradient not written into its buffer", BUFFERS),
    Mutant(SL, "    c_next = f * c + i * g\n", "    c_next = f * c + g\n",
           "the standard LSTM's input gate left out", CELLS),
    Mutant(SL, "dc * c * f * (1.0 - f)", "dc * c * f", "the forget gate's σ' left out", CELLS),
    Mutant(GRU, "new + rz[:, n:] * (h - new)", "h + rz[:, n:] * (new - h)",
           "the GRU's z and 1 − z swapped", CELLS),
    Mutant(GRU, "dr = dn * hn * r * (1.0 - r)", "dr = dn * r * (1.0 - r)",
           "the reset gate's gradient without W_hn h + b_hn", CELLS),
    Mutant(GRU, "dh = dh_direct + das[t] @ W_hh if t or need_first else dh_direct",
           "dh = dh_direct", "the GRU's state gradient skips the recurrent product", CELLS),
    Mutant(BR, "return grads, back[:, self.n_in :], back[:, : self.n_in]",
           "return grads, back[:, : self.n_in], back[:, self.n_in :]",
           "BasicRecurrent's step gradients of state and input swapped", ("tests/test_cells.py",)),
    Mutant(BR, "            if t or need_dstate:\n                dstate = d @ recurrent",
           "            if t:\n                dstate = d @ recurrent",
           "BasicRecurrent's first state gradient skips W", ("tests/test_cells.py",)),
    Mutant(DROP, "scale = 1.0 / (1.0 - self.rate)", "scale = 1.0",
           "dropout does not rescale what it keeps", ("tests/test_dropout.py",)),
    Mutant(DROP, "if not self.training or self.rate == 0.0:", "if self.rate == 0.0:",
           "dropout drops while not training", ("tests/test_dropout.py",)),
    Mutant(GATED, "                xp, da_h, hs, None, None if out is None else",
           "                xp, da_i, hs, None, None if out is None else",
           "the GRU's recurrent gradients from the input-side pre-activations", CELLS),
    Mutant(GATED, "shapes, 1.0 / math.sqrt(n_out), seed", "shapes, 1.0, seed",
           "torch's initial scale lost", ("tests/test_cells.py",)),
    Mutant(TW, "        arrays[name] = _host(key, value)",
           '        if kind == "weight":\n            arrays[name] = _host(key, value)',
           "from_torch drops the biases", CELLS),
    Mutant(NUMBA, "c_next[j] = g[n + j] * c[j] + g[j] * g[2 * n + j]",
           "c_next[j] = g[j] * c[j] + g[n + j] * g[2 * n + j]",
           "the compiled LSTM loop swaps i and f", LOOPS),
    Mutant(NUMBA, "                carry_b[j] = d * update",
           "                carry_b[j] = d * (one - update)",
           "the compiled GRU loop carries (1 − z) back", LOOPS),
    Mutant(CUPY, "        run(gates[t], cells[t], tanh_cells[t], dhs[t], rec, dc, das[t])\n"
                 "        if t or need_first:",
           "        run(gates[t], cells[t], tanh_cells[t], dhs[t], rec, dc, das[t])\n"
           "        if t:", "the CUDA LSTM loop leaves out the first state's product",
           ("tests/test_cuda_standard_lstm_gru.py",)),
    Mutant(KERNELS, "    return loops if selfcheck.verified(key, "
                    "f\"fast {cell} loops\", where,\n"
                    "                                       check) else None",
           "    return loops", "fast loops used without their self-check", LOOPS),
    Mutant(NUMBA, "c_next[j] = g[n + j] * c[j] + g[j] * g[2 * n + j]",
           "c_next[j] = g[n + j] * c[j] + g[2 * n + j]",
           "a broken compiled loop is caught by the cells' own tests, not hidden by the "
           "self-check's fallback", CELLS),
]
