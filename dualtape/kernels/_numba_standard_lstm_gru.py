"""The compiled loops of ``StandardLSTM`` and ``GRU`` behind ``numba_standard_lstm_gru``
(imports numba).

As ``_numba_lstm`` does for Grenade's cell: the recurrent product through numpy's own
``cblas_?gemm`` passed in at each call, the pointwise update written so that LLVM vectorizes
it, σ and tanh from ``fast_exp`` (``tanh x = 2σ(2x) − 1``: within a few ulp of 1 in absolute
terms, so relatively coarser only where ``|tanh x|`` is far below 1). Each gate is read and
written through a view of its own (``g[:n]``, not ``g[j]`` beside ``g[2 * n + j]``): LLVM
vectorizes a loop only where its accesses are to separate arrays or the same element (a loop
that wrote ``g[2 * n + j]`` from ``g[j]`` ran scalar, 14x slower at n = 32).
"""

from __future__ import annotations

from typing import Any

from numba import njit

from ._numba_blas import call_gemm
from ._numba_lstm import fast_exp
from .blas import NO_TRANS, ROW_MAJOR


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def sigmoid(x: Any, one: Any) -> Any:
    """σ(x) in ``x``'s precision (a function of its own: numba's SSA pass warns about
    ``fast_exp`` inlined several times into one loop; LLVM inlines this one)."""
    return one / (one + fast_exp(-x))


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def standard_lstm_forward_loop(gemm: Any, W_t: Any, hs: Any, cells: Any, gates: Any,
                               tanh_cells: Any, one: Any) -> None:
    """Every step forwards: ``gates_t += h_t W_hhᵀ`` (``gates`` arrives holding the input
    projections, both biases in), then ``[i, f, g, o]`` through σ, tanh, σ in place, ``c_{t+1}
    = f c_t + i g``, ``tanh_cells_t = tanh c_{t+1}``, ``h_{t+1} = o tanh c_{t+1}``. ``W_t`` is
    ``W_hhᵀ`` in C order."""
    steps, batch, four_n = gates.shape
    n = four_n // 4
    two = one + one
    for t in range(steps):
        call_gemm(gemm, ROW_MAJOR, NO_TRANS, NO_TRANS, batch, four_n, n, one, hs[t].ctypes.data, n,
                  W_t.ctypes.data, four_n, one, gates[t].ctypes.data, four_n)
        for b in range(batch):
            g = gates[t, b]
            i_f, i, f, cand, o = g[:2 * n], g[:n], g[n:2 * n], g[2 * n:3 * n], g[3 * n:]
            for j in range(2 * n):
                i_f[j] = sigmoid(i_f[j], one)
            for j in range(n):
                cand[j] = two * sigmoid(two * cand[j], one) - one
            for j in range(n):
                o[j] = sigmoid(o[j], one)
            c, c_next, e, h = cells[t, b], cells[t + 1, b], tanh_cells[t, b], hs[t + 1, b]
            for j in range(n):
                c_next[j] = f[j] * c[j] + i[j] * cand[j]
                e[j] = two * sigmoid(two * c_next[j], one) - one
                h[j] = o[j] * e[j]


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def standard_lstm_backward_loop(gemm: Any, W_hh: Any, gates: Any, cells: Any, tanh_cells: Any,
                                dhs: Any, dh: Any, dc: Any, das: Any, need_first: bool,
                                one: Any) -> None:
    """Every step back, t = T-1 … 0, from the state's gradient ``dh``, ``dc`` (overwritten
    with the first state's): ``das_t``, the pre-activations' gradient, and ``dc *= f``; then
    ``dh = das_t W_hh`` (at t = 0 only when ``need_first``). ``W_hh`` is in C order."""
    steps, batch, four_n = gates.shape
    n = four_n // 4
    zero = one - one
    for t in range(steps - 1, -1, -1):
        for b in range(batch):
            g, c, e, d = gates[t, b], cells[t, b], tanh_cells[t, b], das[t, b]
            gi, gf, gg, go = g[:n], g[n:2 * n], g[2 * n:3 * n], g[3 * n:]
            di, df, dg, do = d[:n], d[n:2 * n], d[2 * n:3 * n], d[3 * n:]
            dh_in, dh_b, dc_b = dhs[t, b], dh[b], dc[b]
            for j in range(n):
                i, f, cand, o = gi[j], gf[j], gg[j], go[j]
                dh_t = dh_in[j] + dh_b[j]
                dc_t = dc_b[j] + dh_t * o * (one - e[j] * e[j])
                di[j] = dc_t * cand * i * (one - i)
                df[j] = dc_t * c[j] * f * (one - f)
                dg[j] = dc_t * i * (one - cand * cand)
                do[j] = dh_t * e[j] * o * (one - o)
                dc_b[j] = dc_t * f
        if t or need_first:
            call_gemm(gemm, ROW_MAJOR, NO_TRANS, NO_TRANS, batch, n, four_n, one,
                      das[t].ctypes.data, four_n, W_hh.ctypes.data, n, zero, dh.ctypes.data, n)


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def gru_forward_loop(gemm: Any, W_t: Any, b_hh: Any, hs: Any, gates: Any, r: Any, hn: Any,
                     one: Any) -> None:
    """Every step forwards: ``r = h_t W_hhᵀ``, then with ``gates_t`` holding the input
    projections (``b_ih`` in): ``r, z = σ(a + r + b)`` and ``n = tanh(a_n + r·(r_n + b_n))``
    in place, ``hn_t = r_n + b_n``, ``h_{t+1} = n + z (h_t − n)``. ``W_t`` is ``W_hhᵀ`` in
    C order."""
    steps, batch, three_n = gates.shape
    n = three_n // 3
    two, zero = one + one, one - one
    for t in range(steps):
        call_gemm(gemm, ROW_MAJOR, NO_TRANS, NO_TRANS, batch, three_n, n, one, hs[t].ctypes.data, n,
                  W_t.ctypes.data, three_n, zero, r.ctypes.data, three_n)
        for b in range(batch):
            g, rb, h, h_next, hn_b = gates[t, b], r[b], hs[t, b], hs[t + 1, b], hn[t, b]
            r_z, reset, update, cand = g[:2 * n], g[:n], g[n:2 * n], g[2 * n:]
            for j in range(2 * n):
                r_z[j] = sigmoid(r_z[j] + (rb[j] + b_hh[j]), one)
            for j in range(n):
                hn_b[j] = rb[2 * n + j] + b_hh[2 * n + j]
                new = two * sigmoid(two * (cand[j] + reset[j] * hn_b[j]), one) - one
                cand[j] = new
                h_next[j] = new + update[j] * (h[j] - new)


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def gru_backward_loop(gemm: Any, W_hh: Any, gates: Any, hn: Any, hs: Any, dhs: Any,
                      carry: Any, rec: Any, da_h: Any, dn: Any, need_first: bool,
                      one: Any) -> None:
    """Every step back, t = T-1 … 0: the output's gradient ``d = dhs_t + carry + rec``, the
    gradients ``da_h_t`` of ``h W_hhᵀ + b_hh`` and ``dn_t`` of the candidate's
    pre-activation, ``carry = d z``; then ``rec = da_h_t W_hh`` (at t = 0 only when
    ``need_first``). ``W_hh`` is in C order; ``rec`` starts at zero."""
    steps, batch, three_n = gates.shape
    n = three_n // 3
    zero = one - one
    for t in range(steps - 1, -1, -1):
        for b in range(batch):
            g, h, d_in, hn_b = gates[t, b], hs[t, b], dhs[t, b], hn[t, b]
            carry_b, rec_b, da, dn_b = carry[b], rec[b], da_h[t, b], dn[t, b]
            gr, gz, gn = g[:n], g[n:2 * n], g[2 * n:]
            dr, dz, dcn = da[:n], da[n:2 * n], da[2 * n:]
            for j in range(n):
                reset, update, new = gr[j], gz[j], gn[j]
                d = d_in[j] + carry_b[j] + rec_b[j]
                dcand = d * (one - update) * (one - new * new)
                dr[j] = dcand * hn_b[j] * reset * (one - reset)
                dz[j] = d * (h[j] - new) * update * (one - update)
                dcn[j] = dcand * reset
                dn_b[j] = dcand
                carry_b[j] = d * update
        if t or need_first:
            call_gemm(gemm, ROW_MAJOR, NO_TRANS, NO_TRANS, batch, n, three_n, one,
                      da_h[t].ctypes.data, three_n, W_hh.ctypes.data, n, zero, rec.ctypes.data,
                      n)
