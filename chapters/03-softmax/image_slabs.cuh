/* Rungs v8 and v9: images of strided rows held in shared memory as contiguous slabs of channels.
 *
 * Image n of an NCHW tensor, its C rows at all S = H W positions, is one contiguous run of C S
 * elements. A team of B blocks holds it: block r owns channels [r k, r k + k), a slab of k S
 * elements that also lies in one piece in memory, copied in and out by bulk copies in up to
 * MAX_PIECES pieces (16-byte units: the cut keeps every piece on 16-byte boundaries). A thread
 * owns V neighbouring positions (one vector access a channel) and one of G channel groups:
 * group g takes channels g, g + G, ... of each piece, STEP at a time. What the rungs differ in
 * is how the B blocks of a team meet (v8: a cluster and its distributed shared memory; v9:
 * global memory) and whether a block holds one image or a stream of them. */
#ifndef IMAGE_SLABS_CUH
#define IMAGE_SLABS_CUH

#include "bulk_copy.cuh"
#include "softmax.cuh"
#include "launch.cuh"
#include "softmax.h"

#define MAX_PIECES 16 /* bulk copies a slab arrives in, each with its mbarrier */
#define STEP 4        /* channels a thread loads at once, per position */
/* From H W = 256 on, v3's strips read long enough runs: measured, v3 won at 28x28 positions
 * and lost at 14x14 and 7x7 at most shapes (the README's table). */
#define MAX_POSITIONS 256

/* How an image is cut: `cluster` blocks (a team) of `channels` channels (the last may have
 * fewer), each slab arriving in pieces of `piece` channels (a multiple of STEP groups). A
 * thread owns V neighbouring positions and one of `groups` channel groups. */
struct image_args {
    int C, S, channels, piece, cluster, groups;
};
struct image_plan {
    struct image_args a;
    int vector, threads, waves;
    int at_once; /* images the GPU works on at once with this cut, at most N */
    size_t shared;
};

/* ---- one block's share of an image ---- */

/* Block `rank` of image n's team owns channels [rank channels, rank channels + count), held in
 * shared memory exactly as they lie in the tensor; piece j is its channels
 * [j piece, min(count, (j + 1) piece)). Thread t owns positions [V q, V q + V), q = t % (S / V),
 * and channel group g = t / (S / V) (threads past the last group only help with the exchange).
 * A warp's lanes thus read neighbouring positions, one vector each. */
struct slab {
    int64_t first; /* tensor offset of the slab's first element */
    int count, pieces, position, group;
    bool active;
};

template <int V>
__device__ __forceinline__ slab slab_of(const image_args &a, int64_t image, int rank)
{
    const int vectors = a.S / V, c0 = rank * a.channels;
    slab b;
    b.first = (image * a.C + c0) * a.S;
    b.count = min(a.channels, a.C - c0);
    b.pieces = (b.count + a.piece - 1) / a.piece;
    b.position = (int)threadIdx.x % vectors * V;
    b.group = (int)threadIdx.x / vectors;
    b.active = b.group < a.groups;
    return b;
}

__device__ __forceinline__ int piece_end(const image_args &a, const slab &b, int j)
{
    return min(b.count, (j + 1) * a.piece);
}

template <typename T>
__device__ __forceinline__ unsigned piece_bytes(const image_args &a, const slab &b, int j)
{
    return (unsigned)((piece_end(a, b, j) - j * a.piece) * a.S * sizeof(T));
}

/* V neighbouring elements, moved as one access. */
template <typename T, int V> struct alignas(sizeof(T) * V) lane_vector {
    T e[V];
};

template <typename T, int V>
__device__ __forceinline__ void load_vector(const T *at, bool live, float (&v)[V])
{
    if (live) {
        const lane_vector<T, V> w = *reinterpret_cast<const lane_vector<T, V> *>(at);
#pragma unroll
        for (int e = 0; e < V; e++)
            v[e] = to_float(w.e[e]);
    } else {
#pragma unroll
        for (int e = 0; e < V; e++)
            v[e] = SOFTMAX_NO_VALUE;
    }
}

template <typename T, int V>
__device__ __forceinline__ void store_vector(T *at, const float (&v)[V])
{
    lane_vector<T, V> w;
#pragma unroll
    for (int e = 0; e < V; e++)
        w.e[e] = from_float<T>(v[e]);
    *reinterpret_cast<lane_vector<T, V> *>(at) = w;
}

