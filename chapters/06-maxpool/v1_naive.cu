/* v1, naive: one thread per output; the backward scatters dy into dx with atomics.
 *
 * Idea: the definition. Forward, thread o owns output o = ((n C + c) OH + i) OW + j, splits o
 * into (plane, i, j), scans its KH x KW window (maxpool_window_argmax) and writes y, the plane
 * index and the window index. Neighbouring threads own neighbouring j, so the stores are already
 * coalesced and the loads of a warp touch a few neighbouring stretches of x's rows. Backward,
 * dx is zeroed with cudaMemsetAsync, then thread o adds dy[o] into dx at its plane index with
 * atomicAdd: overlapping windows may choose the same input, and the atomics add their dy
 * without a race.
 * Expected: forward reads x once (the overlap of neighbouring windows hits the L1) and writes
 * y plus 5 bytes of indices per output: at 2x2 stride 2 in fp32, 4 + 9 / 4 = 6.25 bytes per
 * input element. Backward reads dy and the 4-byte plane index per output and writes dx twice:
 * the memset, then the atomics, which land in the L2 as read-modify-writes. Each thread splits
 * its 64-bit output index with three 64-bit divisions, a software routine of dozens of
 * instructions each, and makes one narrow access per element: fine at the roof's scale for
 * fp32, noticeable for fp16's half-size traffic.
 * Limits: any window, stride and padding. The atomics make the backward's sums order-dependent
 * where windows overlap: in fp32 the last bits of such a dx vary from run to run; in fp16 each
 * atomicAdd rounds the running sum to fp16 (11 significant bits), so an input chosen by m
 * windows takes m - 1 roundings, up to about (m - 1) 2^-11 of the sum, against one rounding
 * for a sum kept in fp32. Disjoint windows give each dx at most one dy, added to 0: exact. */
#include "maxpool.cuh"

#define THREADS 256

template <typename T>
__global__ void maxpool_forward_naive(const T *__restrict__ x, T *__restrict__ y,
                                      int32_t *__restrict__ plane_idx,
                                      uint8_t *__restrict__ window_idx, maxpool_dims d)
{
    const int64_t outputs = d.n * d.c * d.oh * d.ow;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < outputs; o += stride) {
        const int64_t j = o % d.ow, i = o / d.ow % d.oh, plane = o / (d.ow * d.oh);
        const maxpool_pick<T> m = maxpool_window_argmax(x + plane * d.h * d.w, d, i, j);
        y[o] = m.value;
        plane_idx[o] = maxpool_plane_index(d, i, j, m.r, m.q);
        window_idx[o] = maxpool_window_index(d, m.r, m.q);
    }
}

/* dx must be zero before: each output adds its dy where its window's maximum was. */
template <typename T>
__global__ void maxpool_backward_scatter(const T *__restrict__ dy,
                                         const int32_t *__restrict__ plane_idx, T *dx,
                                         maxpool_dims d)
{
    const int64_t per_plane = d.oh * d.ow, outputs = d.n * d.c * per_plane;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < outputs; o += stride) {
        const int64_t plane = o / per_plane;
        atomicAdd(dx + plane * d.h * d.w + plane_idx[o], dy[o]); /* __half: sm_70 and later */
    }
}

/* maxpool.h's conversion for rungs that compute the plane index alone (the exercise). */
__global__ void maxpool_plane_to_window_kernel(const int32_t *__restrict__ plane_idx,
                                               uint8_t *__restrict__ window_idx, maxpool_dims d)
{
    const int64_t outputs = d.n * d.c * d.oh * d.ow;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < outputs; o += stride) {
        int64_t row, j, plane, i;
        maxpool_divmod(o, d.ow, row, j);
        maxpool_divmod(row, d.oh, plane, i);
        window_idx[o] = maxpool_window_from_plane(d, plane_idx[o], i, j);
    }
}

template <typename T>
static void forward(const T *x, T *y, int32_t *plane_idx, uint8_t *window_idx, maxpool_dims d,
                    cudaStream_t s)
{
    maxpool_forward_naive<<<maxpool_blocks(d.n * d.c * d.oh * d.ow, THREADS), THREADS, 0, s>>>(
        x, y, plane_idx, window_idx, d);
    LAUNCH_CHECK();
}

template <typename T>
static void backward(const T *dy, const int32_t *plane_idx, const uint8_t *window_idx, T *dx,
                     maxpool_dims d, cudaStream_t s)
{
    (void)window_idx; /* the scatter reads the plane index */
    CUDA_CHECK(cudaMemsetAsync(dx, 0, (size_t)(d.n * d.c * d.h * d.w) * sizeof(T), s));
    maxpool_backward_scatter<<<maxpool_blocks(d.n * d.c * d.oh * d.ow, THREADS), THREADS, 0,
                               s>>>(dy, plane_idx, dx, d);
    LAUNCH_CHECK();
}

MAXPOOL_FORWARD_LAUNCHER(v1)
MAXPOOL_BACKWARD_LAUNCHER(v1)

extern "C" void maxpool_plane_to_window(const int32_t *plane_idx, uint8_t *window_idx,
                                        struct maxpool_dims d, cudaStream_t s)
{
    maxpool_plane_to_window_kernel<<<maxpool_blocks(d.n * d.c * d.oh * d.ow, THREADS), THREADS,
                                     0, s>>>(plane_idx, window_idx, d);
    LAUNCH_CHECK();
}
