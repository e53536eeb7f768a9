// The recurrent parts of StandardLSTM and GRU (torch.nn's cells), one kernel launch per time
// step each way, after the step's recurrent matrix product.
//
// As in lstm.cu: the per-element maths are __host__ __device__ functions, so the same text
// compiles for the host (tests/cuda_host_standard_lstm_gru.cpp) and is checked there against
// the generic array-API code; the __global__ wrappers map threads to the batch x n elements in
// a grid-stride loop. T is float or double (CuPy's RawModule name_expressions). Rows hold gate
// blocks of n: [i, f, g, o] for the LSTM, [r, z, n] for the GRU. dt_tanh and dt_sigmoid come
// from cell_math.cuh.

// LSTM forward, element (b, j): the gate row holds the input projection (both biases in) and
// r the recurrent product h W_hhᵀ (rows of 4n); their sums become i, f, g, o in place in the
// gate row; then c' = f*c + i*g, tanh(c'), h'.
template <typename T> __host__ __device__ inline void standard_lstm_forward_element(
    int b, int j, int n, T* gates, const T* r, const T* c, T* c_next, T* tanh_c, T* h_next) {
    T* row = gates + b * 4 * n;
    const T* rec = r + b * 4 * n;
    const int cell = b * n + j;
    const T i = dt_sigmoid<T>(row[j] + rec[j]), f = dt_sigmoid<T>(row[n + j] + rec[n + j]);
    const T g = dt_tanh<T>(row[2 * n + j] + rec[2 * n + j]);
    const T o = dt_sigmoid<T>(row[3 * n + j] + rec[3 * n + j]);
    row[j] = i;
    row[n + j] = f;
    row[2 * n + j] = g;
    row[3 * n + j] = o;
    c_next[cell] = f * c[cell] + i * g;
    tanh_c[cell] = dt_tanh<T>(c_next[cell]);
    h_next[cell] = o * tanh_c[cell];
}

// LSTM backward, element (b, j): from the output gradient dh_out (this step's dy) and rec (the
// recurrent share, da_{t+1} W_hh), the pre-activation gradients into the row of da; the cell
// gradient dc (the next step's, in) becomes the previous cell's (out).
template <typename T> __host__ __device__ inline void standard_lstm_backward_element(
    int b, int j, int n, const T* gates, const T* c, const T* tanh_c, const T* dh_out,
    const T* rec, T* dc, T* da) {
    const T* row = gates + b * 4 * n;
    T* d = da + b * 4 * n;
    const int cell = b * n + j;
    const T i = row[j], f = row[n + j], g = row[2 * n + j], o = row[3 * n + j];
    const T e = tanh_c[cell], dh = dh_out[cell] + rec[cell];
    const T dct = dc[cell] + dh * o * ((T)1 - e * e);
    d[j] = dct * g * i * ((T)1 - i);
    d[n + j] = dct * c[cell] * f * ((T)1 - f);
    d[2 * n + j] = dct * i * ((T)1 - g * g);
    d[3 * n + j] = dh * e * o * ((T)1 - o);
    dc[cell] = dct * f;
}

// GRU forward, element (b, j): a is the input projection (with b_ih), r the recurrent product
// h W_hhᵀ (rows of 3n), bias b_hh (3n); writes r, z, n into the gate row (which may be a's),
// W_hn h + b_hn into hn, and h'.
template <typename T> __host__ __device__ inline void gru_forward_element(
    int b, int j, int n, const T* a, const T* r, const T* bias, const T* h, T* gates, T* hn,
    T* h_next) {
    const int row = b * 3 * n, cell = b * n + j;
    const T reset = dt_sigmoid<T>(a[row + j] + (r[row + j] + bias[j]));
    const T update = dt_sigmoid<T>(a[row + n + j] + (r[row + n + j] + bias[n + j]));
    const T recurrent = r[row + 2 * n + j] + bias[2 * n + j];
    const T candidate = dt_tanh<T>(a[row + 2 * n + j] + reset * recurrent);
    gates[row + j] = reset;
    gates[row + n + j] = update;
    gates[row + 2 * n + j] = candidate;
    hn[cell] = recurrent;
    h_next[cell] = candidate + update * (h[cell] - candidate);
}

// GRU backward, element (b, j): the output's gradient d = dh_out + carry + rec (this step's
// dy, the direct share z*d of the step after, and its da_h W_hh); the gradients of
// h W_hhᵀ + b_hh into da_h (rows of 3n) and of the candidate's pre-activation into dn; carry
// becomes d*z for the step before.
template <typename T> __host__ __device__ inline void gru_backward_element(
    int b, int j, int n, const T* gates, const T* hn, const T* h, const T* dh_out,
    const T* rec, T* carry, T* da_h, T* dn) {
    const int row = b * 3 * n, cell = b * n + j;
    const T reset = gates[row + j], update = gates[row + n + j];
    const T candidate = gates[row + 2 * n + j];
    const T d = dh_out[cell] + carry[cell] + rec[cell];
    const T dcand = d * ((T)1 - update) * ((T)1 - candidate * candidate);
    da_h[row + j] = dcand * hn[cell] * reset * ((T)1 - reset);
    da_h[row + n + j] = d * (h[cell] - candidate) * update * ((T)1 - update);
    da_h[row + 2 * n + j] = dcand * reset;
    dn[cell] = dcand;
    carry[cell] = d * update;
}

template <typename T> __global__ void standard_lstm_forward(
    int batch, int n, T* gates, const T* r, const T* c, T* c_next, T* tanh_c, T* h_next) {
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < batch * n;
         k += blockDim.x * gridDim.x) {
        standard_lstm_forward_element<T>(k / n, k % n, n, gates, r, c, c_next, tanh_c, h_next);
    }
}

template <typename T> __global__ void standard_lstm_backward(
    int batch, int n, const T* gates, const T* c, const T* tanh_c, const T* dh_out,
    const T* rec, T* dc, T* da) {
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < batch * n;
         k += blockDim.x * gridDim.x) {
        standard_lstm_backward_element<T>(k / n, k % n, n, gates, c, tanh_c, dh_out, rec, dc,
                                          da);
    }
}

template <typename T> __global__ void gru_forward(
    int batch, int n, const T* a, const T* r, const T* bias, const T* h, T* gates, T* hn,
    T* h_next) {
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < batch * n;
         k += blockDim.x * gridDim.x) {
        gru_forward_element<T>(k / n, k % n, n, a, r, bias, h, gates, hn, h_next);
    }
}

template <typename T> __global__ void gru_backward(
    int batch, int n, const T* gates, const T* hn, const T* h, const T* dh_out, const T* rec,
    T* carry, T* da_h, T* dn) {
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < batch * n;
         k += blockDim.x * gridDim.x) {
        gru_backward_element<T>(k / n, k % n, n, gates, hn, h, dh_out, rec, carry, da_h, dn);
    }
}
