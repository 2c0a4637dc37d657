/* v7, pipelined rows: the next row's logits stream in while this row's gradient streams out.
 *
 * Idea: v4 reads a long row into one block's shared memory, merges, then writes dx from the
 * copy, and only then starts the next row: at the large preset (a 201 KB fp32 row, one block per
 * SM) each SM alternates between reading and writing, with a pause at every merge, and gets
 * 70% of the roof backward. v5's clusters did worse. Here each block stays resident (a grid of
 * as many blocks as fit, each walking rows b, b + gridDim.x, ...) and keeps a row of logits in a
 * shared-memory ring. Pack q of a row lives in slot q, and slot q belongs to thread q % G for
 * good: the thread that copies a pack in (cp.async, 16 bytes, no registers) is the only one
 * that reads it, so no barrier guards the slots. As soon as a thread is done with a slot it
 * refills it with the same pack of the next row:
 *   - forward: right after its pass over its packs (its own max and sum, v4's online update),
 *     before the row's merge: the next row is loading while the block merges;
 *   - backward and fwd_bwd: pack by pack, right after it has written that pack's gradient, so
 *     the next row's reads overlap this row's writes.
 * The row's head and tail (up to 15 elements around its 16-byte-aligned packs) and its label
 * are loaded into registers one row ahead too. One barrier per row (the merge), with the merge's
 * scratch alternating between two buffers so that no second barrier is needed.
 * Per logit the loops do as little as they can, since an fp16 row brings two logits for
 * every 4 bytes: the label is looked for once per pack, not compared with every logit, and the
 * gradient is one FADD, one FFMA and one exp (ce_gradient_term), with the label's -1/N added
 * by the one thread that holds it.
 * What changed from v4: the copy is refilled as it is used, so a block always has loads in
 * flight; the head, tail and label are fetched a row early; fewer instructions per logit.
 * Expected: at the large preset 88% of the roof or more in every pass and both dtypes: the
 * forward (a read-only stream) and the backward (reads overlapping writes) no longer stop at
 * each row's merge. fp16 rows (100 KB) fit two blocks per SM, fp32 rows (201 KB) one.
 * Limits: rows of more than 1024 logits whose copy fits in shared memory (about 58K fp32 or
 * 116K fp16 logits on the H200), with x and dx at the same offset from a 16-byte boundary;
 * anything else runs as in v4. cp.async needs compute capability 8.0 (older GPUs copy through
 * registers, correct but unpipelined). */
#include "async_copy.cuh"
#include "cross_entropy.cuh"
#include "cross_entropy.h"
#include "launch.cuh"

#define MAX_THREADS 1024

static __device__ float partial_sums[CE_MAX_BLOCKS];
static __device__ unsigned blocks_done;

/* What a thread holds of a row besides its slots: the row's split, its label, and the head or
 * tail element whose index is this thread's (-FLT_MAX where there is none). */
struct ce_row_ahead {
    ce_row_split split;
    int32_t label;
    float head_v, tail_v;
};

/* Starts fetching row r: this thread's packs from `first_pack` on into their slots, its head
 * and tail elements and the label into registers. The caller commits. */
template <typename T>
__device__ __forceinline__ ce_row_ahead ce_fetch_row(const T *x, const int32_t *labels, size_t r,
                                                     int n_classes, uint4 *ring, int first_pack)
{
    const int t = threadIdx.x;
    const T *xr = x + r * (size_t)n_classes;
    ce_row_ahead a;
    a.split = ce_split_row(xr, n_classes);
    a.label = labels[r];
    const uint4 *packs = reinterpret_cast<const uint4 *>(xr + a.split.head);
    for (int q = first_pack; q < a.split.n_packs; q += blockDim.x)
        kl_copy16_async(ring + q, packs + q);
    a.head_v = t < a.split.head ? to_float(xr[t]) : -FLT_MAX;
    a.tail_v = t < a.split.tail
                   ? to_float(xr[a.split.head + a.split.n_packs * pack16<T>::width + t])
                   : -FLT_MAX;
    return a;
}

/* The block's (m, s), returned to every thread, after one barrier. part alternates between two
 * buffers from row to row, so that a fast warp writing the next row's value never overwrites
 * one a slow warp has still to read. */
