/* v3, a warp per row: shuffles, the row in registers, the mean finished in the kernel.
 *
 * Idea: a row of up to 1024 logits fits in one warp's registers, K = ceil(C / 32) values per
 * lane (K a power of two from 1 to 32, a template parameter, so the array stays in registers).
 * Lane l holds elements l, l + 32, ..., so each of the K loads is one coalesced warp-wide
 * access. The row's maximum and sum come from five __shfl_xor_sync steps each, with no shared
 * memory and no barrier; every lane ends with the same m and log_sum and writes its own
 * gradient elements straight from its registers. The logit at the label is picked out of the
 * owner lane's registers with one more shuffle, never read from memory, so a bad label cannot
 * reach an address at all.
 * What changed from v2: a warp instead of a block per row (the 246 idle threads of the seed
 * preset are gone, and no __syncthreads per reduction); the row is read from DRAM exactly once
 * even for the gradient, so fwd_bwd is one read and one write; and the mean is no longer a
 * memset plus N atomics: each block adds its warps' terms and the last block to finish sums the
 * block partials in a fixed order (ce_finish_mean), so the loss is the same bits every run, and
 * a problem of at most 32 rows is one block that writes the loss directly.
 * Predicted: the seed presets become one DRAM round trip in one kernel: about 2 us, against
 * two (fwd, bwd) or three (fwd_bwd) kernels for the vendor; at 256x1000 one read of the
 * logits, so fwd_bwd should run near the roof of a 2 MB problem.
 * Limits: rows longer than 1024 take the streaming path below (a warp walks the row in global
 * memory: one sweep for the maximum, one for the sum, one for the gradient), which reads a
 * 200 KB row three times and is no faster than v2 there. v4 reads a long row once. */
#include "cross_entropy.cuh"
#include "cross_entropy.h"

/* Each block adds up its warps' loss terms (lane 0 of each holds them) and hands the sum on,
 * through the mean's partial sums and counter in the caller's workspace (ce_finish_mean). */
static __device__ void finish_block(float warp_loss, float *loss, size_t n_rows,
                                    ce_workspace *ws)
{
    __shared__ float warp_losses[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0)
        warp_losses[warp] = warp_loss;
    __syncthreads();
    float block_sum = 0.f;
    if (threadIdx.x == 0)
        for (int w = 0; w < (int)(blockDim.x >> 5); w++)
            block_sum += warp_losses[w];
    ce_finish_mean(block_sum, loss, n_rows, ws->partial_sums, &ws->blocks_done);
}

/* Blocks of rows of more than 256 logits hold 8 warps at most, so that K = 16 or 32 values a
 * lane (and the gradient's temporaries) fit in registers without spilling. */
#define MAX_THREADS(K) ((K) > 8 ? 256 : 1024)

template <typename T, int K, bool LOSS, bool GRAD>
__global__ void __launch_bounds__(MAX_THREADS(K), (K) > 8 ? 2 : 1)
    ce_warp_rows_in_registers(const T *__restrict__ x, const int32_t *__restrict__ labels,
                              float *__restrict__ loss, T *__restrict__ dx, size_t n_rows,
                              int n_classes, float inv_rows, ce_workspace *ws)
{
    const int lane = threadIdx.x & 31;
    const size_t warps = blockDim.x >> 5;
    float warp_loss = 0.f;
    /* The bound depends on the warp only, so all 32 lanes run the same iterations and the
     * full-mask shuffles see every lane. */
    for (size_t row = blockIdx.x * warps + (threadIdx.x >> 5); row < n_rows;
         row += gridDim.x * warps) {
        const T *xr = x + row * (size_t)n_classes;
        const int32_t label = labels[row];
        const bool ok = ce_label_ok(label, n_classes);

        float v[K];
        float m = -FLT_MAX;
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int c = lane + 32 * k;
            v[k] = c < n_classes ? to_float(xr[c]) : -INFINITY; /* exp(-inf - m) = 0 */
            m = fmaxf(m, v[k]);
        }
        m = ce_warp_max(m);
        float sum = 0.f;
#pragma unroll
        for (int k = 0; k < K; k++)
            sum += ce_exp(v[k] - m);
        const float log_sum = logf(ce_warp_sum(sum));

        if (LOSS) {
            float mine = 0.f;
#pragma unroll
            for (int k = 0; k < K; k++)
                if (lane + 32 * k == label)
                    mine = v[k];
            const float x_label = __shfl_sync(CE_FULL_MASK, mine, label & 31);
            warp_loss += ok ? ce_row_loss(m, log_sum, x_label) : ce_nan();
        }
        if (GRAD) {
            T *dr = dx + row * (size_t)n_classes;
#pragma unroll
            for (int k = 0; k < K; k++) {
                const int c = lane + 32 * k;
                if (c < n_classes)
                    dr[c] = from_float<T>(
                        ok ? ce_gradient(v[k], m, log_sum, c == label, inv_rows) : ce_nan());
            }
        }
    }
    if (LOSS)
        finish_block(warp_loss, loss, n_rows, ws);
}

