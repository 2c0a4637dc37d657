/* v5, a row shared by a thread-block cluster, held in registers: small blocks, many per SM.
 *
 * Idea: v4 gives a long row to one block that sweeps it and, for the gradient, keeps a copy in
 * shared memory: at the large preset (8192 x 50257, a 201 KB fp32 row) that is one 1024-thread
 * block per SM, which stops loading while it merges and while it writes dx. Here a row is split
 * across a cluster of B <= 8 blocks of at most 256 threads (clusters are an sm_90 feature).
 * Each thread loads its share, at most 32 logits, into registers in one burst, takes its own
 * maximum m_t and keeps e = exp(x - m_t) in place of each logit: one exp per logit, no
 * rescaling, no branch (v4's online update rescales whenever the maximum grows). The threads'
 * (m_t, s_t) pairs merge once: shuffles, one barrier, then one pair per block read by every
 * block of the cluster from the others' shared memory. The gradient, e exp(m_t - m - log_sum),
 * is written from the registers: no second read, no exp. The label's logit comes from the
 * register of the thread that loaded it. An SM holds three or more such blocks at different
 * phases, so while one merges the others' loads are in flight.
 * Rows of up to 8192 logits are one block each: at 256 x 1000 a block per row, one 16-byte
 * pack a thread, where v3 gave a row one warp issuing 32 loads a lane in turn. A row at any
 * alignment is a head (rank 0's), whole packs and a tail (the last rank's). The mean takes one
 * partial per cluster, in one 64-bit atomic where the whole grid is resident (see "The mean").
 * What changed from v4: a row in registers spread over a cluster, instead of in one block's
 * shared memory; one exp per logit; one merge per row; the mean in one atomic.
 * Expected: near the roof in every pass at the large preset, fp16 included; at 256 x 1000 about
 * 3 us, 1.5 to 2 times the cuDNN baseline. Limits: compute capability 9.0; rows over a
 * cluster's 8 x 256 x 32 = 65536 logits go to v4.
 * Measured (H200): 256x1000 near the prediction (forward 3.93 us, 1.40x; fused 1.91x); the large
 * preset failed: forward 1577 us fp32, 24.7% of the roof, 0.63x (NOTES.md: cluster barriers). */
#include "cluster.cuh"
#include "cross_entropy.cuh"
#include "cross_entropy.h"
#include "launch.cuh"

#define ROW_THREADS 256
#define ROW_VALUES 32 /* logits per thread, at most */
#define MAX_CLUSTER 8
/* Three blocks an SM at least (85 registers a thread): 96 KB of fp32 logits in flight. */

/* ---- The mean. v3's last-block scheme costs three trips to L2 in a row after the last
 * block's work (the partial's store and a fence, the counter's atomic, then the partials'
 * loads), which at 256 x 1000 is a third of the kernel. v5 has two ways with fewer:
 *   - Block 0 waits (any grid). Each cluster stores its partial together with a tag, in one
 *     8-byte store; block 0 (cluster 0's first block), once its own row is done,
 *     waits for each slot to carry this launch's tag and adds the partials in cluster order.
 *     When the grid runs in several waves, block 0 waits while later waves work, and only the
 *     last slot's trip to L2 and back is left after the last cluster.
 *   - One atomic (the grid is resident at once, one block per row). Each cluster adds its
 *     partial and its arrival to one 64-bit word in a single atomicAdd, and the cluster whose
 *     add completes the count has the whole sum in the value the atomic returns: one round
 *     trip, and nothing to read afterwards. The word holds
 *       bits 50-63  clusters arrived        bits 36-49  partials kept out of the sum
 *       bits  0-35  the sum of the others, fixed point with MEAN_FRACTION_BITS fraction bits.
 *     Integers add associatively, so the sum has the same bits whatever order the clusters
 *     arrive in. A partial that is not a finite number in [0, 2^36 / clusters) in fixed point
 *     (a bad label's NaN, huge logits) is kept out, so the sum never overflows. Rounding costs
 *     at most 2^-21 a partial, so the sum is used only if nothing was kept out and it is at
 *     least half the number of clusters: its error is then within 2^-20 of the loss, as close
 *     as adding the floats. Otherwise the finishing block adds the tagged slots, which every
 *     cluster stores before its atomic, in cluster order. The atomic makes each block wait one
 *     round trip before it exits: nothing, when every block is resident from the start, but a
 *     later wave would start that much later, hence the condition.
 * Both give the same bits on every run. The tag is one more than the count of launches so far,
 * which the finishing block advances last; a launch reads it after the previous launch has
 * finished (stream order, or kl_wait_for_previous_grid), so stale slots never carry it.
 * Nothing waits for a block that waits, so neither can deadlock. */
