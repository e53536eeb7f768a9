"""Mutants of ``dualtape/kernels/``."""

from run_mutants import Mutant

SEQ, CUPY = "dualtape/kernels/sequence.py", "dualtape/kernels/cupy_cell.py"
BLAS, CHECK = "dualtape/kernels/blas.py", "dualtape/kernels/selfcheck.py"
LOOPS, NUMBA = "dualtape/kernels/_numba_loops.py", "dualtape/kernels/numba_cell.py"
INIT = "dualtape/kernels/__init__.py"
JIT = ("tests/test_numba_cell.py", "tests/test_kernels.py", "tests/test_lstm.py")
T = ("tests/test_kernels.py", "tests/test_lstm.py", "tests/test_aliasing.py")
LAYOUTS = ("tests/test_layouts.py",)
MUTANTS = [
    Mutant(SEQ, "    carry = mod.empty((batch, n), dtype=dtype)  # C order, whatever the layout "
                "of dc_last\n    carry[...] = dc_last\n",
           "    carry = mod.array(dc_last, copy=True)\n",
           "the loop back keeps dstate_T's layout (not C order)", LAYOUTS),
    Mutant(SEQ, "    carry = mod.empty((batch, n), dtype=dtype)  # C order, whatever the layout "
                "of dc_last\n    carry[...] = dc_last\n",
           "    carry = dc_last\n", "the loop back writes into the caller's dstate_T", T),
    Mutant(SEQ, "carried_0 = mod.array(carried[0], copy=True) if need_dc0 else None",
           "carried_0 = carried[0] if need_dc0 else None",
           "dc_0's output-gate share read after the loop overwrote it", T),
    Mutant(SEQ, "    first = 0 if need_dc0 or steps > 1 else 1", "    first = 0",
           "at T = 1 the U_o product made when dc_0 is not wanted", T),
    Mutant(SEQ, "    carry += carried_0\n", "", "dc_0 misses the output gate's share", T),
    Mutant(SEQ, "    dfi[..., :n] *= cells[:-1]", "    dfi[..., :n] *= cells[1:]",
           "the forget factor uses the next cell", T),
    Mutant(CHECK, "        _VERDICTS[key] = not problem", "        _VERDICTS[key] = True",
           "a failed self-check still enables the kernels", T),
    Mutant(CHECK, '            problem = f"the check raised {type(exc).__name__}: {exc}"',
           "            problem = None", "a self-check that raises counts as passed", T),
    Mutant(CUPY, "        if a.dtype != dtype or not a.flags.c_contiguous:",
           "        if a.dtype != dtype:", "non-contiguous operands reach the raw kernels", T),
    Mutant("dualtape/kernels/__init__.py", 'return os.environ.get("DUALTAPE_FUSED", "") == "0"',
           'return os.environ.get("DUALTAPE_FUSED", "0") == "0"', "fast paths off by default", T),
    Mutant(BLAS, "or not (x.flags.c_contiguous and y.flags.c_contiguous)",
           "or not y.flags.c_contiguous", "BLAS reads a strided x as contiguous",
           ("tests/test_blas.py",)),
    Mutant(BLAS, "or not (x.flags.aligned and y.flags.aligned) or np.may_share_memory(x, y)",
           "or not (x.flags.aligned and y.flags.aligned)", "BLAS updates an overlapping pair",
           ("tests/test_blas.py", "tests/test_optim_chunks.py")),
    # --- the compiled CPU loops ---------------------------------------------------------------
    Mutant(LOOPS, "g[j] = one / (one + fast_exp(-(a[j] + rb[j])))",
           "g[j] = one / (one + fast_exp(a[j] + rb[j]))", "σ of the negated gate", JIT),
    Mutant(LOOPS, "c_next[j] = g[j] * c[j] + g[n + j] * g[3 * n + j]",
           "c_next[j] = g[j] * c[j] + g[n + j] * g[2 * n + j]",
           "the new cell takes the output gate for ĉ", JIT),
    Mutant(LOOPS, "for j in range(2 * n):  # f and i", "for j in range(n):  # f and i",
           "the input gate is never computed", JIT),
    Mutant(LOOPS, "    for t in range(steps - 1, -1, -1):", "    for t in range(steps - 1, 0, -1):",
           "the loop back skips its first step", JIT),
    Mutant(LOOPS, "                carry_b[j] = d[j] * f[j]", "                carry_b[j] = d[j]",
           "the carried cell gradient misses the forget gate", JIT),
    Mutant(LOOPS, "                factors[n + j] *= d[j]\n", "",
           "the input gate's factor is not multiplied by the cell gradient", JIT),
    Mutant(LOOPS, "* r + c[5]) * r * r", "* r + c[5]) * r",
           "float32 exp's polynomial one power short", JIT),
    Mutant(LOOPS, "(np.int32(n) + 127) << 23", "(np.int32(n) + 126) << 23",
           "float32 exp's scale off by a power of two", JIT),
    Mutant(LOOPS, "e = 1.0 + 2.0 * px /", "e = 1.0 + px /", "float64 exp's Padé form halved",
           JIT),
    Mutant(LOOPS, "            above = x if not x < low else low  # NaN stays NaN\n"
                  "            y = above if not above > high else high\n"
                  "            n = (y * log2e",
           "            above = x if x > low else low  # NaN stays NaN\n"
           "            y = above if not above > high else high\n"
           "            n = (y * log2e", "float32 exp turns NaN into a number", JIT),
    Mutant(LOOPS, "LN2_HI32, LN2_LO32 = 0.693359375, -2.12194440e-4",
           "LN2_HI32, LN2_LO32 = 0.693359375, 0.0", "float32 exp's range reduction inexact", JIT),
    Mutant(LOOPS, "                h[j] = o * c[j]", "                h[j] = o",
           "the compiled output is the output gate alone", JIT),
    Mutant(LOOPS, "fast_exp(-(g[2 * n + j] + a[2 * n + j]))", "fast_exp(-g[2 * n + j])",
           "the compiled output gate misses its input projection", JIT),
    Mutant(LOOPS, "d_o[j] = q_b[j] * c_next[j] * (one - o)", "d_o[j] = q_b[j] * c_next[j]",
           "the output gate's gradient misses σ'", JIT),
    Mutant(LOOPS, "            c, factors = cells[t, b], dfi[t, b]",
           "            c, factors = cells[t + 1, b], dfi[t, b]",
           "the compiled forget factor uses the next cell", JIT),
    Mutant(LOOPS, "(one - g[3 * n + j] * g[3 * n + j]) * g[n + j] * d[j]",
           "(one - g[3 * n + j]) * g[n + j] * d[j]", "tanh' taken as 1 - ĉ", JIT),
    Mutant(NUMBA, "        dhs = np.ascontiguousarray(dhs)  # the layer above may hand a strided "
                  "view\n", "", "a strided output gradient refused by the compiled path",
           LAYOUTS),
    Mutant(NUMBA, "        _check(gates, projected, cells, hs)",
           "        _check(projected, cells, hs)",
           "the output gate pass writes into a strided gates' raw memory", JIT),
    Mutant(NUMBA, "        _check(gates, dc, out)", "        _check(dc, out)",
           "the ĉ gradient pass reads a strided gates as C order", JIT),
    Mutant(NUMBA, "        if a.dtype != dtype or not a.flags.c_contiguous:",
           "        if a.dtype != dtype:", "strided operands reach the compiled loops", JIT),
    Mutant(NUMBA, "    if any(get(dtype) is None for get in (blas.gemm, blas.gemv)",
           "    if any(get(dtype) is None for get in (blas.gemm,)",
           "compiled loops offered without a gemv to call", JIT),
    Mutant(LOOPS, "            gemv(ROW_MAJOR, NO_TRANS, 2 * n, n,", "            gemv(ROW_MAJOR, "
           "TRANS, 2 * n, n,", "batch 1 forwards multiplies by U_fi, not its transpose", JIT),
    Mutant(NUMBA, "U_fi_t = U_fi if cells.shape[1] == 1 else np.ascontiguousarray(U_fi.T)",
           "U_fi_t = U_fi if cells.shape[1] == 1 else np.ascontiguousarray(U_fi)",
           "the forward gemm reads U_fi as its own transpose", JIT),
    Mutant(LOOPS, "        if t and batch == 1:", "        if t and batch >= 1:",
           "every batch back through gemv (one row of dfi)", JIT),
    Mutant(BLAS, "        for trans, x in ((NO_TRANS,", "        for trans, x in ((TRANS,",
           "gemv checked only one way", ("tests/test_blas.py",)),
    Mutant(NUMBA, "    return np.ascontiguousarray(U_fi)", "    return U_fi",
           "a Fortran-order U read as C order", JIT),
    Mutant(INIT, 'if os.environ.get("DUALTAPE_JIT", "") == "0":', "if False:",
           "DUALTAPE_JIT=0 ignored", JIT),
    Mutant(INIT, 'if selfcheck.verified(("numba", like.dtype),',
           'if selfcheck.verified(("numba",),', "one self-check for both dtypes", JIT),
]