/* Thread 0 asks the copy engine for piece j of each array (the backward's y and dy share a
 * barrier a piece), counted on landed[j]. */
template <typename T, int A>
__device__ __forceinline__ void load_piece(const image_args &a, const slab &b, int j,
                                           T *const (&held)[A], const T *const (&from)[A],
                                           uint64_t *landed)
{
    const int64_t at = (int64_t)j * a.piece * a.S;
    const unsigned bytes = piece_bytes<T>(a, b, j);
    kl_mbarrier_expect_bytes(landed + j, A * bytes);
#pragma unroll
    for (int k = 0; k < A; k++)
        kl_bulk_load(held[k] + at, from[k] + b.first + at, bytes, landed + j);
}

/* Thread 0 sets up one barrier a piece and asks for every piece at once; the block may use the
 * barriers after the barrier at the end. */
template <typename T, int A>
__device__ __forceinline__ void load_slabs(const image_args &a, const slab &b,
                                           T *const (&held)[A], const T *const (&from)[A],
                                           uint64_t *landed)
{
    if (threadIdx.x == 0) {
        for (int j = 0; j < b.pieces; j++)
            kl_mbarrier_init(landed + j);
        kl_mbarrier_init_fence();
        for (int j = 0; j < b.pieces; j++)
            load_piece(a, b, j, held, from, landed);
    }
    __syncthreads();
}

/* After each piece's outputs are in place: every thread's writes ordered before the copy
 * engine's reads, then thread 0 sends the piece back. */
template <typename T>
__device__ __forceinline__ void store_piece(const image_args &a, const slab &b, int j,
                                            const T *held, T *to)
{
    kl_fence_before_bulk_store();
    __syncthreads();
    if (threadIdx.x == 0) {
        const int64_t at = (int64_t)j * a.piece * a.S;
        kl_bulk_store(to + b.first + at, held + at, piece_bytes<T>(a, b, j));
    }
}

/* Each thread's results for its W positions (mine) into part[g S + p], then op over the groups
 * of each position into published[p]. */
template <typename V, int W, typename Op>
__device__ __forceinline__ void combine_groups(const image_args &a, const slab &b,
                                               const V (&mine)[W], V *part, Op op, V *published)
{
    if (b.active)
#pragma unroll
        for (int e = 0; e < W; e++)
            part[b.group * a.S + b.position + e] = mine[e];
    __syncthreads();
    for (int p = threadIdx.x; p < a.S; p += blockDim.x) {
        V acc = part[p];
        for (int g = 1; g < a.groups; g++)
            acc = op(acc, part[g * a.S + p]);
        published[p] = acc;
    }
}

/* Where the parts of the shared memory start: the slabs (16-byte aligned), the barriers, then
 * the groups' partial results, the block's and the combined ones, one per position each. */
template <typename V> struct image_shared {
    uint64_t *landed;
    V *part, *published, *combined;
};

/* A slab's bytes, rounded up to 16 so that what follows it stays aligned. */
__host__ __device__ inline size_t slab_bytes(int64_t channels, int64_t S, size_t size)
{
    return ((size_t)(channels * S) * size + 15) / 16 * 16;
}

template <typename T, typename V>
__device__ __forceinline__ image_shared<V> shared_parts(unsigned char *base, const image_args &a,
                                                       int arrays)
{
    image_shared<V> sh;
    const size_t slabs = arrays * slab_bytes(a.channels, a.S, sizeof(T));
    sh.landed = reinterpret_cast<uint64_t *>(base + slabs);
    sh.part = reinterpret_cast<V *>(sh.landed + MAX_PIECES);
    sh.published = sh.part + a.groups * a.S;
    sh.combined = sh.published + a.S;
    return sh;
}

/* ---- the arithmetic of a piece ---- */

/* Forward: the piece's channels of this thread, STEP at a time, their max first, then their
 * exps against the running max (one exp a value, one a step to rescale the sum). */
