/* What the cross-entropy rungs share: the arithmetic of one row, the reductions from v3 on, the
 * mean over rows, and the gradient writer of v4 and the vendor rung. The rungs differ in how
 * they map rows to threads and how often they read a row; the formulas are the same in all.
 *
 * A row n is summarised by its maximum m and log_sum = log(sum_c exp(x[c] - m)), so that
 *   logsumexp(x_n) = m + log_sum
 *   loss term      = (m - x[label]) + log_sum       (exact when the label is the row's maximum)
 *   dx[c]          = (exp((x[c] - m) - log_sum) - [c == label]) / N
 * Subtracting m first keeps every exp argument <= 0, so nothing overflows, whatever the logits'
 * magnitude; keeping m and log_sum apart (instead of adding them into one lse) avoids rounding
 * a large m + log_sum before the subtraction. */
#ifndef CROSS_ENTROPY_CUH
#define CROSS_ENTROPY_CUH

#include <float.h>
#include <stdint.h>

#include "cross_entropy.h"
#include "kernels.cuh"

#define CE_FULL_MASK 0xffffffffu

/* Rows up to this length fit in one warp's registers (32 lanes x 32 values): v3's fast path,
 * which v4 keeps for short rows. */
#define CE_WARP_MAX_CLASSES 1024

__device__ __forceinline__ bool ce_label_ok(int32_t label, int64_t n_classes)
{
    return label >= 0 && label < n_classes;
}

__device__ __forceinline__ float ce_nan()
{
    return __int_as_float(0x7fc00000);
}

/* exp on the special-function unit: one FMUL and one MUFU.EX2. Its error grows with |v| (2 +
 * 1.2 |v| ulp), but every argument here is <= 0 and the large ones give values far below the
 * tolerance's absolute floor; where exp is near 1 it is as good as expf, at a quarter of the
 * instructions. That matters: the large preset needs 4e8 exps in under 200 us in fp16. Written
 * out, not __expf: that compiles to ex2.approx.f32, which keeps denormal results at the cost
 * of a compare and two predicated multiplies around the MUFU.EX2; the .ftz form flushes
 * results below 2^-126 to 0, far below any tolerance. Inline asm hides the instruction's cost
 * from the loop unroller, which priced it as unknown work and stopped unrolling loops of chapter
 * 03's v2 and v4 (its softmax_exp uses the compiler's builtin instead); every loop of this chapter
 * unrolls as it did with __expf. */
#define CE_LOG2E 1.4426950408889634f

/* 2^x, results below 2^-126 flushed to 0: the one instruction every exp here comes down to. */
__device__ __forceinline__ float ce_exp2(float x)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ float ce_exp(float v)
{
    return ce_exp2(v * CE_LOG2E);
}

__device__ __forceinline__ float ce_row_loss(float m, float log_sum, float x_label)
{
    return (m - x_label) + log_sum;
}

__device__ __forceinline__ float ce_gradient(float v, float m, float log_sum, bool is_label,
                                             float inv_rows)
{
    return (ce_exp((v - m) - log_sum) - (is_label ? 1.f : 0.f)) * inv_rows;
}

/* The gradient of a whole row at a time (v7): exp(v - m - log_sum) / N as ex2((v - m) log2(e)
 * - (log_sum + ln N) log2(e)), one FADD, one FFMA and one MUFU.EX2 per logit where
 * ce_gradient takes six instructions; the label's -1/N is applied once, by the thread that
 * holds it. v - m is exact where it matters (v near m); the row's constant carries about
 * 2^-24 |log_sum + ln N| of error, 1e-6 relative at the large preset. */
struct ce_gradient_row {
    float m, shift;
};

__device__ __forceinline__ ce_gradient_row ce_gradient_of_row(float m, float log_sum,
                                                              float inv_rows)
{
    return {m, (log_sum - logf(inv_rows)) * CE_LOG2E};
}

__device__ __forceinline__ float ce_gradient_term(float v, ce_gradient_row g)
{
    return ce_exp2(fmaf(v - g.m, CE_LOG2E, -g.shift));
}

/* ---- Reductions over a warp (v3 on). The xor butterfly leaves the same bits in every lane:
 * each step adds the same two numbers in each pair of lanes, and IEEE addition commutes. */

__device__ __forceinline__ float ce_warp_max(float v)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_xor_sync(CE_FULL_MASK, v, offset));
    return v;
}

__device__ __forceinline__ float ce_warp_sum(float v)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(CE_FULL_MASK, v, offset);
    return v;
}

/* Sum over the block; the result is valid in thread 0. blockDim.x must be a multiple of 32 and
 * every thread must call it. */
