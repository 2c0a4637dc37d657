/* Chapter 07, convolution forward: the rung table and the program.
 *
 * Shapes are NxCxHxW-KkRsSpP: x of N x C x H x W (NCHW), K filters of R x R, stride S
 * (default 1) and padding P (default 0), e.g. 2x4x64x64-8k3s1p1. Passes:
 *   fwd       reads x, w (K x C x R x R) and b (K); writes y = conv(x, w) + b, N x K x P x Q
 *   fwd_nhwc  the same numbers with x and y in NHWC and w in KRSC: cuDNN's fast layout for
 *             fp16, shown beside the NCHW rows (vendor_nhwc alone runs it; its layout change is
 *             done by fill, outside the timed region)
 * FLOPs are 2 N K P Q C R R for every rung (Winograd's rate is the effective one); bytes are x,
 * w and b read once and y written once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv.h"
#include "conv_program.h"

enum { FWD, FWD_NHWC };
enum { IN_X, IN_W, IN_B };

/* A full reference above this many multiply-adds would take seconds; beyond, it computes every
 * `every`-th output (an odd step, so the samples walk across filters, rows and columns). */
#define FULL_REFERENCE_MACS (1ll << 30)

static struct conv2d_dims dims_of(const struct problem *p)
{
    return dims_of_shape(&p->shape);
}

#define ADAPT(v)                                                                               \
    static void fwd_##v(const struct launch_args *a, cudaStream_t s)                           \
    {                                                                                          \
        conv2d_forward_##v(a->in[IN_X], a->in[IN_W], a->in[IN_B], a->out[0], dims_of(a->p),    \
                           CONV2D_LINEAR, a->p->dtype, a->workspace, s);                       \
    }
ADAPT(v1)
ADAPT(v2)
ADAPT(v3)
ADAPT(v4)
ADAPT(v5)
ADAPT(v6)
ADAPT(v7)

/* The library call, api.h's conv2d_forward: it picks the rung. */
static void fwd_api(const struct launch_args *a, cudaStream_t s)
{
    conv2d_forward(a->in[IN_X], a->in[IN_W], a->in[IN_B], a->out[0], dims_of(a->p),
                   CONV2D_LINEAR, a->p->dtype, a->workspace, s);
}

static void fwd_vendor(const struct launch_args *a, cudaStream_t s)
{
    conv2d_forward_vendor(a->in[IN_X], a->in[IN_W], a->in[IN_B], a->out[0], dims_of(a->p),
                          a->p->dtype, s);
}

static void nhwc_vendor(const struct launch_args *a, cudaStream_t s)
{
    conv2d_forward_vendor_nhwc(a->in[IN_X], a->in[IN_W], a->in[IN_B], a->out[0], dims_of(a->p),
                               a->p->dtype, s);
}

static void fwd_exercise(const struct launch_args *a, cudaStream_t s)
{
    conv2d_forward_exercise((const float *)a->in[IN_X], (const float *)a->in[IN_W],
                            (const float *)a->in[IN_B], (float *)a->out[0], dims_of(a->p), s);
}

static const char *im2col_why_not(const struct problem *p)
{
    return conv2d_forward_im2col_unsupported(dims_of(p), p->dtype);
}

#define WHY_NOT(v)                                                                             \
    static const char *v##_why_not(const struct problem *p)                                    \
    {                                                                                          \
        return conv2d_forward_##v##_unsupported(dims_of(p), p->dtype);                         \
    }
WHY_NOT(v5)
WHY_NOT(v6)
WHY_NOT(v7)

static const char *vendor_why_not(const struct problem *p)
{
    return conv2d_vendor_unsupported(dims_of(p));
}

/* cuDNN adds the bias in a second call: fp16 rounds twice (vendor.cu). */
#define VENDOR_ROUNDS_TWICE "rounded twice (conv, then AddTensor)"