__device__ __forceinline__ ce_online ce_block_merge_alternating(ce_online (*part)[32], int i,
                                                                ce_online st)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    st = ce_warp_merge(st);
    if (lane == 0)
        part[i & 1][warp] = st;
    __syncthreads();
    return ce_warp_merge(lane < warps ? part[i & 1][lane] : ce_online_empty());
}

template <typename T, bool LOSS, bool GRAD>
__global__ void __launch_bounds__(MAX_THREADS)
    ce_pipelined_rows(const T *__restrict__ x, const int32_t *__restrict__ labels,
                      float *__restrict__ loss, T *__restrict__ dx, size_t n_rows, int n_classes,
                      float inv_rows)
{
    using pack = pack16<T>;
    constexpr int W = pack::width;
    extern __shared__ uint4 ring[];
    __shared__ ce_online part[2][32];
    const int t = threadIdx.x, G = blockDim.x;
    float loss_sum = 0.f; /* this thread's loss terms */

    size_t row = blockIdx.x;
    ce_row_ahead ahead = {};
    if (row < n_rows)
        ahead = ce_fetch_row(x, labels, row, n_classes, ring, t);
    kl_copies_commit();
    for (int i = 0; row < n_rows; i++, row += gridDim.x) {
        const ce_row_ahead cur = ahead;
        const size_t next = row + gridDim.x;
        const int32_t label = cur.label;
        const bool ok = ce_label_ok(label, n_classes);
        const int body = ok ? label - cur.split.head : -1; /* the label among the packs */
        kl_copies_wait<0>();                       /* this thread's slots hold row `row` */

        /* This thread's summary, and the label's logit if it holds it. */
        ce_online st = ce_online_empty();
        float x_label = 0.f;
        bool has_label = false;
        for (int q = t; q < cur.split.n_packs; q += G) {
            pack pk;
            pk.raw = ring[q];
            float f[W];
#pragma unroll
            for (int j = 0; j < W; j++)
                f[j] = to_float(pk.e[j]);
            const int at = body - q * W; /* the label's place in this pack, if it is here */
            if (LOSS && (unsigned)at < (unsigned)W) {
#pragma unroll
                for (int j = 0; j < W; j++)
                    x_label = j == at ? f[j] : x_label;
                has_label = true;
            }
            st = ce_online_push<W>(st, f);
        }
        if (t < cur.split.head) {
            st = ce_online_push<1>(st, &cur.head_v);
            if (LOSS && t == label) {
                x_label = cur.head_v;
                has_label = true;
            }
        }
        if (t < cur.split.tail) {
            st = ce_online_push<1>(st, &cur.tail_v);
            if (LOSS && cur.split.head + cur.split.n_packs * W + t == label) {
                x_label = cur.tail_v;
                has_label = true;
            }
        }
        /* Forward only: the slots are read, so the next row may come in during the merge. */
        if (!GRAD) {
            if (next < n_rows)
                ahead = ce_fetch_row(x, labels, next, n_classes, ring, t);
            kl_copies_commit();
        }

        const ce_online rs = ce_block_merge_alternating(part, i, st);
        const float log_sum = logf(rs.s);
        if (LOSS) {
            if (has_label && ok)
                loss_sum += ce_row_loss(rs.m, log_sum, x_label);
            if (!ok && t == 0)
                loss_sum += ce_nan();
        }
        if (GRAD) {
            T *dr = dx + row * (size_t)n_classes;
            uint4 *dp = reinterpret_cast<uint4 *>(dr + cur.split.head);
            /* The next row's packs, refilled slot by slot behind the gradient. */
            const T *xn = next < n_rows ? x + next * (size_t)n_classes : x;
            const ce_row_split ns = next < n_rows ? ce_split_row(xn, n_classes) : ce_row_split{};
            const uint4 *np = reinterpret_cast<const uint4 *>(xn + ns.head);
            const ce_gradient_row g = ce_gradient_of_row(rs.m, log_sum, inv_rows);
            int q = t;
            for (; q < cur.split.n_packs; q += G) {
                pack pk;
                pk.raw = ring[q];
                float f[W];
#pragma unroll
                for (int j = 0; j < W; j++)
                    f[j] = ce_gradient_term(to_float(pk.e[j]), g);
                const int at = body - q * W;
                if ((unsigned)at < (unsigned)W)
#pragma unroll
                    for (int j = 0; j < W; j++)
                        f[j] -= j == at ? inv_rows : 0.f;
#pragma unroll
                for (int j = 0; j < W; j++)
                    pk.e[j] = from_float<T>(ok ? f[j] : ce_nan());
                dp[q] = pk.raw;
                if (q < ns.n_packs)
                    kl_copy16_async(ring + q, np + q);
            }
            for (; q < ns.n_packs; q += G) /* the next row may have one pack more */
                kl_copy16_async(ring + q, np + q);
            if (t < cur.split.head)
                dr[t] = from_float<T>(
                    ok ? ce_gradient(cur.head_v, rs.m, log_sum, t == label, inv_rows) : ce_nan());
            if (t < cur.split.tail) {
                const int c = cur.split.head + cur.split.n_packs * W + t;
                dr[c] = from_float<T>(
                    ok ? ce_gradient(cur.tail_v, rs.m, log_sum, c == label, inv_rows) : ce_nan());
            }
            if (next < n_rows)
                ahead = ce_fetch_row(x, labels, next, n_classes, ring, ns.n_packs);
            kl_copies_commit();
        }
    }
    if (LOSS)
        ce_finish_mean(ce_block_sum(loss_sum), loss, n_rows, partial_sums, &blocks_done);
}

