/* v7, pipelined rows: the next row's logits stream in while this row's gradient streams out.
 *
 * Idea: v4 reads a long row into one block's shared memory, merges, writes dx from the copy,
 * then starts the next row: at the large preset (a 201 KB fp32 row, one block an SM) each SM
 * alternates reading and writing, pausing at every merge (70% of the roof backward). Here each
 * block stays resident (as many as fit, each walking rows b, b + gridDim.x, ...) and keeps a
 * row in a shared-memory ring. Slot q belongs to thread q % G for good: the thread that copies
 * pack q in (cp.async, 16 bytes, no registers) is the only one that reads it, so no barrier
 * guards the slots, and it refills the slot with the next row's pack once done with it:
 *   - forward: after its own pass (v4's online max and sum): the next row loads during the merge;
 *   - backward and fwd_bwd: pack by pack, right after writing that pack's gradient, so reads
 *     overlap writes; the same pass summarises the next row CE_LAG slots behind the refills.
 * Around that: packs start at the row's first 128-byte boundary and refills ask for whole L2
 * lines (`.L2::128B`), the ring on a line of shared memory (each kernel's static shared memory
 * is whole lines; test v7_rings_start_on_a_line); head, tail and label fetched a row ahead;
 * one barrier a row; a gradient of one FADD, one FFMA and one exp a logit (ce_gradient_term).
 * What changed from v4: the copy is refilled as it is used, so a block always has loads in
 * flight; the gradient pass also summarises the next row; fewer instructions per logit.
 * Expected: 88% of the roof or more at the large preset in every pass and both dtypes.
 * Limits: rows of more than 1024 logits whose copy fits shared memory (about 58K fp32 or 116K
 * fp16 on the H200), x and dx at the same offset from a 16-byte boundary; else v4. cp.async
 * needs compute capability 8.0 (older GPUs copy through registers, correct but unpipelined).
 * Knobs: CE_LAG (the block below) and CE_SPARE (above plan_spare).
 * Measured (H200): as predicted, the best rung of every large-preset pass: backward 860 us
 * fp32, 90.5% of the roof (88.9% fp16, 4.00x cuDNN); forward 101.8% and 93.7%. */
#include "async_copy.cuh"
#include "cross_entropy.cuh"
#include "cross_entropy.h"
#include "launch.cuh"

#define MAX_THREADS 1024

#ifndef CE_LAG
#define CE_LAG 3 /* gradient passes: slots refilled before the oldest refill is summarised */
#endif

/* What a thread holds of a row besides its slots: the row's split, its label, the head or tail
 * element whose index is this thread's (0 where there is none), and in thread 0 of the gradient
 * kernels the label's logit. The logits stay as loaded, in T, until the row is used: converting
 * an fp16 logit to float as it is fetched would make every warp wait there for the load. */
template <typename T> struct ce_row_edges {
    ce_row_split split;
    int32_t label;
    T head_v, tail_v;
    T label_v;
};

/* This thread's head and tail elements of row xr, split as e.split, into registers. */
template <typename T>
__device__ __forceinline__ void ce_load_edge_values(const T *xr, ce_row_edges<T> &e)
{
    const int t = threadIdx.x;
    e.head_v = t < e.split.head ? xr[t] : T{};
    e.tail_v = t < e.split.tail ? xr[e.split.head + e.split.n_packs * pack16<T>::width + t] : T{};
}

/* Loads row r's split, label, this thread's head and tail elements and, in thread 0 if asked
 * for, the label's logit into registers. */
template <typename T, bool LABEL_LOGIT>
__device__ __forceinline__ ce_row_edges<T> ce_fetch_edges(const T *x, const int32_t *labels,
                                                          size_t r, int n_classes)
{
    const T *xr = x + r * (size_t)n_classes;
    ce_row_edges<T> e;
    e.split = ce_split_row<T, 128>(xr, n_classes);
    e.label = labels[r];
    ce_load_edge_values(xr, e);
    e.label_v = LABEL_LOGIT && threadIdx.x == 0 && ce_label_ok(e.label, n_classes)
                    ? xr[e.label]
                    : T{};
    return e;
}

