// dualtape/kernels/lstm.cu compiled for the host (cuda_host_launch.h), its kernels as C
// functions for tests/test_cuda_source.py to call through ctypes.
#include "cuda_host_launch.h"

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
