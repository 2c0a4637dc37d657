/* v7, few input channels: a direct kernel for C <= 4 that runs at the pace of its stores.
 *
 * Idea: at a CNN's first layer (1 or 3 channels) the GEMM's reduction, C R S, is 9 to 36 taps,
 * too short for GEMM tiles, and the outputs are most of the bytes (1 -> 16 channels writes 16
 * times what it reads). So a thread computes a strip of 4 neighbouring outputs of one row, 4
 * filters at a time: its input patch (R rows of 3 + S columns a channel, at stride 1) is loaded
 * once into registers and serves every filter of its block, whose weights sit in shared memory
 * 4 filters to a 16-byte word, read as a broadcast: a tap costs 1 shared load and 16 FMAs. A
 * strip leaves as one 16-byte (fp32) or 8-byte (fp16) store a filter where Q % 4 == 0. Up to 3x3,
 * every channel's patch is loaded at once, so a small problem waits on DRAM once, not once a
 * channel. Compiled: R = S of 1, 3, 5 or 7 at stride 1 or 2 (the patch must be registers);
 * other shapes run a generic kernel that loads each tap's inputs as it goes.
 * What changed from v2-v6: no GEMM at all; each x element is loaded once a strip, not once an
 * output, and each weight once a block.
 * Cost: conv1 at batch 1024 (1024x1x28x28-16k3s1p1) writes 51.4 MB of fp32 y, reads 3.2 MB of
 * x and makes 116 M FMAs, about 5 us of issue: the stores, 12.4 us at the 4.15 TB/s copy roof,
 * are the floor.
 * Expected: conv1 at 1024, 15-18 us (cuDNN 66); at 32 (1.6 MB) and at the seed, the launch and
 * one trip to DRAM, 2.5-3.5 us (cuDNN 5.2; seed 4.4 fp32, 7.6 fp16).
 * Limits: C <= 4 (conv2d_forward_v7_unsupported). K is sliced across blocks, 32 filters at most
 * a block, fewer where the grid would leave SMs idle; each slice loads the patch again.
 * Measured (H200): chapter 10's conv1 at batch 1024 in 19.4 us fp32, 5.85x cuDNN, against a
 * store floor near 13 us; at batch 32, 3.40 us (2.80x). Its fp16 kernel is slower at C = 3-4
 * (the seed: 7.62 us against 4.28 in fp32), not yet understood. */
#include "conv.cuh"

#define THREADS 128      /* strips a block: small blocks spread small problems over more SMs */
#define OUTPUTS 4        /* outputs a strip, along q: one 16-byte fp32 (8-byte fp16) store */
#define FILTERS 4        /* filters a thread sums at once: 16 sums, a float4 of weights a tap */
#define MAX_CHANNELS 4   /* the rung's reach, and the channels whose patches load at once */
#define SLICE_MAX 32     /* filters a block keeps in shared memory: 25 KB at 4 x 7 x 7 taps */
#define BLOCKS_AN_SM 2   /* K is sliced until the grid has this many blocks an SM, or FILTERS */
#define GRID_Y_MAX 65535 /* gridDim.y's limit: more slices loop with a grid stride */

static_assert(FILTERS == 4, "a tap's weights are one float4");

/* OUTPUTS neighbouring outputs of row p of image n, from column q0. */
struct strip {
    int n, p, q0;
    conv_pixel px; /* the window of output (n, p, q0): where the patch starts */
};

__device__ __forceinline__ strip strip_of(const conv2d_dims &d, int index)
{
    const int per_row = ((int)d.q + OUTPUTS - 1) / OUTPUTS;
    const int row = index / per_row; /* n P + p */
    strip st;
    st.q0 = (index - row * per_row) * OUTPUTS;
    st.n = row / (int)d.p;
    st.p = row - st.n * (int)d.p;
    st.px = conv_pixel_of(d, row * (int)d.q + st.q0);
    return st;
}

/* The patch of channels c0 .. c0 + CH - 1 under a strip, 0 in the padding: column j of row r
 * is x under tap (r, j) of the strip's first output. */