__device__ __forceinline__ float ce_block_sum(float v)
{
    __shared__ float warp_sums[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = ce_warp_sum(v);
    __syncthreads(); /* a previous call's warp 0 may still be reading warp_sums */
    if (lane == 0)
        warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0)
        v = ce_warp_sum(lane < warps ? warp_sums[lane] : 0.f);
    return v;
}

/* ---- The online logsumexp (v4 and the exercise): a running maximum m and the sum s of
 * exp(x - m) over the elements seen so far. When a larger maximum arrives, s is rescaled by
 * exp(old m - new m), so one sweep over the row gives both. The empty state is m = -FLT_MAX,
 * s = 0: finite, so that merging two empty states gives exp(0) * 0 = 0, not exp(NaN). */
struct ce_online {
    float m, s;
};

__device__ __forceinline__ ce_online ce_online_empty()
{
    ce_online st = {-FLT_MAX, 0.f};
    return st;
}

__device__ __forceinline__ ce_online ce_online_merge(ce_online a, ce_online b)
{
    ce_online r;
    r.m = fmaxf(a.m, b.m);
    r.s = a.s * ce_exp(a.m - r.m) + b.s * ce_exp(b.m - r.m);
    return r;
}

/* W more elements: one rescale at most, then one exp per element. */
template <int W> __device__ __forceinline__ ce_online ce_online_push(ce_online st, const float *v)
{
    float top = v[0];
#pragma unroll
    for (int j = 1; j < W; j++)
        top = fmaxf(top, v[j]);
    if (top > st.m) {
        st.s *= ce_exp(st.m - top);
        st.m = top;
    }
#pragma unroll
    for (int j = 0; j < W; j++)
        st.s += ce_exp(v[j] - st.m);
    return st;
}

__device__ __forceinline__ ce_online ce_warp_merge(ce_online st)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        ce_online other;
        other.m = __shfl_xor_sync(CE_FULL_MASK, st.m, offset);
        other.s = __shfl_xor_sync(CE_FULL_MASK, st.s, offset);
        st = ce_online_merge(st, other);
    }
    return st;
}

/* The block's merged state, returned to every thread. Same rules as ce_block_sum. Safe to call
 * again straight away: warp 0 reads warp_states before the second barrier, which every thread
 * passes before any can write warp_states again. */
__device__ __forceinline__ ce_online ce_block_merge(ce_online st)
{
    __shared__ ce_online warp_states[32];
    __shared__ ce_online block_state;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    st = ce_warp_merge(st);
    if (lane == 0)
        warp_states[warp] = st;
    __syncthreads();
    if (warp == 0) {
        st = ce_warp_merge(lane < warps ? warp_states[lane] : ce_online_empty());
        if (lane == 0)
            block_state = st;
    }
    __syncthreads();
    return block_state;
}

/* ---- The mean over rows without a second kernel and without a memset (v3, v4, vendor): each
 * block hands in its partial sum, and the last block to finish adds the partials in block
 * order, so the loss has the same bits on every run (float atomics would add in whatever order
 * the blocks finish). partials holds CE_MAX_BLOCKS floats and *done is 0 on entry, as the last
 * block leaves it; both are the caller's (struct ce_workspace's, or the vendor rung's own), so
 * launches that may run at the same time need a pair each, and launches in stream order may
 * share one. A single block skips all of it.
 * Every thread of the block calls this; block_sum is read from thread 0. */
__device__ __forceinline__ void ce_finish_mean(float block_sum, float *loss, size_t n_rows,
                                               float *partials, unsigned *done)
{
    if (gridDim.x == 1) {
        if (threadIdx.x == 0)
            *loss = block_sum / (float)n_rows;
        return;
    }
    bool last = false;
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = block_sum;
        __threadfence(); /* the partial is visible everywhere before the count says so */
        last = atomicAdd(done, 1u) == gridDim.x - 1;
    }
    /* Thread 0's answer reaches the block through the barrier itself, not a shared variable:
     * the static shared memory of v7's loss kernels stays five 128-byte lines (v7's header). */
    if (!__syncthreads_or(last))
        return;
    __threadfence();
    float sum = 0.f;
    for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x)
        sum += __ldcg(partials + b); /* from L2: this SM's L1 never held them */
    sum = ce_block_sum(sum);
    if (threadIdx.x == 0) {
        *loss = sum / (float)n_rows;
        *done = 0;
    }
}

/* ---- A row in 16-byte packs (v4, vendor). Rows of odd length start at every alignment, so
 * each row is split on its own: `head` elements up to the first 16-byte boundary, n_packs whole
 * packs, then `tail` elements. */
struct ce_row_split {
    int head, n_packs, tail;
};

