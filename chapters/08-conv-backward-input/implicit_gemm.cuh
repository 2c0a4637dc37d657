/* The implicit GEMM of v4 and v6: dx = W^T dy_under (dgrad.cuh's product), never storing the
 * columns, over one "phase" of dx a grid layer.
 *
 * A phase is a set of dx pixels (ph + step i, pw + step j) and the filter taps that reach them
 * (r0 + tap_step t, s0 + tap_step u); the output under tap t of pixel i is
 *   p = i + a_r - t              (exactly, with no test, in v6's phases), or
 *   p = (i + a_r - t) / stride   where that divides (v4: one phase of every pixel and tap),
 * and it exists when 0 <= p < P (likewise q). Each stage a block gathers a BK x BN tile of the
 * product's B operand from dy with that test, and BM x BK of A = W^T from w in place, into
 * shared memory, then each thread makes TM x 8 multiply-adds for each pair of elements it
 * reads. A stage's taps are decoded once, by BK threads, into a table the next stage's loads
 * read. Registers are double-buffered: a stage's loads are in flight while the one before is
 * multiplied.
 * Tiles: BM = 32 or 64 channels (the least that holds C), BN = 128 pixels, BK = 16 taps, 256
 * threads, each TM = BM / 16 channels x 8 pixels. No limit on the shape: tails read 0 and are
 * not stored; a phase without taps stores 0. */
#ifndef DGRAD_IMPLICIT_GEMM_CUH
#define DGRAD_IMPLICIT_GEMM_CUH

#include "dgrad.cuh"

#define GEMM_BN 128     /* pixels a block */
#define GEMM_BK 16      /* taps a stage */
#define GEMM_THREADS 256 /* 16 x 16: rows of TM channels x columns of 8 pixels */

/* One phase of dx and its taps (see the header). */
struct gemm_phase {
    int ph, pw, step;       /* its first pixel and the step between its pixels */
    int rows, cols;         /* its pixels along each axis */
    int r0, s0, tap_step;   /* its first tap and the step between its taps */
    int taps_r, taps_s;     /* its taps along each axis */
    int a_r, a_s;           /* p = i + a_r - t (then / stride, for v4) */
};

/* A tap of the phase's reduction as the stage's table holds it: w's offset without the
 * channel, dy's plane offset, and (t, u). w_at < 0 marks the tail past the reduction. */
struct gemm_tap {
    int w_at, dy_at, t, u;
};

__device__ __forceinline__ gemm_tap gemm_tap_of(const conv2d_dims &d, const gemm_phase &ph,
                                                int j)
{
    gemm_tap e;
    const int per_k = ph.taps_r * ph.taps_s;
    if (j >= (int)d.k * per_k) {
        e.w_at = -1;
        e.dy_at = e.t = e.u = 0;
        return e;
    }
    const int k = j / per_k, i = j - k * per_k;
    e.t = i / ph.taps_s;
    e.u = i - e.t * ph.taps_s;
    const int r = ph.r0 + ph.tap_step * e.t, s = ph.s0 + ph.tap_step * e.u;
    e.w_at = k * (int)(d.c * d.r * d.s) + r * (int)d.s + s;
    e.dy_at = k * (int)(d.p * d.q);
    return e;
}

/* A pixel of the phase as a thread's loads see it: dy's image offset, i + a_r and j + a_s,
 * and whether it exists (past the phase's last pixel it is read as 0). */
struct gemm_pixel {
    int dy_at, pi, qi;
    bool in;
};

__device__ __forceinline__ gemm_pixel gemm_pixel_of(const conv2d_dims &d, const gemm_phase &ph,
                                                    int j)
{
    const int plane = ph.rows * ph.cols, n = j / plane, rest = j - n * plane;
    const int i = rest / ph.cols;
    gemm_pixel px;
    px.in = j < (int)d.n * plane;
    px.dy_at = n * (int)(d.k * d.p * d.q);
    px.pi = i + ph.a_r;
    px.qi = rest - i * ph.cols + ph.a_s;
    return px;
}

/* dx's index of the phase's pixel j, channel 0. */
__device__ __forceinline__ int gemm_dx_index(const conv2d_dims &d, const gemm_phase &ph, int j)
{
    const int plane = ph.rows * ph.cols, n = j / plane, rest = j - n * plane;
    const int i = rest / ph.cols, jj = rest - i * ph.cols;
    return n * (int)(d.c * d.h * d.w) + (ph.ph + ph.step * i) * (int)d.w + ph.pw + ph.step * jj;
}

/* The output at `at` = i + a - t along an axis of `count`, or -1: exact in a phase, else where
 * the stride divides it. */
template <bool DIVIDE>
__device__ __forceinline__ int gemm_output_at(int at, int stride, int count)
{
    if (at < 0)
        return -1;
    const int p = DIVIDE ? at / stride : at;
    return (!DIVIDE || p * stride == at) && p < count ? p : -1;
}

template <bool DIVIDE, typename T>
__device__ __forceinline__ float gemm_gather(const T *__restrict__ dy, const conv2d_dims &d,
                                             const gemm_pixel &px, const gemm_tap &e)
{
    const int p = gemm_output_at<DIVIDE>(px.pi - e.t, (int)d.stride, (int)d.p);
    const int q = gemm_output_at<DIVIDE>(px.qi - e.u, (int)d.stride, (int)d.q);
    return px.in && e.w_at >= 0 && p >= 0 && q >= 0
               ? to_float(dy[px.dy_at + e.dy_at + p * (int)d.q + q])
               : 0.f;
}

