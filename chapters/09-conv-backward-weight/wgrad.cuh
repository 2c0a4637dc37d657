/* What the weight-gradient rungs share: the dtype dispatch of the launchers, and the split of
 * the long reduction with its deterministic second pass.
 *
 * The weight gradient is a matrix product whose reduction is the long side (api.h's formula):
 *     dw[k, (c, r, s)] = sum over i = (n, p, q) of dy[k, i] col[i, (c, r, s)],
 *     col[(n, p, q), (c, r, s)] = x[n, c, p stride + r - pad, q stride + s - pad] (0 off x)
 * an M = K by N = C R S product summed over N P Q: at the seed 64 x 288 outputs, each a sum of
 * 131072 products. Few outputs means few threads if each output has one, so the rungs from v3
 * on split the reduction into slices, a block a (tile, slice): each block stores its slice's
 * sums, and the last block of a tile to finish adds the tile's slices in slice order. The order
 * never changes, so neither do the bits; the only atomic is an integer counter a tile, which
 * that last block sets back to 0 for the next call. Every tensor holds fewer than 2^31
 * elements (chapter 07's api.h), so indices within a tensor are 32-bit. Sums are fp32 for both
 * storage types. */
#ifndef WGRAD_CUH
#define WGRAD_CUH

#include <stdint.h>

#include "kernels.cuh"
#include "launch.cuh"
#include "rung_note.h"
#include "wgrad.h"

/* The extern "C" launcher of wgrad.h from a file's template
 *   template <typename T> static void backward(const T *x, const T *dy, T *dw, T *db,
 *       conv2d_dims d, void *workspace, cudaStream_t s)
 * instantiated for fp32 and fp16. A rung that does not fuse the bias is given db = NULL and
 * the launcher sums db afterwards with chapter 02's bias_grad. */
