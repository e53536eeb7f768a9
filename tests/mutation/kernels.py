"""Mutants of ``dualtape/kernels/``."""

from run_mutants import Mutant

SEQ, CUPY = "dualtape/kernels/sequence.py", "dualtape/kernels/cupy_cell.py"
BLAS = "dualtape/kernels/blas.py"
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
    Mutant(SEQ, "    first = 0 if need_dc0 else 1", "    first = 0",
           "the U_o product of step 0 made when dc_0 is not wanted", T),
    Mutant(SEQ, "    carry += carried_0\n", "", "dc_0 misses the output gate's share", T),
    Mutant(SEQ, "    dfi[..., :n] *= cells[:-1]", "    dfi[..., :n] *= cells[1:]",
           "the forget factor uses the next cell", T),
    Mutant(CUPY, "        _VERDICTS[key] = not problem", "        _VERDICTS[key] = True",
           "a failed self-check still enables the kernels", T),
    Mutant(CUPY, '            problem = f"the check raised {type(exc).__name__}: {exc}"',
           "            problem = None", "a self-check that raises counts as passed", T),
    Mutant(CUPY, "        if a.dtype != dtype or not a.flags.c_contiguous:",
           "        if a.dtype != dtype:", "non-contiguous operands reach the raw kernels", T),
    Mutant("dualtape/kernels/__init__.py", 'if os.environ.get("DUALTAPE_FUSED", "") == "0":',
           'if os.environ.get("DUALTAPE_FUSED", "0") == "0":', "fast paths off by default", T),
    Mutant(BLAS, "or not (x.flags.c_contiguous and y.flags.c_contiguous)",
           "or not y.flags.c_contiguous", "BLAS reads a strided x as contiguous",
           ("tests/test_blas.py",)),
    Mutant(BLAS, "or not (x.flags.aligned and y.flags.aligned) or np.may_share_memory(x, y)",
           "or not (x.flags.aligned and y.flags.aligned)", "BLAS updates an overlapping pair",
           ("tests/test_blas.py", "tests/test_optim_chunks.py")),
]
