/* Device helpers the bias-gradient rungs share: sums across a warp and a block, and the last
 * step of the rungs that accumulate in a scratch buffer (kl_grow_buffer) before writing db. */
#ifndef BIAS_GRAD_CUH
#define BIAS_GRAD_CUH

#include "bias_grad.h"
#include "kernels.cuh"
#include "launch.cuh"

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

/* The sum of v over the block, valid in thread 0. blockDim.x is a multiple of 32, at most
 * 1024; every thread of the block must call it. */
__device__ __forceinline__ float block_sum(float v)
{
    __shared__ float warp_sums[32];
    v = warp_sum(v);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0)
        warp_sums[warp] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? warp_sums[lane] : 0.f;
    return warp == 0 ? warp_sum(v) : 0.f;
}

/* db[c] = the float at ws[c], in db's type: the last step of the rungs that sum into ws. */
template <typename T>
__global__ void bias_grad_store(const float *__restrict__ ws, T *__restrict__ db, int64_t c)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < c)
        db[i] = from_float<T>(ws[i]);
}

#endif