template <typename T, int V>
__device__ __forceinline__ void summarise_piece(const image_args &a, const slab &b, const T *held,
                                                int j, softmax_stats (&mine)[V])
{
    const int end = piece_end(a, b, j);
    for (int c = j * a.piece + b.group; b.active && c < end; c += STEP * a.groups) {
        float v[STEP][V];
#pragma unroll
        for (int i = 0; i < STEP; i++)
            load_vector<T, V>(held + (c + i * a.groups) * a.S + b.position,
                              c + i * a.groups < end, v[i]);
#pragma unroll
        for (int e = 0; e < V; e++) {
            float m = mine[e].max;
#pragma unroll
            for (int i = 0; i < STEP; i++)
                m = fmaxf(m, v[i][e]);
            float sum = mine[e].sum * softmax_exp(mine[e].max - m);
#pragma unroll
            for (int i = 0; i < STEP; i++)
                sum += softmax_exp(v[i][e] - m);
            mine[e] = {m, sum};
        }
    }
}

/* Forward: y = exp(x - max) / sum in place over the piece's channels of this thread. */
template <typename T, int V>
__device__ __forceinline__ void write_piece(const image_args &a, const slab &b, T *held, int j,
                                            const float (&max)[V], const float (&scale)[V])
{
    const int end = piece_end(a, b, j);
    for (int c = j * a.piece + b.group; b.active && c < end; c += a.groups) {
        T *at = held + c * a.S + b.position;
        float v[V];
        load_vector<T, V>(at, true, v);
#pragma unroll
        for (int e = 0; e < V; e++)
            v[e] = softmax_exp(v[e] - max[e]) * scale[e];
        store_vector<T, V>(at, v);
    }
}

/* Backward: this thread's sums of dy y over the piece's channels, STEP at a time. */
template <typename T, int V>
__device__ __forceinline__ void dot_piece(const image_args &a, const slab &b, const T *held_y,
                                          const T *held_dy, int j, float (&mine)[V])
{
    const int end = piece_end(a, b, j);
    for (int c = j * a.piece + b.group; b.active && c < end; c += STEP * a.groups) {
        float vy[STEP][V], vdy[STEP][V];
#pragma unroll
        for (int i = 0; i < STEP; i++) {
            const int at = (c + i * a.groups) * a.S + b.position;
            const bool live = c + i * a.groups < end;
            load_vector<T, V>(held_y + at, live, vy[i]);
            load_vector<T, V>(held_dy + at, live, vdy[i]);
        }
#pragma unroll
        for (int i = 0; i < STEP; i++)
#pragma unroll
            for (int e = 0; e < V; e++)
                if (c + i * a.groups < end)
                    mine[e] += vy[i][e] * vdy[i][e];
    }
}

/* Backward: dx = y (dy - dot) over the piece's channels of this thread, written over dy. */
template <typename T, int V>
__device__ __forceinline__ void write_gradient_piece(const image_args &a, const slab &b,
                                                     const T *held_y, T *held_dy, int j,
                                                     const float (&dot)[V])
{
    const int end = piece_end(a, b, j);
    for (int c = j * a.piece + b.group; b.active && c < end; c += a.groups) {
        const int at = c * a.S + b.position;
        float vy[V], vdy[V];
        load_vector<T, V>(held_y + at, true, vy);
        load_vector<T, V>(held_dy + at, true, vdy);
#pragma unroll
        for (int e = 0; e < V; e++)
            vdy[e] = vy[e] * (vdy[e] - dot[e]);
        store_vector<T, V>(held_dy + at, vdy);
    }
}

/* ---- the cut ---- */

static inline int slabs_gcd(int a, int b)
{
    return b ? slabs_gcd(b, a % b) : a;
}

/* What an image of C x S elements needs to be cut for one block size: the fewest blocks, at
 * most max_team, whose slabs (`arrays` of them a block, elements of `size` bytes) fit `budget`
 * bytes of shared memory besides the barriers and the partial results. Pieces start and end
 * on 16-byte boundaries: a slab's channel count and a piece's are multiples of `align`
 * channels. Returns false if none fits. */
