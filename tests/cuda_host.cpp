// dualtape/kernels/lstm.cu compiled for the host: the CUDA qualifiers vanish and a launch is
// emulated by calling the __global__ function once per (block, thread), so the thin wrappers'
// index arithmetic runs too. Used by tests/test_cuda_source.py through ctypes.
#include <math.h>
#define __host__
#define __device__
#define __global__
struct HostDim { int x; };
static HostDim blockIdx, threadIdx, blockDim, gridDim;
#include CU_FILE

template <typename Kernel, typename... Args>
static void launch(Kernel kernel, int grid, int block, Args... args) {
    gridDim.x = grid;
    blockDim.x = block;
    for (int b = 0; b < grid; ++b) {
        for (int t = 0; t < block; ++t) {
            blockIdx.x = b;
            threadIdx.x = t;
            kernel(args...);
        }
    }
}

#define DT_HOST_WRAPPERS(T)                                                                   \
    extern "C" void lstm_forward_##T(int grid, int block, int batch, int n, const T* a,       \
                                     const T* r, const T* c, T* gates, T* c_next) {         \
        launch(lstm_forward<T>, grid, block, batch, n, a, r, c, gates, c_next);              \
    }                                                                                         \
    extern "C" void lstm_backward_##T(int grid, int block, int batch, int n, const T* gates,  \
                                      const T* rec, const T* q, T* carry, T* dfi, T* dc) {   \
        launch(lstm_backward<T>, grid, block, batch, n, gates, rec, q, carry, dfi, dc);      \
    }

DT_HOST_WRAPPERS(float)
DT_HOST_WRAPPERS(double)