/* Starts fetching row r for the forward: this thread's packs into their slots (the caller
 * commits), its head and tail elements and the label into registers. */
template <typename T>
__device__ __forceinline__ ce_row_edges<T> ce_fetch_row(const T *x, const int32_t *labels,
                                                        size_t r, int n_classes, uint4 *ring)
{
    const int t = threadIdx.x;
    const T *xr = x + r * (size_t)n_classes;
    ce_row_edges<T> a;
    a.split = ce_split_row<T, 128>(xr, n_classes);
    a.label = labels[r];
    const uint4 *packs = reinterpret_cast<const uint4 *>(xr + a.split.head);
    for (int q = t; q < a.split.n_packs; q += blockDim.x)
        kl_copy16_async(ring + q, packs + q);
    ce_load_edge_values(xr, a);
    return a;
}

/* Row r's 16-byte packs and their number (none past the last row). */
template <typename T>
__device__ __forceinline__ const uint4 *ce_row_packs(const T *x, size_t r, size_t n_rows,
                                                     int n_classes, int *n_packs)
{
    const T *xr = x + (r < n_rows ? r : 0) * (size_t)n_classes;
    const ce_row_split s = ce_split_row<T, 128>(xr, n_classes);
    *n_packs = r < n_rows ? s.n_packs : 0;
    return reinterpret_cast<const uint4 *>(xr + s.head);
}

/* Refills `slot` with pack q of a row, as a copy group of its own, empty where the row has no
 * pack q: every thread commits exactly one group per slot it owns per row, so the k-th group
 * it committed is always its k-th refill, and "all but the newest n groups have landed" names
 * the slots that may be read. */
__device__ __forceinline__ void ce_refill(uint4 *slot, const uint4 *packs, int q, int n_packs)
{
    if (q < n_packs)
        kl_copy16_async<true>(slot, packs + q); /* whole lines: see the header */
    kl_copies_commit();
}

/* A float's bits as an unsigned integer that orders as the float does (negative floats count
 * down from 0x7fffffff, positive ones up from 0x80000000), and back. */
__device__ __forceinline__ unsigned ce_ordered_bits(float f)
{
    const unsigned u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

__device__ __forceinline__ float ce_float_of_ordered_bits(unsigned k)
{
    return __uint_as_float((k & 0x80000000u) ? k & 0x7fffffffu : ~k);
}

/* The warp's (m, s) in every lane: the maximum in one redux.sync, each lane's sum rescaled to it
 * once, then the sums added by v3's butterfly (the same bits in every lane). */
__device__ __forceinline__ ce_online ce_warp_merge_max_first(ce_online st)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned top = __reduce_max_sync(CE_FULL_MASK, ce_ordered_bits(st.m));
    const float m = ce_float_of_ordered_bits(top);
#else
    const float m = ce_warp_max(st.m); /* redux.sync needs compute capability 8.0 */
#endif
    return {m, ce_warp_sum(st.s * ce_exp(st.m - m))};
}

/* Waits for this thread's copies but the newest `spare` (0 or 1) groups. */
__device__ __forceinline__ void ce_wait_but_spare(int spare)
{
    if (spare)
        kl_copies_wait<1>();
    else
        kl_copies_wait<0>();
}

/* The block's (m, s), returned to every thread, after one barrier. part alternates between two
 * buffers from row to row, so that a fast warp writing the next row's value never overwrites
 * one a slow warp has still to read. */
__device__ __forceinline__ ce_online ce_block_merge_alternating(ce_online (*part)[32], int i,
                                                                ce_online st)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    st = ce_warp_merge_max_first(st);
    if (lane == 0)
        part[i & 1][warp] = st;
    __syncthreads();
    return ce_warp_merge_max_first(lane < warps ? part[i & 1][lane] : ce_online_empty());
}