template <typename T, int FS, int WIDTH, int CH>
__device__ __forceinline__ void load_patch(float (&patch)[CH][FS][WIDTH],
                                           const T *__restrict__ x, const conv2d_dims &d,
                                           const conv_pixel &px, int c0)
{
#pragma unroll
    for (int cc = 0; cc < CH; cc++) {
        const int c = c0 + cc;
#pragma unroll
        for (int r = 0; r < FS; r++)
#pragma unroll
            for (int j = 0; j < WIDTH; j++) {
                const conv_tap t = {c * (int)(d.h * d.w) + r * (int)d.w + j, r, j};
                patch[cc][r][j] = c < (int)d.c ? conv_gather(x, d, px, t) : 0.f;
            }
    }
}

/* acc[f][v] += the taps of channels c0 .. of output v of the strip, for filter f of the group,
 * whose weights are `group`: a float4 of its FILTERS filters a tap, in w's C R S order. */
template <int FS, int STRIDE, int WIDTH, int CH>
__device__ __forceinline__ void accumulate(float (&acc)[FILTERS][OUTPUTS],
                                           const float (&patch)[CH][FS][WIDTH],
                                           const float4 *group, int c0, int channels)
{
#pragma unroll
    for (int cc = 0; cc < CH; cc++) {
        if (c0 + cc >= channels)
            break;
        const float4 *taps = group + (c0 + cc) * FS * FS;
#pragma unroll
        for (int r = 0; r < FS; r++)
#pragma unroll
            for (int s = 0; s < FS; s++) {
                const float4 f = taps[r * FS + s];
#pragma unroll
                for (int v = 0; v < OUTPUTS; v++) {
                    const float in = patch[cc][r][v * STRIDE + s];
                    acc[0][v] = fmaf(in, f.x, acc[0][v]);
                    acc[1][v] = fmaf(in, f.y, acc[1][v]);
                    acc[2][v] = fmaf(in, f.z, acc[2][v]);
                    acc[3][v] = fmaf(in, f.w, acc[3][v]);
                }
            }
    }
}

/* Filters k0 .. k0 + slice - 1 into shared memory: float g (taps) + t holds, in component f,
 * w[k0 + FILTERS g + f][t], 0 past K. Consecutive threads read consecutive weights. */
template <typename T>
__device__ void load_filters(float4 *filters, const T *__restrict__ w, const conv2d_dims &d,
                             int k0, int slice)
{
    const int taps = (int)(d.c * d.r * d.s), elements = slice * taps;
    float *weights = reinterpret_cast<float *>(filters);
    for (int e = threadIdx.x; e < elements; e += blockDim.x) {
        const int kl = e / taps, t = e - kl * taps;
        weights[((kl / FILTERS) * taps + t) * FILTERS + kl % FILTERS] =
            k0 + kl < d.k ? to_float(w[k0 * taps + e]) : 0.f;
    }
}

/* OUTPUTS values from out[0]: one store where `vec` (Q % OUTPUTS == 0, y aligned, so every
 * strip is whole and aligned), else those of the `valid` first that lie inside the row. */
template <typename T>
__device__ __forceinline__ void store_strip(T *out, const float (&v)[OUTPUTS], int valid,
                                            bool vec)
{
    if (vec) {
        if constexpr (sizeof(T) == 4) {
            *reinterpret_cast<float4 *>(out) = make_float4(v[0], v[1], v[2], v[3]);
        } else {
            uint2 raw;
            *reinterpret_cast<__half2 *>(&raw.x) = __floats2half2_rn(v[0], v[1]);
            *reinterpret_cast<__half2 *>(&raw.y) = __floats2half2_rn(v[2], v[3]);
            *reinterpret_cast<uint2 *>(out) = raw;
        }
        return;
    }
#pragma unroll
    for (int e = 0; e < OUTPUTS; e++)
        if (e < valid)
            out[e] = from_float<T>(v[e]);
}

/* The strip's outputs for filters k .. k + FILTERS - 1 (those below K), through the epilogue. */
template <typename T>
__device__ __forceinline__ void store_group(T *__restrict__ y, const conv2d_dims &d,
                                            const strip &st, int k,
                                            const float (&acc)[FILTERS][OUTPUTS],
                                            const T *__restrict__ bias, conv2d_activation act,
                                            bool vec)
{
    const int valid = min(OUTPUTS, (int)d.q - st.q0);
#pragma unroll
    for (int f = 0; f < FILTERS; f++) {
        if (k + f >= d.k)
            break;
        float v[OUTPUTS];
#pragma unroll
        for (int e = 0; e < OUTPUTS; e++)
            v[e] = conv_epilogue(acc[f][e], bias, k + f, act);
        const int plane = st.n * (int)d.k + k + f;
        store_strip(y + (plane * (int)d.p + st.p) * (int)d.q + st.q0, v, valid, vec);
    }
}

