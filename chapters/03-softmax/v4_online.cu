/* v4, online softmax: the max and the sum in one pass, one exchange per row, and rows that do
 * not fit the registers staged in shared memory.
 *
 * Idea (forward): a set of values is summarised by (m, s) = (its max, sum of exp(v - m)), and two
 * summaries merge exactly: m = max(m1, m2), s = s1 exp(m1 - m) + s2 exp(m2 - m). Each thread
 * summarises its own values in registers without waiting for the row's max, and the row's
 * threads merge their summaries in ONE reduction instead of v3's two (one barrier, not two,
 * where a row spans warps); each output is its exp times exp(m_thread - m_row) / s_row.
 * Idea (backward): the dot product is a single reduction already; what changes is where the row
 * waits: y stays in registers while dy is copied straight into shared memory with cp.async
 * (no registers, every copy in flight at once), so rows that v3 sent back to v2 (backward
 * `large`, 32768 values of y and of dy) stay on chip.
 * What changed from v3: long contiguous rows get blocks of at most 512 threads, 32 values each
 * in registers and the rest of the row in shared memory, so two blocks (two 128 KiB fp32 rows)
 * fit an SM and one loads while the other reduces; v3 fitted one. Forward strips keep a thread
 * per row (32 rows a warp) and at most 1024 channels; longer rows of the forward are summarised
 * on the fly and read a second time for the outputs (v2 read them three times).
 * Expected: as v3 at the seed shapes; at `large` forward a few percent over v3 (88% of the roof
 * or more); backward `large` from v2's two passes (~60%) to one (88% or more).
 * Limits: shared memory (227 KiB a block on the H200) bounds the staged rows: forward 73728 fp32
 * or 131072 fp16 values, backward 36864 or 65536; beyond, the forward streams (two passes) and
 * the backward runs v2's kernel. Strided and short (C <= 16) backward rows run as in v3.
 * cp.async needs compute capability 8.0; older GPUs copy through registers.
 * Measured (H200): `large` backward 378 us fp32, 101.8% of the roof (98.7% fp16), as predicted;
 * forward 95.8% fp32, not over v3's 97.3%, but 84.0% in fp16 against v3's 61.8%. */
#include "async_copy.cuh"
#include "launch.cuh"
#include "softmax.cuh"
#include "softmax.h"

#define STRIP_THREADS 1024
#define ROW_THREADS 512 /* at most, per contiguous row: two blocks per SM */
#define ROW_VALUES 32   /* registers of row per thread */
#define TILE_THREADS 256

/* ---- the online summary, one value at a time (the streaming kernel) ---- */

/* One exp per value: when v is the new max the old sum is rescaled, else v's term is added. */
__device__ __forceinline__ void softmax_stats_add(softmax_stats &a, float v)
{
    if (v > a.max) {
        a.sum = a.sum * softmax_exp(a.max - v) + 1.f;
        a.max = v;
    } else {
        a.sum += softmax_exp(v - a.max);
    }
}

/* ---- shared-memory staging of a contiguous row ---- */

/* Pack p of this thread's share of the row (softmax.cuh) waits in `stage` at slot k: the
 * 16 bytes stage[k G + t], or with scalar accesses the elements (k W + j) G + t of stage seen
 * as T, so that a warp's accesses fall in distinct banks. */
template <typename T>
__device__ __forceinline__ void softmax_stage_pack(uint4 *stage, int k, const T *row, int p,
                                                   int C, bool vec, bool live)
{
    constexpr int W = pack16<T>::width;
    const int t = threadIdx.x, G = blockDim.x;
    if (!live)
        return;
    if (vec) {
        const int q = p * G + t;
        if (q * W < C)
            kl_copy16_async(&stage[k * G + t], reinterpret_cast<const uint4 *>(row) + q);
    } else {
        T *st = reinterpret_cast<T *>(stage);
#pragma unroll
        for (int j = 0; j < W; j++) {
            const int e = (p * W + j) * G + t;
            if (e < C)
                st[(k * W + j) * G + t] = row[e];
        }
    }
}

