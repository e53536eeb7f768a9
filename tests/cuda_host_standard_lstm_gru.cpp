// dualtape/kernels/standard_lstm_gru.cu compiled for the host (cuda_host_launch.h), its
// kernels as C functions for tests/test_cuda_standard_lstm_gru.py to call through ctypes.
#include "cuda_host_launch.h"

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
