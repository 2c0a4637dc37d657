/* v5, implicit GEMM on the tensor cores: mma.sync fed by ldmatrix from a channels-last patch.
 *
 * Idea: v4's product y[k][pixel] = sum over (c, r, s) of w[k][c, r, s] col[(c, r, s)][pixel],
 * done by mma.sync.m16n8k16 (mma_sync.cuh): one k16 step is 16 channels under one tap (r, s).
 * A block keeps its BM filters' w in shared memory for the whole launch, as rows of 8
 * channels a (tap, filter), and stays resident (one or two blocks an SM), taking tile after
 * tile: TH x TW output pixels of one image, the shape picked by the launcher. Per 16
 * channels it stages the patch the tile reads, ((TH-1) stride + R) x ((TW-1) stride + S)
 * positions, channels-last: a 16-byte row of 8 channels a position, 0 outside x and past C.
 * Under tap (r, s) pixel (i, j) reads the row at (i stride + r, j stride + s); ldmatrix lets
 * each lane name its own row, so B's fragments come straight from the patch, and every element
 * loaded from x serves R S taps. C is padded to 16 in shared memory, never in global memory.
 * What changed from v4: tensor cores instead of FMAs; a patch read once for all taps instead
 * of a column tile gathered tap by tap; w laid out once a block (cp.async, then a transpose
 * in shared memory) instead of copied once a tile.
 * Cost: a warp tile of 32 x 64 takes 6 ldmatrix (3 KB) for 16 HMMAs a tap, a byte of shared
 * memory per 11 multiply-adds; x loads run along rows of the planes, one stage ahead.
 * Expected: 250-350 TFLOP/s at large and resnet, half the mma.sync ceiling (634), less the
 * tiles Q leaves part-empty and a 1-3 us prologue that lays out w; latency at small batches.
 * Limits: fp16, compute capability 8.0 on. Where w does not fit in shared memory it is
 * reloaded in groups of channels for every tile, on half the warps (slow, correct); filters
 * whose 16-channel slice does not fit (11 x 11 and up), and fp32, go to v4.
 * Measured (H200): 89 TFLOP/s at large (54.1 us, 4.06x cuDNN) and 87 at resnet (85.1 us,
 * 1.70x), not the 250-350 predicted: one block of 8 warps an SM issues in 25% of its cycles,
 * stalled on the ldmatrix-to-HMMA chain (README, the profile). */
#include "async_copy.cuh"
#include "conv.cuh"
#include "mma_sync.cuh"

#define STAGED_W_BYTES (80 * 1024) /* w's prologue copy: more is fewer rounds (one wait each),
                                      less leaves shared memory for a second block */
/* The launcher's cost model, in SM cycles; it only ranks tile shapes and tilings. */
#define MMA_CYCLES_DIV 84.0       /* BM BN RS / this: a chunk's HMMAs at the mma.sync ceiling */
#define LOAD_CYCLES_PER_ROW 0.4   /* a staged 16-byte row of x: 8 loads, a store */
#define EXPOSED_WAIT_CYCLES 800.0 /* a global load that no arithmetic hides */

/* A block: GROUPS groups of WARPS_M x WARPS_N warps, each group on its own tiles of BM filters
 * x BN pixel slots, all sharing the block's w. UNITS: 16-byte rows of the patch a thread keeps
 * in flight for the next stage (the rest are loaded when stored). */
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int UNITS_, int MIN_BLOCKS_>
struct tiling {
    static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
    static constexpr int GROUPS = 2, UNITS = UNITS_, MIN_BLOCKS = MIN_BLOCKS_;
    static constexpr int GROUP_THREADS = 32 * WARPS_M * WARPS_N, THREADS = GROUPS * GROUP_THREADS;
    static constexpr int MMA_M = BM / WARPS_M / 16, MMA_N = BN / WARPS_N / 8; /* a warp's tiles */
    static constexpr int W_ROWS = BM + 1; /* rows of a tap's slice of w: one pads the banks */
    static_assert(BM % (16 * WARPS_M) == 0 && BN % (16 * WARPS_N) == 0, "whole mma pairs a warp");
};
using narrow = tiling<32, 128, 1, 4, 3, 2>; /* K <= 32: 32 x 32 warp tiles */
using square = tiling<64, 128, 2, 2, 3, 1>; /* 32 x 64 warp tiles */
using tall = tiling<128, 64, 2, 2, 5, 1>;   /* 64 x 32 warp tiles, for K > 64 */