template <typename T>
__device__ __forceinline__ void softmax_read_staged(const uint4 *stage, int k, int p, int C,
                                                    bool vec, bool live, float pad,
                                                    float (&v)[pack16<T>::width])
{
    constexpr int W = pack16<T>::width;
    const int t = threadIdx.x, G = blockDim.x;
    if (vec) {
        if (live && (p * G + t) * W < C) {
            pack16<T> pk;
            pk.raw = stage[k * G + t];
#pragma unroll
            for (int j = 0; j < W; j++)
                v[j] = to_float(pk.e[j]);
        } else {
#pragma unroll
            for (int j = 0; j < W; j++)
                v[j] = pad;
        }
    } else {
        const T *st = reinterpret_cast<const T *>(stage);
#pragma unroll
        for (int j = 0; j < W; j++) {
            const int e = (p * W + j) * G + t;
            v[j] = live && e < C ? to_float(st[(k * W + j) * G + t]) : pad;
        }
    }
}

/* Pack p of the row as stored, zeros past its end (softmax.cuh's layout): the backward keeps y
 * in registers in its own type, half the registers in fp16. */
template <typename T>
__device__ __forceinline__ pack16<T> softmax_load_raw(const T *row, int p, int C, bool vec,
                                                      bool live)
{
    constexpr int W = pack16<T>::width;
    const int t = threadIdx.x, G = blockDim.x;
    pack16<T> pk;
    if (vec) {
        const int q = p * G + t;
        pk.raw = live && q * W < C ? reinterpret_cast<const uint4 *>(row)[q]
                                   : make_uint4(0, 0, 0, 0);
    } else {
#pragma unroll
        for (int j = 0; j < W; j++) {
            const int e = (p * W + j) * G + t;
            pk.e[j] = live && e < C ? row[e] : from_float<T>(0.f);
        }
    }
    return pk;
}

/* ---- forward: strips (v3's mapping), one merge instead of two reductions ---- */

template <typename T, int KMAX>
__global__ void __launch_bounds__(STRIP_THREADS)
    softmax_forward_strip_online(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int C,
                                 int64_t S)
{
    __shared__ softmax_stats part[STRIP_THREADS];
    const int groups = blockDim.y, g = threadIdx.y;
    const int64_t r = ((int64_t)blockIdx.x * blockDim.z + threadIdx.z) * 32 + threadIdx.x;
    const bool live = r < rows;
    const int64_t start = live ? softmax_row_start(r, C, S) : 0;

    const int64_t step = groups * S; /* between a thread's channels */
    const T *xp = x + start + g * S;
    float v[KMAX];
#pragma unroll
    for (int k = 0; k < KMAX; k++) {
        const int c = g + k * groups;
        v[k] = live && c < C ? to_float(xp[k * step]) : SOFTMAX_NO_VALUE;
    }
    float m = SOFTMAX_NO_VALUE, sum = 0.f;
#pragma unroll
    for (int k = 0; k < KMAX; k++)
        m = fmaxf(m, v[k]);
#pragma unroll
    for (int k = 0; k < KMAX; k++) {
        v[k] = softmax_exp(v[k] - m);
        sum += v[k];
    }
    const softmax_stats row =
        softmax_strip_reduce<32>(part, softmax_stats{m, sum}, softmax_merge_op());

    const float scale = softmax_exp(m - row.max) / row.sum;
    T *yp = y + start + g * S;
#pragma unroll
    for (int k = 0; k < KMAX; k++) {
        const int c = g + k * groups;
        if (live && c < C)
            yp[k * step] = from_float<T>(v[k] * scale);
    }
}

/* ---- forward: contiguous rows, registers then shared memory, one merge ---- */

/* P packs per thread: the first ROW_VALUES / W in registers, the rest staged (only when the
 * block holds one row of ROW_THREADS threads). */