#define MEAN_FRACTION_BITS 20
#define MEAN_SUM_BITS 36
#define MEAN_KEPT_OUT_SHIFT 36
#define MEAN_ARRIVED_SHIFT 50
#define MEAN_FIELD_MASK 0x3fffull /* 14 bits: up to 16383 clusters (CE_MAX_BLOCKS is 8192) */
#define MEAN_SLOT_BATCH 8         /* slots a thread reads before it waits for any */
/* The word, the slots and the count of launches are the caller's: struct ce_workspace. */

__device__ __forceinline__ unsigned long long ce_load_relaxed(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void ce_store_relaxed(unsigned long long *p, unsigned long long v)
{
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned ce_launch_tag(const ce_workspace *ws)
{
    unsigned v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];"
                 : "=r"(v)
                 : "l"(&ws->launches_done)
                 : "memory");
    return v + 1;
}

/* The loss, and the tag that tells the next launch's slots from this one's. */
__device__ __forceinline__ void ce_finish_loss(float *loss, float mean, unsigned tag,
                                               ce_workspace *ws)
{
    *loss = mean;
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(&ws->launches_done), "r"(tag)
                 : "memory");
}

/* The partials in cluster order, valid in thread 0; every thread of the block calls this.
 * A thread reads MEAN_SLOT_BATCH slots at once, then waits for any not yet tagged. */
__device__ __forceinline__ float ce_add_slots(unsigned tag, unsigned clusters,
                                              const ce_workspace *ws)
{
    const unsigned long long *partial_slots = ws->partial_slots;
    const unsigned G = blockDim.x;
    float mine = 0.f;
    for (unsigned first = threadIdx.x; first < clusters; first += MEAN_SLOT_BATCH * G) {
        unsigned long long slot[MEAN_SLOT_BATCH];
#pragma unroll
        for (int i = 0; i < MEAN_SLOT_BATCH; i++) {
            const unsigned c = first + i * G;
            slot[i] = c < clusters ? ce_load_relaxed(partial_slots + c) : 0;
        }
#pragma unroll
        for (int i = 0; i < MEAN_SLOT_BATCH; i++) {
            const unsigned c = first + i * G;
            if (c >= clusters)
                break;
            while ((unsigned)(slot[i] >> 32) != tag)
                slot[i] = ce_load_relaxed(partial_slots + c);
            mine += __uint_as_float((unsigned)slot[i]);
        }
    }
    return ce_block_sum(mine);
}

/* What one cluster adds to the mean's word: its arrival, and its partial in fixed point, or a mark
 * that it was kept out. */
__device__ __forceinline__ unsigned long long ce_mean_entry(float sum, unsigned clusters)
{
    const double fixed = (double)sum * (double)(1 << MEAN_FRACTION_BITS);
    const double limit = (double)(1ull << MEAN_SUM_BITS) / (double)clusters;
    const unsigned long long arrived = 1ull << MEAN_ARRIVED_SHIFT;
    if (fixed >= 0.0 && fixed < limit) /* false for NaN */
        return arrived | (unsigned long long)__double2ll_rn(fixed);
    return arrived | 1ull << MEAN_KEPT_OUT_SHIFT;
}

/* The mean from the completed word, or -1 where the floats must be added instead. */
__device__ __forceinline__ float ce_mean_from_word(unsigned long long word, unsigned clusters,
                                                   size_t n_rows)
{
    const unsigned long long sum = word & ((1ull << MEAN_SUM_BITS) - 1);
    const bool kept_out = (word >> MEAN_KEPT_OUT_SHIFT & MEAN_FIELD_MASK) != 0;
    if (kept_out || sum < (unsigned long long)clusters << (MEAN_FRACTION_BITS - 1))
        return -1.f;
    return (float)((double)sum * (1.0 / (1 << MEAN_FRACTION_BITS))) / (float)n_rows;
}

