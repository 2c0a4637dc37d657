/* v1, naive: one thread per row.
 *
 * Idea: the loop a C programmer would write, one row per thread. A sweep over the row finds its
 * maximum m, a second sums exp(x - m), and the row's loss term (m - x[label]) + log(sum) is
 * added into the loss with atomicAdd (the launcher zeroes the loss first, with
 * cudaMemsetAsync). For the gradient a third sweep writes dx = (exp(x - lse) - onehot) / N.
 * fwd_bwd does both in the same kernel, from the same two sweeps.
 * Cost model: the minimum is one read of the logits (fwd) plus one write of dx (bwd); v1 reads
 * each row 2 (fwd) or 3 (bwd, fwd_bwd) times and relies on the caches for the repeats.
 * Limits, each the reason for a later rung:
 *  - neighbouring threads read rows C elements apart, so one warp-wide load touches 32 rows,
 *    32 cache lines: nothing is coalesced (v2 gives a row to a whole block);
 *  - there are only N threads: 32 at the seed preset, 8192 (64 blocks, half the SMs) at the
 *    large one, each walking 50257 logits three times on its own (v2);
 *  - the mean is N float atomics on one address, in whatever order the threads finish, so the
 *    loss's last bits change from run to run, and the memset is one more node in the graph
 *    (v3 finishes the mean inside the kernel, in a fixed order).
 * Predicted: slowest rung everywhere past the seed size; at the seed sizes a few microseconds,
 * like any single small kernel. */
#include "cross_entropy.cuh"
#include "cross_entropy.h"

#define THREADS 128

template <typename T, bool LOSS, bool GRAD>
__global__ void __launch_bounds__(THREADS)
    ce_naive(const T *__restrict__ x, const int32_t *__restrict__ labels, float *__restrict__ loss,
             T *__restrict__ dx, size_t n_rows, size_t n_classes, float inv_rows)
{
    const size_t row = (size_t)blockIdx.x * THREADS + threadIdx.x;
    if (row >= n_rows)
        return;
    const T *xr = x + row * n_classes;
    const int32_t label = labels[row];
    const bool ok = ce_label_ok(label, (int64_t)n_classes);

    float m = -FLT_MAX;
    for (size_t c = 0; c < n_classes; c++)
        m = fmaxf(m, to_float(xr[c]));
    float sum = 0.f;
    for (size_t c = 0; c < n_classes; c++)
        sum += ce_exp(to_float(xr[c]) - m);
    const float log_sum = logf(sum);

    if (LOSS) /* the label is read only once it is known to lie inside the row */
        atomicAdd(loss, (ok ? ce_row_loss(m, log_sum, to_float(xr[label])) : ce_nan()) * inv_rows);
    if (GRAD) {
        T *dr = dx + row * n_classes;
        for (size_t c = 0; c < n_classes; c++)
            dr[c] = from_float<T>(ok ? ce_gradient(to_float(xr[c]), m, log_sum,
                                                   c == (size_t)label, inv_rows)
                                     : ce_nan());
    }
}

template <typename T>
static void launch(const T *x, const int32_t *labels, float *loss, T *dx, size_t n_rows,
                   size_t n_classes, cudaStream_t s)
{
    const unsigned blocks = (unsigned)((n_rows + THREADS - 1) / THREADS);
    const float inv_rows = 1.f / (float)n_rows;
    if (loss)
        CUDA_CHECK(cudaMemsetAsync(loss, 0, sizeof(float), s));
    if (loss && dx)
        ce_naive<T, true, true><<<blocks, THREADS, 0, s>>>(x, labels, loss, dx, n_rows,
                                                           n_classes, inv_rows);
    else if (loss)
        ce_naive<T, true, false><<<blocks, THREADS, 0, s>>>(x, labels, loss, dx, n_rows,
                                                            n_classes, inv_rows);
    else
        ce_naive<T, false, true><<<blocks, THREADS, 0, s>>>(x, labels, loss, dx, n_rows,
                                                            n_classes, inv_rows);
    LAUNCH_CHECK();
}

extern "C" void ce_v1(const void *x, const int32_t *labels, float *loss, void *dx, size_t n_rows,
                      size_t n_classes, enum dtype t, cudaStream_t s)
{
    kl_note_rung("v1_naive");
    if (t == DT_FP32)
        launch((const float *)x, labels, loss, (float *)dx, n_rows, n_classes, s);
    else
        launch((const __half *)x, labels, loss, (__half *)dx, n_rows, n_classes, s);
}