/* What the launcher decides for a shape; sizes in shared memory are bytes. */
struct mma_plan {
    int tile_h, tile_w, tiles_q, tiles_pq, tiles; /* tiles of one image, of all images */
    int filter_blocks;                            /* blocks of BM filters */
    int patch_h, patch_w;                         /* input positions a tile reads */
    int phase_w, row_slots; /* a patch row: `stride` phases of phase_w slots, row_slots in all */
    int rows;               /* 16-byte rows of a stage: two planes of patch_h x patch_w */
    int chunks;             /* C / 16, rounded up */
    int group_chunks, w_groups; /* chunks of w held at once; w_groups > 1: reloaded a tile */
    int staged_chunks;          /* chunks of w copied in per round of its load */
    int plane_bytes, stage_bytes, x_offset, staging_offset, taps_offset, smem_bytes;
    int w_aligned, y_pairs; /* w read by 16-byte cp.async; y written in pairs */
};

/* ---- w: global (K C R S) -> staging (the same order) -> resident [chunk][half][tap][k]. ---- */

/* Row k of tap t of 16-channel chunk `chunk`, channels 8 half .. 8 half + 7, lies at
 * ((chunk 2 + half) RS + t) W_ROWS + k rows of 16 bytes from the start. Eight consecutive k
 * fill 128 bytes, so the eight rows of an ldmatrix tile meet no bank twice; and W_ROWS = BM + 1
 * moves each tap's slice one bank group on, so the transposing stores below, 8 filters x 4
 * taps a warp, do not collide either. */
template <class T> __device__ __forceinline__ int w_row(int chunk, int half, int tap, int rs, int k)
{
    return ((chunk * 2 + half) * rs + tap) * T::W_ROWS + k;
}

/* Barrier `id` (0: the whole block) for `threads` threads, the id spelt as a constant so that
 * ptxas reserves only the barriers used. */
__device__ __forceinline__ void barrier_of(int id, int threads)
{
    if (id == 0)
        kl_barrier(0, threads);
    else if (id == 1)
        kl_barrier(1, threads);
    else
        kl_barrier(2, threads);
}

/* Loads chunks first .. first + count - 1 of the block's filters k0 .. k0 + BM - 1 into w's
 * resident layout (zeros past K and past C), threads `tid` of `threads` (whole warps) taking
 * part and meeting at barrier `bar`. Each round copies staged_chunks chunks of w as they lie
 * in memory (filter k's run of 16 R S elements, from the 16-byte boundary below it; a warp a
 * run) into the staging area with cp.async. Then each warp takes slices of 8 filters x one
 * half-chunk, its lanes 8 filters x 4 taps at a time, and gathers a (filter, tap)'s 8
 * channels, R S apart, into one 16-byte row: KCRS becomes channels-last in shared memory. A
 * slice's numbers are worked out once; a row then costs 8 loads, a store and a few adds. */
template <class T>
__device__ void load_w(uint8_t *smem, const __half *__restrict__ w, const conv2d_dims &d,
                       const mma_plan &pl, int k0, int first, int count, int tid, int threads,
                       int bar)
{
    const int rs = (int)(d.r * d.s), c_all = (int)d.c, k_all = (int)d.k;
    const int total = (int)(d.k * d.c) * rs, run_chunks = 2 * rs + 1;
    const int warp = tid / 32, warps = threads / 32, lane = tid % 32;
    uint8_t *staging = smem + pl.staging_offset;
    for (int round = 0; round < count; round += pl.staged_chunks) {
        const int n = min(pl.staged_chunks, count - round);
        for (int run = warp; run < n * T::BM; run += warps) {
            const int k = run % T::BM, c_lo = (first + round + run / T::BM) * 16;
            if (k0 + k >= k_all)
                continue;
            const int start = ((k0 + k) * c_all + c_lo) * rs;
            const int end = start + min(16, c_all - c_lo) * rs;
            for (int from = (start & ~7) + 8 * lane, j = lane; from < end; from += 256, j += 32) {
                uint8_t *to = staging + (run * run_chunks + j) * 16;
                if (pl.w_aligned && from + 8 <= total)
                    kl_copy16_async((uint4 *)to, (const uint4 *)(w + from));
                else /* an unaligned w, or the last chunk of w: element by element */
                    for (int e = 0; e < 8 && from + e < total; e++)
                        ((__half *)to)[e] = w[from + e];
            }
        }
        kl_copies_wait_all();
        barrier_of(bar, threads);
        for (int slice = warp; slice < n * 2 * (T::BM / 8); slice += warps) {
            const int k = slice % (T::BM / 8) * 8 + lane % 8, half = slice / (T::BM / 8) % 2;
            const int lc = slice / (T::BM / 8) / 2, c_lo = (first + round + lc) * 16;
            const int c_in = min(16, c_all - c_lo) - 8 * half; /* channels of the half */
            const bool live = k0 + k < k_all;
            const int start = live ? ((k0 + k) * c_all + c_lo) * rs : 0;
            const __half *run = (const __half *)(staging + (lc * T::BM + k) * run_chunks * 16) +
                                (start & 7) + 8 * half * rs;
            for (int t = lane / 8; t < rs; t += 4) {
                pack16<__half> row;
#pragma unroll
                for (int e = 0; e < 8; e++)
                    row.e[e] = live && e < c_in ? run[e * rs + t] : __float2half(0.f);
                *(uint4 *)(smem + w_row<T>(round + lc, half, t, rs, k) * 16) = row.raw;
            }
        }
        barrier_of(bar, threads); /* the staging area is rewritten next round, w read next */
    }
}