/* Every thread of cluster `cluster`'s first block calls this; sum is valid in the thread for
 * which hands_in is true, one thread of the block (thread 0 but where the caller says). */
__device__ __forceinline__ void ce_hand_in_partial(float sum, bool hands_in, float *loss,
                                                   size_t n_rows, unsigned tag, unsigned cluster,
                                                   unsigned clusters, bool one_atomic,
                                                   ce_workspace *ws)
{
    if (clusters == 1) {
        if (hands_in)
            ce_finish_loss(loss, sum / (float)n_rows, tag, ws);
        return;
    }
    if (!one_atomic) { /* block 0 waits; its own slot, stored by thread 0, is read by thread 0 */
        if (threadIdx.x == 0)
            ce_store_relaxed(ws->partial_slots + cluster,
                             (unsigned long long)tag << 32 | __float_as_uint(sum));
        if (cluster != 0)
            return;
        const float total = ce_add_slots(tag, clusters, ws);
        if (threadIdx.x == 0)
            ce_finish_loss(loss, total / (float)n_rows, tag, ws);
        return;
    }
    __shared__ bool fall_back;
    if (hands_in) {
        ce_store_relaxed(ws->partial_slots + cluster,
                         (unsigned long long)tag << 32 | __float_as_uint(sum));
        const unsigned long long mine = ce_mean_entry(sum, clusters);
        const unsigned long long word = atomicAdd(&ws->mean_word, mine) + mine;
        const bool finishing = (word >> MEAN_ARRIVED_SHIFT) == clusters;
        float mean = -1.f;
        if (finishing) {
            ws->mean_word = 0; /* every cluster has added: ready for the next launch */
            mean = ce_mean_from_word(word, clusters, n_rows);
            if (mean >= 0.f)
                ce_finish_loss(loss, mean, tag, ws);
        }
        fall_back = finishing && mean < 0.f;
    }
    __syncthreads();
    if (!fall_back)
        return;
    /* Every cluster stored its slot before its atomic, this block's own included (visible to
     * the block past the barrier). */
    const float total = ce_add_slots(tag, clusters, ws);
    if (threadIdx.x == 0)
        ce_finish_loss(loss, total / (float)n_rows, tag, ws);
}

/* Where a block's logits of one row lie. vec: packs q in [first_pack, end_pack) of the row's
 * 16-byte-aligned body, pack q at element head + q W; the head's elements (rank 0) and the
 * tail's (last rank) go one per thread. Otherwise the block's slice [first, first + slice) in
 * the scalar layout of softmax's rows: element first + (p W + j) G + t. */
struct ce_slice {
    int head, n_packs, tail; /* the row's split (vec) */
    int first, end;          /* packs (vec) or elements (scalar) of this block */
};

template <typename T, int P>
__device__ __forceinline__ ce_slice ce_slice_of(const T *row, int n_classes, bool vec,
                                                unsigned rank)
{
    constexpr int W = pack16<T>::width;
    const int per_block = P * (int)blockDim.x;
    ce_slice sl;
    if (vec) {
        const ce_row_split r = ce_split_row(row, n_classes);
        sl.head = r.head;
        sl.n_packs = r.n_packs;
        sl.tail = r.tail;
        sl.first = (int)rank * per_block;
        sl.end = min(sl.first + per_block, r.n_packs);
    } else {
        sl.head = sl.n_packs = sl.tail = 0;
        sl.first = (int)rank * per_block * W;
        sl.end = min(sl.first + per_block * W, n_classes);
    }
    return sl;
}

/* Element index of value j of this thread's pack p, or -1 past the slice. */
template <int W>
__device__ __forceinline__ int ce_element(const ce_slice &sl, bool vec, int p, int j)
{
    const int t = threadIdx.x, G = blockDim.x;
    if (vec) {
        const int q = sl.first + p * G + t;
        return q < sl.end ? sl.head + q * W + j : -1;
    }
    const int e = sl.first + (p * W + j) * G + t;
    return e < sl.end ? e : -1;
}

/* The block's (m, s), returned to every thread: one barrier. part must not be written again
 * before every thread has passed the next barrier of the block (or the cluster). */
