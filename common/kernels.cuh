/* Device-side helpers shared by the rungs: element conversions and grid sizing. No operation
 * logic lives here. */
#ifndef KL_KERNELS_CUH
#define KL_KERNELS_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "check.h"
#include "rung_note.h"

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

/* An attribute of the current device, asked of the driver once per (device, attribute):
 * launchers ask on every launch. Past the table's room it is asked every time. */
inline int kl_device_attribute(enum cudaDeviceAttr attr)
{
    struct known {
        int dev;
        enum cudaDeviceAttr attr;
        int value;
    };
    static struct known table[32];
    static int n_known = 0;
    int dev;
    CUDA_CHECK(cudaGetDevice(&dev));
    for (int i = 0; i < n_known; i++)
        if (table[i].dev == dev && table[i].attr == attr)
            return table[i].value;
    int value = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&value, attr, dev));
    if (n_known < (int)(sizeof table / sizeof table[0]))
        table[n_known++] = {dev, attr, value};
    return value;
}

/* The current device's SMs. */
inline int kl_sm_count(void)
{
    return kl_device_attribute(cudaDevAttrMultiProcessorCount);
}

/* Blocks of `kernel` that one SM holds at `threads` threads and `smem` bytes of dynamic shared
 * memory a block (at least 1). Launchers ask on every launch, and the runtime's answer costs host
 * time, so it is asked once per (device, kernel, threads, smem) and kept; past the table's room
 * it is asked every time. */
inline int kl_blocks_per_sm(const void *kernel, int threads, size_t smem)
{
    struct known {
        int dev, threads;
        const void *kernel;
        size_t smem;
        int per_sm;
    };
    static struct known table[256];
    static int n_known = 0;
    int dev;
    CUDA_CHECK(cudaGetDevice(&dev));
    for (int i = 0; i < n_known; i++)
        if (table[i].kernel == kernel && table[i].threads == threads && table[i].smem == smem &&
            table[i].dev == dev)
            return table[i].per_sm;
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    per_sm = per_sm > 0 ? per_sm : 1;
    if (n_known < (int)(sizeof table / sizeof table[0]))
        table[n_known++] = {dev, threads, kernel, smem, per_sm};
    return per_sm;
}

/* Blocks of `threads` threads that fill every SM to full occupancy for this kernel: the grid
 * for a grid-stride loop. Never more than the work needs. */
inline int grid_to_fill_gpu(const void *kernel, int threads, size_t work_blocks)
{
    const size_t full = (size_t)kl_sm_count() * (size_t)kl_blocks_per_sm(kernel, threads, 0);
    const size_t blocks = work_blocks < full ? work_blocks : full;
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
