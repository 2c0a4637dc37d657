/* v2, a block per row: shared-memory tree reductions.
 *
 * Idea: give each row to a block of 256 threads. Thread t reads elements t, t + 256, ..., so a
 * warp's load covers 32 neighbouring elements (one 128-byte line in fp32): coalesced. Each
 * thread keeps a partial maximum, the block combines the 256 partials in shared memory, then
 * the same for sum(exp(x - m)). Thread 0 adds the row's loss term with atomicAdd, as in v1;
 * for the gradient every thread writes its strided elements.
 * What changed from v1: the row is read by 256 threads side by side instead of one, so the
 * loads are coalesced and N rows make N blocks (8192 at the large preset: every SM busy).
 * The tree: at each step the lower half of the threads adds the value `stride` places above
 * (sequential addressing), so the active threads stay packed into whole warps and neighbours
 * read neighbouring banks; 8 steps and 10 barriers for 256 values.
 * Predicted: at the large preset, a read of the row per sweep from DRAM (8 blocks of 256
 * threads a SM keep about a thousand 200 KB rows in flight, far more than the 60 MB L2 holds),
 * so fwd reads the logits twice (2 N C s bytes against 1) and bwd three times and writes dx
 * once (4 N C s against 2): about half the roof at best in both.
 * Limits: with C = 10 (the seed preset) 246 of the 256 threads have nothing to do and the two
 * trees still take their 20 barriers; every row pays two block-wide reductions; the mean is
 * still N atomics plus a memset node. v3 gives a short row to one warp and reduces with
 * shuffles. */
#include "cross_entropy.cuh"
#include "cross_entropy.h"

#define THREADS 256

struct max_of {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

struct sum_of {
    __device__ float operator()(float a, float b) const { return a + b; }
};

/* Combines one value per thread; every thread gets the result. red holds THREADS floats. */
template <typename Op> static __device__ float tree_reduce(float v, float *red, Op op)
{
    red[threadIdx.x] = v;
    __syncthreads();
    for (int stride = THREADS / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride)
            red[threadIdx.x] = op(red[threadIdx.x], red[threadIdx.x + stride]);
        __syncthreads();
    }
    const float result = red[0];
    __syncthreads(); /* red is written again by the next reduction */
    return result;
}

template <typename T, bool LOSS, bool GRAD>
__global__ void __launch_bounds__(THREADS)
    ce_block_per_row(const T *__restrict__ x, const int32_t *__restrict__ labels,
                     float *__restrict__ loss, T *__restrict__ dx, size_t n_rows,
                     size_t n_classes, float inv_rows)
{
    __shared__ float red[THREADS];
    for (size_t row = blockIdx.x; row < n_rows; row += gridDim.x) {
        const T *xr = x + row * n_classes;
        const int32_t label = labels[row];
        const bool ok = ce_label_ok(label, (int64_t)n_classes);

        float m = -FLT_MAX;
        for (size_t c = threadIdx.x; c < n_classes; c += THREADS)
            m = fmaxf(m, to_float(xr[c]));
        m = tree_reduce(m, red, max_of());
        float sum = 0.f;
        for (size_t c = threadIdx.x; c < n_classes; c += THREADS)
            sum += ce_exp(to_float(xr[c]) - m);
        const float log_sum = logf(tree_reduce(sum, red, sum_of()));

        if (LOSS && threadIdx.x == 0)
            atomicAdd(loss,
                      (ok ? ce_row_loss(m, log_sum, to_float(xr[label])) : ce_nan()) * inv_rows);
        if (GRAD) {
            T *dr = dx + row * n_classes;
            for (size_t c = threadIdx.x; c < n_classes; c += THREADS)
                dr[c] = from_float<T>(ok ? ce_gradient(to_float(xr[c]), m, log_sum,
                                                       c == (size_t)label, inv_rows)
                                         : ce_nan());
        }
    }
}

template <typename T>
static void launch(const T *x, const int32_t *labels, float *loss, T *dx, size_t n_rows,
                   size_t n_classes, cudaStream_t s)
{
    /* A block per row; the chapter caps N below 2^31, the grid's limit, and the loop covers
     * the rest should that cap ever be raised. */
    const unsigned blocks = (unsigned)(n_rows < 0x7fffffff ? n_rows : 0x7fffffff);
    const float inv_rows = 1.f / (float)n_rows;
    if (loss)
        CUDA_CHECK(cudaMemsetAsync(loss, 0, sizeof(float), s));
    if (loss && dx)
        ce_block_per_row<T, true, true><<<blocks, THREADS, 0, s>>>(x, labels, loss, dx, n_rows,
                                                                   n_classes, inv_rows);
    else if (loss)
        ce_block_per_row<T, true, false><<<blocks, THREADS, 0, s>>>(x, labels, loss, dx, n_rows,
                                                                    n_classes, inv_rows);
    else
        ce_block_per_row<T, false, true><<<blocks, THREADS, 0, s>>>(x, labels, loss, dx, n_rows,
                                                                    n_classes, inv_rows);
    LAUNCH_CHECK();
}

extern "C" void ce_v2(const void *x, const int32_t *labels, float *loss, void *dx, size_t n_rows,
                      size_t n_classes, enum dtype t, cudaStream_t s)
{
    kl_note_rung("v2_block_per_row");
    if (t == DT_FP32)
        launch((const float *)x, labels, loss, (float *)dx, n_rows, n_classes, s);
    else
        launch((const __half *)x, labels, loss, (__half *)dx, n_rows, n_classes, s);
}
