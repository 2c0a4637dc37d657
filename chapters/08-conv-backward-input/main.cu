/* Chapter 08, the convolution's input gradient: the rung table and the program.
 *
 * Shapes are those of chapter 07's forward, NxCxHxW-KkRsSpP: x of N x C x H x W, K filters of
 * R x R, stride S (default 1) and padding P (default 0), e.g. 2x4x64x64-8k3s1p1. Passes:
 *   bwd_input       reads dy (N x K x P x Q) and w (K x C x R x R); writes dx (N x C x H x W)
 *   bwd_input_nhwc  the same numbers with dy and dx in NHWC and w in KRSC: cuDNN's fast layout
 *                   for fp16, shown beside the NCHW rows (vendor_nhwc alone runs it; its layout
 *                   change is done by fill, outside the timed region)
 * FLOPs are the forward's, 2 N K P Q C R R, for every rung (a rung that multiplies by the zeros
 * of a strided gradient does more work, not more FLOPs); bytes are dy and w read once and dx
 * written once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "07-conv-forward/conv_program.h"
#include "dgrad.h"

enum { BWD, BWD_NHWC };
enum { IN_DY, IN_W };

/* A full reference above this many multiply-adds would take seconds; beyond, it computes every
 * `every`-th element of dx (an odd step, so the samples walk across channels, rows and
 * columns). */
#define FULL_REFERENCE_MACS (1ll << 30)

static struct conv2d_dims dims_of(const struct problem *p)
{
    return dims_of_shape(&p->shape);
}

#define ADAPT(v)                                                                               \
    static void bwd_##v(const struct launch_args *a, cudaStream_t s)                           \
    {                                                                                          \
        dgrad_##v(a->in[IN_DY], a->in[IN_W], a->out[0], dims_of(a->p), a->p->dtype,            \
                  a->workspace, s);                                                            \
    }
ADAPT(v1)
ADAPT(v2)
ADAPT(v3)
ADAPT(v4)
ADAPT(v5)
ADAPT(v6)
ADAPT(v7)

/* The library call, api.h's conv2d_backward_input: it picks the rung. */
static void bwd_api(const struct launch_args *a, cudaStream_t s)
{
    conv2d_backward_input(a->in[IN_DY], a->in[IN_W], a->out[0], dims_of(a->p), a->p->dtype,
                          a->workspace, s);
}

static void bwd_vendor(const struct launch_args *a, cudaStream_t s)
{
    dgrad_vendor(a->in[IN_DY], a->in[IN_W], a->out[0], dims_of(a->p), a->p->dtype, s);
}

static void nhwc_vendor(const struct launch_args *a, cudaStream_t s)
{
    dgrad_vendor_nhwc(a->in[IN_DY], a->in[IN_W], a->out[0], dims_of(a->p), a->p->dtype, s);
}

static void bwd_exercise(const struct launch_args *a, cudaStream_t s)
{
    dgrad_exercise((const float *)a->in[IN_DY], (const float *)a->in[IN_W], (float *)a->out[0],
                   dims_of(a->p), s);
}

static const char *col2im_why_not(const struct problem *p)
{
    return dgrad_col2im_unsupported(dims_of(p), p->dtype);
}

#define WHY_NOT(v)                                                                             \
    static const char *v##_why_not(const struct problem *p)                                    \
    {                                                                                          \
        return dgrad_##v##_unsupported(dims_of(p), p->dtype);                                  \
    }
WHY_NOT(v5)
WHY_NOT(v6)
WHY_NOT(v7)

static const char *vendor_why_not(const struct problem *p)
{
    return dgrad_vendor_unsupported(dims_of(p));
}

/* cuDNN's fp16 backward-data kernels can round on the way (at 3x1x12x12-5k3s1p0 one element
 * is 0.686035 against 0.684082, two fp16 steps off): the row says so instead of failing, and
 * the tests hold it to two roundings' worth. */
#define VENDOR_ROUNDS_TWICE "rounded more than once (cuDNN's fp16 kernel)"

/* In fp16 the column matrix is stored in fp16, so v2 and v3 round each product once and then
 * the sum of up to R R of them again. */
#define COLUMNS_ROUND_TWICE "rounded twice (the fp16 columns, then their sum)"

