"""Hand-written planted bugs in the code a generator cannot reach: numba's compiled kernels
(``dualtape/kernels/_numba_*.py``: mutmut leaves decorated functions alone) and the CUDA
source. Everything else gets mutmut's generated mutants (``generated.py``). Each replaces a
snippet of its file (found even when a formatter respaced it, ``run_mutants.locate``) with the
bug it stands for; ``run_mutants.py`` plants them one at a time and runs the named tests."""

from run_mutants import Mutant

CELLS_CELLS_TORCH = ("tests/test_cells.py", "tests/test_cells_torch.py")
CUDA_SOURCE = ("tests/test_cuda_source.py",)
DESCENT = ("tests/test_descent.py",)
LOSS_COMPILED = ("tests/test_loss_compiled.py",)
NUMBA_BLAS = ("tests/test_numba_blas.py",)
NUMBA_LSTM = ("tests/test_numba_lstm.py",)
NUMBA_LSTM_KERNELS_LSTM = (
    "tests/test_numba_lstm.py",
    "tests/test_kernels.py",
    "tests/test_lstm.py",
)
NUMBA_SPATIAL_CONVOLUTION_POOLING = (
    "tests/test_numba_spatial.py",
    "tests/test_convolution.py",
    "tests/test_pooling.py",
)
NUMBA_STANDARD_LSTM_GRU = ("tests/test_numba_standard_lstm_gru.py",)
ONE_HOT_IDS_EMBEDDING = ("tests/test_one_hot_ids.py", "tests/test_embedding.py")
OPTIM_COMPILED = ("tests/test_optim_compiled.py",)
OPTIM_HELD_OPTIM_COMPILED = ("tests/test_optim_held.py", "tests/test_optim_compiled.py")
OUTER_COMPILED_GRADIENT_BUFFERS = ("tests/test_outer_compiled.py", "tests/test_gradient_buffers.py")
PLANNED_BACKPROP = ("tests/test_planned_backprop.py",)
TRAIN_STEP = ("tests/test_train_step.py",)