/* Byte offset, from a plane's start, of the patch row under tap t: r rows down, s columns on. */
__device__ __forceinline__ void write_taps(int *taps, const conv2d_dims &d, const mma_plan &pl,
                                           int tid, int threads)
{
    const int st = (int)d.stride;
    for (int t = tid; t < (int)(d.r * d.s); t += threads) {
        const int r = t / (int)d.s, s = t % (int)d.s;
        taps[t] = (r * pl.row_slots + s % st * pl.phase_w + s / st) * 16;
    }
}

/* ---- x: global (NCHW) -> registers -> the patch, channels-last. ---- */

/* Position (pr, pc) of the patch sits at pr row_slots + (pc % stride) phase_w + pc / stride:
 * the columns of one stride phase side by side, so that the 8 pixels of an n8 tile, a stride
 * apart in x, read 8 consecutive rows, 128 bytes, under every tap: no bank conflicts. */
__device__ __forceinline__ int patch_slot(const mma_plan &pl, int stride, int pr, int pc)
{
    return pr * pl.row_slots + pc % stride * pl.phase_w + pc / stride;
}

/* Row u of a stage: plane u / (patch_h patch_w) (channels 0-7 or 8-15 of the chunk) at patch
 * position (pr, pc), packed as pc | pr << 15 | plane << 30; patch sizes stay below 2^15 (the
 * launcher's shared memory bound sees to it). */
__device__ __forceinline__ int locate_row(const mma_plan &pl, int u)
{
    const int per_plane = pl.patch_h * pl.patch_w, plane = u >= per_plane;
    const int pos = u - plane * per_plane, pr = pos / pl.patch_w;
    return (pos - pr * pl.patch_w) | pr << 15 | plane << 30;
}

__device__ __forceinline__ int row_offset(const mma_plan &pl, int stride, int at)
{
    const int pr = at >> 15 & 0x7fff, pc = at & 0x7fff;
    return (at >> 30) * pl.plane_bytes + patch_slot(pl, stride, pr, pc) * 16;
}

/* Where a step's tile lies: image n, its patch's top-left corner in x, and its channels. */
struct step_origin {
    int n, p0, q0, top, left, c_lo;
};

__device__ __forceinline__ step_origin origin_of(const conv2d_dims &d, const mma_plan &pl,
                                                 int tile, int chunk)
{
    step_origin o;
    o.n = tile / pl.tiles_pq;
    const int rest = tile - o.n * pl.tiles_pq, tp = rest / pl.tiles_q;
    o.p0 = tp * pl.tile_h;
    o.q0 = (rest - tp * pl.tiles_q) * pl.tile_w;
    o.top = o.p0 * (int)d.stride - (int)d.pad;
    o.left = o.q0 * (int)d.stride - (int)d.pad;
    o.c_lo = chunk * 16;
    return o;
}

/* The 8 channels of row `at`, or zeros outside x and past C. Lanes hold neighbouring pc, so
 * each of the 8 loads reads a run of a row of one plane. */
__device__ __forceinline__ void load_row(const __half *__restrict__ x, const conv2d_dims &d,
                                         const step_origin &o, int at, __half v[8])
{
    const int h = o.top + (at >> 15 & 0x7fff), col = o.left + (at & 0x7fff);
    const int c = o.c_lo + 8 * (at >> 30), hw = (int)(d.h * d.w);
    const bool inside = (unsigned)h < (unsigned)d.h && (unsigned)col < (unsigned)d.w;
    const int valid = inside ? min(8, (int)d.c - c) : 0;
    const int off = valid > 0 ? ((o.n * (int)d.c + c) * (int)d.h + h) * (int)d.w + col : 0;
#pragma unroll
    for (int e = 0; e < 8; e++)
        v[e] = e < valid ? x[off + e * hw] : __float2half(0.f);
}