__device__ __forceinline__ ce_online ce_block_merge_once(ce_online *part, ce_online st)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    st = ce_warp_merge(st);
    if (lane == 0)
        part[warp] = st;
    __syncthreads();
    return ce_warp_merge(lane < warps ? part[lane] : ce_online_empty());
}

struct ce_sum_op {
    __device__ float operator()(float a, float b) const { return a + b; }
};

struct ce_online_merge_op {
    __device__ ce_online operator()(ce_online a, ce_online b) const
    {
        return ce_online_merge(a, b);
    }
};

template <typename T, int P, bool LOSS, bool GRAD>
__global__ void __launch_bounds__(ROW_THREADS, 3)
    ce_cluster_rows(const T *__restrict__ x, const int32_t *__restrict__ labels,
                    float *__restrict__ loss, T *__restrict__ dx, size_t n_rows, int n_classes,
                    float inv_rows, bool vec, bool one_atomic, ce_workspace *ws)
{
    constexpr int W = pack16<T>::width;
    __shared__ ce_online part[32], published[1], combined[1];
    __shared__ float published_loss[1], combined_loss[1];
    kl_let_next_grid_start();
    const unsigned B = cluster_blocks(), rank = cluster_rank();
    const size_t clusters = gridDim.x / B;
    const int t = threadIdx.x;
    kl_wait_for_previous_grid();
    const unsigned tag = LOSS ? ce_launch_tag(ws) : 0;

    float loss_sum = 0.f;    /* this thread's loss terms */
    bool holds_term = false; /* its last row's term is in loss_sum: the label's or a NaN */
    bool readers_pending = false;
    for (size_t row = blockIdx.x / B; row < n_rows; row += clusters) {
        const T *xr = x + row * (size_t)n_classes;
        const int32_t label = labels[row];
        const bool ok = ce_label_ok(label, n_classes);
        const ce_slice sl = ce_slice_of<T, P>(xr, n_classes, vec, rank);

        /* One burst of loads: the packs, then at most one head and one tail element. */
        float v[P][W];
#pragma unroll
        for (int p = 0; p < P; p++) {
            if (vec) {
                const int q = sl.first + p * (int)blockDim.x + t;
                pack16<T> pk;
                if (q < sl.end)
                    pk.raw = reinterpret_cast<const uint4 *>(xr + sl.head)[q];
#pragma unroll
                for (int j = 0; j < W; j++)
                    v[p][j] = q < sl.end ? to_float(pk.e[j]) : -FLT_MAX;
            } else {
#pragma unroll
                for (int j = 0; j < W; j++) {
                    const int e = ce_element<W>(sl, false, p, j);
                    v[p][j] = e >= 0 ? to_float(xr[e]) : -FLT_MAX;
                }
            }
        }
        const int head_e = rank == 0 && t < sl.head ? t : -1;
        const int tail_e = rank == B - 1 && t < sl.tail ? sl.head + sl.n_packs * W + t : -1;
        float head_v = head_e >= 0 ? to_float(xr[head_e]) : -FLT_MAX;
        float tail_v = tail_e >= 0 ? to_float(xr[tail_e]) : -FLT_MAX;

        /* The label's logit, if this thread loaded it. */
        float x_label = 0.f;
        bool has_label = false;
        if (LOSS && ok) {
#pragma unroll
            for (int p = 0; p < P; p++)
#pragma unroll
                for (int j = 0; j < W; j++)
                    if (ce_element<W>(sl, vec, p, j) == label) {
                        x_label = v[p][j];
                        has_label = true;
                    }
            if (head_e == label || tail_e == label) {
                x_label = head_e == label ? head_v : tail_v;
                has_label = true;
            }
        }

        /* This thread's (m, s), its e values in place of the logits. */
        ce_online st;
        st.m = fmaxf(head_v, tail_v);
#pragma unroll
        for (int p = 0; p < P; p++)
#pragma unroll
            for (int j = 0; j < W; j++)
                st.m = fmaxf(st.m, v[p][j]);
        head_v = ce_exp(head_v - st.m);
        tail_v = ce_exp(tail_v - st.m);
        st.s = head_v + tail_v;
#pragma unroll
        for (int p = 0; p < P; p++)
#pragma unroll
            for (int j = 0; j < W; j++) {
                v[p][j] = ce_exp(v[p][j] - st.m);
                st.s += v[p][j];
            }

        ce_online rs = ce_block_merge_once(part, st);
        if (B > 1) {
            if (readers_pending)
                cluster_wait_readers();
            if (t == 0)
                published[0] = rs;
            cluster_combine(published, 1, ce_online_merge_op(), combined);
            rs = combined[0];
            readers_pending = true;
        } else if (!one_atomic) {
            __syncthreads(); /* part is written again for the next row (one_atomic: no next) */
        }
        const float log_sum = logf(rs.s);
        if (LOSS) {
            if (has_label)
                loss_sum += ce_row_loss(rs.m, log_sum, x_label);
            if (!ok && rank == 0 && t == 0)
                loss_sum += ce_nan();
            holds_term = ok ? has_label : rank == 0 && t == 0;
        }
        if (GRAD) {
            T *dr = dx + row * (size_t)n_classes;
            const float k = ce_exp((st.m - rs.m) - log_sum);
#define GRADIENT(e, val)                                                                       \
    from_float<T>(ok ? ((val) * k - ((e) == label ? 1.f : 0.f)) * inv_rows : ce_nan())
#pragma unroll
            for (int p = 0; p < P; p++) {
                if (vec) {
                    const int q = sl.first + p * (int)blockDim.x + t;
                    if (q < sl.end) {
                        pack16<T> pk;
#pragma unroll
                        for (int j = 0; j < W; j++)
                            pk.e[j] = GRADIENT(sl.head + q * W + j, v[p][j]);
                        reinterpret_cast<uint4 *>(dr + sl.head)[q] = pk.raw;
                    }
                } else {
#pragma unroll
                    for (int j = 0; j < W; j++) {
                        const int e = ce_element<W>(sl, false, p, j);
                        if (e >= 0)
                            dr[e] = GRADIENT(e, v[p][j]);
                    }
                }
            }
            if (head_e >= 0)
                dr[head_e] = GRADIENT(head_e, head_v);
            if (tail_e >= 0)
                dr[tail_e] = GRADIENT(tail_e, tail_v);
#undef GRADIENT
        }
    }
    if (LOSS && one_atomic) {
        /* One row a block (B is 1): its term is already in one thread, the label's, or for a
         * bad label thread 0's NaN, which hands it in without a block sum. */
        ce_hand_in_partial(loss_sum, holds_term, loss, n_rows, tag, blockIdx.x,
                           (unsigned)clusters, true, ws);
    } else if (LOSS) {
        /* One partial per cluster: the loss terms of its blocks, added in rank order. */
        float sum = ce_block_sum(loss_sum);
        if (B > 1) {
            if (readers_pending)
                cluster_wait_readers();
            if (t == 0)
                published_loss[0] = sum;
            cluster_combine(published_loss, 1, ce_sum_op(), combined_loss);
            sum = combined_loss[0];
        }
        if (rank == 0)
            ce_hand_in_partial(sum, t == 0, loss, n_rows, tag, blockIdx.x / B,
                               (unsigned)clusters, one_atomic, ws);
    }
    if (readers_pending)
        cluster_wait_readers();
}