/* ---- host ---- */

template <typename T, bool LOSS, bool GRAD> static size_t ring_room()
{
    static size_t room = 0;
    if (!room)
        room = kl_grant_shared_memory((const void *)ce_pipelined_rows<T, LOSS, GRAD>);
    return room;
}

template <typename T, bool LOSS, bool GRAD>
static bool launch_pass(const T *x, const int32_t *labels, float *loss, T *dx, size_t n_rows,
                        int n_classes, cudaStream_t s)
{
    const size_t ring_bytes = ((size_t)n_classes / pack16<T>::width + 1) * 16;
    if (ring_bytes > ring_room<T, LOSS, GRAD>())
        return false;
    int dev, per_sm_bytes, per_sm = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(
        cudaDeviceGetAttribute(&per_sm_bytes, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    /* One block per SM when the ring takes over half its shared memory: give it every thread. */
    const int threads = 2 * (ring_bytes + 1024) > (size_t)per_sm_bytes ? MAX_THREADS : 512;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, ce_pipelined_rows<T, LOSS, GRAD>, threads, ring_bytes));
    size_t blocks = (size_t)ce_sm_count() * (size_t)(per_sm > 0 ? per_sm : 1);
    blocks = blocks < n_rows ? blocks : n_rows;
    blocks = blocks < CE_MAX_BLOCKS ? blocks : CE_MAX_BLOCKS;
    ce_pipelined_rows<T, LOSS, GRAD><<<(unsigned)blocks, threads, ring_bytes, s>>>(
        x, labels, loss, dx, n_rows, n_classes, 1.f / (float)n_rows);
    LAUNCH_CHECK();
    return true;
}

template <typename T>
static bool launch(const T *x, const int32_t *labels, float *loss, T *dx, size_t n_rows,
                   size_t n_classes, cudaStream_t s)
{
    if (n_classes <= CE_WARP_MAX_CLASSES || n_classes > 0x7fffffff)
        return false;
    if (dx && ((uintptr_t)x & 15) != ((uintptr_t)dx & 15))
        return false;
    if (loss && dx)
        return launch_pass<T, true, true>(x, labels, loss, dx, n_rows, (int)n_classes, s);
    if (loss)
        return launch_pass<T, true, false>(x, labels, loss, dx, n_rows, (int)n_classes, s);
    return launch_pass<T, false, true>(x, labels, loss, dx, n_rows, (int)n_classes, s);
}

extern "C" void ce_v7(const void *x, const int32_t *labels, float *loss, void *dx, size_t n_rows,
                      size_t n_classes, enum dtype t, cudaStream_t s)
{
    const bool done =
        t == DT_FP32
            ? launch((const float *)x, labels, loss, (float *)dx, n_rows, n_classes, s)
            : launch((const __half *)x, labels, loss, (__half *)dx, n_rows, n_classes, s);
    if (!done)
        ce_v4(x, labels, loss, dx, n_rows, n_classes, t, s);
}
