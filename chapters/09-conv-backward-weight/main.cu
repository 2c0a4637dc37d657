/* Chapter 09, the convolution's weight gradient: the rung table and the program.
 *
 * Shapes are those of chapter 07's forward, NxCxHxW-KkRsSpP: x of N x C x H x W, K filters of
 * R x R, stride S (default 1) and padding P (default 0), e.g. 8x32x128x128-64k3s1p1. Passes:
 *   bwd_weight       reads x (N x C x H x W) and dy (N x K x P x Q); writes dw (K x C x R x R)
 *   bwd_weight_bias  the same, and db (K) too: the layer with a bias, where a rung that sums
 *                    db from the dy it already reads saves a second pass over dy
 *   bwd_weight_nhwc  the same numbers as bwd_weight with x and dy in NHWC and dw in KRSC:
 *                    cuDNN's fast layout for fp16, shown beside the NCHW rows (vendor_nhwc
 *                    alone runs it; its layout change is done by fill, outside the timed
 *                    region)
 * The 2D kernel, one channel and one filter, has no pass of its own: it is this table's
 * C = K = 1 shapes, run with --preset seed-2d, where the 2d_ rungs take them.
 * FLOPs are the forward's, 2 K C R R N P Q, for every rung; bytes are x and dy read once and
 * dw (and db) written once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "07-conv-forward/conv_program.h"
#include "wgrad.h"

enum { BWD, BWD_BIAS, BWD_NHWC };
enum { IN_X, IN_DY };
enum { OUT_DW, OUT_DB };

/* A full reference above this many multiply-adds would take seconds; beyond, it computes every
 * `every`-th element of dw (a step with no factor in common with C R S, so that the samples
 * reach every tap of every channel across the filters). */
#define FULL_REFERENCE_MACS (1ll << 30)

static struct conv2d_dims dims_of(const struct problem *p)
{
    return dims_of_shape(&p->shape);
}

/* A rung's launchers: bwd_weight (db NULL) and bwd_weight_bias (db the second output). */
#define ADAPT_BIAS(v)                                                                          \
    static void bias_##v(const struct launch_args *a, cudaStream_t s)                          \
    {                                                                                          \
        wgrad_##v(a->in[IN_X], a->in[IN_DY], a->out[OUT_DW], a->out[OUT_DB], dims_of(a->p),    \
                  a->p->dtype, a->workspace, s);                                               \
    }
#define ADAPT(v)                                                                               \
    static void bwd_##v(const struct launch_args *a, cudaStream_t s)                           \
    {                                                                                          \
        wgrad_##v(a->in[IN_X], a->in[IN_DY], a->out[OUT_DW], NULL, dims_of(a->p), a->p->dtype,  \
                  a->workspace, s);                                                            \
    }                                                                                          \
    ADAPT_BIAS(v)
ADAPT(v1)
ADAPT(v2)
ADAPT(v3)
ADAPT(v4)
ADAPT_BIAS(v5) /* v5 is the fused bias: it has no pass without one */
ADAPT(v6)
ADAPT(v7)
ADAPT(2d_v1)
ADAPT(2d_v2)
ADAPT(2d_v3)

/* The library call, api.h's conv2d_backward_weight: it picks the rung. */
static void bwd_api(const struct launch_args *a, cudaStream_t s)
{
    conv2d_backward_weight(a->in[IN_X], a->in[IN_DY], a->out[OUT_DW], NULL, dims_of(a->p),
                           a->p->dtype, a->workspace, s);
}

static void bias_api(const struct launch_args *a, cudaStream_t s)
{
    conv2d_backward_weight(a->in[IN_X], a->in[IN_DY], a->out[OUT_DW], a->out[OUT_DB],
                           dims_of(a->p), a->p->dtype, a->workspace, s);
}

static void bwd_vendor(const struct launch_args *a, cudaStream_t s)
{
    wgrad_vendor(a->in[IN_X], a->in[IN_DY], a->out[OUT_DW], NULL, dims_of(a->p), a->p->dtype,
                 s);
}

static void bias_vendor(const struct launch_args *a, cudaStream_t s)
{
    wgrad_vendor(a->in[IN_X], a->in[IN_DY], a->out[OUT_DW], a->out[OUT_DB], dims_of(a->p),
                 a->p->dtype, s);
}

static void nhwc_vendor(const struct launch_args *a, cudaStream_t s)
{
    wgrad_vendor_nhwc(a->in[IN_X], a->in[IN_DY], a->out[OUT_DW], dims_of(a->p), a->p->dtype, s);
}

static void bwd_exercise(const struct launch_args *a, cudaStream_t s)
{
    wgrad_exercise((const float *)a->in[IN_X], (const float *)a->in[IN_DY],
                   (float *)a->out[OUT_DW], dims_of(a->p), s);
}

#define WHY_NOT(v)                                                                             \
    static const char *v##_why_not(const struct problem *p)                                    \
    {                                                                                          \
        return wgrad_##v##_unsupported(dims_of(p), p->dtype);                                  \
    }
WHY_NOT(v2)
WHY_NOT(v4)
WHY_NOT(v6)
WHY_NOT(v7)

