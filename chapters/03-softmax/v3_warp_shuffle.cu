/* v3, warp shuffles and the row in registers: each byte is read from memory once.
 *
 * Idea: load a thread's share of the row into registers once, and do both reductions and the
 * outputs from there. Threads of one warp that share a row combine their partial results with
 * register shuffles (__shfl_xor_sync, 5 steps, no shared memory, no barrier); only when a row
 * spans several warps does one value per warp go through shared memory, after one barrier.
 * The mapping, by layout and row length C (H W is the distance between a row's elements):
 *   - rows H W apart, or short (C <= 32): "strips", a warp's lanes own neighbouring rows, so
 *     each load reads neighbouring elements (a warp per row would read 32 elements H W apart).
 *     Up to 32 channels a thread holds its whole row (the seed: no exchange at all); beyond,
 *     a warp takes 16 rows (two channel groups) and up to 32 warps split the channels.
 *   - contiguous rows longer than 32: a warp per row up to 1024 elements, else a block of up
 *     to 1024 threads up to 32768 (`large`); 32 values a thread, 16-byte accesses if aligned.
 *   Backward keeps y and dy, 16 values of each a thread: strips to C = 1024, rows to 16384.
 * What changed from v2: three passes over memory become one read and one write; the barriers
 * of the tree become shuffles. The bottleneck removed: v2's second and third reads of the row.
 * Expected: DRAM sees each byte once, so long rows should approach the roof: 85-95% at `large`
 * forward, where other SMs keep the memory busy while one 1024-thread block reduces. At the
 * seed shapes one round trip to memory per thread instead of three: at or below cuDNN.
 * Limits: rows longer than the registers hold (forward C > 32768 contiguous or > 2048 strided;
 * backward 16384 and 1024, which includes `large`) go to v2's kernels, which read them again;
 * v4 stages the overflow in shared memory.
 * Measured (H200): `large` forward 264 us fp32, 97.3% of the roof, 2.84x cuDNN (above the
 * prediction), but 61.8% in fp16; backward there is v2's, 660 us; seed forward 2.74 us, 1.68x
 * cuDNN, but 8x10x1x1 0.83x (2.16 us against 1.79). */
#include "softmax.cuh"
#include "softmax.h"

#define MAX_THREADS 1024
#define FWD_VALUES 32 /* registers of row per thread, forward */
#define BWD_VALUES 16 /* per array, backward */

/* ---- strips: TR neighbouring rows per warp slice, channel groups across warps ---- */

template <typename T, int TR, int KMAX>
__global__ void __launch_bounds__(MAX_THREADS)
    softmax_forward_strip_regs(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int C,
                               int64_t S)
{
    __shared__ float part_max[MAX_THREADS], part_sum[MAX_THREADS];
    constexpr int groups_per_warp = 32 / TR;
    const int groups = blockDim.y * groups_per_warp;
    const int g = threadIdx.y * groups_per_warp + threadIdx.x / TR;
    const int64_t r = ((int64_t)blockIdx.x * blockDim.z + threadIdx.z) * TR + threadIdx.x % TR;
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
    float m = SOFTMAX_NO_VALUE;
#pragma unroll
    for (int k = 0; k < KMAX; k++)
        m = fmaxf(m, v[k]);
    m = softmax_strip_reduce<TR>(part_max, m, softmax_max_op());

    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < KMAX; k++) {
        v[k] = softmax_exp(v[k] - m); /* 0 for the padding */
        sum += v[k];
    }
    sum = softmax_strip_reduce<TR>(part_sum, sum, softmax_sum_op());

    const float inv = 1.f / sum;
    T *yp = y + start + g * S;
#pragma unroll
    for (int k = 0; k < KMAX; k++) {
        const int c = g + k * groups;
        if (live && c < C)
            yp[k * step] = from_float<T>(v[k] * inv);
    }
}

