/* Chapter 02, bias gradient: the rung table and the program.
 *
 * Shapes are NxCxHxW (32x128x64x64), the shape of dy. One pass, bwd: it reads dy and writes
 * db, C sums of N x H x W elements each. */
#include <stdio.h>

#include "api.h"
#include "bias_grad.cuh"

static struct bias_grad_size size_of(const struct problem *p)
{
    const int64_t *d = p->shape.dim;
    struct bias_grad_size z = {d[0], d[1], d[2] * d[3]};
    return z;
}

/* The harness hands a rung a problem; the launchers take pointers and sizes. */
#define ADAPT(v)                                                                               \
    static void bwd_##v(const struct launch_args *a, cudaStream_t s)                           \
    {                                                                                          \
        bias_grad_##v(a->in[0], a->out[0], size_of(a->p), a->p->dtype, s);                     \
    }
#define ADAPT_WITH_WORKSPACE(v)                                                                \
    static void bwd_##v(const struct launch_args *a, cudaStream_t s)                           \
    {                                                                                          \
        bias_grad_##v(a->in[0], a->out[0], size_of(a->p), a->p->dtype, a->workspace, s);       \
    }
ADAPT(v1)
ADAPT_WITH_WORKSPACE(v2)
ADAPT(v3)
ADAPT_WITH_WORKSPACE(v4)
ADAPT(v5)
ADAPT_WITH_WORKSPACE(v6)
ADAPT(vendor)
ADAPT(exercise)

static struct bias_grad_dims dims_of(const struct problem *p)
{
    const int64_t *d = p->shape.dim;
    struct bias_grad_dims dims = {d[0], d[1], d[2], d[3]};
    return dims;
}

/* The library call, api.h's bias_grad: it picks the rung. */
static void bwd_api(const struct launch_args *a, cudaStream_t s)
{
    bias_grad(a->in[0], a->out[0], dims_of(a->p), a->p->dtype, a->workspace, s);
}

static size_t workspace_bytes(const struct problem *p)
{
    return bias_grad_workspace_bytes(dims_of(p), p->dtype);
}

/* cuDNN takes int dimensions: dy is described as n x c x 1 x hw. */
static const char *vendor_unsupported(const struct problem *p)
{
    struct bias_grad_size z = size_of(p);
    return z.n > 0x7fffffff || z.c > 0x7fffffff || z.hw > 0x7fffffff
               ? "cuDNN takes int dimensions" : NULL;
}

#define RUNG(n, v, what, types, shown)                                                         \
    {.name = n, .idea = what, .launch = {bwd_##v}, .dtypes = types, .min_cc = 0,              \
     .unsupported = NULL, .shown_for_error = shown}
static const struct rung rungs[] = {
    RUNG("v1_thread_per_channel", v1, "one thread per channel, a serial loop", DT_FLOATS, NULL),
    RUNG("v2_atomic", v2, "one thread per element, atomicAdd into the channel's sum", DT_FLOATS,
         NULL),
    RUNG("v3_shared_tree", v3, "a block per channel, shared-memory tree", DT_FLOATS, NULL),
    RUNG("v4_split_shuffle", v4, "rows cut into chunks, 16-byte loads, warp shuffles, 2nd pass",
         DT_FLOATS, NULL),
    RUNG("v5_fp16_accumulate", v5, "v3 with fp16 sums: shown for its error", 1u << DT_FP16,
         "fp16 sums: inexact"),
    {.name = "v6_tensor_core_sum", .idea = "v4 with each fp16 pack summed by one mma.sync",
     .launch = {bwd_v6}, .dtypes = 1u << DT_FP16, .min_cc = 80, .unsupported = NULL,
     .shown_for_error = NULL},
    RUNG("api", api, "the library: api.h's bias_grad picks the rung", DT_FLOATS, NULL),
    {.name = "vendor", .idea = "cuDNN cudnnConvolutionBackwardBias", .launch = {bwd_vendor},
     .dtypes = DT_FLOATS, .min_cc = 0, .unsupported = vendor_unsupported,
     .shown_for_error = NULL},
};

static const struct rung exercise = RUNG("exercise", exercise,
                                         "your warp-shuffle reduction in exercise.cu",
                                         1u << DT_FP32, NULL);

static const char *const exercise_shapes[] = {"1x1x1x1", "1x3x7x7", "3x7x33x17", "2x130x8x9",
                                              NULL};

static const struct preset presets[] = {
    {"seed", "32x128x64x64", "the reference report's bias gradient"},
    {"large", "64x256x112x112", "822 MB of fp32: a ResNet stage at batch 64"},
    {"sanitize", "3x5x33x17", "small and odd, for make sanitize"},
};

static int check_shape(const struct shape *s, char *why, size_t why_len)
{
    if (s->ndims != 4) {
        snprintf(why, why_len, "dy needs 4 dimensions, N x C x H x W; got %d", s->ndims);
        return -1;
    }
    if (s->nparams || s->has_lead) {
        snprintf(why, why_len, "the bias gradient takes no window parameters");
        return -1;
    }
    /* Grids of a block a channel (v3, v5) or a block a chunk of every row (v4, v6: N C chunks
     * of at least BIAS_GRAD_MIN_CHUNK elements) must fit gridDim.x. */
    const int64_t n = s->dim[0], c = s->dim[1], hw = s->dim[2] * s->dim[3];
    const int64_t chunks = (hw + BIAS_GRAD_MIN_CHUNK - 1) / BIAS_GRAD_MIN_CHUNK;
    if (c > 0x7fffffff || (double)n * (double)c * (double)chunks > 0x7fffffff) {
        snprintf(why, why_len, "C and N*C*ceil(H*W/%d) must each be below 2^31, the grids' "
                 "limit (C = %lld, N = %lld, H*W = %lld)", BIAS_GRAD_MIN_CHUNK, (long long)c,
                 (long long)n, (long long)hw);
        return -1;
    }
    return 0;
}

static void describe(struct problem *p)
{
    struct bias_grad_size z = size_of(p);
    size_t elements = (size_t)(z.n * z.c * z.hw);
    p->n_in = 1;
    p->in[0] = tensor_of("dy", p->dtype, elements);
    p->n_out = 1;
    p->out[0] = tensor_of("db", p->dtype, (size_t)z.c);
    p->bytes = (double)(elements + (size_t)z.c) * (double)dtype_size(p->dtype);
    p->flops = 0;
    p->reduction_len = (size_t)(z.n * z.hw);
}

static void fill(struct problem *p, struct rng *r)
{
    fill_uniform(p->host_in[0], p->in[0].type, p->in[0].count, r, -1.0, 1.0);
}

static void reference(struct problem *p)
{
    bias_grad_reference(p->host_in[0], p->dtype, size_of(p), p->ref_out[0]);
}

extern "C" const struct chapter bias_grad_chapter = {
    .id = "02-bias-grad",
    .title = "convolution bias gradient: a sum over N, H, W per channel",
    .shape_help = "dy's N x C x H x W, e.g. 32x128x64x64",
    .passes = {"bwd"},
    .n_passes = 1,
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
    return ladder_main(&bias_grad_chapter, argc, argv);
}
#endif