static const char *two_d_why_not(const struct problem *p)
{
    return wgrad_2d_unsupported(dims_of(p), p->dtype);
}

static const char *vendor_why_not(const struct problem *p)
{
    return wgrad_vendor_unsupported(dims_of(p));
}

/* cuDNN's fp16 kernels can round on the way, as its backward-data kernels do in chapter 08:
 * the row says so instead of failing, and the tests hold it to two roundings' worth. */
#define VENDOR_ROUNDS_TWICE "rounded more than once (cuDNN's fp16 kernel)"

/* A rung with launchers for bwd_weight and bwd_weight_bias, from compute capability cc on. */
#define RUNG(n, v, what, why_not, cc)                                                          \
    {.name = n, .idea = what, .launch = {bwd_##v, bias_##v}, .dtypes = DT_FLOATS,             \
     .min_cc = cc, .unsupported = why_not, .shown_for_error = NULL}
static const struct rung rungs[] = {
    RUNG("v1_naive", v1, "a thread per weight sums all N P Q products: too few threads", NULL,
         0),
    RUNG("v2_im2col_gemm", v2, "im2col, then dY col^T by chapter 05's 16x16 tiles", v2_why_not,
         0),
    RUNG("v3_split_k", v3, "implicit GEMM, the N P Q reduction split into slices to fill the "
         "GPU", NULL, 0),
    RUNG("v4_tensor_cores", v4, "v3 on tensor cores: x staged channels-last, mma.sync (fp16)",
         v4_why_not, 80),
    {.name = "v5_fused_bias", .idea = "db summed from the dy tiles already on chip: one pass "
     "over dy", .launch = {NULL, bias_v5}, .dtypes = DT_FLOATS, .min_cc = 0,
     .unsupported = NULL, .shown_for_error = NULL},
    RUNG("v6_few_channels", v6, "C <= 4: a thread's R S C sums for each filter in registers",
         v6_why_not, 0),
    RUNG("v7_filter_taps", v7, "a thread per (channel, 8 filters), its R S taps in registers, "
         "bands of 64 pixels a slice unit", v7_why_not, 0),
    RUNG("2d_v1_naive", 2d_v1, "C = K = 1: a thread per tap, serial", two_d_why_not, 0),
    RUNG("2d_v2_block_reduce", 2d_v2, "C = K = 1: a block per tap, a tree reduction",
         two_d_why_not, 0),
    RUNG("2d_v3_one_pass", 2d_v3, "C = K = 1: one pass, all R S sums in registers, warp "
         "shuffles, a short second pass", two_d_why_not, 0),
    RUNG("api", api, "the library: api.h's conv2d_backward_weight picks the rung", NULL, 0),
    {.name = "vendor", .idea = "cuDNN: the fastest backward-filter algorithm Find returns",
     .launch = {bwd_vendor, bias_vendor}, .dtypes = DT_FLOATS, .min_cc = 0,
     .unsupported = vendor_why_not, .shown_for_error = VENDOR_ROUNDS_TWICE},
    {.name = "vendor_nhwc", .idea = "cuDNN on NHWC tensors (bwd_weight_nhwc): what NCHW costs "
     "it", .launch = {NULL, NULL, nhwc_vendor}, .dtypes = 1u << DT_FP16, .min_cc = 0,
     .unsupported = vendor_why_not, .shown_for_error = VENDOR_ROUNDS_TWICE},
};

static const struct rung exercise = {
    .name = "exercise",
    .idea = "your fp32 sum for one weight in exercise.cu",
    .launch = {bwd_exercise},
    .dtypes = 1u << DT_FP32,
    .min_cc = 0,
    .unsupported = NULL,
    .shown_for_error = NULL,
};

static const char *const exercise_shapes[] = {
    "1x1x1x1-1k1",       "1x2x5x5-3k3s1p1",   "2x3x9x7-5k3s2p1", "3x4x16x16-8k5s1p2",
    "1x3x7x7-1k7s1p3",   "2x2x10x10-3k5s3p3", "2x1x9x7-1k3s1p1", NULL};

static const struct preset presets[] = {
    {"seed", "8x32x128x128-64k3s1p1",
     "the reference report's large weight-gradient configuration: 32 -> 64 channels at 128x128"},
    {"seed-small", "2x4x32x32-8k3s1p1", "the reference report's small one: 4 -> 8 channels"},
    {"seed-2d", "8x1x128x128-1k3s1p1",
     "the reference report's 2D kernel: 8 single-channel 128x128 images, 3x3, padding 1"},
    {"large", "32x64x56x56-64k3s1p1", "a ResNet stage-1 layer, 7.4 GFLOP (as resnet)"},
    {"cnn", "32x1x28x28-16k3s1p1", "chapter 10's first layer at batch 32"},
    {"cnn2", "32x16x14x14-32k3s1p1", "chapter 10's second layer at batch 32"},
    {"resnet", "32x64x56x56-64k3s1p1", "a ResNet stage-1 layer, 7.4 GFLOP"},
    {"sanitize", "2x3x9x7-5k3s1p1", "small and odd, for make sanitize (the 2d rungs decline it)"},
    {"sanitize-stride", "2x3x9x7-5k3s2p1", "the same at stride 2"},
    {"sanitize-2d", "2x1x9x7-1k3s1p1", "small and odd with C = K = 1, for the 2d rungs"},
};

static void describe(struct problem *p)
{
    const struct conv2d_dims d = dims_of(p);
    const enum dtype t = p->dtype;
    p->n_in = 2;
    p->in[IN_X] = tensor_of("x", t, count_x(d));
    p->in[IN_DY] = tensor_of("dy", t, count_y(d));
    p->n_out = p->pass == BWD_BIAS ? 2 : 1;
    p->out[OUT_DW] = tensor_of("dw", t, count_w(d));
    if (p->pass == BWD_BIAS)
        p->out[OUT_DB] = tensor_of("db", t, (size_t)d.k);
    const size_t written = count_w(d) + (p->pass == BWD_BIAS ? (size_t)d.k : 0);
    p->bytes = (double)(count_x(d) + count_y(d) + written) * (double)dtype_size(t);
    p->flops = 2.0 * (double)count_y(d) * (double)(d.c * d.r * d.s);
    p->reduction_len = (size_t)(d.n * d.p * d.q); /* every element of dw and db sums N P Q */
}

/* x and dy uniform in [-1, 1]: sums of products of mean 0. */
static void fill(struct problem *p, struct rng *r)
{
    for (int i = 0; i < p->n_in; i++)
        fill_uniform(p->host_in[i], p->dtype, p->in[i].count, r, -1.0, 1.0);
}

static int64_t common_factor(int64_t a, int64_t b)
{
    while (b) {
        const int64_t rest = a % b;
        a = b;
        b = rest;
    }
    return a;
}

/* 1, or past FULL_REFERENCE_MACS the sampling step: more than the reference's multiply-adds
 * over FULL_REFERENCE_MACS, and coprime to C R S. */
static int64_t sampling_step(struct conv2d_dims d)
{
    const double macs = (double)count_y(d) * (double)(d.c * d.r * d.s);
    if (macs <= (double)FULL_REFERENCE_MACS)
        return 1;
    int64_t every = (int64_t)(macs / (double)FULL_REFERENCE_MACS) + 1;
    while (common_factor(every, d.c * d.r * d.s) != 1)
        every++;
    return every;
}

static void reference(struct problem *p)
{
    const struct conv2d_dims d = dims_of(p);
    const int64_t every = sampling_step(d);
    double *dw = p->ref_out[OUT_DW];
    double *db = p->pass == BWD_BIAS ? p->ref_out[OUT_DB] : NULL;
    const double skip = verify_unchecked();
    if (every > 1)
        for (size_t i = 0; i < count_w(d); i++)
            dw[i] = skip;
    if (p->pass != BWD_NHWC) {
        wgrad_reference(p->host_in[IN_X], p->host_in[IN_DY], p->dtype, d, every, dw, db);
        return;
    }
    /* bwd_weight_nhwc: the NCHW reference of the same numbers, its output moved to KRSC. */
    const size_t es = dtype_size(p->dtype);
    void *x = host_alloc(count_x(d) * es), *dy = host_alloc(count_y(d) * es);
    double *dw_kcrs = (double *)host_alloc(count_w(d) * sizeof *dw_kcrs);
    permute_channels_last(p->host_in[IN_X], x, es, d.n, d.c, d.h, d.w, 1);
    permute_channels_last(p->host_in[IN_DY], dy, es, d.n, d.k, d.p, d.q, 1);
    for (size_t i = 0; i < count_w(d); i++)
        dw_kcrs[i] = skip;
    wgrad_reference(x, dy, p->dtype, d, every, dw_kcrs, NULL);
    permute_channels_last(dw_kcrs, dw, sizeof *dw, d.k, d.c, d.r, d.s, 0);
    free(x);
    free(dy);
    free(dw_kcrs);
}

static size_t workspace_bytes(const struct problem *p)
{
    return p->pass == BWD_NHWC ? 0 : wgrad_rung_workspace_bytes(dims_of(p), p->dtype);
}

extern "C" const struct chapter wgrad_chapter = {
    .id = "09-conv-backward-weight",
    .title = "2D convolution backward, weight gradient, NCHW",
    .shape_help = "NxCxHxW-KkRsSpP (the forward's): K filters of R x R, stride S (default 1), "
                  "padding P (default 0)",
    .passes = {"bwd_weight", "bwd_weight_bias", "bwd_weight_nhwc"},
    .n_passes = 3,
    .presets = presets,
    .n_presets = sizeof presets / sizeof presets[0],
    .rungs = rungs,
    .n_rungs = sizeof rungs / sizeof rungs[0],
    .check_shape = check_shape,
    .describe = describe,
    .fill = fill,
    .reference = reference,
    .exercise = &exercise,
    .exercise_shapes = exercise_shapes,
    .workspace_bytes = workspace_bytes,
};

#ifndef KL_NO_MAIN
int main(int argc, char **argv)
{
    return ladder_main(&wgrad_chapter, argc, argv);
}
#endif