#define WGRAD_LAUNCHER(v, fuses_bias)                                                          \
    extern "C" void wgrad_##v(const void *x, const void *dy, void *dw, void *db,                \
                              struct conv2d_dims d, enum dtype t, void *workspace,              \
                              cudaStream_t s)                                                   \
    {                                                                                          \
        void *own_db = fuses_bias ? db : NULL;                                                 \
        if (t == DT_FP32)                                                                      \
            backward((const float *)x, (const float *)dy, (float *)dw, (float *)own_db, d,     \
                     workspace, s);                                                            \
        else                                                                                   \
            backward((const __half *)x, (const __half *)dy, (__half *)dw, (__half *)own_db, d, \
                     workspace, s);                                                            \
        if (db && !(fuses_bias))                                                               \
            wgrad_bias_unfused(dy, db, d, t, workspace, s);                                    \
        kl_note_rung(#v); /* after bias_grad's own note */                                     \
    }

__host__ __device__ inline int64_t wgrad_columns(conv2d_dims d) { return d.c * d.r * d.s; }
__host__ __device__ inline int64_t wgrad_pixels(conv2d_dims d) { return d.n * d.p * d.q; }

/* Where a 256-byte aligned piece of `bytes` bytes starts after the previous one. */
static inline size_t wgrad_align(size_t bytes)
{
    return (bytes + 255) / 256 * 256;
}

/* ---- The split reduction ----
 * The workspace of the split rungs holds, from its start:
 *   counters: WGRAD_COUNTERS unsigned, one per output tile, zero between calls;
 *   partials: slices x (K C R S + K) floats, a slice's sums of dw, then of db.
 * The counters come first and at a fixed size, so that calls of other shapes sharing one
 * workspace (api.h) never write over them. A rung splits into at most wgrad_max_slices(d)
 * slices, so that the partials stay within WGRAD_PARTIAL_FLOATS floats (16 MiB) or a slice per
 * 16 pixels, whichever is fewer; a tile's last block adds the slices only where the tiles fit
 * the counters (wgrad_finish_in_last_block). */
#define WGRAD_PARTIAL_FLOATS (INT64_C(1) << 22)
#define WGRAD_MAX_SLICES 2048
#define WGRAD_COUNTERS 4096

struct wgrad_slices {
    float *partials;
    unsigned *counters;
    int64_t floats; /* a slice's: K C R S + K */
};

/* from[i] where `in`, else 0, without a branch: where not `in` the load reads from[0] (every
 * tensor has an element 0) and the value is dropped, so a thread's loads are all in flight at
 * once; a branch around each load, with fp16's conversion inside it, makes them wait in turn. */
template <typename T>
__device__ __forceinline__ float wgrad_load_or_zero(const T *__restrict__ from, int i, bool in)
{
    const float v = to_float(from[in ? i : 0]);
    return in ? v : 0.f;
}

__device__ __forceinline__ float wgrad_warp_sum(float v)
{
#pragma unroll
    for (int lanes = 16; lanes > 0; lanes >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, lanes);
    return v;
}


static inline int64_t wgrad_slice_floats(conv2d_dims d) { return d.k * wgrad_columns(d) + d.k; }

static inline int wgrad_max_slices(conv2d_dims d)
{
    int64_t most = WGRAD_PARTIAL_FLOATS / wgrad_slice_floats(d);
    const int64_t by_pixels = (wgrad_pixels(d) + 15) / 16;
    most = most < by_pixels ? most : by_pixels;
    most = most < WGRAD_MAX_SLICES ? most : WGRAD_MAX_SLICES;
    return (int)(most < 1 ? 1 : most);
}

static inline wgrad_slices wgrad_slices_of(conv2d_dims d, void *workspace)
{
    wgrad_slices w;
    w.floats = wgrad_slice_floats(d);
    w.counters = (unsigned *)workspace;
    w.partials = (float *)((char *)workspace + WGRAD_COUNTERS * sizeof(unsigned));
    return w;
}

/* Slices of `pixels` for a grid of `tiles` blocks a slice: enough (tiles x slices) blocks to
 * give every SM `blocks_per_sm` of them, no slice shorter than min_pixels, and no more slices
 * than the workspace holds. */
static inline int wgrad_slices_to_fill(conv2d_dims d, int64_t tiles, int blocks_per_sm,
                                       int64_t min_pixels)
{
    const int64_t want = ((int64_t)kl_sm_count() * blocks_per_sm + tiles - 1) / tiles;
    const int64_t by_length = (wgrad_pixels(d) + min_pixels - 1) / min_pixels;
    int64_t slices = want < by_length ? want : by_length;
    slices = slices < wgrad_max_slices(d) ? slices : wgrad_max_slices(d);
    return (int)(slices < 1 ? 1 : slices);
}

/* Called by every thread of a block once it has stored its slice's sums for tile `tile`:
 * true in the block that arrives last, which then sees every slice's sums. Thread 0 counts the
 * arrivals; the last resets the counter. */
__device__ __forceinline__ bool wgrad_arrived_last(unsigned *counters, int tile, int slices)
{
    __shared__ bool last;
    __threadfence(); /* this block's sums are visible before its arrival is counted */
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(&counters[tile], 1u) == (unsigned)slices - 1;
        if (last)
            counters[tile] = 0;
    }
    __syncthreads();
    if (last)
        __threadfence();
    return last;
}

/* The second pass over element e of a slice (e < K C R S: dw, else db[e - K C R S]): the sum of
 * its slices in slice order, read past L1 (other SMs wrote them). */
__device__ __forceinline__ float wgrad_sum_slices(const float *partials, int slices,
                                                  int64_t floats, int e)
{
    float sum = 0.f;
    for (int s = 0; s < slices; s++)
        sum += __ldcg(partials + (int64_t)s * floats + e);
    return sum;
}
/* Whether the last block of a tile should add its slices itself (true), or leave them to
 * wgrad_finish_slices (false): past 2^15 floats a tile, one block reading them all would
 * outlast the product. */
static inline bool wgrad_finish_in_last_block(int64_t tile_outputs, int slices)
{
    return tile_outputs * slices <= (INT64_C(1) << 15);
}

/* The second pass as a kernel (split.cu): dw (and db, where not NULL) from the slices. */
extern "C" void wgrad_finish_slices(const float *partials, int slices, struct conv2d_dims d,
                                    void *dw, void *db, enum dtype t, cudaStream_t s);