template <typename T>
__global__ void __launch_bounds__(ROW_THREADS, 2)
    softmax_forward_rows_online(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int C,
                                int P, bool vec)
{
    constexpr int W = pack16<T>::width, PR = ROW_VALUES / W;
    extern __shared__ uint4 softmax_stage[];
    __shared__ softmax_stats part[32];
    const int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
    const bool live = r < rows;
    const T *xr = x + (live ? r : 0) * C;
    T *yr = y + (live ? r : 0) * C;
    uint4 *stage = softmax_stage + (size_t)threadIdx.y * blockDim.x * (P > PR ? P - PR : 0);

    float v[PR][W];
#pragma unroll
    for (int p = 0; p < PR; p++)
        softmax_load_pack(xr, p, C, vec, live, SOFTMAX_NO_VALUE, v[p]);
    for (int p = PR; p < P; p++)
        softmax_stage_pack(stage, p - PR, xr, p, C, vec, live);
    kl_copies_wait_all(); /* this thread's copies; each reads back only its own slots */

    float m = SOFTMAX_NO_VALUE, sum = 0.f;
#pragma unroll
    for (int p = 0; p < PR; p++)
#pragma unroll
        for (int j = 0; j < W; j++)
            m = fmaxf(m, v[p][j]);
    for (int p = PR; p < P; p++) {
        float u[W];
        softmax_read_staged<T>(stage, p - PR, p, C, vec, live, SOFTMAX_NO_VALUE, u);
#pragma unroll
        for (int j = 0; j < W; j++)
            m = fmaxf(m, u[j]);
    }
#pragma unroll
    for (int p = 0; p < PR; p++)
#pragma unroll
        for (int j = 0; j < W; j++) {
            v[p][j] = softmax_exp(v[p][j] - m);
            sum += v[p][j];
        }
    for (int p = PR; p < P; p++) {
        float u[W];
        softmax_read_staged<T>(stage, p - PR, p, C, vec, live, SOFTMAX_NO_VALUE, u);
#pragma unroll
        for (int j = 0; j < W; j++)
            sum += softmax_exp(u[j] - m);
    }
    const softmax_stats row = softmax_row_reduce(part, softmax_stats{m, sum}, softmax_merge_op());

    const float scale = softmax_exp(m - row.max) / row.sum;
#pragma unroll
    for (int p = 0; p < PR; p++) {
#pragma unroll
        for (int j = 0; j < W; j++)
            v[p][j] *= scale;
        softmax_store_pack(yr, p, C, vec, live, v[p]);
    }
    for (int p = PR; p < P; p++) {
        float u[W];
        softmax_read_staged<T>(stage, p - PR, p, C, vec, live, SOFTMAX_NO_VALUE, u);
#pragma unroll
        for (int j = 0; j < W; j++)
            u[j] = softmax_exp(u[j] - m) * scale;
        softmax_store_pack(yr, p, C, vec, live, u);
    }
}

/* ---- forward: rows too long for shared memory, streamed twice (v2's tile mapping) ---- */

template <typename T>
__global__ void __launch_bounds__(TILE_THREADS)
    softmax_forward_tile_online(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int C,
                                int64_t S, int TS)
{
    __shared__ softmax_stats red[TILE_THREADS];
    const int TC = TILE_THREADS / TS, tc = threadIdx.x / TS;
    const int64_t r = (int64_t)blockIdx.x * TS + threadIdx.x % TS;
    const bool live = r < rows;
    const int64_t start = live ? softmax_row_start(r, C, S) : 0;

    softmax_stats st = {SOFTMAX_NO_VALUE, 0.f};
    if (live)
        for (int c = tc; c < C; c += TC)
            softmax_stats_add(st, to_float(x[start + c * S]));
    red[threadIdx.x] = st;
    __syncthreads();
    for (int stride = TC / 2; stride > 0; stride /= 2) {
        if (tc < stride)
            red[threadIdx.x] = softmax_stats_merge(red[threadIdx.x],
                                                   red[threadIdx.x + stride * TS]);
        __syncthreads();
    }
    st = red[threadIdx.x % TS];

    const float inv = 1.f / st.sum;
    if (live)
        for (int c = tc; c < C; c += TC) {
            const float e = softmax_exp(to_float(x[start + c * S]) - st.max);
            y[start + c * S] = from_float<T>(e * inv);
        }
}

/* ---- backward: contiguous rows, y in registers, dy (and y's overflow) staged ---- */

/* Stage layout per row: dy's P packs in slots 0 .. P-1, then y's packs PR .. P-1. A 32768-long
 * fp32 row stages 192 KiB, so one block per SM whatever the registers: that type may use more
 * than 64 of them; fp16 (96 KiB) keeps two blocks per SM. */
