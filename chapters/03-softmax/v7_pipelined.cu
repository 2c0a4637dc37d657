/* v7, pipelined rows: the next row's loads in flight while this one reduces.
 *
 * Idea: every earlier rung gives a block one row (or one tile) and lets the block stop loading
 * while it reduces and writes: the memory is kept busy only by *other* blocks being at another
 * phase. With one large block per SM (a 64 KiB fp16 row of 32768 values) there are none, and
 * v4 reaches 79% of the roof in fp16 forward at `large`; v5 tried many small blocks in clusters
 * instead and lost to the cluster barrier. Here a block stays resident (a grid of one block per
 * SM, each walking rows b, b + gridDim.x, ...) and double-buffers rows in shared memory: before
 * it works on row i it issues the copy of row i + 1 into the other buffer, with cp.async (16
 * bytes a copy, global to shared, no registers, all in flight at once), then waits only for
 * row i's copies. So while the block finds row i's max, sums its exps and writes its outputs,
 * row i + 1 is already on its way: the SM always has a row's worth of loads outstanding.
 * Each thread moves its share of row i from shared memory to registers (at most 4 packs, 32
 * values), and the arithmetic is v4's: its own max, its exps kept in registers, one merge per
 * row, each output its exp times exp(m_thread - m_row) / s_row. One barrier frees the buffer
 * for row i + 2.
 * What changed from v4 (and v6): a persistent block and a two-row pipeline instead of one row
 * per block; the forward only (the backward needs y and dy, twice the buffer).
 * Expected: at `large` in fp16 (128 KiB of buffers, one 1024-thread block per SM) the loads
 * never pause: 88% of the roof or more, against v4's 79%. fp32 rows of 32768 (128 KiB each)
 * do not fit twice and stay with v4 (96% already).
 * Limits: contiguous rows (H W = 1) of 2048 to 4 x 1024 packs (32768 fp16, 16384 fp32 values),
 * 16-byte aligned, whose two buffers fit in shared memory, forward only; every other shape and
 * the backward run as in v4. cp.async needs compute capability 8.0. */
#include "async_copy.cuh"
#include "launch.cuh"
#include "softmax.cuh"
#include "softmax.h"

#define THREADS 1024
#define MAX_PACKS 4 /* per thread */
#define MIN_VALUES 2048

__device__ __forceinline__ void copy_row_async(uint4 *buffer, const uint4 *row, int packs)
{
    for (int q = threadIdx.x; q < packs; q += blockDim.x)
        kl_copy16_async(buffer + q, row + q);
}

template <typename T, int P>
__global__ void __launch_bounds__(THREADS, 1)
    softmax_forward_rows_pipelined(const T *__restrict__ x, T *__restrict__ y, int64_t rows,
                                   int C)
{
    constexpr int W = pack16<T>::width;
    extern __shared__ uint4 buffers[]; /* two rows of packs */
    __shared__ softmax_stats part[32];
    const int packs = C / W, t = threadIdx.x, G = blockDim.x;
    const uint4 *xp = reinterpret_cast<const uint4 *>(x);
    uint4 *yp = reinterpret_cast<uint4 *>(y);

    int64_t row = blockIdx.x;
    if (row < rows)
        copy_row_async(buffers, xp + row * packs, packs);
    kl_copies_commit();
    for (int i = 0; row < rows; i++, row += gridDim.x) {
        uint4 *current = buffers + (i & 1) * packs, *other = buffers + (~i & 1) * packs;
        if (row + gridDim.x < rows)
            copy_row_async(other, xp + (row + gridDim.x) * packs, packs);
        kl_copies_commit();
        kl_copies_wait<1>(); /* this row's group has landed; the next row's may still fly */
        __syncthreads(); /* every thread's copies of this row have landed */

        float v[P][W];
        softmax_stats mine = {SOFTMAX_NO_VALUE, 0.f};
#pragma unroll
        for (int p = 0; p < P; p++) {
            const int q = p * G + t;
            pack16<T> pk;
            if (q < packs)
                pk.raw = current[q];
#pragma unroll
            for (int j = 0; j < W; j++) {
                v[p][j] = q < packs ? to_float(pk.e[j]) : SOFTMAX_NO_VALUE;
                mine.max = fmaxf(mine.max, v[p][j]);
            }
        }
#pragma unroll
        for (int p = 0; p < P; p++)
#pragma unroll
            for (int j = 0; j < W; j++) {
                v[p][j] = softmax_exp(v[p][j] - mine.max);
                mine.sum += v[p][j];
            }
        const softmax_stats r = softmax_row_reduce(part, mine, softmax_merge_op());
        const float scale = softmax_exp(mine.max - r.max) / r.sum;
#pragma unroll
        for (int p = 0; p < P; p++) {
            const int q = p * G + t;
            if (q < packs) {
                pack16<T> pk;
#pragma unroll
                for (int j = 0; j < W; j++)
                    pk.e[j] = from_float<T>(v[p][j] * scale);
                yp[row * packs + q] = pk.raw;
            }
        }
        __syncthreads(); /* `current` and part are free: the next iteration refills them */
    }
}