#define RUNG(n, v, what, why_not, rounding)                                                    \
    {.name = n, .idea = what, .launch = {bwd_##v}, .dtypes = DT_FLOATS, .min_cc = 0,            \
     .unsupported = why_not, .shown_for_error = rounding}
static const struct rung rungs[] = {
    RUNG("v1_direct", v1, "a thread per input element gathers the outputs that touched it",
         NULL, NULL),
    RUNG("v2_col2im_atomic", v2, "columns W^T dY by chapter 05's 16x16 tiles, added back by "
         "atomics", col2im_why_not, COLUMNS_ROUND_TWICE),
    RUNG("v3_col2im_gather", v3, "the same columns, each input element gathers its own",
         col2im_why_not, COLUMNS_ROUND_TWICE),
    RUNG("v4_implicit_gemm", v4, "implicit GEMM: dy gathered into shared memory, no columns",
         NULL, NULL),
    RUNG("v5_as_forward", v5, "stride 1: chapter 07's forward on the flipped, transposed filter",
         v5_why_not, NULL),
    RUNG("v6_stride_phases", v6, "stride^2 phases in v4's kernel: no tap multiplies a zero",
         v6_why_not, NULL),
    RUNG("v7_few_channels", v7, "C <= 16: a thread per pixel, its C channels in registers",
         v7_why_not, NULL),
    RUNG("api", api, "the library: api.h's conv2d_backward_input picks the rung", NULL, NULL),
    {.name = "vendor", .idea = "cuDNN: the fastest backward-data algorithm Find returns",
     .launch = {bwd_vendor}, .dtypes = DT_FLOATS, .min_cc = 0, .unsupported = vendor_why_not,
     .shown_for_error = VENDOR_ROUNDS_TWICE},
    {.name = "vendor_nhwc", .idea = "cuDNN on NHWC tensors (bwd_input_nhwc): what NCHW costs it",
     .launch = {NULL, nhwc_vendor}, .dtypes = 1u << DT_FP16, .min_cc = 0,
     .unsupported = vendor_why_not, .shown_for_error = VENDOR_ROUNDS_TWICE},
};

static const struct rung exercise = {
    .name = "exercise",
    .idea = "your fp32 direct gather in exercise.cu",
    .launch = {bwd_exercise},
    .dtypes = 1u << DT_FP32,
    .min_cc = 0,
    .unsupported = NULL,
    .shown_for_error = NULL,
};

static const char *const exercise_shapes[] = {"1x1x1x1-1k1", "1x2x5x5-3k3s1p1",
                                              "2x3x9x7-5k3s2p1", "3x4x16x16-8k5s1p2",
                                              "1x3x7x7-1k7s1p3", "2x2x10x10-3k5s3p3", NULL};

static const struct preset presets[] = {
    {"seed", "2x4x64x64-8k3s1p1", "the reference report's: 4 -> 8 channels, 3x3, padding 1"},
    {"cnn", "32x16x14x14-32k3s1p1", "chapter 10's second layer at batch 32"},
    {"large", "8x32x128x128-64k3s1p1", "32 -> 64 channels at 128x128, 4.8 GFLOP"},
    {"resnet", "32x64x56x56-64k3s1p1", "a ResNet stage-1 layer, 7.4 GFLOP"},
    {"stride2", "32x64x56x56-128k3s2p1", "a ResNet downsampling layer, stride 2"},
    {"sanitize", "2x3x9x7-5k3s1p1", "small and odd, for make sanitize (every rung takes it)"},
    {"sanitize-stride", "2x3x9x7-5k3s2p1", "the same at stride 2: v4's zero test, v6's phases"},
};

static void describe(struct problem *p)
{
    const struct conv2d_dims d = dims_of(p);
    const enum dtype t = p->dtype;
    p->n_in = 2;
    p->in[IN_DY] = tensor_of("dy", t, count_y(d));
    p->in[IN_W] = tensor_of("w", t, count_w(d));
    p->n_out = 1;
    p->out[0] = tensor_of("dx", t, count_x(d));
    p->bytes = (double)(count_y(d) + count_w(d) + count_x(d)) * (double)dtype_size(t);
    p->flops = 2.0 * (double)count_y(d) * (double)(d.c * d.r * d.s);
    /* An element of dx sums at most K ceil(R / stride)^2 products. */
    const int64_t taps = (d.r + d.stride - 1) / d.stride;
    p->reduction_len = (size_t)(d.k * taps * taps);
}

/* dy and w uniform in [-1, 1]: sums of products of mean 0. */
static void fill(struct problem *p, struct rng *r)
{
    for (int i = 0; i < p->n_in; i++)
        fill_uniform(p->host_in[i], p->dtype, p->in[i].count, r, -1.0, 1.0);
}

static void reference(struct problem *p)
{
    const struct conv2d_dims d = dims_of(p);
    const double macs = (double)count_y(d) * (double)(d.c * d.r * d.s);
    int64_t every = 1;
    if (macs > (double)FULL_REFERENCE_MACS)
        every = (int64_t)(macs / (double)FULL_REFERENCE_MACS) | 1;
    double *dx = p->ref_out[0];
    const double skip = verify_unchecked();
    if (every > 1)
        for (size_t i = 0; i < count_x(d); i++)
            dx[i] = skip;
    if (p->pass == BWD) {
        dgrad_reference(p->host_in[IN_DY], p->host_in[IN_W], p->dtype, d, every, dx);
        return;
    }
    /* bwd_input_nhwc: the NCHW reference of the same numbers, its output moved to NHWC. */
    const size_t es = dtype_size(p->dtype);
    void *dy = host_alloc(count_y(d) * es), *w = host_alloc(count_w(d) * es);
    double *dx_nchw = (double *)host_alloc(count_x(d) * sizeof *dx_nchw);
    permute_channels_last(p->host_in[IN_DY], dy, es, d.n, d.k, d.p, d.q, 1);
    permute_channels_last(p->host_in[IN_W], w, es, d.k, d.c, d.r, d.s, 1);
    for (size_t i = 0; i < count_x(d); i++)
        dx_nchw[i] = skip;
    dgrad_reference(dy, w, p->dtype, d, every, dx_nchw);
    permute_channels_last(dx_nchw, dx, sizeof *dx, d.n, d.c, d.h, d.w, 0);
    free(dy);
    free(w);
    free(dx_nchw);
}

static size_t workspace_bytes(const struct problem *p)
{
    return p->pass == BWD ? dgrad_rung_workspace_bytes(dims_of(p), p->dtype) : 0;
}

extern "C" const struct chapter dgrad_chapter = {
    .id = "08-conv-backward-input",
    .title = "2D convolution backward, input gradient, NCHW",
    .shape_help = "NxCxHxW-KkRsSpP (the forward's): K filters of R x R, stride S (default 1), "
                  "padding P (default 0)",
    .passes = {"bwd_input", "bwd_input_nhwc"},
    .n_passes = 2,
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
    return ladder_main(&dgrad_chapter, argc, argv);
}
#endif