__device__ __forceinline__ void store_row(uint8_t *stage, int offset, const __half v[8])
{
    pack16<__half> row;
#pragma unroll
    for (int e = 0; e < 8; e++)
        row.e[e] = v[e];
    *(uint4 *)(stage + offset) = row.raw;
}

/* A thread's rows of every stage, u = gtid + i GROUP_THREADS, and their values in flight. */
template <class T> struct x_rows {
    int at[T::UNITS]; /* locate_row's answer, or -1 past the stage's rows */
    int to[T::UNITS]; /* byte offset in a stage */
    __half v[T::UNITS][8];
};

template <class T>
__device__ __forceinline__ void load_rows(x_rows<T> &x_r, const __half *__restrict__ x,
                                          const conv2d_dims &d, const step_origin &o)
{
#pragma unroll
    for (int i = 0; i < T::UNITS; i++)
        if (x_r.at[i] >= 0)
            load_row(x, d, o, x_r.at[i], x_r.v[i]);
}

/* Stores the rows in flight, then loads and stores the stage's rows beyond them (tiles whose
 * patch is larger than the registers hold: the load's latency is not hidden for those). */
template <class T>
__device__ __forceinline__ void store_rows(const x_rows<T> &x_r, uint8_t *stage,
                                           const __half *__restrict__ x, const conv2d_dims &d,
                                           const mma_plan &pl, const step_origin &o, int gtid)
{
#pragma unroll
    for (int i = 0; i < T::UNITS; i++)
        if (x_r.at[i] >= 0)
            store_row(stage, x_r.to[i], x_r.v[i]);
    for (int u = gtid + T::UNITS * T::GROUP_THREADS; u < pl.rows; u += T::GROUP_THREADS) {
        const int at = locate_row(pl, u);
        __half v[8];
        load_row(x, d, o, at, v);
        store_row(stage, row_offset(pl, (int)d.stride, at), v);
    }
}

/* ---- Shared memory -> registers -> tensor cores. ---- */

template <class T> struct fragments {
    uint32_t a[T::MMA_M][4];
    uint32_t b[T::MMA_N][2];
};

/* One k16 step: A's tiles from w's rows at `a` (16 filters apart: 256 bytes), B's from the
 * patch rows of the lane's pixels moved by the tap. Each ldmatrix of B gives two n8 tiles. */
template <class T>
__device__ __forceinline__ void load_fragments(fragments<T> &f, uint32_t a,
                                               const uint32_t (&b)[T::MMA_N / 2], int tap)
{
#pragma unroll
    for (int i = 0; i < T::MMA_M; i++)
        kl_ldmatrix_x4(f.a[i], a + i * 256);
#pragma unroll
    for (int jj = 0; jj < T::MMA_N / 2; jj++) {
        uint32_t r[4];
        kl_ldmatrix_x4(r, b[jj] + tap);
        f.b[2 * jj][0] = r[0];
        f.b[2 * jj][1] = r[1];
        f.b[2 * jj + 1][0] = r[2];
        f.b[2 * jj + 1][1] = r[3];
    }
}

template <class T>
__device__ __forceinline__ void mma_tiles(float (&acc)[T::MMA_M][T::MMA_N][4],
                                          const fragments<T> &f)
{
#pragma unroll
    for (int i = 0; i < T::MMA_M; i++)
#pragma unroll
        for (int j = 0; j < T::MMA_N; j++)
            kl_mma_16816(acc[i][j], f.a[i], f.b[j]);
}

/* The R S k16 steps of one chunk; each step's fragments are loaded while the previous
 * step's HMMAs run (two sets, taken in turn). */
template <class T>
__device__ __forceinline__ void multiply_chunk(float (&acc)[T::MMA_M][T::MMA_N][4], uint32_t a,
                                               const uint32_t (&b)[T::MMA_N / 2],
                                               const int *taps, int rs)
{
    constexpr int tap_rows = T::W_ROWS * 16; /* bytes from one tap's slice of w to the next */
    fragments<T> f0, f1;
    load_fragments<T>(f0, a, b, taps[0]);
    for (int t = 0; t < rs; t += 2) {
        if (t + 1 < rs)
            load_fragments<T>(f1, a + (t + 1) * tap_rows, b, taps[t + 1]);
        mma_tiles<T>(acc, f0);
        if (t + 1 < rs) {
            if (t + 2 < rs)
                load_fragments<T>(f0, a + (t + 2) * tap_rows, b, taps[t + 2]);
            mma_tiles<T>(acc, f1);
        }
    }
}

/* ---- Registers -> y. ---- */