template <typename T, int TR, int KMAX>
__global__ void __launch_bounds__(MAX_THREADS)
    softmax_backward_strip_regs(const T *__restrict__ y, const T *__restrict__ dy,
                                T *__restrict__ dx, int64_t rows, int C, int64_t S)
{
    __shared__ float part[MAX_THREADS];
    constexpr int groups_per_warp = 32 / TR;
    const int groups = blockDim.y * groups_per_warp;
    const int g = threadIdx.y * groups_per_warp + threadIdx.x / TR;
    const int64_t r = ((int64_t)blockIdx.x * blockDim.z + threadIdx.z) * TR + threadIdx.x % TR;
    const bool live = r < rows;
    const int64_t start = live ? softmax_row_start(r, C, S) : 0;

    const int64_t step = groups * S, first = start + g * S;
    float yv[KMAX], dv[KMAX];
#pragma unroll
    for (int k = 0; k < KMAX; k++) {
        const int c = g + k * groups;
        const bool in = live && c < C;
        yv[k] = in ? to_float(y[first + k * step]) : 0.f;
        dv[k] = in ? to_float(dy[first + k * step]) : 0.f;
    }
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < KMAX; k++)
        dot += yv[k] * dv[k];
    dot = softmax_strip_reduce<TR>(part, dot, softmax_sum_op());

#pragma unroll
    for (int k = 0; k < KMAX; k++) {
        const int c = g + k * groups;
        if (live && c < C)
            dx[first + k * step] = from_float<T>(yv[k] * (dv[k] - dot));
    }
}

/* ---- contiguous rows: blockDim.x threads per row, blockDim.y rows per block ---- */

template <typename T>
__global__ void __launch_bounds__(MAX_THREADS)
    softmax_forward_rows_regs(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int C,
                              bool vec)
{
    constexpr int W = pack16<T>::width, PACKS = FWD_VALUES / W;
    __shared__ float part_max[32], part_sum[32];
    const int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
    const bool live = r < rows;
    const int64_t start = (live ? r : 0) * C;

    float v[PACKS][W];
#pragma unroll
    for (int p = 0; p < PACKS; p++)
        softmax_load_pack(x + start, p, C, vec, live, SOFTMAX_NO_VALUE, v[p]);
    float m = SOFTMAX_NO_VALUE;
#pragma unroll
    for (int p = 0; p < PACKS; p++)
#pragma unroll
        for (int j = 0; j < W; j++)
            m = fmaxf(m, v[p][j]);
    m = softmax_row_reduce(part_max, m, softmax_max_op());

    float sum = 0.f;
#pragma unroll
    for (int p = 0; p < PACKS; p++)
#pragma unroll
        for (int j = 0; j < W; j++) {
            v[p][j] = softmax_exp(v[p][j] - m);
            sum += v[p][j];
        }
    sum = softmax_row_reduce(part_sum, sum, softmax_sum_op());

    const float inv = 1.f / sum;
#pragma unroll
    for (int p = 0; p < PACKS; p++) {
#pragma unroll
        for (int j = 0; j < W; j++)
            v[p][j] *= inv;
        softmax_store_pack(y + start, p, C, vec, live, v[p]);
    }
}

template <typename T>
__global__ void __launch_bounds__(MAX_THREADS)
    softmax_backward_rows_regs(const T *__restrict__ y, const T *__restrict__ dy,
                               T *__restrict__ dx, int64_t rows, int C, bool vec)
{
    constexpr int W = pack16<T>::width, PACKS = BWD_VALUES / W;
    __shared__ float part[32];
    const int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
    const bool live = r < rows;
    const int64_t start = (live ? r : 0) * C;

    float yv[PACKS][W], dv[PACKS][W];
#pragma unroll
    for (int p = 0; p < PACKS; p++) {
        softmax_load_pack(y + start, p, C, vec, live, 0.f, yv[p]);
        softmax_load_pack(dy + start, p, C, vec, live, 0.f, dv[p]);
    }
    float dot = 0.f;
#pragma unroll
    for (int p = 0; p < PACKS; p++)
#pragma unroll
        for (int j = 0; j < W; j++)
            dot += yv[p][j] * dv[p][j];
    dot = softmax_row_reduce(part, dot, softmax_sum_op());

#pragma unroll
    for (int p = 0; p < PACKS; p++) {
#pragma unroll
        for (int j = 0; j < W; j++)
            dv[p][j] = yv[p][j] * (dv[p][j] - dot);
        softmax_store_pack(dx + start, p, C, vec, live, dv[p]);
    }
}