/* ---- host ---- */

struct ce_plan {
    int packs_per_thread, threads, blocks_per_row;
};

/* As few packs per thread as keep blocks at ROW_THREADS threads or fewer, then as many blocks
 * per row as the row needs. False past MAX_CLUSTER blocks. */
static bool plan_rows(size_t n_classes, size_t esize, struct ce_plan *cp)
{
    const size_t W = 16 / esize, packs = (n_classes + W - 1) / W, max_packs = ROW_VALUES / W;
    size_t P = 1;
    while (P < max_packs && P * ROW_THREADS < packs)
        P *= 2;
    size_t G = (packs + P - 1) / P;
    G = G > ROW_THREADS ? ROW_THREADS : (G + 31) / 32 * 32;
    const size_t B = (packs + P * G - 1) / (P * G);
    cp->packs_per_thread = (int)P;
    cp->threads = (int)G;
    cp->blocks_per_row = (int)B;
    return B <= MAX_CLUSTER;
}

template <typename T, int P, bool LOSS, bool GRAD>
static void launch_pass(const T *x, const int32_t *labels, float *loss, T *dx, size_t n_rows,
                        int n_classes, const struct ce_plan *cp, bool vec, bool early,
                        ce_workspace *ws, cudaStream_t s)
{
    auto kernel = ce_cluster_rows<T, P, LOSS, GRAD>;
    const size_t clusters = n_rows < CE_MAX_BLOCKS ? n_rows : CE_MAX_BLOCKS;
    const struct kl_launch_opts o = {(unsigned)cp->blocks_per_row, early};
    /* The mean in one atomic when every block is resident from the start (above); clusters is
     * then n_rows, one row a block. */
    const bool one_atomic =
        LOSS && cp->blocks_per_row == 1 &&
        clusters <= (size_t)kl_blocks_per_sm((const void *)kernel, cp->threads, 0) *
                        (size_t)kl_sm_count();
    kl_launch(kernel, dim3((unsigned)(clusters * cp->blocks_per_row)), dim3(cp->threads), 0, s,
              o, x, labels, loss, dx, n_rows, n_classes, 1.f / (float)n_rows, vec, one_atomic,
              ws);
}