/* The last block's second pass over `count` sums of a tile (count <= BLOCK_THREADS, the
 * block's threads): sum a sits at at(a) in every slice. Its slices are cut into runs of
 * consecutive slices, BLOCK_THREADS / count runs or fewer, each added in slice order by
 * wgrad_sum_slices, then the runs in order: an order fixed by the slices and count, so the
 * bits are the same on every call, with BLOCK_THREADS loads in flight where a thread a sum
 * would have count. store(a, total) writes the result. */
template <int BLOCK_THREADS, typename At, typename Store>
__device__ __forceinline__ void wgrad_add_slices_in_runs(const float *partials, int slices,
                                                         int64_t floats, int count, At at,
                                                         Store store)
{
    __shared__ float run_sums[BLOCK_THREADS];
    const int most = BLOCK_THREADS / count, runs = most < slices ? most : slices;
    const int length = (slices + runs - 1) / runs;
    const int a = threadIdx.x % count, run = threadIdx.x / count, first = run * length;
    if (run < runs && first < slices) {
        const int n = length < slices - first ? length : slices - first;
        run_sums[threadIdx.x] = wgrad_sum_slices(partials + (int64_t)first * floats, n, floats,
                                                 at(a));
    } else if (run < runs) {
        run_sums[threadIdx.x] = 0.f;
    }
    __syncthreads();
    if ((int)threadIdx.x < count) {
        float total = 0.f;
        for (int r = 0; r < runs; r++)
            total += run_sums[r * count + threadIdx.x];
        store(threadIdx.x, total);
    }
}
/* ---- end of the split reduction ---- */

/* ---- Bands: the rungs that stage the x under a block of output pixels (v6, v7) ----
 * A launch's bands: rows x cols output pixels, under them x_rows x x_cols of x a channel;
 * down x across bands an image. */
struct band_shape {
    int rows, cols, x_rows, x_cols, down, across;
};

/* Where band b lies: image n, first output row and column, first x row and column. */
struct band_place {
    int n, p0, q0, h0, w0;
};

__device__ __forceinline__ band_place band_place_of(int b, band_shape band, conv2d_dims d)
{
    band_place at;
    const int per_image = band.down * band.across, rest = b % per_image;
    at.n = b / per_image;
    at.p0 = rest / band.across * band.rows;
    at.q0 = rest % band.across * band.cols;
    at.h0 = at.p0 * (int)d.stride - (int)d.pad;
    at.w0 = at.q0 * (int)d.stride - (int)d.pad;
    return at;
}

/* At most max_cols columns and max_pixels pixels a band, the bands of an image of equal size
 * but the last, and the x under a band, `channels` of them, within max_x floats: rows halved
 * until it is, then columns (a caller makes sure one pixel's x always fits). */
static inline band_shape wgrad_band_of(conv2d_dims d, int64_t channels, int64_t max_cols,
                                       int64_t max_pixels, int64_t max_x)
{
    const int64_t pieces = (d.q + max_cols - 1) / max_cols;
    int64_t cols = (d.q + pieces - 1) / pieces;
    int64_t rows = max_pixels / cols < d.p ? max_pixels / cols : d.p;
    rows = rows < 1 ? 1 : rows;
    for (;;) {
        const int64_t down = (d.p + rows - 1) / rows, across = (d.q + cols - 1) / cols;
        rows = (d.p + down - 1) / down; /* the same bands, evened out */
        cols = (d.q + across - 1) / across;
        const int64_t x_rows = (rows - 1) * d.stride + d.r, x_cols = (cols - 1) * d.stride + d.s;
        if (channels * x_rows * x_cols <= max_x || (rows == 1 && cols == 1)) {
            const band_shape band = {(int)rows,   (int)cols, (int)x_rows,
                                     (int)x_cols, (int)down, (int)across};
            return band;
        }
        if (rows > 1)
            rows = (rows + 1) / 2;
        else
            cols = (cols + 1) / 2;
    }
}

#endif
