// The per-element functions every cell's kernels share, put before each .cu file's text when
// it is compiled (cupy_lstm.cuda_source, and the host shims in tests/).

template <typename T> __host__ __device__ inline T dt_tanh(T x);
template <> __host__ __device__ inline float dt_tanh<float>(float x) { return tanhf(x); }
template <> __host__ __device__ inline double dt_tanh<double>(double x) { return tanh(x); }

// σ in its tanh form, which does not overflow.
template <typename T> __host__ __device__ inline T dt_sigmoid(T x) {
    return dt_tanh<T>(x * (T)0.5) * (T)0.5 + (T)0.5;
}
