/* Device helpers the bias-gradient rungs share: sums across a warp and a block, and the last
 * step of the rungs that accumulate in the caller's workspace before writing db. */
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

/* The rungs that split every row into chunks (v4, v6) differ only in how a block sums its
 * chunk: Chunk supplies `threads` (the block), `elements` (a chunk's length) and
 * `sum(row, begin, end)` (this thread's share of row[begin, end), in fp32). */

/* First pass: block b sums chunk b % chunks of row b / chunks into
 * partials[c][n * chunks + chunk]. */
template <typename Chunk, typename T>
__global__ void __launch_bounds__(Chunk::threads)
    bias_grad_chunk_sums(const T *__restrict__ dy, float *__restrict__ partials,
                         struct bias_grad_size z, int64_t chunks)
{
    const int64_t row = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
    const int64_t n = row / z.c, c = row % z.c;
    const int64_t begin = chunk * Chunk::elements, end = min(z.hw, begin + Chunk::elements);
    const float sum = block_sum(Chunk::sum(dy + row * z.hw, begin, end));
    if (threadIdx.x == 0)
        partials[c * z.n * chunks + n * chunks + chunk] = sum;
}

/* Second pass: one warp per channel adds the channel's per_channel partial sums, in a fixed
 * order, and stores db[c]. */
template <typename T>
__global__ void bias_grad_add_partials(const float *__restrict__ partials, T *__restrict__ db,
                                       int64_t c_count, int64_t per_channel)
{
    int64_t c = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (c >= c_count)
        return; /* whole warps leave together: c is the same across a warp */
    float sum = 0.f;
    for (int64_t i = threadIdx.x % 32; i < per_channel; i += 32)
        sum += partials[c * per_channel + i];
    sum = warp_sum(sum);
    if (threadIdx.x % 32 == 0)
        db[c] = from_float<T>(sum);
}

/* The fewest elements a chunk of v4 or v6 holds (v4's in fp32: 256 threads x 4 packs of 4),
 * so that bias_grad_workspace_bytes has room for the partials of either. */
#define BIAS_GRAD_MIN_CHUNK 4096

/* Both passes, the partials in the caller's workspace: a float a chunk of every row. */
template <typename Chunk, typename T>
static void bias_grad_launch_chunked(const T *dy, T *db, struct bias_grad_size z,
                                     float *partials, cudaStream_t s)
{
    static_assert(Chunk::elements >= BIAS_GRAD_MIN_CHUNK, "the workspace holds fewer partials");
    const int64_t chunks = (z.hw + Chunk::elements - 1) / Chunk::elements;
    const int64_t per_channel = z.n * chunks;
    bias_grad_chunk_sums<Chunk><<<(unsigned)(z.n * z.c * chunks), Chunk::threads, 0, s>>>(
        dy, partials, z, chunks);
    LAUNCH_CHECK();
    const int warps = 8;
    bias_grad_add_partials<<<(unsigned)((z.c + warps - 1) / warps), warps * 32, 0, s>>>(
        partials, db, z.c, per_channel);
    LAUNCH_CHECK();
}

#endif