/* ---- launch plans ---- */

/* A strip launch: TR rows per warp slice, `warps` warps of channel groups, strips_per_block
 * strips; each thread holds at most kmax values per array. */
struct strip_plan {
    int tr, warps, strips_per_block, kmax;
    unsigned blocks;
};

/* Values per thread rounded up to an instantiated size. */
static int kmax_for(int k)
{
    return k <= 8 ? 8 : k <= 16 ? 16 : 32;
}

/* Up to cap values per thread; TR = 16 puts two channel groups in each warp, which doubles the
 * row length a block can hold. Returns 0 when the row does not fit. */
static int plan_strips(int64_t rows, int C, int cap, int tr, struct strip_plan *sp)
{
    const int per_warp = 32 / tr;
    const int warps = (C + cap * per_warp - 1) / (cap * per_warp);
    if (warps > 32)
        return 0;
    const int groups = warps * per_warp;
    sp->tr = tr;
    sp->warps = warps;
    sp->kmax = kmax_for((C + groups - 1) / groups);
    sp->strips_per_block = warps >= 4 ? 1 : 4 / warps; /* blocks of at least ~100 threads */
    const int64_t strips = (rows + tr - 1) / tr;
    sp->blocks = (unsigned)((strips + sp->strips_per_block - 1) / sp->strips_per_block);
    return 1;
}

/* A contiguous-row launch: `threads` per row (a multiple of 32), rows_per_block rows. */
struct row_plan {
    int threads, rows_per_block;
    unsigned blocks;
    bool vec;
};

static int plan_rows(int64_t rows, int C, int values, size_t esize, bool aligned,
                     struct row_plan *rp)
{
    const int W = (int)(16 / esize), packs_per_thread = values / W;
    const int64_t packs = (C + W - 1) / W;
    const int64_t threads = (packs + packs_per_thread - 1) / packs_per_thread;
    if (threads > MAX_THREADS)
        return 0;
    rp->threads = (int)((threads + 31) / 32 * 32);
    rp->rows_per_block = rp->threads == 32 ? 4 : 1;
    rp->blocks = (unsigned)((rows + rp->rows_per_block - 1) / rp->rows_per_block);
    rp->vec = aligned && (size_t)C * esize % 16 == 0;
    return 1;
}

/* ---- forward ---- */

template <typename T, int TR>
static void launch_forward_strips(const T *x, T *y, int64_t rows, int C, int64_t S,
                                  const struct strip_plan *sp, cudaStream_t s)
{
    const dim3 block(32, sp->warps, sp->strips_per_block);
    if (sp->kmax == 8)
        softmax_forward_strip_regs<T, TR, 8><<<sp->blocks, block, 0, s>>>(x, y, rows, C, S);
    else if (sp->kmax == 16)
        softmax_forward_strip_regs<T, TR, 16><<<sp->blocks, block, 0, s>>>(x, y, rows, C, S);
    else
        softmax_forward_strip_regs<T, TR, 32><<<sp->blocks, block, 0, s>>>(x, y, rows, C, S);
    LAUNCH_CHECK();
}