__device__ __forceinline__ int strips_of(const conv2d_dims &d)
{
    return (int)(d.n * d.p) * (((int)d.q + OUTPUTS - 1) / OUTPUTS);
}

/* R = S = FS, stride STRIDE, CH channels' patches held at once. A block: THREADS strips, and
 * `slice` filters at a time (blockIdx.y's, then every gridDim.y-th slice after it). */
template <typename T, int FS, int STRIDE, int CH>
__global__ void __launch_bounds__(THREADS)
    conv_few_channels(const T *__restrict__ x, const T *__restrict__ w,
                      const T *__restrict__ bias, T *__restrict__ y, conv2d_dims d,
                      conv2d_activation act, int slice, bool vec)
{
    constexpr int WIDTH = (OUTPUTS - 1) * STRIDE + FS; /* a patch row's columns */
    extern __shared__ float4 filters[];                /* [slice / FILTERS][C R S] */
    const int index = blockIdx.x * THREADS + threadIdx.x;
    const bool active = index < strips_of(d);
    const strip st = strip_of(d, active ? index : 0);
    const int taps = (int)d.c * FS * FS;
    /* All the channels in one chunk: the patch is loaded once and kept for every filter. */
    const bool patch_kept = d.c <= CH;
    float patch[CH][FS][WIDTH];
    if (active && patch_kept)
        load_patch(patch, x, d, st.px, 0);
    for (int k0 = blockIdx.y * slice; k0 < d.k; k0 += gridDim.y * slice) {
        load_filters(filters, w, d, k0, slice);
        __syncthreads();
        for (int g = 0; active && g < slice / FILTERS && k0 + g * FILTERS < d.k; g++) {
            float acc[FILTERS][OUTPUTS] = {};
            for (int c0 = 0; c0 < d.c; c0 += CH) {
                if (!patch_kept)
                    load_patch(patch, x, d, st.px, c0);
                accumulate<FS, STRIDE>(acc, patch, filters + g * taps, c0, (int)d.c);
            }
            store_group(y, d, st, k0 + g * FILTERS, acc, bias, act, vec);
        }
        __syncthreads(); /* the filters are overwritten next */
    }
}

/* Any filter and stride: the same strips and groups of filters, but each tap's OUTPUTS inputs
 * are loaded as it comes and the weights read through the cache (one address a warp). */
template <typename T>
__global__ void __launch_bounds__(THREADS)
    conv_few_channels_any(const T *__restrict__ x, const T *__restrict__ w,
                          const T *__restrict__ bias, T *__restrict__ y, conv2d_dims d,
                          conv2d_activation act, bool vec)
{
    const int index = blockIdx.x * THREADS + threadIdx.x;
    if (index >= strips_of(d))
        return;
    const strip st = strip_of(d, index);
    const int taps = (int)(d.c * d.r * d.s), stride = (int)d.stride;
    for (int k = blockIdx.y * FILTERS; k < d.k; k += gridDim.y * FILTERS) {
        float acc[FILTERS][OUTPUTS] = {};
        for (int i = 0; i < taps; i++) {
            const conv_tap t = conv_tap_of(d, i);
            float in[OUTPUTS];
#pragma unroll
            for (int v = 0; v < OUTPUTS; v++) {
                const conv_tap tv = {t.offset + v * stride, t.r, t.s + v * stride};
                in[v] = conv_gather(x, d, st.px, tv);
            }
#pragma unroll
            for (int f = 0; f < FILTERS; f++) {
                const float wf = k + f < d.k ? to_float(w[(k + f) * taps + i]) : 0.f;
#pragma unroll
                for (int v = 0; v < OUTPUTS; v++)
                    acc[f][v] = fmaf(in[v], wf, acc[f][v]);
            }
        }
        store_group(y, d, st, k, acc, bias, act, vec);
    }
}

extern "C" const char *conv2d_forward_v7_unsupported(struct conv2d_dims d, enum dtype t)
{
    (void)t;
    return d.c > MAX_CHANNELS ? "C > 4: the GEMM rungs' reduction is long enough there" : NULL;
}