template <typename T> __device__ __forceinline__ void ce_unpack(uint4 raw, float *f)
{
    pack16<T> pk;
    pk.raw = raw;
#pragma unroll
    for (int j = 0; j < pack16<T>::width; j++)
        f[j] = to_float(pk.e[j]);
}

/* A held pack into the summary, where the row has it. */
template <typename T>
__device__ __forceinline__ ce_online ce_push_held(ce_online st, const uint4 *held, bool present)
{
    if (present) {
        float f[pack16<T>::width];
        ce_unpack<T>(*held, f);
        st = ce_online_push<pack16<T>::width>(st, f);
    }
    return st;
}

/* The row's head and tail elements into the summary. */
template <typename T>
__device__ __forceinline__ ce_online ce_push_edges(ce_online st, const ce_row_edges<T> &e)
{
    const float head = to_float(e.head_v), tail = to_float(e.tail_v);
    if ((int)threadIdx.x < e.split.head)
        st = ce_online_push<1>(st, &head);
    if ((int)threadIdx.x < e.split.tail)
        st = ce_online_push<1>(st, &tail);
    return st;
}

/* Forward: one pass a row. A thread waits for its slots of the row, summarises them, and at
 * once refills them with the next row's packs, before the row's merge: the next row streams in
 * while the block merges and while the other block on the SM, if any, works. (Refilling each
 * slot as soon as it is read, inside the pass, ran slower: 72% against 83% of the roof in fp16
 * at the large preset.) */
template <typename T>
__global__ void __launch_bounds__(MAX_THREADS)
    ce_pipelined_loss(const T *__restrict__ x, const int32_t *__restrict__ labels,
                      float *__restrict__ loss, size_t n_rows, int n_classes, ce_workspace *ws)
{
    using pack = pack16<T>;
    constexpr int W = pack::width;
    extern __shared__ uint4 ring[];
    __shared__ ce_online part[2][32];
    const int t = threadIdx.x, G = blockDim.x;
    float loss_sum = 0.f; /* this thread's loss terms */

    size_t row = blockIdx.x;
    ce_row_edges<T> ahead = {};
    if (row < n_rows)
        ahead = ce_fetch_row(x, labels, row, n_classes, ring);
    kl_copies_commit();
    for (int i = 0; row < n_rows; i++, row += gridDim.x) {
        const ce_row_edges<T> cur = ahead;
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
            if ((unsigned)at < (unsigned)W) {
#pragma unroll
                for (int j = 0; j < W; j++)
                    x_label = j == at ? f[j] : x_label;
                has_label = true;
            }
            st = ce_online_push<W>(st, f);
        }
        st = ce_push_edges(st, cur);
        if (t < cur.split.head && t == label) {
            x_label = to_float(cur.head_v);
            has_label = true;
        }
        if (t < cur.split.tail && cur.split.head + cur.split.n_packs * W + t == label) {
            x_label = to_float(cur.tail_v);
            has_label = true;
        }
        /* The slots are read, so the next row may come in during the merge. */
        if (next < n_rows)
            ahead = ce_fetch_row(x, labels, next, n_classes, ring);
        kl_copies_commit();

        const ce_online rs = ce_block_merge_alternating(part, i, st);
        const float log_sum = logf(rs.s);
        if (has_label && ok)
            loss_sum += ce_row_loss(rs.m, log_sum, x_label);
        if (!ok && t == 0)
            loss_sum += ce_nan();
    }
    ce_finish_mean(ce_block_sum(loss_sum), loss, n_rows, ws->partial_sums, &ws->blocks_done);
}