MUTANTS = [
    # dualtape/kernels/_numba_blas.py
    Mutant(
        "dualtape/kernels/_numba_blas.py",
        ('"real": (real, ir.FloatType() if real == types.float32 else ir.DoubleType())'),
        '"real": (real, ir.FloatType())',
        "cblas_dgemm called with float scalars",
        NUMBA_BLAS,
    ),
    Mutant(
        "dualtape/kernels/_numba_blas.py",
        "if real not in (types.float32, types.float64):",
        "if real is None:",
        "an integer alpha compiled (and passed as a float's bits)",
        NUMBA_BLAS,
    ),
    # dualtape/kernels/_numba_descent.py
    Mutant(
        "dualtape/kernels/_numba_descent.py",
        "rows, n_in, n, one, dg.ctypes",
        "rows, n_in, n, zero, dg.ctypes",
        "the candidates' input gradient replaces the others'",
        DESCENT,
    ),
    Mutant(
        "dualtape/kernels/_numba_descent.py",
        "            sums[3 * n + j] += dg[r, j]",
        "            sums[3 * n + j] += da_o[r, j]",
        "the candidates' bias moved by the output gate's gradient",
        DESCENT,
    ),
    Mutant(
        "dualtape/kernels/_numba_descent.py",
        "        if first < 3 * n:  # U has no ĉ rows",
        "        if first < 2 * n:",
        "the output gate's recurrent weights never move",
        DESCENT,
    ),
    Mutant(
        "dualtape/kernels/_numba_descent.py",
        "        factor = scale * a[j]",
        "        factor = a[j]",
        "the rank-1 update forgets the rate",
        DESCENT,
    ),
    Mutant(
        "dualtape/kernels/_numba_descent.py",
        ("        if not np.isfinite(v):\n            return False"),
        ("        if False:\n            return False"),
        "an infinite input that leaves the loss finite trains",
        TRAIN_STEP,
    ),
    Mutant(
        "dualtape/kernels/_numba_descent.py",
        ("            dys = dxs.reshape(steps, batch, n_in)\n    return True"),
        ("            pass\n    return True"),
        "every layer below the top moved by the top's output gradient",
        TRAIN_STEP,
    ),
    Mutant(
        "dualtape/kernels/_numba_descent.py",
        "        xs = inputs[k].reshape(rows, n_in)",
        "        xs = inputs[max(k - 1, 0)].reshape(rows, n_in)",
        "a layer's weights moved by the inputs of the layer below for its own",
        TRAIN_STEP,
    ),
    # dualtape/kernels/_numba_grads.py
    Mutant(
        "dualtape/kernels/_numba_grads.py",
        "        if v < 0 or v >= n:",
        "        if v >= n:",
        "a negative id gathered and summed past the table",
        PLANNED_BACKPROP,
    ),
    Mutant(
        "dualtape/kernels/_numba_grads.py",
        "        if v < 0 or v >= n:",
        "        if v < 0 or v > n:",
        "an id one past the table gathered",
        PLANNED_BACKPROP,
    ),
    Mutant(
        "dualtape/kernels/_numba_grads.py",
        "    ones[:] = one\n",
        "",
        "the column sums taken with what the scratch held",
        PLANNED_BACKPROP,
    ),
    Mutant(
        "dualtape/kernels/_numba_grads.py",
        "                                            blocks, together or k > 0, one)",
        "                                            blocks, together or k >= 0, one)",
        "the first layer's blocks always joined (not the layer path's products)",
        PLANNED_BACKPROP,
    ),
    Mutant(
        "dualtape/kernels/_numba_grads.py",
        "    if together:\n        block_grads(gemm, gemv, joined, 0,",
        "    if False:\n        block_grads(gemm, gemv, joined, 0,",
        "small blocks never joined",
        PLANNED_BACKPROP,
    ),
    Mutant(
        "dualtape/kernels/_numba_grads.py",
        "    u_end = min(start + width, 3 * n)",
        "    u_end = min(start + width, 2 * n)",
        "the o rows of U's gradient never written",
        PLANNED_BACKPROP,
    ),
    Mutant(
        "dualtape/kernels/_numba_grads.py",
        "            joined[:, 3 * n :] = dg\n",
        "",
        "the input gradient without the ĉ block",
        PLANNED_BACKPROP,
    ),
    Mutant(
        "dualtape/kernels/_numba_grads.py",
        "    sums[...] = 0\n",
        "",
        "row sums by id added to the last call's",
        PLANNED_BACKPROP,
    ),
    Mutant(
        "dualtape/kernels/_numba_grads.py",
        "            out[j, v] = sums[v, j]",
        "            out[j, v] = sums[v % 2, j]",
        "sums by id read from the wrong rows",
        PLANNED_BACKPROP,
    ),
    Mutant(
        "dualtape/kernels/_numba_grads.py",
        ("        product_into(gemm, dys, top_W, down, one)\n        dys = down\n"),
        "        dys = down\n",
        "the top layer's input gradient never made",
        PLANNED_BACKPROP,
    ),
    # dualtape/kernels/_numba_lstm.py
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        "    carries[0] = one - one\n",
        "",
        "a stack pass's last cell gradient read from a buffer never cleared",
        PLANNED_BACKPROP + TRAIN_STEP,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        "g[j] = one / (one + fast_exp(-(a[j] + rb[j])))",
        "g[j] = one / (one + fast_exp(a[j] + rb[j]))",
        "σ of the negated gate",
        NUMBA_LSTM_KERNELS_LSTM,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        "c_next[j] = g[j] * c[j] + g[n + j] * g[3 * n + j]",
        "c_next[j] = g[j] * c[j] + g[n + j] * g[2 * n + j]",
        "the new cell takes the output gate for ĉ",
        NUMBA_LSTM_KERNELS_LSTM,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        "for j in range(2 * n):  # f and i",
        "for j in range(n):  # f and i",
        "the input gate is never computed",
        NUMBA_LSTM_KERNELS_LSTM,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        "    for t in range(steps - 1, -1, -1):",
        "    for t in range(steps - 1, 0, -1):",
        "the loop back skips its first step",
        NUMBA_LSTM_KERNELS_LSTM,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        "                carry_b[j] = d[j] * f[j]",
        "                carry_b[j] = d[j]",
        "the carried cell gradient misses the forget gate",
        NUMBA_LSTM_KERNELS_LSTM,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        "                factors[n + j] *= d[j]\n",
        "",
        "the input gate's factor is not multiplied by the cell gradient",
        NUMBA_LSTM_KERNELS_LSTM,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        "* r + c[5]) * r * r",
        "* r + c[5]) * r",
        "float32 exp's polynomial one power short",
        NUMBA_LSTM_KERNELS_LSTM,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        "(np.int32(n) + 127) << 23",
        "(np.int32(n) + 126) << 23",
        "float32 exp's scale off by a power of two",
        NUMBA_LSTM_KERNELS_LSTM,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        "e = 1.0 + 2.0 * px /",
        "e = 1.0 + px /",
        "float64 exp's Padé form halved",
        NUMBA_LSTM_KERNELS_LSTM,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        (
            "            above = x if not x < low else low  # NaN stays NaN\n"
            "            y = above if not above > high else high\n"
            "            n = (y * log2e"
        ),
        (
            "            above = x if x > low else low  # NaN stays NaN\n"
            "            y = above if not above > high else high\n"
            "            n = (y * log2e"
        ),
        "float32 exp turns NaN into a number",
        NUMBA_LSTM_KERNELS_LSTM,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        "LN2_HI32, LN2_LO32 = 0.693359375, -2.12194440e-4",
        "LN2_HI32, LN2_LO32 = 0.693359375, 0.0",
        "float32 exp's range reduction inexact",
        NUMBA_LSTM_KERNELS_LSTM,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        "                h[j] = o * c[j]",
        "                h[j] = o",
        "the compiled output is the output gate alone",
        NUMBA_LSTM_KERNELS_LSTM,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        "fast_exp(-(g[2 * n + j] + a[2 * n + j]))",
        "fast_exp(-g[2 * n + j])",
        "the compiled output gate misses its input projection",
        NUMBA_LSTM_KERNELS_LSTM,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        "d_o[j] = q_b[j] * c_next[j] * (one - o)",
        "d_o[j] = q_b[j] * c_next[j]",
        "the output gate's gradient misses σ'",
        NUMBA_LSTM_KERNELS_LSTM,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        "            c, factors = cells[t, b], dfi[t, b]",
        "            c, factors = cells[t + 1, b], dfi[t, b]",
        "the compiled forget factor uses the next cell",
        NUMBA_LSTM_KERNELS_LSTM,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        "(one - g[3 * n + j] * g[3 * n + j]) * g[n + j] * d[j]",
        "(one - g[3 * n + j]) * g[n + j] * d[j]",
        "tanh' taken as 1 - ĉ",
        NUMBA_LSTM_KERNELS_LSTM,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        "call_gemv(gemv, ROW_MAJOR, NO_TRANS, 2 * n, n,",
        "call_gemv(gemv, ROW_MAJOR, TRANS, 2 * n, n,",
        "batch 1 forwards multiplies by U_fi, not its transpose",
        NUMBA_LSTM_KERNELS_LSTM,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        ("    batch, n = rec.shape\n    zero = one - one\n    if batch == 1:"),
        ("    batch, n = rec.shape\n    zero = one - one\n    if batch >= 1:"),
        "every batch back through gemv (one row of dfi)",
        NUMBA_LSTM_KERNELS_LSTM,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        "    for t in range(dfi.shape[0] - 1, 0, -1):",
        "    for t in range(dfi.shape[0] - 1, 1, -1):",
        "the bound's products back stop a step early",
        NUMBA_LSTM,
    ),
    Mutant(
        "dualtape/kernels/_numba_lstm.py",
        ("        forward_product(gemm, gemv, U_fi, U_fi_t, cells[t], r, one)\n    for"),
        ("        forward_product(gemm, gemv, U_fi, U_fi_t, cells[t + 1], r, one)\n    for"),
        "the bound's products forwards read the next cells",
        NUMBA_LSTM,
    ),
    # dualtape/kernels/_numba_optim.py
    Mutant(
        "dualtape/kernels/_numba_optim.py",
        "        vk = v[k] * beta2 + (gk * keep2) * gk",
        "        vk = v[k] * beta2 + (gk * gk) * keep2",
        "compiled Adam rounds the second moment's term in another order",
        OPTIM_COMPILED,
    ),
    Mutant(
        "dualtape/kernels/_numba_optim.py",
        ("        m[k] = mk\n        v[k] = vk"),
        "        v[k] = vk",
        "compiled Adam does not keep its first moment",
        OPTIM_COMPILED,
    ),
    Mutant(
        "dualtape/kernels/_numba_optim.py",
        "            step = m[k] * momentum + step",
        "            step = m[k] * momentum - step",
        "compiled SGD subtracts the gradient's step from the velocity",
        OPTIM_COMPILED,
    ),
    Mutant(
        "dualtape/kernels/_numba_optim.py",
        "            w[k] = (w[k] + step) - w[k] * decay",
        "            w[k] = w[k] + (step - w[k] * decay)",
        "compiled SGD applies L2 in another order",
        OPTIM_COMPILED,
    ),
    Mutant(
        "dualtape/kernels/_numba_optim.py",
        ("    for j in range(len(ws)):\n        adam("),
        ("    for j in range(1, len(ws)):\n        adam("),
        "the batched Adam skips a batch's first parameter",
        OPTIM_HELD_OPTIM_COMPILED,
    ),
    # dualtape/kernels/_numba_outer.py
    Mutant(
        "dualtape/kernels/_numba_outer.py",
        "        for j in range(out.shape[1]):",
        "        for j in range(out.shape[1] - 1):",
        "the compiled outer product leaves its last column",
        OUTER_COMPILED_GRADIENT_BUFFERS,
    ),
    # dualtape/kernels/_numba_scatter.py
    Mutant(
        "dualtape/kernels/_numba_scatter.py",
        "target[j] += rows[r, j]",
        "target[j] = rows[r, j]",
        "the compiled row sums keep the last row of each id",
        ONE_HOT_IDS_EMBEDDING,
    ),
    # dualtape/kernels/_numba_softmax_cross_entropy.py
    Mutant(
        "dualtape/kernels/_numba_softmax_cross_entropy.py",
        "            out[j] = row[j] - top\n",
        "            out[j] = row[j]\n",
        "the compiled loss takes exp of the logits unshifted (overflow)",
        LOSS_COMPILED,
    ),
    Mutant(
        "dualtape/kernels/_numba_softmax_cross_entropy.py",
        "picked[r] = out[labels[r]]",
        "picked[r] = out[0]",
        "the compiled loss reads the first class, not the label",
        LOSS_COMPILED,
    ),
    Mutant(
        "dualtape/kernels/_numba_softmax_cross_entropy.py",
        ("        for j in range(1, row.shape[0]):\n            s += row[j]"),
        ("        for j in range(1, row.shape[0] - 1):\n            s += row[j]"),
        "the compiled loss leaves the last class out of the sum",
        LOSS_COMPILED,
    ),
    Mutant(
        "dualtape/kernels/_numba_softmax_cross_entropy.py",
        "row[labels[r]] -= scale",
        "row[labels[r]] -= 1",
        "the compiled loss subtracts an unscaled 1 at the label",
        LOSS_COMPILED,
    ),
    Mutant(
        "dualtape/kernels/_numba_softmax_cross_entropy.py",
        "factor = scale / s",
        "factor = 1 / s",
        "the compiled loss's softmax not divided by the batch",
        LOSS_COMPILED,
    ),
    Mutant(
        "dualtape/kernels/_numba_softmax_cross_entropy.py",
        "total += math.log(s) - picked[r]",
        "total += math.log(s) + picked[r]",
        "the compiled loss adds the label's logit",
        LOSS_COMPILED,
    ),
    Mutant(
        "dualtape/kernels/_numba_softmax_cross_entropy.py",
        "labels[r] >= y.shape[1]",
        "labels[r] > y.shape[1]",
        "the compiled loss writes one class past the end",
        LOSS_COMPILED,
    ),
    Mutant(
        "dualtape/kernels/_numba_softmax_cross_entropy.py",
        "if labels[r] < 0 or ",
        "if ",
        "the compiled loss writes before the row",
        LOSS_COMPILED,
    ),
    Mutant(
        "dualtape/kernels/_numba_softmax_cross_entropy.py",
        "            outside += 1\n",
        "",
        "the compiled loss skips a label outside the row without saying so",
        LOSS_COMPILED,
    ),
    # dualtape/kernels/_numba_spatial.py
    Mutant(
        "dualtape/kernels/_numba_spatial.py",
        "out[c, p, q, i, j] = x[b, c, r, j + q]",
        "out[c, p, q, i, j] = x[b, c, r, j]",
        "compiled unfold: the kernel column ignored at column stride 1",
        NUMBA_SPATIAL_CONVOLUTION_POOLING,
    ),
    Mutant(
        "dualtape/kernels/_numba_spatial.py",
        "out[c, p, q, i, j] = x[b, c, r, j * sw + q]",
        "out[c, p, q, i, j] = x[b, c, r, j * sh + q]",
        "compiled unfold: the row stride used for columns",
        NUMBA_SPATIAL_CONVOLUTION_POOLING,
    ),
    Mutant(
        "dualtape/kernels/_numba_spatial.py",
        (
            "                    r = i * sh + p\n"
            "                    if sw == 1:\n"
            "                        for j in range(cols):\n"
            "                            out["
        ),
        (
            "                    r = i + p\n"
            "                    if sw == 1:\n"
            "                        for j in range(cols):\n"
            "                            out["
        ),
        "compiled unfold: the row stride ignored",
        NUMBA_SPATIAL_CONVOLUTION_POOLING,
    ),
    Mutant(
        "dualtape/kernels/_numba_spatial.py",
        "dx[b, c, r, j + q] += grads[c, p, q, i, j]",
        "dx[b, c, r, j + q] = grads[c, p, q, i, j]",
        "compiled fold: overlapping windows overwrite instead of summing",
        NUMBA_SPATIAL_CONVOLUTION_POOLING,
    ),
    Mutant(
        "dualtape/kernels/_numba_spatial.py",
        "dx[b, c, r, j * sw + q] += grads[c, p, q, i, j]",
        "dx[b, c, r, j + q] += grads[c, p, q, i, j]",
        "compiled fold: the column stride ignored",
        NUMBA_SPATIAL_CONVOLUTION_POOLING,
    ),
    Mutant(
        "dualtape/kernels/_numba_spatial.py",
        "if v > best or (v != v and best == best):",
        "if v > best:",
        "compiled pooling: a NaN after the window's first element is dropped",
        NUMBA_SPATIAL_CONVOLUTION_POOLING,
    ),
    Mutant(
        "dualtape/kernels/_numba_spatial.py",
        "if v > best or (v != v and best == best):",
        "if v >= best or (v != v and best == best):",
        "compiled pooling: the last maximum wins a tie",
        NUMBA_SPATIAL_CONVOLUTION_POOLING,
    ),
    Mutant(
        "dualtape/kernels/_numba_spatial.py",
        "dx[b, c, i * sh + at // kw, j * sw + at % kw]",
        "dx[b, c, i * sh + at % kw, j * sw + at // kw]",
        "compiled pooling back: the position's row and column swapped",
        NUMBA_SPATIAL_CONVOLUTION_POOLING,
    ),
    Mutant(
        "dualtape/kernels/_numba_spatial.py",
        "                y[b, o, j] += bias[o]\n",
        "",
        "fast Convolution: the bias left out",
        NUMBA_SPATIAL_CONVOLUTION_POOLING,
    ),
    Mutant(
        "dualtape/kernels/_numba_spatial.py",
        "ones.ctypes.data, 1, one, db.ctypes.data, 1)",
        "ones.ctypes.data, 1, zero, db.ctypes.data, 1)",
        "fast Convolution: the bias gradient of the last image only",
        NUMBA_SPATIAL_CONVOLUTION_POOLING,
    ),
    Mutant(
        "dualtape/kernels/_numba_spatial.py",
        (
            "        call_gemm(gemm, ROW_MAJOR, NO_TRANS, TRANS, n_out, k,"
            " n, one, d[b].ctypes.data, n,\n"
            "                  windows.ctypes.data, n, one,"
        ),
        (
            "        call_gemm(gemm, ROW_MAJOR, NO_TRANS, TRANS, n_out, k,"
            " n, one, d[b].ctypes.data, n,\n"
            "                  windows.ctypes.data, n, zero,"
        ),
        "fast Convolution: the weight gradient of the last image only",
        NUMBA_SPATIAL_CONVOLUTION_POOLING,
    ),
    Mutant(
        "dualtape/kernels/_numba_spatial.py",
        "        fold_image(products, b, sh, sw, dx)",
        "        fold_image(products, 0, sh, sw, dx)",
        "fast Convolution: every image's input gradient folded into the first",
        NUMBA_SPATIAL_CONVOLUTION_POOLING,
    ),
    Mutant(
        "dualtape/kernels/_numba_spatial.py",
        "            y[b, o] += bias[o]\n",
        "",
        "fast Deconvolution: the bias left out",
        NUMBA_SPATIAL_CONVOLUTION_POOLING,
    ),
    Mutant(
        "dualtape/kernels/_numba_spatial.py",
        "windows.ctypes.data, n, zero, dx[b].ctypes.data, n)",
        "windows.ctypes.data, n, zero, dx[x.shape[0] - 1 - b].ctypes.data, n)",
        "fast Deconvolution: input gradients of the batch reversed",
        NUMBA_SPATIAL_CONVOLUTION_POOLING,
    ),
    Mutant(
        "dualtape/kernels/_numba_spatial.py",
        (
            "channels, k, n, one, x[b].ctypes.data, n,\n"
            "                  windows.ctypes.data, n, one,"
        ),
        (
            "channels, k, n, one, x[b].ctypes.data, n,\n"
            "                  windows.ctypes.data, n, zero,"
        ),
        "fast Deconvolution: the weight gradient of the last image only",
        NUMBA_SPATIAL_CONVOLUTION_POOLING,
    ),
    # dualtape/kernels/_numba_standard_lstm_gru.py
    Mutant(
        "dualtape/kernels/_numba_standard_lstm_gru.py",
        "c_next[j] = f[j] * c[j] + i[j] * cand[j]",
        "c_next[j] = i[j] * c[j] + f[j] * cand[j]",
        "the compiled LSTM loop swaps i and f",
        NUMBA_STANDARD_LSTM_GRU,
    ),
    Mutant(
        "dualtape/kernels/_numba_standard_lstm_gru.py",
        "                carry_b[j] = d * update",
        "                carry_b[j] = d * (one - update)",
        "the compiled GRU loop carries (1 − z) back",
        NUMBA_STANDARD_LSTM_GRU,
    ),
    Mutant(
        "dualtape/kernels/_numba_standard_lstm_gru.py",
        "c_next[j] = f[j] * c[j] + i[j] * cand[j]",
        "c_next[j] = f[j] * c[j] + cand[j]",
        (
            "a broken compiled loop is caught by the cells' own tests, not"
            " hidden by the self-check's fallback"
        ),
        CELLS_CELLS_TORCH,
    ),
    # dualtape/kernels/lstm.cu
    Mutant(
        "dualtape/kernels/lstm.cu",
        (
            "T* gates, T* c_next) {\n"
            "    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k <"
            " batch * n;\n"
            "         k += blockDim.x * gridDim.x) {"
        ),
        (
            "T* gates, T* c_next) {\n"
            "    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k <"
            " batch * n;\n"
            "         k += blockDim.x) {"
        ),
        ("the forward kernel strides by its block only: blocks redo each other's elements"),
        CUDA_SOURCE,
    ),
]