/* Lane l holds filters g = l / 4 and g + 8 of each mma tile and pixel slots 2 (l % 4) and + 1.
 * Slot v of the tile is pixel (v / tile_w, v % tile_w); slots past the tile or past the image
 * are not written. In pairs (one __half2) where Q, tile_w and y's alignment allow: then both
 * slots of a pair lie in one row, at an even q. */
template <class T>
__device__ __forceinline__ void store_tile(const float (&acc)[T::MMA_M][T::MMA_N][4],
                                           __half *__restrict__ y, const __half *__restrict__ bias,
                                           const conv2d_dims &d, conv2d_activation act,
                                           const mma_plan &pl, const step_origin &o, int k0,
                                           int warp_m0, int warp_n0)
{
    const int lane = threadIdx.x % 32, g = lane / 4, pq = (int)(d.p * d.q);
    const int slots = pl.tile_h * pl.tile_w;
#pragma unroll
    for (int j = 0; j < T::MMA_N; j++) {
        int pixel[2]; /* p Q + q, or -1: not written */
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int v = warp_n0 + 8 * j + 2 * (lane % 4) + e, i = v / pl.tile_w;
            const int p = o.p0 + i, q = o.q0 + v - i * pl.tile_w;
            pixel[e] = v < slots && p < (int)d.p && q < (int)d.q ? p * (int)d.q + q : -1;
        }
#pragma unroll
        for (int i = 0; i < T::MMA_M; i++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int k = k0 + warp_m0 + 16 * i + g + 8 * h;
                if (k >= (int)d.k)
                    continue;
                __half *plane = y + (o.n * (int)d.k + k) * pq;
                const float v0 = conv_epilogue(acc[i][j][2 * h], bias, k, act);
                const float v1 = conv_epilogue(acc[i][j][2 * h + 1], bias, k, act);
                if (pl.y_pairs) {
                    if (pixel[0] >= 0)
                        *(__half2 *)(plane + pixel[0]) = __floats2half2_rn(v0, v1);
                } else {
                    if (pixel[0] >= 0)
                        plane[pixel[0]] = __float2half_rn(v0);
                    if (pixel[1] >= 0)
                        plane[pixel[1]] = __float2half_rn(v1);
                }
            }
    }
}

/* ---- The kernel. ---- */

/* Block b works for filters (b % filter_blocks) BM on; its tiles are b / filter_blocks + m
 * (gridDim.x / filter_blocks), m = 0, 1, ..., and group h takes every GROUPS-th of them from
 * m = h. A group's steps are its tiles times its chunks, one stage each: the x rows of step
 * s + 2 are loaded while step s is multiplied and stored once it is, one barrier a step. */
