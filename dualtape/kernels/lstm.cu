// The recurrent part of Grenade's LSTM, one kernel launch per time step each way.
//
// The sequence loop (dualtape/kernels/lstm_sequence.py) keeps only the recurrence in its time loop:
// tanh(ĉ) before it, the output gate and h = o*c' after it. Each step it runs one matrix product
// and one of these kernels over the batch x o cells. Gate rows are [f, i, o, ĉ] blocks of n.
//
// The per-element maths are __host__ __device__ functions, so the same text compiles for the
// host (tests/cuda_host_lstm.cpp) and is checked there against the generic array-API code. The
// __global__ wrappers only map threads to elements. T is float or double (instantiated through
// CuPy's RawModule name_expressions). dt_tanh and dt_sigmoid come from cell_math.cuh.

// Forward, element (b, j): f and i from the input projection a (rows of 4n) and the recurrent
// product r (rows of 2n), written into the gate row; then c' = f*c + i*ĉ, with ĉ already in it.
template <typename T> __host__ __device__ inline void lstm_forward_element(
    int b, int j, int n, const T* a, const T* r, const T* c, T* gates, T* c_next) {
    const int row = b * 4 * n, rec = b * 2 * n, cell = b * n + j;
    const T f = dt_sigmoid<T>(a[row + j] + r[rec + j]);
    const T in = dt_sigmoid<T>(a[row + n + j] + r[rec + n + j]);
    gates[row + j] = f;
    gates[row + n + j] = in;
    c_next[cell] = f * c[cell] + in * gates[row + 3 * n + j];
}

// Backward, element (b, j): the cell gradient d = carry + rec + q; the f and i pre-activation
// gradients d*factor, in place over their factors c*f(1-f) and ĉ*i(1-i) (rows of 2n); d is kept
// for the ĉ gradient after the loop, and carry becomes d*f for the step before.
template <typename T> __host__ __device__ inline void lstm_backward_element(
    int b, int j, int n, const T* gates, const T* rec, const T* q, T* carry, T* dfi, T* dc) {
    const int cell = b * n + j, fi = b * 2 * n + j;
    const T d = carry[cell] + rec[cell] + q[cell];
    dfi[fi] *= d;
    dfi[fi + n] *= d;
    dc[cell] = d;
    carry[cell] = d * gates[b * 4 * n + j];
}

template <typename T> __global__ void lstm_forward(
    int batch, int n, const T* a, const T* r, const T* c, T* gates, T* c_next) {
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < batch * n;
         k += blockDim.x * gridDim.x) {
        lstm_forward_element<T>(k / n, k % n, n, a, r, c, gates, c_next);
    }
}

template <typename T> __global__ void lstm_backward(
    int batch, int n, const T* gates, const T* rec, const T* q, T* carry, T* dfi, T* dc) {
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < batch * n;
         k += blockDim.x * gridDim.x) {
        lstm_backward_element<T>(k / n, k % n, n, gates, rec, q, carry, dfi, dc);
    }
}
