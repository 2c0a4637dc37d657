/* v8, split rows: the forward as one stream of short spans, a warp each, with no barrier.
 *
 * Idea: the forward needs of a row only its (m, s) and one logit, so nothing has to hold the
 * row, and no block has to wait for it. v7's forward still gives a row to a block: each thread
 * waits for its whole share of the row, works through it, and the block meets at the row's
 * merge, so a block has loads in flight only while it is not working. Here each row is cut
 * into spans of 256 packs (4 KB: 2048 fp16 or 1024 fp32 logits) and each span goes to one warp,
 * which loads it at once (8 packs, 128 bytes, a lane), summarises it (v4's online (m, s), then
 * the warp's shuffles) and stores the span's (m, s) in a workspace, a plain store that nothing
 * waits for. A second, small kernel then gives each row to a warp, which merges the row's spans
 * in span order and adds the row's loss; the mean is v3's (ce_finish_mean), so the loss has the
 * same bits on every run. That kernel is launched early (programmatic dependent launch, as in
 * v6, on sm_90), so that its launch overlaps the stream's last spans.
 * What changed from v7 (forward only): no block-wide merge, no copy in shared memory, no
 * barrier; a row's spans summarised by many warps at once; 8 bytes of workspace a span, and a
 * second kernel that reads them.
 * Expected: the large-preset forward near the read bandwidth in both dtypes (v7 then made 83%
 * in fp16): 32 warps an SM, each loading 4 KB that nothing holds back but its own summary.
 * Limits: the backward and the fused pass are v7's (they must hold the row to write its
 * gradient), and rows of up to 1024 logits run as in v7. The span states lie in the caller's
 * workspace, past the mean's (ce_workspace_bytes), so concurrent launches need one each. The
 * variants that lost are in NOTES.md.
 * Measured (H200): large forward 90.4% of the roof in fp16 and 97.1% in fp32, near the read
 * bandwidth but behind v7 (93.7%, 101.8%); at 1024x4096 in fp16 it wins, 9.437 us
 * against v7's 9.905. */
#include "cross_entropy.cuh"
#include "cross_entropy.h"
#include "launch.cuh"

#define SPLIT_THREADS 256
#define PACKS_A_LANE 8                  /* 128 bytes in flight a lane */
#define SPAN_PACKS (32 * PACKS_A_LANE) /* a warp's span of a row */
#define FINISH_THREADS 256

/* What a lane holds of one span: its packs, and the row's head or tail element where the span
 * is the row's first or last and the lane's index falls there. */
template <typename T> struct span_values {
    uint4 packs[PACKS_A_LANE];
    int n_packs; /* of the span */
    float head_v, tail_v;
    bool has_head, has_tail;
};

/* Loads span `span` of row `row`: all of a lane's packs are in flight at once. */
template <typename T>
__device__ __forceinline__ span_values<T> load_span(const T *__restrict__ x, size_t row,
                                                    int span, int n_spans, int n_classes,
                                                    int lane)
{
    constexpr int W = pack16<T>::width;
    const T *xr = x + row * (size_t)n_classes;
    const ce_row_split sp = ce_split_row(xr, n_classes);
    const int first = span * SPAN_PACKS;
    span_values<T> v;
    v.n_packs = min(sp.n_packs - first, SPAN_PACKS);
    const uint4 *packs = reinterpret_cast<const uint4 *>(xr + sp.head) + first;
#pragma unroll
    for (int k = 0; k < PACKS_A_LANE; k++)
        if (lane + 32 * k < v.n_packs)
            v.packs[k] = packs[lane + 32 * k];
    v.has_head = span == 0 && lane < sp.head;
    v.has_tail = span == n_spans - 1 && lane < sp.tail;
    v.head_v = v.has_head ? to_float(xr[lane]) : 0.f;
    v.tail_v = v.has_tail ? to_float(xr[sp.head + sp.n_packs * W + lane]) : 0.f;
    return v;
}

/* The span's (m, s), the same in every lane. */
template <typename T>
__device__ __forceinline__ ce_online summarise_span(const span_values<T> &v, int lane)
{
    constexpr int W = pack16<T>::width;
    ce_online st = ce_online_empty();
#pragma unroll
    for (int k = 0; k < PACKS_A_LANE; k++) {
        if (lane + 32 * k < v.n_packs) {
            pack16<T> pk;
            pk.raw = v.packs[k];
            float f[W];
#pragma unroll
            for (int j = 0; j < W; j++)
                f[j] = to_float(pk.e[j]);
            st = ce_online_push<W>(st, f);
        }
    }
    if (v.has_head)
        st = ce_online_push<1>(st, &v.head_v);
    if (v.has_tail)
        st = ce_online_push<1>(st, &v.tail_v);
    return ce_warp_merge(st);
}

/* The stream: warp k of the grid takes spans k, k + (warps in the grid), ...; span u is span
 * u % n_spans of row u / n_spans, and the step between a warp's spans is step_rows rows and
 * step_spans spans (the warps in the grid, divided by n_spans, on the host). */