static inline bool cut_image(int64_t C, int64_t S, size_t size, int arrays, int vector,
                             int threads, size_t budget, int max_team, struct image_plan *pl)
{
    const int align = 16 / slabs_gcd((int)(S * (int64_t)size % 16), 16); /* channels a 16 B */
    const int64_t vectors = S / vector, group_unit = align / slabs_gcd(align, STEP);
    const int64_t groups = vectors > threads ? 0 : threads / vectors / group_unit * group_unit;
    /* the barriers, then per position a part per group, the block's and the combined result,
     * at most 8 bytes each (a softmax_stats) */
    const size_t extras = MAX_PIECES * sizeof(uint64_t) + (size_t)(groups + 2) * S * 8;
    if (!groups || budget <= extras)
        return false;
    for (int64_t team = 1; team <= max_team; team++) {
        int64_t channels = (C + team - 1) / team;
        channels = (channels + align - 1) / align * align;
        const size_t slab = slab_bytes(channels, S, size);
        if (arrays * slab > budget - extras)
            continue;
        const int64_t round = STEP * groups; /* channels a piece takes in one step */
        const int64_t steps = ((channels + round - 1) / round + MAX_PIECES - 1) / MAX_PIECES;
        pl->a = (struct image_args){(int)C, (int)S, (int)channels, (int)(steps * round),
                                    (int)((C + channels - 1) / channels), (int)groups};
        pl->vector = vector;
        pl->threads = threads;
        pl->shared = arrays * slab + extras;
        return true;
    }
    return false;
}

/* Which shapes the image rungs take: strided rows of more than 32 channels, fewer than
 * MAX_POSITIONS positions apart, whose C S elements are a multiple of 16 bytes. */
static inline bool image_shape_fits(struct softmax_dims d, size_t size)
{
    const int64_t S = d.h * d.w;
    return S > 1 && S < MAX_POSITIONS && d.c > 32 && d.c * S * (int64_t)size % 16 == 0;
}

/* Positions a thread owns: 4 when S allows, else 2, else 1. */
static inline int image_vector(struct softmax_dims d)
{
    const int64_t S = d.h * d.w;
    return S % 4 == 0 ? 4 : S % 2 == 0 ? 2 : 1;
}

/* The three kernels of one pass of a rung, one a vector width (1, 2, 4), and the shared memory
 * they may take besides their static part: the opt-in maximum, granted on first use. */
struct image_pass {
    const void *kernels[3];
    size_t room;
};

static inline const void *image_kernel(const struct image_pass *p, int vector)
{
    return p->kernels[vector == 4 ? 2 : vector - 1];
}

static inline size_t grant_room(struct image_pass *p)
{
    if (!p->room)
        for (int k = 0; k < 3; k++)
            p->room = kl_grant_shared_memory(p->kernels[k]);
    return p->room;
}

/* The shared memory one block may take when `per` blocks share an SM, at most `room`. */
static inline size_t image_budget(int per, size_t room)
{
    const size_t per_sm = (size_t)kl_device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor),
                 reserved = (size_t)kl_device_attribute(cudaDevAttrReservedSharedMemoryPerBlock);
    return per_sm / per - reserved < room ? per_sm / per - reserved : room;
}

/* How many images a rung can work on at once with cut `pl` of `kernel` (0: none): v8 counts
 * resident clusters, v9 resident blocks a team. */
typedef int64_t (*images_at_once_fn)(const void *kernel, const struct image_plan *pl,
                                     struct softmax_dims d);

/* Cuts the images of d for pass p's kernel of their vector width into teams of at most
 * max_team blocks, or returns false. Of the block sizes (one or two blocks an SM) whose cut
 * fits, the one with the fewest rounds of images at once over the N images; among those, the
 * largest blocks. */
static inline bool plan_images(struct image_pass *p, struct softmax_dims d, size_t size,
                               int arrays, int max_team, images_at_once_fn images_at_once,
                               struct image_plan *best)
{
    if (!image_shape_fits(d, size))
        return false;
    const int vector = image_vector(d);
    const void *kernel = image_kernel(p, vector);
    const size_t room = grant_room(p);
    best->waves = 0;
    for (int per = 1; per <= 2; per++) {
        const size_t budget = image_budget(per, room);
        for (int threads = 1024 / per; threads >= 512 / per; threads -= 256 / per) {
            struct image_plan pl;
            if (!cut_image(d.c, d.h * d.w, size, arrays, vector, threads, budget, max_team, &pl))
                continue;
            int64_t fit = images_at_once(kernel, &pl, d);
            if (fit <= 0)
                continue;
            fit = fit < d.n ? fit : d.n;
            pl.at_once = (int)fit;
            pl.waves = (int)((d.n + fit - 1) / fit);
            if (!best->waves || pl.waves < best->waves)
                *best = pl;
        }
    }
    return best->waves > 0;
}

#endif
