/* The softmax arithmetic every rung shares, in fp32 whatever the storage type, and the layout of
 * a row of an NCHW tensor. The rungs differ in which threads share a row, how they combine their
 * partial results, and where the row waits between its reduction and its output.
 *
 * Row r = n S + s (S = H W) holds the C elements n C S + c S + s. The chapter keeps N S and C
 * below 2^31 (main.cu checks the shape), so a row index and a channel fit an int; element
 * offsets are 64-bit. */
#ifndef SOFTMAX_CUH
#define SOFTMAX_CUH

#include <float.h>

#include "kernels.cuh"

/* Where a running max starts, and what pads a thread's share of a row past its end: below any
 * input yet finite, so that exp(NO_VALUE - NO_VALUE) is 1 rather than NaN when two empty
 * partial results meet, and exp(NO_VALUE - m) is 0 for any real max m. */
#define SOFTMAX_NO_VALUE (-FLT_MAX)

/* exp(d) for d <= 0 (every argument here is a value minus a max): a multiply by log2(e) and
 * the hardware's ex2.approx, two instructions. Written out because __expf compiles to
 * ex2.approx.f32, which keeps denormal results at the cost of two more instructions per call
 * (a compare and two predicated multiplies around the MUFU.EX2), and a streaming fp16 softmax
 * issues one or two exps for every 2 bytes it reads. The .ftz form flushes results below
 * 2^-126 to 0, far below any tolerance. It is called through the compiler's builtin for that
 * instruction, not inline asm: the loop unroller prices an asm statement as unknown work and
 * stopped unrolling v2's loops, which then kept one load in flight a thread and ran up to 1.8
 * times slower.
 * Error: about 2 ulp, plus |d| 2^-24 relative from rounding the product, so under 2e-6
 * relative wherever exp(d) > 1e-9. */
__device__ __forceinline__ float softmax_exp(float d)
{
#ifdef __CUDA_ARCH__
    return __nvvm_ex2_approx_ftz_f(d * 1.4426950408889634f);
#else
    return __expf(d); /* the host pass parses device code but never runs it */
#endif
}

/* Offset of element c = 0 of row r. The division is done in 32 bits (a 64-bit one is a long
 * software routine): N S < 2^31. */
__device__ __forceinline__ int64_t softmax_row_start(int64_t r, int C, int64_t S)
{
    const unsigned row = (unsigned)r, stride = (unsigned)S;
    const unsigned n = row / stride, s = row - n * stride;
    return (int64_t)n * C * S + s;
}

/* The online softmax's summary of a set of values (rung v4): their max, and the sum of
 * exp(v - max). Two summaries merge exactly, by rescaling each sum to the larger max. */
struct softmax_stats {
    float max, sum;
};

__device__ __forceinline__ softmax_stats softmax_stats_merge(softmax_stats a, softmax_stats b)
{
    const float m = fmaxf(a.max, b.max);
    return {m, a.sum * softmax_exp(a.max - m) + b.sum * softmax_exp(b.max - m)};
}