/* How many elements p lies past an ALIGN-byte boundary. */
template <typename T, int ALIGN = 16> __device__ __forceinline__ int ce_misalignment(const T *p)
{
    return (int)(((uintptr_t)p & (ALIGN - 1)) / sizeof(T));
}

/* A row split at its first ALIGN-byte boundary (16: the first pack; v7 takes 128, a line). */
template <typename T, int ALIGN = 16>
__device__ __forceinline__ ce_row_split ce_split_row(const T *row, int n)
{
    constexpr int W = pack16<T>::width, STEP = ALIGN / (int)sizeof(T);
    const int off = ce_misalignment<T, ALIGN>(row);
    ce_row_split r;
    r.head = off ? STEP - off : 0;
    if (r.head > n)
        r.head = n;
    r.n_packs = (n - r.head) / W;
    r.tail = n - r.head - r.n_packs * W;
    return r;
}

/* Packs in flight per thread in the vector loops: 4 x 16 bytes. */
#define CE_UNROLL 4

/* One row of the gradient, written by the whole block: dst[c] = ce_gradient(src[c], ...), or NaN
 * for a bad label. src is the row of logits (in global or shared memory) or, for the vendor
 * rung, of log-probabilities (m = log_sum = 0). When src and dst sit at the same offset from a
 * 16-byte boundary, both move in 16-byte packs; otherwise element by element. */
template <typename T>
__device__ void ce_write_gradient_row(const T *src, T *dst, int n_classes, int32_t label,
                                      bool ok, float m, float log_sum, float inv_rows)
{
    using pack = pack16<T>;
    constexpr int W = pack::width;
    if (ce_misalignment(src) != ce_misalignment(dst)) {
        for (int64_t c = threadIdx.x; c < n_classes; c += blockDim.x)
            dst[c] = from_float<T>(ok ? ce_gradient(to_float(src[c]), m, log_sum, c == label,
                                                    inv_rows)
                                      : ce_nan());
        return;
    }
    const ce_row_split r = ce_split_row(dst, n_classes);
    const int tid = threadIdx.x;
    if (tid < r.head)
        dst[tid] = from_float<T>(
            ok ? ce_gradient(to_float(src[tid]), m, log_sum, tid == label, inv_rows) : ce_nan());
    const uint4 *sp = reinterpret_cast<const uint4 *>(src + r.head);
    uint4 *dp = reinterpret_cast<uint4 *>(dst + r.head);
    for (int p0 = tid; p0 < r.n_packs; p0 += CE_UNROLL * blockDim.x) {
        pack v[CE_UNROLL];
#pragma unroll
        for (int u = 0; u < CE_UNROLL; u++) {
            int p = p0 + u * blockDim.x;
            if (p < r.n_packs)
                v[u].raw = sp[p];
        }
#pragma unroll
        for (int u = 0; u < CE_UNROLL; u++) {
            int p = p0 + u * blockDim.x;
            if (p < r.n_packs) {
                int c0 = r.head + p * W;
#pragma unroll
                for (int j = 0; j < W; j++)
                    v[u].e[j] = from_float<T>(ok ? ce_gradient(to_float(v[u].e[j]), m, log_sum,
                                                               c0 + j == label, inv_rows)
                                                 : ce_nan());
                dp[p] = v[u].raw;
            }
        }
    }
    const int c = r.head + r.n_packs * W + tid;
    if (tid < r.tail)
        dst[c] = from_float<T>(
            ok ? ce_gradient(to_float(src[c]), m, log_sum, c == label, inv_rows) : ce_nan());
}

/* ---- Host side. */

/* Launch shape of the kernels that give each row to one warp (v3, and v4 for short rows). A
 * problem of at most 32K logits whose rows fit in one block of max_threads (a warp a row) runs
 * as that one block, so the mean needs no second step and the whole pass is one DRAM round
 * trip. Otherwise blocks of 1 to 8 warps, fewer when rows are few, so that the rows spread over
 * at least two blocks per SM; past CE_MAX_BLOCKS blocks the warps loop over rows. */
static inline void ce_warp_rows_grid(size_t n_rows, size_t n_classes, int max_threads,
                                     int *threads, int *blocks)
{
    if (n_rows <= (size_t)max_threads / 32 && n_rows * n_classes <= 32768) {
        *threads = 32 * (int)n_rows;
        *blocks = 1;
        return;
    }
    size_t spread = 2 * (size_t)kl_sm_count();
    size_t warps = (n_rows + spread - 1) / spread;
    warps = warps < 1 ? 1 : warps > 8 ? 8 : warps;
    size_t b = (n_rows + warps - 1) / warps;
    *threads = 32 * (int)warps;
    *blocks = (int)(b < CE_MAX_BLOCKS ? b : CE_MAX_BLOCKS);
}

#endif