/* Phases::of(d, z) is grid layer z's phase, as the rung defines it. */
template <int BM, bool DIVIDE, typename Phases, typename T>
__global__ void __launch_bounds__(GEMM_THREADS)
    dgrad_implicit_gemm(const T *__restrict__ dy, const T *__restrict__ w, T *__restrict__ dx,
                        conv2d_dims d)
{
    constexpr int BN = GEMM_BN, BK = GEMM_BK, THREADS = GEMM_THREADS;
    constexpr int TM = BM / 16, A_LOADS = BM * BK / THREADS, B_LOADS = BN * BK / THREADS;
    __shared__ __align__(16) float a_tile[2][BK][BM];
    __shared__ __align__(16) float b_tile[2][BK][BN];
    __shared__ gemm_tap taps[2][BK];
    const gemm_phase ph = Phases::of(d, blockIdx.z);
    const int j0 = blockIdx.x * BN, pixels = (int)d.n * ph.rows * ph.cols;
    if (j0 >= pixels)
        return; /* the whole block: this phase has fewer pixels than the grid's widest */
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16, c0 = blockIdx.y * BM;
    const int reduction = (int)d.k * ph.taps_r * ph.taps_s, stages = (reduction + BK - 1) / BK;
    const int rs = (int)(d.r * d.s);

    /* What this thread loads: channel a_row of w at taps a_tap + m THREADS / BM, pixel b_col
     * of dy at taps b_tap + m THREADS / BN. */
    const int a_row = tid % BM, a_tap = tid / BM, b_col = tid % BN, b_tap = tid / BN;
    const bool a_in = c0 + a_row < (int)d.c;
    const gemm_pixel px = gemm_pixel_of(d, ph, j0 + b_col);
    float a_next[A_LOADS], b_next[B_LOADS];

    if (tid < 2 * BK)
        taps[tid / BK][tid % BK] = gemm_tap_of(d, ph, tid);
    __syncthreads();
    auto load = [&](int buf) {
#pragma unroll
        for (int m = 0; m < A_LOADS; m++) {
            const gemm_tap e = taps[buf][a_tap + m * (THREADS / BM)];
            a_next[m] = a_in && e.w_at >= 0 ? to_float(w[e.w_at + (c0 + a_row) * rs]) : 0.f;
        }
#pragma unroll
        for (int m = 0; m < B_LOADS; m++)
            b_next[m] = gemm_gather<DIVIDE>(dy, d, px, taps[buf][b_tap + m * (THREADS / BN)]);
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int m = 0; m < A_LOADS; m++)
            a_tile[buf][a_tap + m * (THREADS / BM)][a_row] = a_next[m];
#pragma unroll
        for (int m = 0; m < B_LOADS; m++)
            b_tile[buf][b_tap + m * (THREADS / BN)][b_col] = b_next[m];
    };
    load(0);
    store(0);
    __syncthreads();

    float acc[TM][8] = {};
    for (int stage = 0; stage < stages; stage++) {
        const int cur = stage & 1;
        const bool more = stage + 1 < stages;
        if (more)
            load(cur ^ 1); /* the table's other half holds stage + 1 */
#pragma unroll
        for (int k = 0; k < BK; k++) {
            float a[TM], b[8];
#pragma unroll
            for (int i = 0; i < TM; i++)
                a[i] = a_tile[cur][k][ty * TM + i];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                b[i] = b_tile[cur][k][tx * 4 + i];
                b[4 + i] = b_tile[cur][k][64 + tx * 4 + i];
            }
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int jj = 0; jj < 8; jj++)
                    acc[i][jj] = fmaf(a[i], b[jj], acc[i][jj]);
        }
        if (more)
            store(cur ^ 1);
        if (tid < BK) /* this stage's half of the table is free: stage + 2 goes there */
            taps[cur][tid] = gemm_tap_of(d, ph, (stage + 2) * BK + tid);
        __syncthreads();
    }

    const int hw = (int)(d.h * d.w);
#pragma unroll
    for (int jj = 0; jj < 8; jj++) {
        const int j = j0 + (jj < 4 ? tx * 4 + jj : 64 + tx * 4 + jj - 4);
        if (j >= pixels)
            continue;
        const int at = gemm_dx_index(d, ph, j);
#pragma unroll
        for (int i = 0; i < TM; i++) {
            const int c = c0 + ty * TM + i;
            if (c < (int)d.c)
                dx[at + c * hw] = from_float<T>(acc[i][jj]);
        }
    }
}

/* The grid over `layers` phases, the widest of `widest` pixels, and the launch. */
template <bool DIVIDE, typename Phases, typename T>
static void dgrad_gemm_launch(const T *dy, const T *w, T *dx, conv2d_dims d, int64_t widest,
                              int layers, cudaStream_t s)
{
    dim3 g((unsigned)((widest + GEMM_BN - 1) / GEMM_BN), 1, (unsigned)layers);
    if (d.c <= 32) {
        g.y = (unsigned)((d.c + 31) / 32);
        dgrad_implicit_gemm<32, DIVIDE, Phases, T><<<g, GEMM_THREADS, 0, s>>>(dy, w, dx, d);
    } else {
        g.y = (unsigned)((d.c + 63) / 64);
        dgrad_implicit_gemm<64, DIVIDE, Phases, T><<<g, GEMM_THREADS, 0, s>>>(dy, w, dx, d);
    }
    LAUNCH_CHECK();
}

#endif
