/* Chapter 04, cross-entropy: the rung table and the program.
 *
 * Shapes are NxC: N rows (samples) of C logits (classes). Passes, each reading the logits
 * (N x C, fp32 or fp16) and the labels (N int32):
 *   fwd      writes the mean loss: one fp32, whatever the logits' type
 *   bwd      writes dx, N x C in the logits' type (the gradient of the mean loss)
 *   fwd_bwd  writes both, the pass a training step runs
 * The loss stays fp32 in fp16 problems because it is a mean of N terms of size ~log C: fp16
 * would round it to 11 bits (0.008 at a loss of 11, the large preset's), above the differences
 * a training curve shows, and training frameworks keep their loss in fp32 for that reason; it
 * also lets every rung accumulate it in fp32 and store it as is. */
#include <stdint.h>
#include <stdio.h>

#include "api.h"
#include "cross_entropy.h"

enum { FWD, BWD, FWD_BWD };

static struct ce_dims dims_of(const struct problem *p)
{
    struct ce_dims d = {(size_t)p->shape.dim[0], (size_t)p->shape.dim[1]};
    return d;
}

/* The outputs of a's pass; the launchers do what their non-NULL outputs ask. */
static void outputs_of(const struct launch_args *a, float **loss, void **dx)
{
    const int pass = a->p->pass;
    *loss = pass == BWD ? NULL : (float *)a->out[0];
    *dx = pass == FWD ? NULL : a->out[pass == BWD ? 0 : 1];
}

/* The harness hands a rung a problem; the launchers take pointers and the shape. */
#define ADAPT(v)                                                                               \
    static void run_##v(const struct launch_args *a, cudaStream_t s)                           \
    {                                                                                          \
        float *loss;                                                                           \
        void *dx;                                                                              \
        outputs_of(a, &loss, &dx);                                                             \
        const struct ce_dims d = dims_of(a->p);                                                \
        ce_##v(a->in[0], (const int32_t *)a->in[1], loss, dx, d.n, d.c, a->p->dtype, s);       \
    }
#define ADAPT_WITH_WORKSPACE(v)                                                                \
    static void run_##v(const struct launch_args *a, cudaStream_t s)                           \
    {                                                                                          \
        float *loss;                                                                           \
        void *dx;                                                                              \
        outputs_of(a, &loss, &dx);                                                             \
        const struct ce_dims d = dims_of(a->p);                                                \
        ce_##v(a->in[0], (const int32_t *)a->in[1], loss, dx, d.n, d.c, a->p->dtype,           \
               a->workspace, s);                                                               \
    }
ADAPT(v1)
ADAPT(v2)
ADAPT_WITH_WORKSPACE(v3)
ADAPT_WITH_WORKSPACE(v4)
ADAPT_WITH_WORKSPACE(v5)
ADAPT_WITH_WORKSPACE(v6)
ADAPT_WITH_WORKSPACE(v7)
ADAPT_WITH_WORKSPACE(v8)
ADAPT(vendor)

/* The library calls, api.h's: each picks the rung for its pass. */
static void fwd_api(const struct launch_args *a, cudaStream_t s)
{
    cross_entropy_forward(a->in[0], (const int32_t *)a->in[1], (float *)a->out[0],
                          dims_of(a->p), a->p->dtype, a->workspace, s);
}

static void bwd_api(const struct launch_args *a, cudaStream_t s)
{
    cross_entropy_backward(a->in[0], (const int32_t *)a->in[1], a->out[0], dims_of(a->p),
                           a->p->dtype, a->workspace, s);
}

static void fwd_bwd_api(const struct launch_args *a, cudaStream_t s)
{
    cross_entropy_fused(a->in[0], (const int32_t *)a->in[1], (float *)a->out[0], a->out[1],
                        dims_of(a->p), a->p->dtype, a->workspace, s);
}

static size_t workspace_bytes(const struct problem *p)
{
    return cross_entropy_workspace_bytes(dims_of(p), p->dtype);
}

