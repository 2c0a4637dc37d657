/* Device-side helpers shared by the rungs: element conversions and grid sizing. No operation
 * logic lives here. */
#ifndef KL_KERNELS_CUH
#define KL_KERNELS_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "check.h"

/* Arithmetic is done in fp32 for both element types: fp16 storage, fp32 compute. */
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v)
{
    return __float2half_rn(v);
}

/* 16 bytes of elements, loaded and stored by one 128-bit instruction. */
template <typename T> union pack16 {
    static constexpr int width = 16 / sizeof(T);
    uint4 raw;
    T e[16 / sizeof(T)];
};

__host__ __device__ inline bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

/* Blocks of `threads` threads that fill every SM to full occupancy for this kernel: the grid
 * for a grid-stride loop. Never more than the work needs. */
inline int grid_to_fill_gpu(const void *kernel, int threads, size_t work_blocks)
{
    static int sms = 0;
    if (!sms) {
        int dev;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    }
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
    size_t full = (size_t)sms * (size_t)(per_sm > 0 ? per_sm : 1);
    size_t blocks = work_blocks < full ? work_blocks : full;
    return blocks > 0 ? (int)blocks : 1;
}

/* Programmatic dependent launch (sm_90 on; see launch.cuh): a kernel launched "early" may start
 * while the kernel before it in the stream still runs. It calls kl_let_next_grid_start() so
 * that the next kernel may be launched in turn, then kl_wait_for_previous_grid() before it
 * touches memory: that waits until the previous grid has finished and its writes are visible.
 * Both are no-ops when the launch did not ask for it, and compile to nothing below sm_90. */
__device__ __forceinline__ void kl_let_next_grid_start()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void kl_wait_for_previous_grid()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

#endif