/* Backward, and forward with backward: the row's summary must be complete before its gradient
 * can be written, so the gradient pass over row r does double duty. Each slot is turned into
 * dx, refilled with a pack of row r + 1, and CE_LAG refills later, its copy landed, summarised
 * for row r + 1: by the end of the pass, row r + 1 is summarised but for its last few packs,
 * and the block merges it at once. The loss, if asked for, is taken from the logits as the
 * gradient pass reads them.
 * A thread's slots t, t + G, ... form a ring of its own: `len` of them hold its packs of a row
 * and `spare` (0 or 1) more let the next row start early. Row i's k-th pack of the thread lies
 * in its slot (first_i + k) mod (len + spare), and first_{i+1} = first_i + len: the slot freed
 * by pack k of row r takes pack k + spare of row r + 1 (or, past its end, a first pack of row
 * r + 2). So the last refill of row r + 1 leaves `spare` slots before the pass ends, and the
 * wait for it at the row's end is that much shorter. */
template <typename T, bool LOSS>
__global__ void __launch_bounds__(MAX_THREADS)
    ce_pipelined_grad(const T *__restrict__ x, const int32_t *__restrict__ labels,
                      float *__restrict__ loss, T *__restrict__ dx, size_t n_rows,
                      int n_classes, int n_slots, int spare, float inv_rows, ce_workspace *ws)
{
    constexpr int W = pack16<T>::width;
    extern __shared__ uint4 ring[];
    __shared__ ce_online part[2][32];
    const int t = threadIdx.x, G = blockDim.x;
    const int len = (n_slots - t + G - 1) / G, ring_len = len + spare;
    float loss_sum = 0.f;
    uint4 *const mine = ring + t; /* this thread's slot j is mine[G j] */

    /* The block's first row, and the first `spare` packs of its second; the first row is
     * summarised once all of it has landed. */
    size_t row = blockIdx.x;
    int n_packs, n_packs_next;
    const uint4 *packs = ce_row_packs(x, row, n_rows, n_classes, &n_packs);
    for (int k = 0; k < len; k++)
        ce_refill(mine + G * k, packs, t + G * k, n_packs);
    const uint4 *packs_next = ce_row_packs(x, row + gridDim.x, n_rows, n_classes, &n_packs_next);
    for (int k = 0; k < spare; k++)
        ce_refill(mine + G * (len + k), packs_next, t + G * k, n_packs_next);
    ce_row_edges<T> ahead = {};
    if (row < n_rows)
        ahead = ce_fetch_edges<T, LOSS>(x, labels, row, n_classes);
    ce_wait_but_spare(spare);
    ce_online st = ce_online_empty();
    for (int k = 0; k < len; k++)
        st = ce_push_held<T>(st, mine + G * k, t + G * k < n_packs);
    st = ce_push_edges(st, ahead);

    int first = 0; /* the slot of this thread's first pack of the row */
    for (int i = 0; row < n_rows; i++, row += gridDim.x) {
        const ce_row_edges<T> cur = ahead;
        const size_t next = row + gridDim.x;
        const bool ok = ce_label_ok(cur.label, n_classes);
        const int body = ok ? cur.label - cur.split.head : -1;
        const ce_online rs = ce_block_merge_alternating(part, i, st);
        const float log_sum = logf(rs.s);
        const ce_gradient_row g = ce_gradient_of_row(rs.m, log_sum, inv_rows);
        if (next < n_rows)
            ahead = ce_fetch_edges<T, LOSS>(x, labels, next, n_classes);
        packs = ce_row_packs(x, next, n_rows, n_classes, &n_packs);
        packs_next = ce_row_packs(x, next + gridDim.x, n_rows, n_classes, &n_packs_next);

        T *dr = dx + row * (size_t)n_classes;
        uint4 *dp = reinterpret_cast<uint4 *>(dr + cur.split.head);
        st = ce_online_empty();
        int slot = first;
        int lagging = first + len < ring_len ? first + len : first + len - ring_len;
        int summarised = 0; /* of the next row's packs */
        for (int k = 0; k < len; k++) {
            const int q = t + G * k;
            if (q < cur.split.n_packs) {
                float f[W];
                ce_unpack<T>(mine[G * slot], f);
                const int at = body - q * W; /* the label's place in this pack, if it is here */
#pragma unroll
                for (int j = 0; j < W; j++)
                    f[j] = ce_gradient_term(f[j], g);
                if ((unsigned)at < (unsigned)W)
#pragma unroll
                    for (int j = 0; j < W; j++)
                        f[j] -= j == at ? inv_rows : 0.f;
                pack16<T> pk;
#pragma unroll
                for (int j = 0; j < W; j++)
                    pk.e[j] = from_float<T>(ok ? f[j] : ce_nan());
                dp[q] = pk.raw;
            }
            const int later = k + spare; /* the pack that follows into this slot */
            if (later < len)
                ce_refill(mine + G * slot, packs, t + G * later, n_packs);
            else
                ce_refill(mine + G * slot, packs_next, t + G * (later - len), n_packs_next);
            slot = slot + 1 < ring_len ? slot + 1 : 0;
            if (later >= CE_LAG) {
                kl_copies_wait<CE_LAG>();
                st = ce_push_held<T>(st, mine + G * lagging, t + G * summarised < n_packs);
                lagging = lagging + 1 < ring_len ? lagging + 1 : 0;
                summarised++;
            }
        }
        ce_wait_but_spare(spare);
        for (; summarised < len; summarised++) {
            st = ce_push_held<T>(st, mine + G * lagging, t + G * summarised < n_packs);
            lagging = lagging + 1 < ring_len ? lagging + 1 : 0;
        }
        st = ce_push_edges(st, ahead); /* unused after the last row */
        first = first + len < ring_len ? first + len : first + len - ring_len;

        if (t < cur.split.head)
            dr[t] = from_float<T>(ok ? ce_gradient(to_float(cur.head_v), rs.m, log_sum,
                                                   t == cur.label, inv_rows)
                                     : ce_nan());
        if (t < cur.split.tail) {
            const int c = cur.split.head + cur.split.n_packs * W + t;
            dr[c] = from_float<T>(ok ? ce_gradient(to_float(cur.tail_v), rs.m, log_sum,
                                                   c == cur.label, inv_rows)
                                     : ce_nan());
        }
        if (LOSS && t == 0)
            loss_sum += ok ? ce_row_loss(rs.m, log_sum, to_float(cur.label_v)) : ce_nan();
    }
    if (LOSS) /* the block's sum is thread 0's */
        ce_finish_mean(loss_sum, loss, n_rows, ws->partial_sums, &ws->blocks_done);
}

