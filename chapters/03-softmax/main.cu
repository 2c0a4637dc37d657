/* Chapter 03, softmax over the channels of NCHW: the rung table and the program.
 *
 * Shapes are NxCxHxW. Softmax runs over C at each of the N H W positions (rows); a row's
 * elements lie H W apart. Passes: fwd reads x and writes y (2 arrays); bwd reads y (the
 * forward's output) and dy and writes dx (3 arrays). */
#include <stdio.h>
#include <stdlib.h>

#include <math.h>

#include "api.h"
#include "softmax.h"

static struct softmax_dims dims_of(const struct problem *p)
{
    const int64_t *d = p->shape.dim;
    struct softmax_dims sd = {d[0], d[1], d[2], d[3]};
    return sd;
}

/* The harness hands a rung a problem; the launchers take pointers and the dimensions. */
#define ADAPT(v)                                                                               \
    static void fwd_##v(const struct launch_args *a, cudaStream_t s)                           \
    {                                                                                          \
        softmax_forward_##v(a->in[0], a->out[0], dims_of(a->p), a->p->dtype, s);               \
    }                                                                                          \
    static void bwd_##v(const struct launch_args *a, cudaStream_t s)                           \
    {                                                                                          \
        softmax_backward_##v(a->in[0], a->in[1], a->out[0], dims_of(a->p), a->p->dtype, s);    \
    }
ADAPT(v1)
ADAPT(v2)
ADAPT(v3)
ADAPT(v4)
ADAPT(v5)
ADAPT(v6)
ADAPT(v7)
ADAPT(v8)
ADAPT(vendor)

/* v9 and the library call take the chapter's workspace (softmax_workspace_bytes). */
#define ADAPT_WITH_WORKSPACE(v, forward, backward)                                             \
    static void fwd_##v(const struct launch_args *a, cudaStream_t s)                           \
    {                                                                                          \
        forward(a->in[0], a->out[0], dims_of(a->p), a->p->dtype, a->workspace, s);             \
    }                                                                                          \
    static void bwd_##v(const struct launch_args *a, cudaStream_t s)                           \
    {                                                                                          \
        backward(a->in[0], a->in[1], a->out[0], dims_of(a->p), a->p->dtype, a->workspace, s);  \
    }
ADAPT_WITH_WORKSPACE(v9, softmax_forward_v9, softmax_backward_v9)
ADAPT_WITH_WORKSPACE(api, softmax_forward, softmax_backward)

static size_t workspace_bytes(const struct problem *p)
{
    return softmax_workspace_bytes(dims_of(p), p->dtype);
}

static void fwd_exercise(const struct launch_args *a, cudaStream_t s)
{
    softmax_forward_exercise(a->in[0], a->out[0], dims_of(a->p), a->p->dtype, s);
}

/* cuDNN describes the tensor with int dimensions and strides. */
static const char *vendor_unsupported(const struct problem *p)
{
    return p->in[0].count > 0x7fffffff ? "cuDNN takes int dimensions and strides" : NULL;
}

