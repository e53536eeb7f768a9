// dualtape/kernels/cells.cu compiled for the host, as cuda_host.cpp does for lstm.cu: the CUDA
// qualifiers vanish and a launch calls the __global__ function once per (block, thread). Used
// by tests/test_cuda_cells.py through ctypes.
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
    extern "C" void standard_lstm_forward_##T(int grid, int block, int batch, int n,         \
                                              T* gates, const T* r, const T* c, T* c_next,   \
                                              T* tanh_c, T* h_next) {                         \
        launch(standard_lstm_forward<T>, grid, block, batch, n, gates, r, c, c_next, tanh_c,  \
               h_next);                                                                       \
    }                                                                                         \
    extern "C" void standard_lstm_backward_##T(int grid, int block, int batch, int n,        \
                                               const T* gates, const T* c, const T* tanh_c,  \
                                               const T* dh_out, const T* rec, T* dc, T* da) {\
        launch(standard_lstm_backward<T>, grid, block, batch, n, gates, c, tanh_c, dh_out,    \
               rec, dc, da);                                                                  \
    }                                                                                         \
    extern "C" void gru_forward_##T(int grid, int block, int batch, int n, const T* a,        \
                                    const T* r, const T* bias, const T* h, T* gates, T* hn,   \
                                    T* h_next) {                                              \
        launch(gru_forward<T>, grid, block, batch, n, a, r, bias, h, gates, hn, h_next);      \
    }                                                                                         \
    extern "C" void gru_backward_##T(int grid, int block, int batch, int n, const T* gates,   \
                                     const T* hn, const T* h, const T* dh_out, const T* rec,  \
                                     T* carry, T* da_h, T* dn) {                              \
        launch(gru_backward<T>, grid, block, batch, n, gates, hn, h, dh_out, rec, carry, da_h, \
               dn);                                                                           \
    }

DT_HOST_WRAPPERS(float)
DT_HOST_WRAPPERS(double)