/* ---- host ---- */

/* A kernel's ring for rows of n_classes logits, `width` to a 16-byte slot, and the grid that
 * walks the rows: one block per SM when the ring takes over half an SM's shared memory, given
 * every thread; else 512 threads and as many blocks as fit. */
struct ring_plan {
    int n_slots, spare;
    size_t bytes;
    int threads;
    unsigned blocks;
};

/* False when the ring does not fit the kernel's shared memory (room: asked for once). */
static bool plan_ring(const void *kernel, size_t *room, int n_classes, int width, size_t n_rows,
                      struct ring_plan *p)
{
    p->n_slots = n_classes / width + 1;
    p->spare = 0;
    p->bytes = (size_t)p->n_slots * 16;
    if (!*room)
        *room = kl_grant_shared_memory(kernel);
    if (p->bytes > *room)
        return false;
    const size_t per_sm = (size_t)kl_device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor);
    p->threads = 2 * (p->bytes + 1024) > per_sm ? MAX_THREADS : 512;
    size_t b = (size_t)kl_sm_count() * (size_t)kl_blocks_per_sm(kernel, p->threads, p->bytes);
    b = b < n_rows ? b : n_rows;
    p->blocks = (unsigned)(b < CE_MAX_BLOCKS ? b : CE_MAX_BLOCKS);
    return true;
}

#ifndef CE_SPARE
#define CE_SPARE 1 /* the gradient passes' spare slots a thread, where they fit */
#endif

/* Gives the gradient kernel's threads CE_SPARE more slots each where every thread holds a pack
 * of each row and the larger ring fits as many blocks an SM as the plain one. */