template <typename T>
static int forward(const T *x, T *y, struct softmax_dims d, cudaStream_t s)
{
    const int64_t rows = d.n * d.h * d.w, S = d.h * d.w;
    const int C = (int)d.c;
    if (S == 1 && C > FWD_VALUES) {
        struct row_plan rp;
        if (!plan_rows(rows, C, FWD_VALUES, sizeof(T), aligned16(x) && aligned16(y), &rp))
            return 0;
        const dim3 block(rp.threads, rp.rows_per_block);
        softmax_forward_rows_regs<T><<<rp.blocks, block, 0, s>>>(x, y, rows, C, rp.vec);
        LAUNCH_CHECK();
        return 1;
    }
    struct strip_plan sp;
    /* A thread per row while the row fits one thread; beyond, 16-row strips, as backward. */
    const int tr = C <= FWD_VALUES ? 32 : 16;
    if (!plan_strips(rows, C, FWD_VALUES, tr, &sp))
        return 0;
    if (tr == 32)
        launch_forward_strips<T, 32>(x, y, rows, C, S, &sp, s);
    else
        launch_forward_strips<T, 16>(x, y, rows, C, S, &sp, s);
    return 1;
}

extern "C" void softmax_forward_v3(const void *x, void *y, struct softmax_dims d, enum dtype t,
                                   cudaStream_t s)
{
    kl_note_rung("v3_warp_shuffle");
    int done = t == DT_FP32 ? forward((const float *)x, (float *)y, d, s)
                            : forward((const __half *)x, (__half *)y, d, s);
    if (!done)
        softmax_forward_v2(x, y, d, t, s); /* the row does not fit the registers */
}

/* ---- backward ---- */

template <typename T, int TR>
static void launch_backward_strips(const T *y, const T *dy, T *dx, int64_t rows, int C,
                                   int64_t S, const struct strip_plan *sp, cudaStream_t s)
{
    const dim3 block(32, sp->warps, sp->strips_per_block);
    if (sp->kmax == 8)
        softmax_backward_strip_regs<T, TR, 8><<<sp->blocks, block, 0, s>>>(y, dy, dx, rows, C, S);
    else
        softmax_backward_strip_regs<T, TR, 16><<<sp->blocks, block, 0, s>>>(y, dy, dx, rows, C,
                                                                            S);
    LAUNCH_CHECK();
}

template <typename T>
static int backward(const T *y, const T *dy, T *dx, struct softmax_dims d, cudaStream_t s)
{
    const int64_t rows = d.n * d.h * d.w, S = d.h * d.w;
    const int C = (int)d.c;
    if (S == 1 && C > BWD_VALUES) {
        struct row_plan rp;
        if (!plan_rows(rows, C, BWD_VALUES, sizeof(T),
                       aligned16(y) && aligned16(dy) && aligned16(dx), &rp))
            return 0;
        const dim3 block(rp.threads, rp.rows_per_block);
        softmax_backward_rows_regs<T><<<rp.blocks, block, 0, s>>>(y, dy, dx, rows, C, rp.vec);
        LAUNCH_CHECK();
        return 1;
    }
    /* A thread per row while the row fits one thread; beyond, half-warp strips. */
    struct strip_plan sp;
    const int tr = C <= BWD_VALUES ? 32 : 16;
    if (!plan_strips(rows, C, BWD_VALUES, tr, &sp))
        return 0;
    if (tr == 32)
        launch_backward_strips<T, 32>(y, dy, dx, rows, C, S, &sp, s);
    else
        launch_backward_strips<T, 16>(y, dy, dx, rows, C, S, &sp, s);
    return 1;
}

extern "C" void softmax_backward_v3(const void *y, const void *dy, void *dx,
                                    struct softmax_dims d, enum dtype t, cudaStream_t s)
{
    kl_note_rung("v3_warp_shuffle");
    int done = t == DT_FP32
                   ? backward((const float *)y, (const float *)dy, (float *)dx, d, s)
                   : backward((const __half *)y, (const __half *)dy, (__half *)dx, d, s);
    if (!done)
        softmax_backward_v2(y, dy, dx, d, t, s); /* the row does not fit the registers */
}
