/* v4, several vectors in flight per thread.
 *
 * Idea: Little's law. To keep ~4 TB/s busy with ~600-800 ns of memory latency, the GPU needs
 * about 3 MB of loads in flight, some 23 KB per SM. v3 issues one 16-byte load per thread and
 * waits for it before the next; at 2048 threads per SM that is 32 KB only when every thread is
 * resident and has its load out at once, which the loop's dependency chain never quite allows.
 * Here each thread first issues UNROLL independent 16-byte loads (UNROLL x 16 B per input per
 * thread), then transforms and stores them all.
 * What changed from v3: the loop body handles UNROLL packs, block-strided so that each of the
 * UNROLL loads is still coalesced across the warp; the ragged end of the last block-chunk is
 * predicated, the elements past the last whole pack go through the scalar tail as in v3.
 * Expected: the last few percent to the copy roof on large tensors (more bytes in flight, fewer
 * loop branches per byte); nothing on tensors that fit in one wave. */
#include "relu.cuh"
#include "relu.h"

#define THREADS 256
#define UNROLL 4

template <typename T>
__global__ void relu_forward_vector_ilp(const T *__restrict__ x, T *__restrict__ y, size_t n)
{
    using pack = pack16<T>;
    size_t n_packs = aligned16(x) && aligned16(y) ? n / pack::width : 0;
    const uint4 *xv = reinterpret_cast<const uint4 *>(x);
    uint4 *yv = reinterpret_cast<uint4 *>(y);
    size_t chunk = (size_t)blockDim.x * UNROLL;
    for (size_t base = (size_t)blockIdx.x * chunk; base < n_packs; base += gridDim.x * chunk) {
        pack v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            size_t i = base + (size_t)u * blockDim.x + threadIdx.x;
            if (i < n_packs)
                v[u].raw = xv[i];
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            size_t i = base + (size_t)u * blockDim.x + threadIdx.x;
            if (i < n_packs) {
#pragma unroll
                for (int j = 0; j < pack::width; j++)
                    v[u].e[j] = from_float<T>(relu_value(to_float(v[u].e[j])));
                yv[i] = v[u].raw;
            }
        }
    }
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = n_packs * pack::width + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride)
        y[i] = from_float<T>(relu_value(to_float(x[i])));
}

template <typename T>
__global__ void relu_backward_vector_ilp(const T *__restrict__ x, const T *__restrict__ dy,
                                         T *__restrict__ dx, size_t n)
{
    using pack = pack16<T>;
    size_t n_packs = aligned16(x) && aligned16(dy) && aligned16(dx) ? n / pack::width : 0;
    const uint4 *xv = reinterpret_cast<const uint4 *>(x);
    const uint4 *dyv = reinterpret_cast<const uint4 *>(dy);
    uint4 *dxv = reinterpret_cast<uint4 *>(dx);
    size_t chunk = (size_t)blockDim.x * UNROLL;
    for (size_t base = (size_t)blockIdx.x * chunk; base < n_packs; base += gridDim.x * chunk) {
        pack vx[UNROLL], vd[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            size_t i = base + (size_t)u * blockDim.x + threadIdx.x;
            if (i < n_packs) {
                vx[u].raw = xv[i];
                vd[u].raw = dyv[i];
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            size_t i = base + (size_t)u * blockDim.x + threadIdx.x;
            if (i < n_packs) {
#pragma unroll
                for (int j = 0; j < pack::width; j++)
                    vd[u].e[j] =
                        from_float<T>(relu_gradient(to_float(vx[u].e[j]), to_float(vd[u].e[j])));
                dxv[i] = vd[u].raw;
            }
        }
    }
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = n_packs * pack::width + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride)
        dx[i] = from_float<T>(relu_gradient(to_float(x[i]), to_float(dy[i])));
}

/* Blocks that each get at least one chunk of UNROLL packs per thread. */
static size_t blocks_for(size_t n, int width)
{
    size_t packs = n / width + 1;
    size_t chunk = (size_t)THREADS * UNROLL;
    return (packs + chunk - 1) / chunk;
}

template <typename T> static void forward(const T *x, T *y, size_t n, cudaStream_t s)
{
    int blocks = grid_to_fill_gpu((const void *)relu_forward_vector_ilp<T>, THREADS,
                                  blocks_for(n, pack16<T>::width));
    relu_forward_vector_ilp<<<blocks, THREADS, 0, s>>>(x, y, n);
    LAUNCH_CHECK();
}

template <typename T> static void backward(const T *x, const T *dy, T *dx, size_t n,
                                           cudaStream_t s)
{
    int blocks = grid_to_fill_gpu((const void *)relu_backward_vector_ilp<T>, THREADS,
                                  blocks_for(n, pack16<T>::width));
    relu_backward_vector_ilp<<<blocks, THREADS, 0, s>>>(x, dy, dx, n);
    LAUNCH_CHECK();
}

extern "C" void relu_forward_v4(const void *x, void *y, size_t n, enum dtype t, cudaStream_t s)
{
    kl_note_rung("v4_vector_ilp");
    if (t == DT_FP32)
        forward((const float *)x, (float *)y, n, s);
    else
        forward((const __half *)x, (__half *)y, n, s);
}

extern "C" void relu_backward_v4(const void *x, const void *dy, void *dx, size_t n, enum dtype t,
                                 cudaStream_t s)
{
    kl_note_rung("v4_vector_ilp");
    if (t == DT_FP32)
        backward((const float *)x, (const float *)dy, (float *)dx, n, s);
    else
        backward((const __half *)x, (const __half *)dy, (__half *)dx, n, s);
}