static void plan_spare(const void *kernel, size_t room, struct ring_plan *p)
{
    const size_t bytes = p->bytes + (size_t)CE_SPARE * (size_t)p->threads * 16;
    if (!CE_SPARE || p->n_slots < p->threads || bytes > room ||
        kl_blocks_per_sm(kernel, p->threads, bytes) <
            kl_blocks_per_sm(kernel, p->threads, p->bytes))
        return;
    p->spare = CE_SPARE;
    p->bytes = bytes; /* same blocks an SM, so the grid stands */
}

template <typename T>
static bool launch_loss(const T *x, const int32_t *labels, float *loss, size_t n_rows,
                        int n_classes, ce_workspace *ws, cudaStream_t s)
{
    static size_t room = 0;
    struct ring_plan p;
    if (!plan_ring((const void *)ce_pipelined_loss<T>, &room, n_classes, pack16<T>::width,
                   n_rows, &p))
        return false;
    ce_pipelined_loss<T><<<p.blocks, p.threads, p.bytes, s>>>(x, labels, loss, n_rows, n_classes,
                                                              ws);
    LAUNCH_CHECK();
    return true;
}

template <typename T, bool LOSS>
static bool launch_grad(const T *x, const int32_t *labels, float *loss, T *dx, size_t n_rows,
                        int n_classes, ce_workspace *ws, cudaStream_t s)
{
    static size_t room = 0;
    struct ring_plan p;
    if (!plan_ring((const void *)ce_pipelined_grad<T, LOSS>, &room, n_classes, pack16<T>::width,
                   n_rows, &p))
        return false;
    plan_spare((const void *)ce_pipelined_grad<T, LOSS>, room, &p);
    ce_pipelined_grad<T, LOSS><<<p.blocks, p.threads, p.bytes, s>>>(
        x, labels, loss, dx, n_rows, n_classes, p.n_slots, p.spare, 1.f / (float)n_rows, ws);
    LAUNCH_CHECK();
    return true;
}

template <typename T>
static bool launch(const T *x, const int32_t *labels, float *loss, T *dx, size_t n_rows,
                   size_t n_classes, ce_workspace *ws, cudaStream_t s)
{
    if (n_classes <= CE_WARP_MAX_CLASSES || n_classes > 0x7fffffff)
        return false;
    if (dx && ((uintptr_t)x & 15) != ((uintptr_t)dx & 15))
        return false;
    if (loss && dx)
        return launch_grad<T, true>(x, labels, loss, dx, n_rows, (int)n_classes, ws, s);
    if (loss)
        return launch_loss(x, labels, loss, n_rows, (int)n_classes, ws, s);
    return launch_grad<T, false>(x, labels, loss, dx, n_rows, (int)n_classes, ws, s);
}

extern "C" size_t ce_v7_ring_misalignment(void)
{
    const void *const kernels[] = {
        (const void *)ce_pipelined_loss<float>,        (const void *)ce_pipelined_loss<__half>,
        (const void *)ce_pipelined_grad<float, false>, (const void *)ce_pipelined_grad<float, true>,
        (const void *)ce_pipelined_grad<__half, false>,
        (const void *)ce_pipelined_grad<__half, true>,
    };
    size_t off = 0;
    for (const void *kernel : kernels) {
        cudaFuncAttributes a;
        CUDA_CHECK(cudaFuncGetAttributes(&a, kernel));
        off |= a.sharedSizeBytes % 128;
    }
    return off;
}

extern "C" void ce_v7(const void *x, const int32_t *labels, float *loss, void *dx, size_t n_rows,
                      size_t n_classes, enum dtype t, void *workspace, cudaStream_t s)
{
    kl_note_rung("v7_pipelined");
    ce_workspace *ws = (ce_workspace *)workspace;
    const bool done =
        t == DT_FP32
            ? launch((const float *)x, labels, loss, (float *)dx, n_rows, n_classes, ws, s)
            : launch((const __half *)x, labels, loss, (__half *)dx, n_rows, n_classes, ws, s);
    if (!done)
        ce_v4(x, labels, loss, dx, n_rows, n_classes, t, workspace, s);
}