/* The reductions, as objects the helpers below are written over: op(a, b) and its identity. */
struct softmax_max_op {
    __device__ float identity() const { return SOFTMAX_NO_VALUE; }
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct softmax_sum_op {
    __device__ float identity() const { return 0.f; }
    __device__ float operator()(float a, float b) const { return a + b; }
};
struct softmax_merge_op {
    __device__ softmax_stats identity() const { return {SOFTMAX_NO_VALUE, 0.f}; }
    __device__ softmax_stats operator()(softmax_stats a, softmax_stats b) const
    {
        return softmax_stats_merge(a, b);
    }
};

__device__ __forceinline__ float softmax_shfl_xor(float v, int lanes)
{
    return __shfl_xor_sync(0xffffffffu, v, lanes);
}
__device__ __forceinline__ softmax_stats softmax_shfl_xor(softmax_stats v, int lanes)
{
    return {__shfl_xor_sync(0xffffffffu, v.max, lanes), __shfl_xor_sync(0xffffffffu, v.sum, lanes)};
}

/* Rungs v3 and v4: op over the 32 lanes of a warp, by a butterfly of register exchanges (no
 * shared memory, no barrier). Every lane must be present. Each step combines two lanes' values
 * with a commutative op, so every lane ends with the very same bits. */
template <typename V, typename Op> __device__ __forceinline__ V softmax_warp_reduce(V v, Op op)
{
#pragma unroll
    for (int lanes = 16; lanes > 0; lanes /= 2)
        v = op(v, softmax_shfl_xor(v, lanes));
    return v;
}

/* Rows shared by blockDim.x threads (a multiple of 32): op over a whole row, returned to every
 * thread of it. A warp per row needs the shuffles alone; several warps per row (then the block
 * holds that one row) exchange one value per warp through part[32], after one barrier. Each
 * call needs its own part, or a barrier between two calls. */
template <typename V, typename Op>
__device__ __forceinline__ V softmax_row_reduce(V *part, V v, Op op)
{
    v = softmax_warp_reduce(v, op);
    if (blockDim.x == 32)
        return v;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    v = lane < (int)blockDim.x / 32 ? part[lane] : op.identity();
    return softmax_warp_reduce(v, op);
}

/* Strips of TR consecutive rows (blocks of 32 x blockDim.y x blockDim.z threads; threadIdx.z
 * picks the strip): lane l of warp threadIdx.y works on row l % TR of the strip and on channel
 * group threadIdx.y (32 / TR) + l / TR. op over all groups of a row, returned to each of its
 * threads: the groups of one warp combine by shuffles, the warps through part (32 floats per
 * warp of the block), after one barrier. Each call needs its own part. */
template <int TR, typename V, typename Op>
__device__ __forceinline__ V softmax_strip_reduce(V *part, V v, Op op)
{
#pragma unroll
    for (int lanes = TR; lanes < 32; lanes *= 2)
        v = op(v, softmax_shfl_xor(v, lanes));
    if (blockDim.y == 1)
        return v;
    const int row = threadIdx.x % TR;
    V *strip = part + threadIdx.z * blockDim.y * TR;
    if (threadIdx.x < TR)
        strip[threadIdx.y * TR + row] = v;
    __syncthreads();
    v = strip[row];
    for (int g = 1; g < (int)blockDim.y; g++)
        v = op(v, strip[g * TR + row]);
    return v;
}

/* A contiguous row (S = 1) shared by G = blockDim.x threads, each holding packs of
 * W = 16 / sizeof(T) elements. With 16-byte vectors (vec: the row and the pointers are 16-byte
 * aligned) pack p of thread t is the elements (p G + t) W + j, j < W, one 16-byte access. Without,
 * it is the elements (p W + j) G + t, so that each of the W scalar accesses is coalesced
 * across the warp. Either way element e is in the row when e < C; live is false for the
 * padding rows of the last block. */
template <typename T>
__device__ __forceinline__ void softmax_load_pack(const T *row, int p, int C, bool vec, bool live,
                                                  float pad, float (&v)[pack16<T>::width])
{
    constexpr int W = pack16<T>::width;
    const int t = threadIdx.x, G = blockDim.x;
    if (vec) {
        const int q = p * G + t;
        if (live && q * W < C) {
            pack16<T> pk;
            pk.raw = reinterpret_cast<const uint4 *>(row)[q];
#pragma unroll
            for (int j = 0; j < W; j++)
                v[j] = to_float(pk.e[j]);
        } else {
#pragma unroll
            for (int j = 0; j < W; j++)
                v[j] = pad;
        }
    } else {
#pragma unroll
        for (int j = 0; j < W; j++) {
            const int e = (p * W + j) * G + t;
            v[j] = live && e < C ? to_float(row[e]) : pad;
        }
    }
}

template <typename T>
__device__ __forceinline__ void softmax_store_pack(T *row, int p, int C, bool vec, bool live,
                                                   const float (&v)[pack16<T>::width])
{
    constexpr int W = pack16<T>::width;
    const int t = threadIdx.x, G = blockDim.x;
    if (vec) {
        const int q = p * G + t;
        if (live && q * W < C) {
            pack16<T> pk;
#pragma unroll
            for (int j = 0; j < W; j++)
                pk.e[j] = from_float<T>(v[j]);
            reinterpret_cast<uint4 *>(row)[q] = pk.raw;
        }
    } else {
#pragma unroll
        for (int j = 0; j < W; j++) {
            const int e = (p * W + j) * G + t;
            if (live && e < C)
                row[e] = from_float<T>(v[j]);
        }
    }
}

#endif
