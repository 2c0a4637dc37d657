/* v1, naive: one thread per output; the backward scatters dy into dx with atomics.
 *
 * Idea: the definition. Forward, thread o owns output o = ((n C + c) OH + i) OW + j, splits o
 * into (plane, i, j), scans its KH x KW window (maxpool_window_argmax) and writes y and the
 * winner's position in the window, packed (maxpool.h): at 2x2, four outputs share a byte, so
 * the four lanes that own them OR their 2-bit fields together with two shuffles and one of
 * them stores the byte (maxpool_store_argmax_by_warp). Neighbouring threads own neighbouring
 * j, so the stores are coalesced and the loads of a warp touch a few neighbouring stretches of
 * x's rows. Backward, dx is zeroed with cudaMemsetAsync, then thread o turns its argmax back
 * into a position in the plane and adds dy[o] there with atomicAdd: overlapping windows may
 * choose the same input, and the atomics add their dy without a race.
 * Expected: forward reads x once (the overlap of neighbouring windows hits the L1) and writes
 * y and the argmax: at 2x2 stride 2 in fp32, 4 + 4 / 4 + 1 / 16 = 5.06 bytes per input
 * element. Backward reads dy and the argmax and writes dx twice: the memset, then the atomics,
 * which land in the L2 as read-modify-writes. Each thread splits its 64-bit output index with
 * 64-bit divisions, a software routine of dozens of instructions each, and makes one narrow
 * access per element: fine at the roof's scale for fp32, noticeable for fp16's half-size
 * traffic.
 * Limits: any window, stride and padding. The atomics make the backward's sums order-dependent
 * where windows overlap: in fp32 the last bits of such a dx vary from run to run. In fp16 an
 * atomicAdd on __half would round every partial sum to 11 significant bits, and with dy of both
 * signs the partial sums can be larger than the total: errors of a few parts in a thousand,
 * past the tolerance of a sum kept in fp32. So fp16 with overlapping windows scatters into an
 * fp32 copy of dx, allocated on the stream (cudaMallocAsync, which a CUDA graph captures), and
 * rounds it into dx at the end: 4 more bytes written and read per input. Disjoint windows give
 * each dx at most one dy, added to 0: exact in both types, straight into dx. */
#include "maxpool.cuh"

#define THREADS 256

/* The loop runs whole warps (maxpool_store_argmax_by_warp): lanes past the last output scan
 * nothing and store nothing, but take part in the shuffles. */
template <typename T>
__global__ void maxpool_forward_naive(const T *__restrict__ x, T *__restrict__ y,
                                      uint8_t *__restrict__ argmax, maxpool_dims d)
{
    const int64_t outputs = d.n * d.c * d.oh * d.ow;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t first = maxpool_warp_first_output(); first < outputs; first += stride) {
        const int64_t o = first + threadIdx.x % 32;
        const bool valid = o < outputs;
        int position = 0;
        if (valid) {
            const int64_t j = o % d.ow, i = o / d.ow % d.oh, plane = o / (d.ow * d.oh);
            const maxpool_pick<T> m = maxpool_window_argmax(x + plane * d.h * d.w, d, i, j);
            y[o] = m.value;
            position = maxpool_window_position(d, m.r, m.q);
        }
        maxpool_store_argmax_by_warp(argmax, d, o, valid, position);
    }
}

/* sum must be zero before: each output adds its dy where its window's maximum was. Sum is dx
 * itself (Sum = T), or an fp32 copy of it for fp16 with overlapping windows. */
template <typename T, typename Sum>
__global__ void maxpool_backward_scatter(const T *__restrict__ dy,
                                         const uint8_t *__restrict__ argmax, Sum *sum,
                                         maxpool_dims d)
{
    const int64_t per_plane = d.oh * d.ow, outputs = d.n * d.c * per_plane;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < outputs; o += stride) {
        const int64_t j = o % d.ow, i = o / d.ow % d.oh, plane = o / per_plane;
        const int position = maxpool_load_argmax(argmax, d, o);
        const int r = position / (int)d.kw, q = position % (int)d.kw;
        const int64_t at = (maxpool_window_top(d, i) + r) * d.w + maxpool_window_left(d, j) + q;
        atomicAdd(sum + plane * d.h * d.w + at, (Sum)dy[o]); /* __half: sm_70 and later */
    }
}

/* dx = sum rounded to fp16, for the fp16 scatter through an fp32 copy. */
__global__ void maxpool_round_to_half(const float *__restrict__ sum, __half *__restrict__ dx,
                                      int64_t inputs)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < inputs; e += stride)
        dx[e] = __float2half_rn(sum[e]);
}

template <typename T>
static void forward(const T *x, T *y, uint8_t *argmax, maxpool_dims d, cudaStream_t s)
{
    maxpool_forward_naive<<<maxpool_blocks(d.n * d.c * d.oh * d.ow, THREADS), THREADS, 0, s>>>(
        x, y, argmax, d);
    LAUNCH_CHECK();
}

template <typename T, typename Sum>
static void scatter(const T *dy, const uint8_t *argmax, Sum *sum, maxpool_dims d, cudaStream_t s)
{
    CUDA_CHECK(cudaMemsetAsync(sum, 0, (size_t)(d.n * d.c * d.h * d.w) * sizeof(Sum), s));
    maxpool_backward_scatter<<<maxpool_blocks(d.n * d.c * d.oh * d.ow, THREADS), THREADS, 0,
                               s>>>(dy, argmax, sum, d);
    LAUNCH_CHECK();
}

template <typename T>
static void backward(const T *dy, const uint8_t *argmax, T *dx, maxpool_dims d, cudaStream_t s)
{
    if (sizeof(T) == 4 || maxpool_disjoint_windows(d)) {
        scatter(dy, argmax, dx, d, s);
        return;
    }
    const int64_t inputs = d.n * d.c * d.h * d.w;
    float *sum;
    CUDA_CHECK(cudaMallocAsync((void **)&sum, (size_t)inputs * sizeof(float), s));
    scatter(dy, argmax, sum, d, s);
    maxpool_round_to_half<<<maxpool_blocks(inputs, THREADS), THREADS, 0, s>>>(
        sum, (__half *)dx, inputs);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaFreeAsync(sum, s));
}

MAXPOOL_FORWARD_LAUNCHER(v1)
MAXPOOL_BACKWARD_LAUNCHER(v1)