template <class T>
__global__ void __launch_bounds__(T::THREADS, T::MIN_BLOCKS)
    conv_implicit_mma(const __half *__restrict__ x, const __half *__restrict__ w,
                      const __half *__restrict__ bias, __half *__restrict__ y, conv2d_dims d,
                      conv2d_activation act, mma_plan pl)
{
#if KL_MMA_SYNC_OK
    extern __shared__ __align__(128) uint8_t smem[];
    const bool w_once = pl.w_groups == 1;
    const int group = threadIdx.x / T::GROUP_THREADS, gtid = threadIdx.x % T::GROUP_THREADS;
    if (!w_once && group > 0)
        return; /* w reloaded a tile: one group, so that the reloads need no block barrier */
    const int groups = w_once ? T::GROUPS : 1, bar = 1 + group;
    const int w_tid = w_once ? (int)threadIdx.x : gtid;
    const int w_threads = w_once ? T::THREADS : T::GROUP_THREADS, w_bar = w_once ? 0 : bar;
    const int rs = (int)(d.r * d.s), k0 = (int)(blockIdx.x % pl.filter_blocks) * T::BM;
    int *taps = (int *)(smem + pl.taps_offset);
    write_taps(taps, d, pl, w_tid, w_threads);

    const int block_tiles = gridDim.x / pl.filter_blocks;
    const int first = blockIdx.x / pl.filter_blocks + group * block_tiles;
    const int tile_step = groups * block_tiles;
    const int my_tiles = first < pl.tiles ? (pl.tiles - first + tile_step - 1) / tile_step : 0;
    const int steps = my_tiles * pl.chunks;

    x_rows<T> x_r;
#pragma unroll
    for (int i = 0; i < T::UNITS; i++) {
        const int u = gtid + i * T::GROUP_THREADS;
        x_r.at[i] = u < pl.rows ? locate_row(pl, u) : -1;
        x_r.to[i] = u < pl.rows ? row_offset(pl, (int)d.stride, x_r.at[i]) : 0;
    }
    if (steps > 0) /* on its way while w is laid out */
        load_rows<T>(x_r, x, d, origin_of(d, pl, first, 0));
    if (w_once)
        load_w<T>(smem, w, d, pl, k0, 0, pl.chunks, w_tid, w_threads, w_bar);
    if (steps == 0)
        return;

    uint8_t *stages = smem + pl.x_offset + group * 2 * pl.stage_bytes;
    store_rows<T>(x_r, stages, x, d, pl, origin_of(d, pl, first, 0), gtid);
    if (steps > 1)
        load_rows<T>(x_r, x, d, origin_of(d, pl, first + 1 / pl.chunks * tile_step, 1 % pl.chunks));
    barrier_of(bar, T::GROUP_THREADS);

    /* The lane's ldmatrix rows: of w, filter warp_m0 + l % 8 + 8 ((l / 8) % 2), half l / 16;
     * of the patch, pixel slot warp_n0 + 16 jj + 8 (l / 16) + l % 8, half (l / 8) % 2 (idle
     * slots past the tile read slot 0's rows). */
    const int warp = gtid / 32, lane = gtid % 32;
    const int warp_m0 = warp / T::WARPS_N * (T::BM / T::WARPS_M);
    const int warp_n0 = warp % T::WARPS_N * (T::BN / T::WARPS_N);
    const uint32_t base = kl_shared_address(smem);
    const uint32_t a_lane =
        base + w_row<T>(0, lane / 16, 0, rs, warp_m0 + lane % 8 + 8 * (lane / 8 % 2)) * 16;
    uint32_t b_lane[T::MMA_N / 2];
#pragma unroll
    for (int jj = 0; jj < T::MMA_N / 2; jj++) {
        const int v = warp_n0 + 16 * jj + 8 * (lane / 16) + lane % 8, i = v / pl.tile_w;
        const int pos = v < pl.tile_h * pl.tile_w
                            ? i * (int)d.stride * pl.row_slots + v - i * pl.tile_w : 0;
        b_lane[jj] = kl_shared_address(stages) + (lane / 8 % 2) * pl.plane_bytes + pos * 16;
    }

    float acc[T::MMA_M][T::MMA_N][4];
    for (int s = 0; s < steps; s++) {
        const int tile = first + s / pl.chunks * tile_step, chunk = s % pl.chunks;
        if (chunk == 0)
#pragma unroll
            for (int i = 0; i < T::MMA_M; i++)
#pragma unroll
                for (int j = 0; j < T::MMA_N; j++)
                    acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;
        const int w_chunk = chunk % pl.group_chunks;
        if (!w_once && w_chunk == 0) /* every reader of the last group passed the barrier */
            load_w<T>(smem, w, d, pl, k0, chunk, min(pl.group_chunks, pl.chunks - chunk), w_tid,
                      w_threads, w_bar);
        uint32_t b[T::MMA_N / 2];
#pragma unroll
        for (int jj = 0; jj < T::MMA_N / 2; jj++)
            b[jj] = b_lane[jj] + s % 2 * pl.stage_bytes;
        multiply_chunk<T>(acc, a_lane + w_row<T>(w_chunk, 0, 0, rs, 0) * 16, b, taps, rs);
        if (chunk == pl.chunks - 1)
            store_tile<T>(acc, y, bias, d, act, pl, origin_of(d, pl, tile, 0), k0, warp_m0,
                          warp_n0);
        /* Stage (s + 1) % 2 was last read at step s - 1, before the barrier that ended it. */
        if (s + 1 < steps) {
            const int next = s + 1;
            store_rows<T>(x_r, stages + next % 2 * pl.stage_bytes, x, d, pl,
                          origin_of(d, pl, first + next / pl.chunks * tile_step, next % pl.chunks),
                          gtid);
        }
        if (s + 2 < steps) {
            const int next = s + 2;
            load_rows<T>(x_r, x, d,
                         origin_of(d, pl, first + next / pl.chunks * tile_step, next % pl.chunks));
        }
        barrier_of(bar, T::GROUP_THREADS);
    }
#else
    /* mma.sync m16n8k16 and cp.async need sm_80; the rung table never launches this below. */
    (void)x, (void)w, (void)bias, (void)y, (void)d, (void)act, (void)pl;
#endif
}

/* ---- The launcher: a tiling, a tile shape, and the layout of shared memory. ---- */

static int ceil_div(int64_t a, int64_t b) { return (int)((a + b - 1) / b); }
static int round16(int64_t bytes) { return (int)((bytes + 15) / 16 * 16); }

/* The device's limits, asked once a launch (cached by kl_device_attribute). */
struct device_room {
    int64_t block_smem, sm_smem;
    int sms;
};