#define RUNG(n, v, what, why_not)                                                              \
    {.name = n, .idea = what, .launch = {fwd_##v}, .dtypes = DT_FLOATS, .min_cc = 0,            \
     .unsupported = why_not, .shown_for_error = NULL}
static const struct rung rungs[] = {
    RUNG("v1_direct", v1, "a thread per output, loops over channels and taps", NULL),
    RUNG("v2_im2col_tiled", v2, "im2col into a buffer, then chapter 05's 16x16 tiled matmul",
         im2col_why_not),
    RUNG("v3_im2col_gemm", v3, "im2col into a buffer, then chapter 05's best matmul",
         im2col_why_not),
    RUNG("v4_implicit_gemm", v4, "implicit GEMM: column tiles gathered into shared memory",
         NULL),
    {.name = "v5_implicit_mma", .idea = "implicit GEMM on tensor cores: mma.sync from ldmatrix",
     .launch = {fwd_v5}, .dtypes = 1u << DT_FP16, .min_cc = 80, .unsupported = v5_why_not,
     .shown_for_error = NULL},
    RUNG("v6_winograd", v6, "Winograd F(2x2, 3x3): 16 multiplies for 36, 3x3 stride 1 only",
         v6_why_not),
    RUNG("v7_few_channels", v7, "C <= 4: input patch in registers, 4 outputs x 4 filters a thread",
         v7_why_not),
    RUNG("api", api, "the library: api.h's conv2d_forward picks the rung", NULL),
    {.name = "vendor", .idea = "cuDNN: the fastest algorithm Find returns, then AddTensor",
     .launch = {fwd_vendor}, .dtypes = DT_FLOATS, .min_cc = 0, .unsupported = vendor_why_not,
     .shown_for_error = VENDOR_ROUNDS_TWICE},
    {.name = "vendor_nhwc", .idea = "cuDNN on NHWC tensors (fwd_nhwc pass): what NCHW costs it",
     .launch = {NULL, nhwc_vendor}, .dtypes = 1u << DT_FP16, .min_cc = 0,
     .unsupported = vendor_why_not, .shown_for_error = VENDOR_ROUNDS_TWICE},
};

static const struct rung exercise = {
    .name = "exercise",
    .idea = "your fp32 implicit-GEMM gather in exercise.cu",
    .launch = {fwd_exercise},
    .dtypes = 1u << DT_FP32,
    .min_cc = 0,
    .unsupported = NULL,
    .shown_for_error = NULL,
};

static const char *const exercise_shapes[] = {"1x1x1x1-1k1", "1x2x5x5-3k3s1p1",
                                              "2x3x9x7-5k3s2p1", "3x4x16x16-8k5s1p2",
                                              "1x3x7x7-1k7s1p3", NULL};

static const struct preset presets[] = {
    {"seed", "2x4x64x64-8k3s1p1", "the reference report's: 4 -> 8 channels, 3x3, padding 1"},
    {"cnn", "32x16x14x14-32k3s1p1", "chapter 10's second layer at batch 32"},
    {"cnn-conv1", "32x1x28x28-16k3s1p1", "chapter 10's first layer at batch 32"},
    {"large", "8x32x128x128-64k3s1p1", "32 -> 64 channels at 128x128, 4.8 GFLOP"},
    {"resnet", "32x64x56x56-64k3s1p1", "a ResNet stage-1 layer, 7.4 GFLOP"},
    {"stride2", "32x64x56x56-128k3s2p1", "a ResNet downsampling layer, stride 2"},
    {"sanitize", "2x3x9x7-5k3s1p1", "small and odd, for make sanitize (every rung takes it)"},
};

static void describe(struct problem *p)
{
    const struct conv2d_dims d = dims_of(p);
    const enum dtype t = p->dtype;
    p->n_in = 3;
    p->in[IN_X] = tensor_of("x", t, count_x(d));
    p->in[IN_W] = tensor_of("w", t, count_w(d));
    p->in[IN_B] = tensor_of("b", t, (size_t)d.k);
    p->n_out = 1;
    p->out[0] = tensor_of("y", t, count_y(d));
    p->bytes = (double)(count_x(d) + count_w(d) + (size_t)d.k + count_y(d)) *
               (double)dtype_size(t);
    p->flops = 2.0 * (double)count_y(d) * (double)(d.c * d.r * d.s);
    p->reduction_len = (size_t)(d.c * d.r * d.s + 1);
}

/* x and w uniform in [-1, 1], b in [-1, 1]: sums of C R S products of mean 0. */
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
    double *y = p->ref_out[0];
    const double skip = verify_unchecked();
    if (every > 1)
        for (size_t o = 0; o < count_y(d); o++)
            y[o] = skip;
    if (p->pass == FWD) {
        conv2d_forward_reference(p->host_in[IN_X], p->host_in[IN_W], p->host_in[IN_B], p->dtype,
                                 d, CONV2D_LINEAR, every, y);
        return;
    }
    /* fwd_nhwc: the NCHW reference of the same numbers, its output moved to NHWC. */
    const size_t es = dtype_size(p->dtype);
    void *x = host_alloc(count_x(d) * es), *w = host_alloc(count_w(d) * es);
    double *y_nchw = (double *)host_alloc(count_y(d) * sizeof *y_nchw);
    permute_channels_last(p->host_in[IN_X], x, es, d.n, d.c, d.h, d.w, 1);
    permute_channels_last(p->host_in[IN_W], w, es, d.k, d.c, d.r, d.s, 1);
    for (size_t o = 0; o < count_y(d); o++)
        y_nchw[o] = skip;
    conv2d_forward_reference(x, w, p->host_in[IN_B], p->dtype, d, CONV2D_LINEAR, every, y_nchw);
    permute_channels_last(y_nchw, y, sizeof *y, d.n, d.k, d.p, d.q, 0);
    free(x);
    free(w);
    free(y_nchw);
}

static size_t workspace_bytes(const struct problem *p)
{
    return p->pass == FWD ? conv2d_rung_workspace_bytes(dims_of(p), p->dtype) : 0;
}

extern "C" const struct chapter conv2d_chapter = {
    .id = "07-conv-forward",
    .title = "2D convolution forward (+ bias), NCHW",
    .shape_help = "NxCxHxW-KkRsSpP: K filters of R x R, stride S (default 1), padding P "
                  "(default 0)",
    .passes = {"fwd", "fwd_nhwc"},
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
    return ladder_main(&conv2d_chapter, argc, argv);
}
#endif