template <typename T>
__global__ void __launch_bounds__(ROW_THREADS, sizeof(T) == 2 ? 2 : 1)
    softmax_backward_rows_staged(const T *__restrict__ y, const T *__restrict__ dy,
                                 T *__restrict__ dx, int64_t rows, int C, int P, bool vec)
{
    constexpr int W = pack16<T>::width, PR = ROW_VALUES / W;
    extern __shared__ uint4 softmax_stage[];
    __shared__ float part[32];
    const int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
    const bool live = r < rows;
    const int64_t start = (live ? r : 0) * C;
    const int y_staged = P > PR ? P - PR : 0;
    uint4 *dy_stage = softmax_stage + (size_t)threadIdx.y * blockDim.x * (P + y_staged);
    uint4 *y_stage = dy_stage + (size_t)P * blockDim.x;

    pack16<T> yv[PR];
#pragma unroll
    for (int p = 0; p < PR; p++)
        yv[p] = softmax_load_raw(y + start, p, C, vec, live);
    for (int p = 0; p < P; p++)
        softmax_stage_pack(dy_stage, p, dy + start, p, C, vec, live);
    for (int p = PR; p < P; p++)
        softmax_stage_pack(y_stage, p - PR, y + start, p, C, vec, live);
    kl_copies_wait_all(); /* this thread's copies; each reads back only its own slots */

    float dot = 0.f;
#pragma unroll
    for (int p = 0; p < PR; p++) {
        float d[W];
        softmax_read_staged<T>(dy_stage, p, p, C, vec, live, 0.f, d);
#pragma unroll
        for (int j = 0; j < W; j++)
            dot += to_float(yv[p].e[j]) * d[j];
    }
    for (int p = PR; p < P; p++) {
        float a[W], d[W];
        softmax_read_staged<T>(y_stage, p - PR, p, C, vec, live, 0.f, a);
        softmax_read_staged<T>(dy_stage, p, p, C, vec, live, 0.f, d);
#pragma unroll
        for (int j = 0; j < W; j++)
            dot += a[j] * d[j];
    }
    dot = softmax_row_reduce(part, dot, softmax_sum_op());

#pragma unroll
    for (int p = 0; p < PR; p++) {
        float d[W];
        softmax_read_staged<T>(dy_stage, p, p, C, vec, live, 0.f, d);
#pragma unroll
        for (int j = 0; j < W; j++)
            d[j] = to_float(yv[p].e[j]) * (d[j] - dot);
        softmax_store_pack(dx + start, p, C, vec, live, d);
    }
    for (int p = PR; p < P; p++) {
        float a[W], d[W];
        softmax_read_staged<T>(y_stage, p - PR, p, C, vec, live, 0.f, a);
        softmax_read_staged<T>(dy_stage, p, p, C, vec, live, 0.f, d);
#pragma unroll
        for (int j = 0; j < W; j++)
            d[j] = a[j] * (d[j] - dot);
        softmax_store_pack(dx + start, p, C, vec, live, d);
    }
}

/* ---- launch plans ---- */

/* A contiguous-row launch: `threads` per row, P packs per thread, rows_per_block rows, and
 * stage_bytes of shared memory per block. */
struct row_plan {
    int threads, P, rows_per_block;
    unsigned blocks;
    size_t stage_bytes;
    bool vec;
};

/* Threads per row: as few as hold the row in registers, at most ROW_THREADS; what the registers
 * do not hold is staged. staged_arrays(P, PR) gives the staged packs per thread. Returns 0
 * when the stage would exceed max_bytes. */
static int plan_rows(int64_t rows, int C, size_t esize, bool aligned, int backward,
                     size_t max_bytes, struct row_plan *rp)
{
    const int W = (int)(16 / esize), PR = ROW_VALUES / W;
    const int64_t packs = (C + W - 1) / W;
    int64_t threads = (packs + PR - 1) / PR;
    threads = threads > ROW_THREADS ? ROW_THREADS : (threads + 31) / 32 * 32;
    const int64_t P = (packs + threads - 1) / threads;
    const int64_t y_staged = P > PR ? P - PR : 0;
    const int64_t staged = backward ? P + y_staged : y_staged;
    rp->threads = (int)threads;
    rp->rows_per_block = threads == 32 ? 4 : 1;
    rp->stage_bytes = (size_t)(staged * threads * 16 * rp->rows_per_block);
    if (rp->stage_bytes > max_bytes)
        return 0;
    rp->P = (int)P;
    rp->blocks = (unsigned)((rows + rp->rows_per_block - 1) / rp->rows_per_block);
    rp->vec = aligned && (size_t)C * esize % 16 == 0;
    return 1;
}

/* v3's strip plan for the forward: 32 rows per warp, up to 32 warps of channel groups, up to 32
 * values per thread. Returns 0 when C > 1024. */
struct strip_plan {
    int warps, strips_per_block, kmax;
    unsigned blocks;
};

static int plan_strips(int64_t rows, int C, struct strip_plan *sp)
{
    const int warps = (C + ROW_VALUES - 1) / ROW_VALUES;
    if (warps > 32)
        return 0;
    const int k = (C + warps - 1) / warps;
    sp->warps = warps;
    sp->kmax = k <= 8 ? 8 : k <= 16 ? 16 : 32;
    sp->strips_per_block = warps >= 4 ? 1 : 4 / warps;
    const int64_t strips = (rows + 31) / 32;
    sp->blocks = (unsigned)((strips + sp->strips_per_block - 1) / sp->strips_per_block);
    return 1;
}