/* Plans d for tiling T with tiles of tile_w pixels across (the height follows), or returns a
 * negative cost where it does not fit. The cost is the model's SM cycles for the launch: the
 * tiles of the busiest SM, each chunks x max(HMMA cycles, load cycles), plus w's prologue. */
template <class T>
static double plan_with(const conv2d_dims &d, const device_room &dev, int tile_w, mma_plan *pl)
{
    const int64_t rs = d.r * d.s, st = d.stride;
    if (tile_w > T::BN || tile_w > d.q)
        return -1;
    const int rows_of_tiles = ceil_div(d.p, T::BN / tile_w);
    mma_plan p = {};
    p.tile_w = tile_w;
    p.tile_h = ceil_div(d.p, rows_of_tiles);
    p.tiles_q = ceil_div(d.q, tile_w);
    p.tiles_pq = rows_of_tiles * p.tiles_q;
    p.tiles = (int)d.n * p.tiles_pq;
    p.filter_blocks = ceil_div(d.k, T::BM);
    const int64_t patch_h = (p.tile_h - 1) * st + d.r, patch_w = (tile_w - 1) * st + d.s;
    const int64_t phase_w = (patch_w + st - 1) / st;
    const int64_t plane = patch_h * st * phase_w * 16;
    const int64_t w_chunk = 2 * rs * T::W_ROWS * 16, staged_chunk = T::BM * (2 * rs + 1) * 16;
    const int64_t taps = round16(rs * 4);
    if (plane > dev.block_smem || w_chunk + staged_chunk > dev.block_smem)
        return -1;
    p.patch_h = (int)patch_h;
    p.patch_w = (int)patch_w;
    p.phase_w = (int)phase_w;
    p.row_slots = (int)(st * phase_w);
    p.rows = (int)(2 * patch_h * patch_w);
    p.chunks = ceil_div(d.c, 16);
    p.plane_bytes = (int)plane;
    p.stage_bytes = (int)(2 * plane);

    /* w held whole, its staging area shared with the stages (used before them), or in groups
     * of chunks reloaded a tile, with a staging area of its own and one group of warps. */
    int64_t staged = STAGED_W_BYTES / staged_chunk;
    staged = staged < 1 ? 1 : staged > p.chunks ? p.chunks : staged;
    const int64_t x_all = T::GROUPS * 2 * (int64_t)p.stage_bytes;
    int64_t after_w = x_all > staged * staged_chunk ? x_all : staged * staged_chunk;
    int64_t smem = p.chunks * w_chunk + after_w + taps;
    if (smem <= dev.block_smem) {
        p.group_chunks = p.chunks;
        p.w_groups = 1;
        p.staged_chunks = (int)staged;
        p.x_offset = p.staging_offset = (int)(p.chunks * w_chunk);
    } else {
        after_w = 2 * (int64_t)p.stage_bytes + staged_chunk;
        const int64_t fit = (dev.block_smem - after_w - taps) / w_chunk;
        if (fit < 1)
            return -1;
        p.group_chunks = (int)(fit < p.chunks ? fit : p.chunks);
        p.w_groups = ceil_div(p.chunks, p.group_chunks);
        p.staged_chunks = 1;
        p.x_offset = (int)(p.group_chunks * w_chunk);
        p.staging_offset = p.x_offset + 2 * p.stage_bytes;
        smem = p.group_chunks * w_chunk + after_w + taps;
    }
    p.taps_offset = (int)(smem - taps);
    p.smem_bytes = (int)smem;

    const int64_t items = (int64_t)p.tiles * p.filter_blocks;
    int64_t per_sm = dev.sm_smem / (smem + 1024);
    per_sm = per_sm < 1 ? 1 : per_sm > T::MIN_BLOCKS ? T::MIN_BLOCKS : per_sm;
    int64_t grid = items < dev.sms * per_sm ? items : dev.sms * per_sm;
    grid = grid / p.filter_blocks * p.filter_blocks;
    grid = grid < p.filter_blocks ? p.filter_blocks : grid;
    const double rounds = ceil_div(p.tiles, grid / p.filter_blocks);
    const double group_rows = p.rows - (double)T::UNITS * T::GROUP_THREADS;
    const double loads = p.rows * LOAD_CYCLES_PER_ROW; /* mostly hidden: a tenth shows */
    const double step = fmax((double)T::BM * T::BN * rs / MMA_CYCLES_DIV, loads) + 0.1 * loads +
                        (group_rows > 0 ? EXPOSED_WAIT_CYCLES : 0.0);
    const double w_load = p.chunks * w_chunk / 16 * 0.5 + EXPOSED_WAIT_CYCLES;
    double tile = p.chunks * step, prologue = w_load;
    if (p.w_groups > 1) {
        tile = 1.5 * tile + w_load * p.w_groups; /* half the warps, and w again */
        prologue = 0;
    }
    *pl = p;
    return (double)ceil_div(grid, dev.sms) * (rounds * tile + prologue);
}