/* Shared memory the kernel may take: the opt-in maximum less its static part, granted once. */
template <typename T, int P> static size_t buffer_room()
{
    static size_t room = 0;
    if (!room)
        room = kl_grant_shared_memory((const void *)softmax_forward_rows_pipelined<T, P>);
    return room;
}

template <typename T, int P>
static bool launch(const T *x, T *y, int64_t rows, int C, int threads, cudaStream_t s)
{
    const size_t bytes = 2 * (size_t)C * sizeof(T);
    if (bytes > buffer_room<T, P>())
        return false;
    const int64_t resident =
        (int64_t)kl_sm_count() *
        kl_blocks_per_sm((const void *)softmax_forward_rows_pipelined<T, P>, threads, bytes);
    const unsigned blocks = (unsigned)(rows < resident ? rows : resident);
    softmax_forward_rows_pipelined<T, P><<<blocks, threads, bytes, s>>>(x, y, rows, C);
    LAUNCH_CHECK();
    return true;
}

/* Returns false for the shapes left to v4. */
template <typename T> static bool forward(const T *x, T *y, struct softmax_dims d, cudaStream_t s)
{
    constexpr int W = pack16<T>::width;
    const int C = (int)d.c;
    const int64_t rows = d.n * d.h * d.w;
    if (d.h * d.w != 1 || C < MIN_VALUES || C % W || !aligned16(x) || !aligned16(y))
        return false;
    const int packs = C / W;
    if (packs > MAX_PACKS * THREADS)
        return false;
    int P = 1;
    while (P * THREADS < packs)
        P *= 2;
    const int threads = (packs + P - 1) / P < THREADS ? ((packs + P - 1) / P + 31) / 32 * 32
                                                        : THREADS;
    switch (P) {
    case 1: return launch<T, 1>(x, y, rows, C, threads, s);
    case 2: return launch<T, 2>(x, y, rows, C, threads, s);
    default: return launch<T, MAX_PACKS>(x, y, rows, C, threads, s);
    }
}

extern "C" void softmax_forward_v7(const void *x, void *y, struct softmax_dims d, enum dtype t,
                                   cudaStream_t s)
{
    kl_note_rung("v7_pipelined");
    const bool done = t == DT_FP32 ? forward((const float *)x, (float *)y, d, s)
                                   : forward((const __half *)x, (__half *)y, d, s);
    if (!done)
        softmax_forward_v4(x, y, d, t, s);
}

extern "C" void softmax_backward_v7(const void *y, const void *dy, void *dx,
                                    struct softmax_dims d, enum dtype t, cudaStream_t s)
{
    kl_note_rung("v7_pipelined");
    softmax_backward_v4(y, dy, dx, d, t, s);
}