template <typename T, int P>
static void launch_packs(const T *x, const int32_t *labels, float *loss, T *dx, size_t n_rows,
                         int n_classes, const struct ce_plan *cp, bool vec, bool early,
                         ce_workspace *ws, cudaStream_t s)
{
    if (loss && dx)
        launch_pass<T, P, true, true>(x, labels, loss, dx, n_rows, n_classes, cp, vec, early, ws,
                                      s);
    else if (loss)
        launch_pass<T, P, true, false>(x, labels, loss, dx, n_rows, n_classes, cp, vec, early,
                                       ws, s);
    else
        launch_pass<T, P, false, true>(x, labels, loss, dx, n_rows, n_classes, cp, vec, early,
                                       ws, s);
}

template <typename T>
static bool launch(const T *x, const int32_t *labels, float *loss, T *dx, size_t n_rows,
                   size_t n_classes, bool early, ce_workspace *ws, cudaStream_t s)
{
    struct ce_plan cp;
    if (!plan_rows(n_classes, sizeof(T), &cp))
        return false;
    /* Packs need x and dx rows at the same offset from a 16-byte boundary. */
    const bool vec = !dx || ((uintptr_t)x & 15) == ((uintptr_t)dx & 15);
    constexpr int max_packs = ROW_VALUES / pack16<T>::width;
    const int C = (int)n_classes;
    switch (cp.packs_per_thread) {
    case 1: launch_packs<T, 1>(x, labels, loss, dx, n_rows, C, &cp, vec, early, ws, s); break;
    case 2: launch_packs<T, 2>(x, labels, loss, dx, n_rows, C, &cp, vec, early, ws, s); break;
    case 4: launch_packs<T, 4>(x, labels, loss, dx, n_rows, C, &cp, vec, early, ws, s); break;
    default:
        launch_packs<T, max_packs>(x, labels, loss, dx, n_rows, C, &cp, vec, early, ws, s);
        break;
    }
    return true;
}

/* v6 calls this with early = true. */
extern "C" void ce_v5_launch(const void *x, const int32_t *labels, float *loss, void *dx,
                             size_t n_rows, size_t n_classes, enum dtype t, bool early,
                             void *workspace, cudaStream_t s)
{
    ce_workspace *ws = (ce_workspace *)workspace;
    const bool done =
        t == DT_FP32
            ? launch((const float *)x, labels, loss, (float *)dx, n_rows, n_classes, early, ws,
                     s)
            : launch((const __half *)x, labels, loss, (__half *)dx, n_rows, n_classes, early,
                     ws, s);
    if (!done)
        ce_v4(x, labels, loss, dx, n_rows, n_classes, t, workspace, s);
}

extern "C" void ce_v5(const void *x, const int32_t *labels, float *loss, void *dx, size_t n_rows,
                      size_t n_classes, enum dtype t, void *workspace, cudaStream_t s)
{
    kl_note_rung("v5_cluster");
    ce_v5_launch(x, labels, loss, dx, n_rows, n_classes, t, false, workspace, s);
}