#define RUNG_CC(n, v, what, cc, why_not)                                                       \
    {.name = n, .idea = what, .launch = {fwd_##v, bwd_##v}, .dtypes = DT_FLOATS, .min_cc = cc,  \
     .unsupported = why_not, .shown_for_error = NULL}
#define RUNG(n, v, what, why_not) RUNG_CC(n, v, what, 0, why_not)
static const struct rung rungs[] = {
    RUNG("v1_naive", v1, "a thread per row, three passes over it (two backward)", NULL),
    RUNG("v2_block_reduce", v2, "a block shares rows: shared-memory tree reductions", NULL),
    RUNG("v3_warp_shuffle", v3, "the row in registers, read once; warp-shuffle reductions",
         NULL),
    RUNG("v4_online", v4, "online max and sum, one merge; long rows staged in shared memory",
         NULL),
    RUNG_CC("v5_cluster", v5, "a row split over a thread-block cluster, small blocks, on-chip merge",
            90, NULL),
    RUNG_CC("v6_early_launch", v6, "v5 with programmatic dependent launch: launches overlap", 90,
            NULL),
    RUNG("v7_pipelined", v7, "forward: a resident block loads the next row while it reduces this",
         NULL),
    RUNG_CC("v8_image_on_chip", v8,
            "strided rows: a cluster holds an image, moved in contiguous slabs by bulk copies", 90,
            NULL),
    RUNG_CC("v9_image_stream", v9,
            "v8's slabs in a resident grid: teams meet in global memory, next image loads early",
            90, NULL),
    RUNG("api", api, "the library: api.h's softmax_forward and softmax_backward pick the rung",
         NULL),
    RUNG("vendor", vendor, "cuDNN cudnnSoftmaxForward/Backward, accurate, channel mode",
         vendor_unsupported),
};

static const struct rung exercise = {
    .name = "exercise",
    .idea = "your fp32 thread-per-row online softmax in exercise.cu",
    .launch = {fwd_exercise},
    .dtypes = 1u << DT_FP32,
    .min_cc = 0,
    .unsupported = NULL,
    .shown_for_error = NULL,
};

static const char *const exercise_shapes[] = {"1x1x1x1", "3x7x1x1", "2x10x7x7", "3x1000x2x3",
                                              "1x4099x1x1", NULL};

static const struct preset presets[] = {
    {"seed", "8x10x28x28", "the reference report's: 10 channels at 8x28x28 positions"},
    {"seed-1x1", "8x10x1x1", "the reference report's: 8 rows of 10"},
    {"large", "4096x32768x1x1", "4096 contiguous rows of 32768, 512 MiB in fp32"},
    {"large-spatial", "64x1000x14x14", "1000 channels at 64x14x14 positions, 196 apart"},
    {"sanitize", "3x40x5x7", "small, odd H W, for make sanitize (C H W a multiple of 8: v8 runs)"},
};

#define MAX_CHANNELS (INT64_C(0x7fffffff) - 256)

static int check_shape(const struct shape *s, char *why, size_t why_len)
{
    if (s->ndims != 4) {
        snprintf(why, why_len, "softmax takes 4 dimensions, NxCxHxW; this shape has %d",
                 s->ndims);
        return -1;
    }
    if (s->nparams || s->has_lead) {
        snprintf(why, why_len, "softmax takes no window parameters");
        return -1;
    }
    /* The rungs step through a row in int, up to 256 channels past its end (v2's and v4's
     * loops), and round C up to whole packs in int (v3-v5): C stops short of that. */
    const int64_t rows = s->dim[0] * s->dim[2] * s->dim[3];
    if (s->dim[1] > MAX_CHANNELS || rows > 0x7fffffff) {
        snprintf(why, why_len, "C must be at most 2^31 - 257 and N*H*W below 2^31 (C = %lld, "
                 "N*H*W = %lld)", (long long)s->dim[1], (long long)rows);
        return -1;
    }
    return 0;
}

static void describe(struct problem *p)
{
    size_t n = (size_t)shape_elements(&p->shape);
    enum dtype t = p->dtype;
    if (p->pass == 0) {
        p->n_in = 1;
        p->in[0] = tensor_of("x", t, n);
        p->n_out = 1;
        p->out[0] = tensor_of("y", t, n);
    } else {
        p->n_in = 2;
        p->in[0] = tensor_of("y", t, n);
        p->in[1] = tensor_of("dy", t, n);
        p->n_out = 1;
        p->out[0] = tensor_of("dx", t, n);
    }
    p->bytes = (double)(p->n_in + p->n_out) * (double)n * (double)dtype_size(t);
    p->flops = 0;
    p->reduction_len = (size_t)p->shape.dim[1];
}

/* Overwrites buf (logits, as type t) with their softmax over C, rounded to t: what a backward
 * pass receives from its forward. */
static void softmax_in_place(void *buf, enum dtype t, struct softmax_dims d)
{
    const size_t S = (size_t)(d.h * d.w), C = (size_t)d.c;
    for (size_t n = 0; n < (size_t)d.n; n++) {
        for (size_t s = 0; s < S; s++) {
            const size_t first = n * C * S + s;
            double m = -INFINITY, sum = 0;
            for (size_t c = 0; c < C; c++)
                m = fmax(m, load_as_double(buf, t, first + c * S));
            for (size_t c = 0; c < C; c++)
                sum += exp(load_as_double(buf, t, first + c * S) - m);
            for (size_t c = 0; c < C; c++) {
                const size_t i = first + c * S;
                store_from_double(buf, t, i, exp(load_as_double(buf, t, i) - m) / sum);
            }
        }
    }
}

/* Forward: logits in [-5, 5], so that rows are far from uniform. Backward: y the softmax of such
 * logits, dy in [-1, 1]. */
static void fill(struct problem *p, struct rng *r)
{
    fill_uniform(p->host_in[0], p->in[0].type, p->in[0].count, r, -5.0, 5.0);
    if (p->pass == 1) {
        softmax_in_place(p->host_in[0], p->dtype, dims_of(p));
        fill_uniform(p->host_in[1], p->in[1].type, p->in[1].count, r, -1.0, 1.0);
    }
}

static void reference(struct problem *p)
{
    if (p->pass == 0)
        softmax_forward_reference(p->host_in[0], p->dtype, dims_of(p), p->ref_out[0]);
    else
        softmax_backward_reference(p->host_in[0], p->host_in[1], p->dtype, dims_of(p),
                                   p->ref_out[0]);
}

extern "C" const struct chapter softmax_chapter = {
    .id = "03-softmax",
    .title = "softmax over the channels of NCHW, forward and backward",
    .shape_help = "NxCxHxW, softmax over C at each of the N*H*W positions, e.g. 8x10x28x28 "
                  "or 4096x32768x1x1",
    .passes = {"fwd", "bwd"},
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
    return ladder_main(&softmax_chapter, argc, argv);
}
#endif