static void run_exercise(const struct launch_args *a, cudaStream_t s)
{
    const struct problem *p = a->p;
    ce_forward_exercise((const float *)a->in[0], (const int32_t *)a->in[1], (float *)a->out[0],
                        (size_t)p->shape.dim[0], (size_t)p->shape.dim[1], s);
}

/* cuDNN takes int dimensions, and its tensors stay below 2^31 elements. */
static const char *vendor_unsupported(const struct problem *p)
{
    return p->in[0].count > 0x7fffffff ? "cuDNN tensors hold fewer than 2^31 elements" : NULL;
}

#define RUNG_CC(n, v, what, cc, why_not)                                                       \
    {.name = n, .idea = what, .launch = {run_##v, run_##v, run_##v}, .dtypes = DT_FLOATS,       \
     .min_cc = cc, .unsupported = why_not, .shown_for_error = NULL}
#define RUNG(n, v, what, why_not) RUNG_CC(n, v, what, 0, why_not)
static const struct rung rungs[] = {
    RUNG("v1_naive", v1, "one thread per row, three sweeps, atomics for the mean", NULL),
    RUNG("v2_block_per_row", v2, "a block per row, shared-memory tree reductions", NULL),
    RUNG("v3_warp_per_row", v3, "a warp per row in registers, shuffles, in-kernel mean", NULL),
    RUNG("v4_fused_online", v4, "long rows: one online sweep, row kept in shared memory",
         NULL),
    RUNG_CC("v5_cluster", v5, "a row in registers over a thread-block cluster, one exp a logit",
            90, NULL),
    RUNG_CC("v6_early_launch", v6, "v5 with programmatic dependent launch: launches overlap", 90,
            NULL),
    RUNG("v7_pipelined", v7, "long rows: a resident block refills its copy with the next row",
         NULL),
    RUNG("v8_split_rows", v8, "forward: rows cut into spans, a warp each, no barrier; else v7",
         NULL),
    {.name = "api", .idea = "the library: api.h's cross_entropy_forward, _backward, _fused",
     .launch = {fwd_api, bwd_api, fwd_bwd_api}, .dtypes = DT_FLOATS, .min_cc = 0,
     .unsupported = NULL, .shown_for_error = NULL},
    RUNG("vendor", vendor, "cuDNN log-softmax + our gather and gradient kernels",
         vendor_unsupported),
};

static const struct rung exercise = {
    .name = "exercise",
    .idea = "your fp32 warp-per-row online forward in exercise.cu",
    .launch = {run_exercise, NULL, NULL},
    .dtypes = 1u << DT_FP32,
    .min_cc = 0,
    .unsupported = NULL,
    .shown_for_error = NULL,
};

static const char *const exercise_shapes[] = {"1x1", "1x2", "3x7", "257x1000", "5x4099", NULL};

static const struct preset presets[] = {
    {"seed", "32x10", "the reference report's 10-class head"},
    {"seed-1000", "256x1000", "the reference report's 1000-class head"},
    {"large", "8192x50257", "a language-model head: 8192 tokens, a 50257-word vocabulary"},
    {"sanitize", "37x1031", "small and odd, for make sanitize"},
};

static int check_shape(const struct shape *s, char *why, size_t why_len)
{
    if (s->nparams || s->has_lead) {
        snprintf(why, why_len, "cross-entropy takes no window parameters");
        return -1;
    }
    if (s->ndims != 2) {
        snprintf(why, why_len, "cross-entropy takes NxC, rows by classes: 2 dimensions, not %d",
                 s->ndims);
        return -1;
    }
    if (s->dim[1] > INT32_MAX) {
        snprintf(why, why_len, "C = %lld classes: labels are int32, so C must stay below 2^31",
                 (long long)s->dim[1]);
        return -1;
    }
    if (s->dim[0] > INT32_MAX) {
        snprintf(why, why_len, "N = %lld rows: at most 2^31 - 1 rows", (long long)s->dim[0]);
        return -1;
    }
    return 0;
}

/* Rounding-error lengths for the tolerance (common/verify.c grows it as their square root).
 * dx: each element comes from a row's sum of C terms: C. The loss: a sum of C terms per row,
 * then a sum of N rows; the two levels' errors add, so N + C. fwd_bwd has one length for both
 * outputs: the loss's, the larger.
 * fp16 problems: fp16 storage lets a rung keep intermediates in fp16, as the vendor's cuDNN
 * log-softmax does. One rounding of a log-probability to 11 bits moves the loss by up to 2^-11
 * = 4.9e-4 of itself, and a gradient element by up to 2^-11 max(p |log p|) / N = 1.8e-4 / N.
 * Lengths of at least 4096 for the loss (fp32 rtol 6.4e-4) and 1024 for dx (fp16 atol 3.2e-4)
 * admit that. */
static size_t tolerance_length(int pass, enum dtype t, size_t n_rows, size_t n_classes)
{
    size_t grad = n_classes, mean = n_rows + n_classes;
    if (t == DT_FP16) {
        grad = grad > 1024 ? grad : 1024;
        mean = mean > 4096 ? mean : 4096;
    }
    return pass == BWD ? grad : mean;
}

static void describe(struct problem *p)
{
    const size_t n_rows = (size_t)p->shape.dim[0], n_classes = (size_t)p->shape.dim[1];
    const size_t n = n_rows * n_classes;
    const enum dtype t = p->dtype;
    const double s = (double)dtype_size(t), logits = (double)n * s, labels = 4.0 * n_rows;
    p->n_in = 2;
    p->in[0] = tensor_of("logits", t, n);
    p->in[1] = tensor_of("labels", DT_I32, n_rows);
    switch (p->pass) {
    case FWD:
        p->n_out = 1;
        p->out[0] = tensor_of("loss", DT_FP32, 1);
        p->bytes = logits + labels + 4;
        break;
    case BWD:
        p->n_out = 1;
        p->out[0] = tensor_of("dx", t, n);
        p->bytes = 2 * logits + labels;
        break;
    default:
        p->n_out = 2;
        p->out[0] = tensor_of("loss", DT_FP32, 1);
        p->out[1] = tensor_of("dx", t, n);
        p->bytes = 2 * logits + labels + 4;
        break;
    }
    p->flops = 0;
    p->reduction_len = tolerance_length(p->pass, t, n_rows, n_classes);
}

/* Logits in [-4, 4): rows neither flat nor one-hot, so both terms of dx matter. Labels uniform
 * over the classes, every one in range (the tests put bad ones in on purpose). */
static void fill(struct problem *p, struct rng *r)
{
    fill_uniform(p->host_in[0], p->dtype, p->in[0].count, r, -4.0, 4.0);
    fill_uniform(p->host_in[1], DT_I32, p->in[1].count, r, 0.0, (double)p->shape.dim[1]);
}

static void reference(struct problem *p)
{
    const size_t n_rows = (size_t)p->shape.dim[0], n_classes = (size_t)p->shape.dim[1];
    const int32_t *labels = (const int32_t *)p->host_in[1];
    if (p->pass != BWD)
        ce_forward_reference(p->host_in[0], p->dtype, labels, n_rows, n_classes, p->ref_out[0]);
    if (p->pass != FWD)
        ce_backward_reference(p->host_in[0], p->dtype, labels, n_rows, n_classes,
                              p->ref_out[p->pass == BWD ? 0 : 1]);
}

extern "C" const struct chapter ce_chapter = {
    .id = "04-cross-entropy",
    .title = "Cross-entropy loss over N x C logits with labels, forward and backward",
    .shape_help = "NxC: N rows (samples) of C logits (classes), e.g. 32x10 or 8192x50257",
    .passes = {"fwd", "bwd", "fwd_bwd"},
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
    return ladder_main(&ce_chapter, argc, argv);
}
#endif