/* ---- forward ---- */

template <typename T>
static void forward_strips(const T *x, T *y, int64_t rows, int C, int64_t S,
                           const struct strip_plan *sp, cudaStream_t s)
{
    const dim3 block(32, sp->warps, sp->strips_per_block);
    if (sp->kmax == 8)
        softmax_forward_strip_online<T, 8><<<sp->blocks, block, 0, s>>>(x, y, rows, C, S);
    else if (sp->kmax == 16)
        softmax_forward_strip_online<T, 16><<<sp->blocks, block, 0, s>>>(x, y, rows, C, S);
    else
        softmax_forward_strip_online<T, 32><<<sp->blocks, block, 0, s>>>(x, y, rows, C, S);
    LAUNCH_CHECK();
}

template <typename T>
static void forward_streamed(const T *x, T *y, int64_t rows, int C, int64_t S, cudaStream_t s)
{
    const int TS = S == 1 ? 1 : 32;
    const unsigned blocks = (unsigned)((rows + TS - 1) / TS);
    softmax_forward_tile_online<<<blocks, TILE_THREADS, 0, s>>>(x, y, rows, C, S, TS);
    LAUNCH_CHECK();
}

template <typename T> static void forward(const T *x, T *y, struct softmax_dims d, cudaStream_t s)
{
    static size_t max_stage; /* per element type */
    if (!max_stage)
        max_stage = kl_grant_shared_memory((const void *)softmax_forward_rows_online<T>);
    const int64_t rows = d.n * d.h * d.w, S = d.h * d.w;
    const int C = (int)d.c;
    if (S == 1 && C > ROW_VALUES) {
        struct row_plan rp;
        if (!plan_rows(rows, C, sizeof(T), aligned16(x) && aligned16(y), 0, max_stage, &rp))
            return forward_streamed(x, y, rows, C, S, s);
        const dim3 block(rp.threads, rp.rows_per_block);
        softmax_forward_rows_online<T>
            <<<rp.blocks, block, rp.stage_bytes, s>>>(x, y, rows, C, rp.P, rp.vec);
        LAUNCH_CHECK();
        return;
    }
    struct strip_plan sp;
    if (!plan_strips(rows, C, &sp))
        return forward_streamed(x, y, rows, C, S, s);
    forward_strips(x, y, rows, C, S, &sp, s);
}

extern "C" void softmax_forward_v4(const void *x, void *y, struct softmax_dims d, enum dtype t,
                                   cudaStream_t s)
{
    kl_note_rung("v4_online");
    if (t == DT_FP32)
        forward((const float *)x, (float *)y, d, s);
    else
        forward((const __half *)x, (__half *)y, d, s);
}

/* ---- backward ---- */

/* Contiguous rows longer than one thread holds; returns 0 for the shapes it leaves to v3. */
template <typename T>
static int backward(const T *y, const T *dy, T *dx, struct softmax_dims d, enum dtype t,
                    cudaStream_t s)
{
    static size_t max_stage;
    if (!max_stage)
        max_stage = kl_grant_shared_memory((const void *)softmax_backward_rows_staged<T>);
    const int64_t rows = d.n * d.h * d.w;
    const int C = (int)d.c;
    if (d.h * d.w != 1 || C <= 16)
        return 0;
    struct row_plan rp;
    if (!plan_rows(rows, C, sizeof(T), aligned16(y) && aligned16(dy) && aligned16(dx), 1,
                   max_stage, &rp)) {
        softmax_backward_v2(y, dy, dx, d, t, s); /* longer than shared memory holds */
        return 1;
    }
    const dim3 block(rp.threads, rp.rows_per_block);
    softmax_backward_rows_staged<T>
        <<<rp.blocks, block, rp.stage_bytes, s>>>(y, dy, dx, rows, C, rp.P, rp.vec);
    LAUNCH_CHECK();
    return 1;
}

extern "C" void softmax_backward_v4(const void *y, const void *dy, void *dx,
                                    struct softmax_dims d, enum dtype t, cudaStream_t s)
{
    kl_note_rung("v4_online");
    int done = t == DT_FP32
                   ? backward((const float *)y, (const float *)dy, (float *)dx, d, t, s)
                   : backward((const __half *)y, (const __half *)dy, (__half *)dx, d, t, s);
    if (!done)
        softmax_backward_v3(y, dy, dx, d, t, s); /* strips: v3's kernels, unchanged */
}
