// A CUDA source compiled for the host (the shims cuda_host_lstm.cpp and
// cuda_host_standard_lstm_gru.cpp include this): the CUDA qualifiers vanish, cell_math.cuh
// (MATH_FILE) and the kernels (CU_FILE) are included, and a launch is emulated by calling the
// __global__ function once per (block, thread), so the thin wrappers' index arithmetic runs
// too; after dt_run_only_block(b), a launch runs block b alone (-1: all), so a test can see
// which elements each block writes (tests/cuda_tools.py, writes_per_element).
#include <math.h>
#define __host__
#define __device__
#define __global__
struct HostDim { int x; };
static HostDim blockIdx, threadIdx, blockDim, gridDim;
static int only_block = -1;
extern "C" void dt_run_only_block(int block) { only_block = block; }
#include MATH_FILE
#include CU_FILE

template <typename Kernel, typename... Args>
static void launch(Kernel kernel, int grid, int block, Args... args) {
    gridDim.x = grid;
    blockDim.x = block;
    for (int b = 0; b < grid; ++b) {
        if (only_block >= 0 && b != only_block) continue;
        for (int t = 0; t < block; ++t) {
            blockIdx.x = b;
            threadIdx.x = t;
            kernel(args...);
        }
    }
}