static int64_t strip_count(conv2d_dims d)
{
    return d.n * d.p * ((d.q + OUTPUTS - 1) / OUTPUTS);
}

static unsigned grid_y(int64_t slices)
{
    return (unsigned)(slices < GRID_Y_MAX ? slices : GRID_Y_MAX);
}

/* Filters a block holds: all of K up to SLICE_MAX, halved (in multiples of FILTERS) while the
 * grid would leave SMs idle. */
static int filters_a_block(conv2d_dims d, int64_t strip_blocks)
{
    int64_t slice = (d.k + FILTERS - 1) / FILTERS * FILTERS;
    slice = slice < SLICE_MAX ? slice : SLICE_MAX;
    const int64_t fill = (int64_t)BLOCKS_AN_SM * kl_sm_count();
    while (slice > FILTERS && strip_blocks * ((d.k + slice - 1) / slice) < fill)
        slice = (slice / 2 + FILTERS - 1) / FILTERS * FILTERS;
    return (int)slice;
}

template <typename T, int FS, int STRIDE, int CH>
static void launch(const T *x, const T *w, const T *bias, T *y, conv2d_dims d,
                   conv2d_activation act, bool vec, cudaStream_t s)
{
    const int64_t strip_blocks = (strip_count(d) + THREADS - 1) / THREADS;
    const int slice = filters_a_block(d, strip_blocks);
    const size_t shared = (size_t)slice * (size_t)d.c * FS * FS * sizeof(float);
    const dim3 grid((unsigned)strip_blocks, grid_y((d.k + slice - 1) / slice));
    conv_few_channels<T, FS, STRIDE, CH>
        <<<grid, THREADS, shared, s>>>(x, w, bias, y, d, act, slice, vec);
    LAUNCH_CHECK();
}

/* Every channel's patch at once up to 3x3 (at most 4 x 3 x 9 registers); one at a time above. */
template <typename T, int FS, int STRIDE>
static void launch_by_channels(const T *x, const T *w, const T *bias, T *y, conv2d_dims d,
                               conv2d_activation act, bool vec, cudaStream_t s)
{
    if constexpr (FS <= 3) {
        if (d.c > 1) {
            launch<T, FS, STRIDE, MAX_CHANNELS>(x, w, bias, y, d, act, vec, s);
            return;
        }
    }
    launch<T, FS, STRIDE, 1>(x, w, bias, y, d, act, vec, s);
}

template <typename T, int FS>
static void launch_by_stride(const T *x, const T *w, const T *bias, T *y, conv2d_dims d,
                             conv2d_activation act, bool vec, cudaStream_t s)
{
    if (d.stride == 1)
        launch_by_channels<T, FS, 1>(x, w, bias, y, d, act, vec, s);
    else
        launch_by_channels<T, FS, 2>(x, w, bias, y, d, act, vec, s);
}

template <typename T>
static void forward(const T *x, const T *w, const T *bias, T *y, conv2d_dims d,
                    conv2d_activation act, void *workspace, cudaStream_t s)
{
    (void)workspace;
    const bool vec = d.q % OUTPUTS == 0 && (uintptr_t)y % (OUTPUTS * sizeof(T)) == 0;
    const bool compiled = d.c <= MAX_CHANNELS && d.r == d.s && d.stride <= 2 &&
                          (d.r == 1 || d.r == 3 || d.r == 5 || d.r == 7);
    if (!compiled) {
        const dim3 grid((unsigned)((strip_count(d) + THREADS - 1) / THREADS),
                        grid_y((d.k + FILTERS - 1) / FILTERS));
        conv_few_channels_any<T><<<grid, THREADS, 0, s>>>(x, w, bias, y, d, act, vec);
        LAUNCH_CHECK();
        return;
    }
    switch (d.r) {
    case 1: launch_by_stride<T, 1>(x, w, bias, y, d, act, vec, s); break;
    case 3: launch_by_stride<T, 3>(x, w, bias, y, d, act, vec, s); break;
    case 5: launch_by_stride<T, 5>(x, w, bias, y, d, act, vec, s); break;
    default: launch_by_stride<T, 7>(x, w, bias, y, d, act, vec, s); break;
    }
}

CONV2D_FORWARD_LAUNCHER(v7)
