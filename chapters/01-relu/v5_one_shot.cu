/* v5, one-shot blocks: no loop at all, the hardware block scheduler walks the tensor.
 *
 * Idea: each block owns one fixed stretch of THREADS x UNROLL packs, each thread loads its
 * UNROLL packs (block-strided, so every load is coalesced), transforms and stores them, and
 * exits. The grid grows with n, as v1's did, but every thread now moves UNROLL x 16 bytes per
 * input instead of 4: v1's idea with v3's and v4's bytes.
 * What changed from v4: the grid-stride loop is gone. v2-v4 kept a GPU-sized grid whose warps
 * drift apart over thousands of iterations, so at any moment they touch addresses spread over
 * the whole tensor; with one-shot blocks the resident warps always work on one contiguous window
 * just behind the block scheduler's front, which keeps DRAM pages open and the queue of loads
 * full while blocks retire and start. (Measured on the H200, README: v3 and v4 stopped at about
 * 94% of the copy roof forward; this rung reaches the roof.)
 * Limits: 128-thread blocks of 2 packs per thread were the best of the shapes tried (the README
 * lists the others). Elements past the last whole pack are done by the last block; pointers not
 * 16-byte aligned make each block walk its stretch one element at a time. */
#include "relu.cuh"
#include "relu.h"

#define THREADS 128
#define UNROLL 2

/* The elements of one block: THREADS x UNROLL packs. */
template <typename T> __host__ __device__ constexpr size_t block_elements()
{
    return (size_t)THREADS * UNROLL * pack16<T>::width;
}

template <typename T>
__global__ void __launch_bounds__(THREADS)
    relu_forward_one_shot(const T *__restrict__ x, T *__restrict__ y, size_t n)
{
    using pack = pack16<T>;
    size_t begin = (size_t)blockIdx.x * block_elements<T>();
    if (!aligned16(x) || !aligned16(y)) {
        size_t end = min(n, begin + block_elements<T>());
        for (size_t i = begin + threadIdx.x; i < end; i += THREADS)
            y[i] = from_float<T>(relu_value(to_float(x[i])));
        return;
    }
    size_t n_packs = n / pack::width, first = begin / pack::width;
    pack v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        size_t i = first + (size_t)u * THREADS + threadIdx.x;
        if (i < n_packs)
            v[u].raw = reinterpret_cast<const uint4 *>(x)[i];
    }
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        size_t i = first + (size_t)u * THREADS + threadIdx.x;
        if (i < n_packs) {
#pragma unroll
            for (int j = 0; j < pack::width; j++)
                v[u].e[j] = from_float<T>(relu_value(to_float(v[u].e[j])));
            reinterpret_cast<uint4 *>(y)[i] = v[u].raw;
        }
    }
    if (blockIdx.x == gridDim.x - 1)
        for (size_t i = n_packs * pack::width + threadIdx.x; i < n; i += THREADS)
            y[i] = from_float<T>(relu_value(to_float(x[i])));
}

template <typename T>
__global__ void __launch_bounds__(THREADS)
    relu_backward_one_shot(const T *__restrict__ x, const T *__restrict__ dy, T *__restrict__ dx,
                           size_t n)
{
    using pack = pack16<T>;
    size_t begin = (size_t)blockIdx.x * block_elements<T>();
    if (!aligned16(x) || !aligned16(dy) || !aligned16(dx)) {
        size_t end = min(n, begin + block_elements<T>());
        for (size_t i = begin + threadIdx.x; i < end; i += THREADS)
            dx[i] = from_float<T>(relu_gradient(to_float(x[i]), to_float(dy[i])));
        return;
    }
    size_t n_packs = n / pack::width, first = begin / pack::width;
    pack vx[UNROLL], vd[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        size_t i = first + (size_t)u * THREADS + threadIdx.x;
        if (i < n_packs) {
            vx[u].raw = reinterpret_cast<const uint4 *>(x)[i];
            vd[u].raw = reinterpret_cast<const uint4 *>(dy)[i];
        }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        size_t i = first + (size_t)u * THREADS + threadIdx.x;
        if (i < n_packs) {
#pragma unroll
            for (int j = 0; j < pack::width; j++)
                vd[u].e[j] =
                    from_float<T>(relu_gradient(to_float(vx[u].e[j]), to_float(vd[u].e[j])));
            reinterpret_cast<uint4 *>(dx)[i] = vd[u].raw;
        }
    }
    if (blockIdx.x == gridDim.x - 1)
        for (size_t i = n_packs * pack::width + threadIdx.x; i < n; i += THREADS)
            dx[i] = from_float<T>(relu_gradient(to_float(x[i]), to_float(dy[i])));
}

template <typename T> static unsigned blocks_for(size_t n)
{
    return (unsigned)((n + block_elements<T>() - 1) / block_elements<T>());
}

template <typename T> static void forward(const T *x, T *y, size_t n, cudaStream_t s)
{
    relu_forward_one_shot<<<blocks_for<T>(n), THREADS, 0, s>>>(x, y, n);
    LAUNCH_CHECK();
}

template <typename T> static void backward(const T *x, const T *dy, T *dx, size_t n,
                                           cudaStream_t s)
{
    relu_backward_one_shot<<<blocks_for<T>(n), THREADS, 0, s>>>(x, dy, dx, n);
    LAUNCH_CHECK();
}

extern "C" void relu_forward_v5(const void *x, void *y, size_t n, enum dtype t, cudaStream_t s)
{
    kl_note_rung("v5_one_shot");
    if (t == DT_FP32)
        forward((const float *)x, (float *)y, n, s);
    else
        forward((const __half *)x, (__half *)y, n, s);
}

extern "C" void relu_backward_v5(const void *x, const void *dy, void *dx, size_t n, enum dtype t,
                                 cudaStream_t s)
{
    kl_note_rung("v5_one_shot");
    if (t == DT_FP32)
        backward((const float *)x, (const float *)dy, (float *)dx, n, s);
    else
        backward((const __half *)x, (const __half *)dy, (__half *)dx, n, s);
}