/* Rows longer than a warp's registers hold: the warp streams the row from global memory, one
 * sweep per quantity. Correct for any C; fast for none past 1024. */
template <typename T, bool LOSS, bool GRAD>
__global__ void __launch_bounds__(1024)
    ce_warp_rows_streamed(const T *__restrict__ x, const int32_t *__restrict__ labels,
                          float *__restrict__ loss, T *__restrict__ dx, size_t n_rows,
                          int n_classes, float inv_rows, ce_workspace *ws)
{
    const int lane = threadIdx.x & 31;
    const size_t warps = blockDim.x >> 5;
    float warp_loss = 0.f;
    for (size_t row = blockIdx.x * warps + (threadIdx.x >> 5); row < n_rows;
         row += gridDim.x * warps) {
        const T *xr = x + row * (size_t)n_classes;
        const int32_t label = labels[row];
        const bool ok = ce_label_ok(label, n_classes);

        float m = -FLT_MAX;
        for (int64_t c = lane; c < n_classes; c += 32)
            m = fmaxf(m, to_float(xr[c]));
        m = ce_warp_max(m);
        float sum = 0.f;
        for (int64_t c = lane; c < n_classes; c += 32)
            sum += ce_exp(to_float(xr[c]) - m);
        const float log_sum = logf(ce_warp_sum(sum));

        if (LOSS) /* every lane reads the same address: one broadcast load */
            warp_loss += ok ? ce_row_loss(m, log_sum, to_float(xr[label])) : ce_nan();
        if (GRAD) {
            T *dr = dx + row * (size_t)n_classes;
            for (int64_t c = lane; c < n_classes; c += 32)
                dr[c] = from_float<T>(ok ? ce_gradient(to_float(xr[c]), m, log_sum, c == label,
                                                       inv_rows)
                                         : ce_nan());
        }
    }
    if (LOSS)
        finish_block(warp_loss, loss, n_rows, ws);
}

/* The kernel for one K, with the pass chosen by which outputs are given. */
#define LAUNCH_PASSES(kernel, ...)                                                             \
    do {                                                                                       \
        if (loss && dx)                                                                        \
            kernel<__VA_ARGS__, true, true><<<blocks, threads, 0, s>>>(                        \
                x, labels, loss, dx, n_rows, n_classes, inv_rows, ws);                         \
        else if (loss)                                                                         \
            kernel<__VA_ARGS__, true, false><<<blocks, threads, 0, s>>>(                       \
                x, labels, loss, dx, n_rows, n_classes, inv_rows, ws);                         \
        else                                                                                   \
            kernel<__VA_ARGS__, false, true><<<blocks, threads, 0, s>>>(                       \
                x, labels, loss, dx, n_rows, n_classes, inv_rows, ws);                         \
    } while (0)

template <typename T>
static void launch(const T *x, const int32_t *labels, float *loss, T *dx, size_t n_rows,
                   int n_classes, ce_workspace *ws, cudaStream_t s)
{
    const int per_lane = (n_classes + 31) / 32;
    int threads, blocks;
    ce_warp_rows_grid(n_rows, (size_t)n_classes, per_lane > 8 ? 256 : 1024, &threads, &blocks);
    const float inv_rows = 1.f / (float)n_rows;
    if (per_lane <= 1)
        LAUNCH_PASSES(ce_warp_rows_in_registers, T, 1);
    else if (per_lane <= 2)
        LAUNCH_PASSES(ce_warp_rows_in_registers, T, 2);
    else if (per_lane <= 4)
        LAUNCH_PASSES(ce_warp_rows_in_registers, T, 4);
    else if (per_lane <= 8)
        LAUNCH_PASSES(ce_warp_rows_in_registers, T, 8);
    else if (per_lane <= 16)
        LAUNCH_PASSES(ce_warp_rows_in_registers, T, 16);
    else if (per_lane <= 32)
        LAUNCH_PASSES(ce_warp_rows_in_registers, T, 32);
    else
        LAUNCH_PASSES(ce_warp_rows_streamed, T);
    LAUNCH_CHECK();
}

extern "C" void ce_v3(const void *x, const int32_t *labels, float *loss, void *dx, size_t n_rows,
                      size_t n_classes, enum dtype t, void *workspace, cudaStream_t s)
{
    kl_note_rung("v3_warp_per_row");
    ce_workspace *ws = (ce_workspace *)workspace;
    if (t == DT_FP32)
        launch((const float *)x, labels, loss, (float *)dx, n_rows, (int)n_classes, ws, s);
    else
        launch((const __half *)x, labels, loss, (__half *)dx, n_rows, (int)n_classes, ws, s);
}