template <typename T>
__global__ void __launch_bounds__(SPLIT_THREADS, 4)
    ce_split_spans(const T *__restrict__ x, size_t n_rows, int n_classes, int n_spans,
                   size_t step_rows, int step_spans, ce_online *__restrict__ span_states)
{
    kl_let_next_grid_start(); /* the finishing kernel may launch, and wait */
    const int lane = threadIdx.x & 31;
    const unsigned warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    size_t row = warp / n_spans;
    int span = (int)(warp % n_spans);
    while (row < n_rows) {
        const ce_online st =
            summarise_span(load_span(x, row, span, n_spans, n_classes, lane), lane);
        if (lane == 0)
            span_states[row * n_spans + span] = st;
        row += step_rows;
        span += step_spans;
        if (span >= n_spans) {
            span -= n_spans;
            row++;
        }
    }
}

/* The rows: a warp a row merges its spans in span order and adds its loss; then the mean. */
template <typename T>
__global__ void __launch_bounds__(FINISH_THREADS)
    ce_split_finish(const T *__restrict__ x, const int32_t *__restrict__ labels,
                    float *__restrict__ loss, size_t n_rows, int n_classes, int n_spans,
                    const ce_online *__restrict__ span_states, ce_workspace *ws)
{
    kl_wait_for_previous_grid(); /* every span's state is stored */
    const int lane = threadIdx.x & 31;
    const size_t warps = (size_t)gridDim.x * (blockDim.x / 32);
    float loss_sum = 0.f; /* lane 0's */
    for (size_t row = (blockIdx.x * blockDim.x + threadIdx.x) / 32; row < n_rows; row += warps) {
        ce_online rs = ce_online_empty();
        for (int q = lane; q < n_spans; q += 32)
            rs = ce_online_merge(rs, span_states[row * n_spans + q]);
        rs = ce_warp_merge(rs);
        if (lane == 0) {
            const int32_t label = labels[row];
            const bool ok = ce_label_ok(label, n_classes);
            const float x_label = ok ? to_float(x[row * (size_t)n_classes + label]) : 0.f;
            loss_sum += ok ? ce_row_loss(rs.m, logf(rs.s), x_label) : ce_nan();
        }
    }
    ce_finish_mean(ce_block_sum(loss_sum), loss, n_rows, ws->partial_sums, &ws->blocks_done);
}

/* ---- host ---- */

/* Spans a row of n_classes logits, `width` to a pack, is cut into (whole packs bound it: a row
 * that starts off a 16-byte boundary has fewer). */
static int spans_a_row(int n_classes, int width)
{
    const int packs = n_classes / width;
    return (packs + SPAN_PACKS - 1) / SPAN_PACKS; /* C > 1024: packs >= 128 */
}

extern "C" size_t ce_workspace_bytes(size_t n_rows, size_t n_classes, enum dtype t)
{
    /* v8 cuts rows into spans only where it runs its own forward: rows of over 1024 logits. */
    if (n_classes <= CE_WARP_MAX_CLASSES)
        return sizeof(struct ce_workspace);
    const int n_spans = spans_a_row((int)n_classes, 16 / (int)dtype_size(t));
    return CE_SPAN_STATES_OFFSET + n_rows * (size_t)n_spans * sizeof(ce_online);
}

template <typename T>
static void launch_loss(const T *x, const int32_t *labels, float *loss, size_t n_rows,
                        int n_classes, void *workspace, cudaStream_t s)
{
    const int n_spans = spans_a_row(n_classes, pack16<T>::width);
    const size_t spans = n_rows * (size_t)n_spans;
    ce_workspace *ws = (ce_workspace *)workspace;
    ce_online *states = (ce_online *)((char *)workspace + CE_SPAN_STATES_OFFSET);

    const size_t warps_a_block = SPLIT_THREADS / 32;
    size_t blocks = (size_t)kl_sm_count() *
                    (size_t)kl_blocks_per_sm((const void *)ce_split_spans<T>, SPLIT_THREADS, 0);
    const size_t enough = (spans + warps_a_block - 1) / warps_a_block;
    blocks = blocks < enough ? blocks : enough;
    const size_t warps = blocks * warps_a_block;
    ce_split_spans<T><<<(unsigned)blocks, SPLIT_THREADS, 0, s>>>(
        x, n_rows, n_classes, n_spans, warps / (size_t)n_spans, (int)(warps % (size_t)n_spans),
        states);
    LAUNCH_CHECK();

    const size_t rows_a_block = FINISH_THREADS / 32;
    size_t finish_blocks = (n_rows + rows_a_block - 1) / rows_a_block;
    finish_blocks = finish_blocks < CE_MAX_BLOCKS ? finish_blocks : CE_MAX_BLOCKS;
    const struct kl_launch_opts early = {1, kl_device_cc() >= 90};
    kl_launch(ce_split_finish<T>, dim3((unsigned)finish_blocks), dim3(FINISH_THREADS), 0, s,
              early, x, labels, loss, n_rows, n_classes, n_spans, (const ce_online *)states, ws);
}

extern "C" void ce_v8(const void *x, const int32_t *labels, float *loss, void *dx, size_t n_rows,
                      size_t n_classes, enum dtype t, void *workspace, cudaStream_t s)
{
    kl_note_rung("v8_split_rows");
    if (dx || !loss || n_classes <= CE_WARP_MAX_CLASSES) {
        ce_v7(x, labels, loss, dx, n_rows, n_classes, t, workspace, s);
        return;
    }
    if (t == DT_FP32)
        launch_loss((const float *)x, labels, loss, n_rows, (int)n_classes, workspace, s);
    else
        launch_loss((const __half *)x, labels, loss, n_rows, (int)n_classes, workspace, s);
}