/* The best tile shape for T: widths of Q itself and of powers of 2 down to 8 (8 pixels in a
 * row make an n8 tile's ldmatrix rows consecutive); at equal cost the wider (longer runs of
 * x loaded, of y stored). */
template <class T>
static double plan_tiling(const conv2d_dims &d, const device_room &dev, mma_plan *best)
{
    const int widths[] = {(int)(d.q < T::BN ? d.q : T::BN), 128, 64, 32, 16, 8};
    double best_cost = -1;
    for (int width : widths) {
        mma_plan p = {};
        const double cost = plan_with<T>(d, dev, width, &p);
        if (cost >= 0 && (best_cost < 0 || cost < best_cost)) {
            best_cost = cost;
            *best = p;
        }
    }
    return best_cost;
}

template <class T>
static void launch(const __half *x, const __half *w, const __half *bias, __half *y,
                   conv2d_dims d, conv2d_activation act, mma_plan p, const device_room &dev,
                   cudaStream_t s)
{
    static bool granted = false; /* above 48 KB of dynamic shared memory a kernel must opt in */
    if (!granted) {
        kl_grant_shared_memory((const void *)conv_implicit_mma<T>);
        granted = true;
    }
    p.w_aligned = aligned16(w);
    p.y_pairs = d.q % 2 == 0 && p.tile_w % 2 == 0 && (uintptr_t)y % 4 == 0;
    const int per_sm = kl_blocks_per_sm((const void *)conv_implicit_mma<T>, T::THREADS,
                                        (size_t)p.smem_bytes);
    const int64_t items = (int64_t)p.tiles * p.filter_blocks;
    int64_t grid = items < (int64_t)dev.sms * per_sm ? items : (int64_t)dev.sms * per_sm;
    grid = grid / p.filter_blocks * p.filter_blocks;
    grid = grid < p.filter_blocks ? p.filter_blocks : grid;
    conv_implicit_mma<T><<<(unsigned)grid, T::THREADS, (size_t)p.smem_bytes, s>>>(x, w, bias, y,
                                                                                   d, act, p);
    LAUNCH_CHECK();
}

/* fp32 is not this rung's (its dtypes say so): v4 takes it if asked. */
static void forward(const float *x, const float *w, const float *bias, float *y, conv2d_dims d,
                    conv2d_activation act, void *workspace, cudaStream_t s)
{
    conv2d_forward_v4(x, w, bias, y, d, act, DT_FP32, workspace, s);
}

static void forward(const __half *x, const __half *w, const __half *bias, __half *y,
                    conv2d_dims d, conv2d_activation act, void *workspace, cudaStream_t s)
{
    if (kl_device_cc() < 80) {
        conv2d_forward_v4(x, w, bias, y, d, act, DT_FP16, workspace, s);
        return;
    }
    const device_room dev = {kl_device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin),
                             kl_device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor),
                             kl_sm_count()};
    /* Each tiling's best plan, by the model's cost; narrow only where K <= 32, tall where
     * K > 64 (else their filter tiles would be mostly empty or need two blocks). */
    mma_plan plans[3] = {};
    const double costs[3] = {d.k <= 32 ? plan_tiling<narrow>(d, dev, &plans[0]) : -1,
                             plan_tiling<square>(d, dev, &plans[1]),
                             d.k > 64 ? plan_tiling<tall>(d, dev, &plans[2]) : -1};
    int pick = -1;
    for (int i = 0; i < 3; i++)
        if (costs[i] >= 0 && (pick < 0 || costs[i] < costs[pick]))
            pick = i;
    if (pick < 0) /* a 16-channel slice of w does not fit in shared memory */
        conv2d_forward_v4(x, w, bias, y, d, act, DT_FP16, workspace, s);
    else if (pick == 0)
        launch<narrow>(x, w, bias, y, d, act, plans[0], dev, s);
    else if (pick == 1)
        launch<square>(x, w, bias, y, d, act, plans[1], dev, s);
    else
        launch<tall>(x, w, bias, y, d, act, plans[2], dev, s);
}

CONV2D_FORWARD_LAUNCHER(v5)

extern "C" const char *conv2d_forward_v5_unsupported(struct conv2d_dims d, enum dtype t)
{
    (void)d;
    return t == DT_FP16 ? NULL : "fp16 only: the tensor cores' fp16 product";
}
