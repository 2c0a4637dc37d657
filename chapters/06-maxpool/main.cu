/* Chapter 06, max pooling: the rung table and the program.
 *
 * Shapes are NxCxHxW-kKsSpP: x of N x C x H x W (NCHW), a K x K window, stride S (default K)
 * and padding P (default 0), e.g. 8x64x128x128-k2s2p0. Passes:
 *   fwd  reads x; writes y and the packed argmax (maxpool.h)
 *   bwd  reads dy and the argmax (the vendor: x, y and dy instead); writes dx
 * The backward's inputs come from the reference forward of random x, so every backward rung
 * starts from the same, correct argmax. */
#include <stdio.h>
#include <stdlib.h>

#include "maxpool.h"

enum { FWD, BWD };
enum { FWD_Y, FWD_ARGMAX };            /* the forward's outputs */
enum { BWD_DY, BWD_ARGMAX, BWD_X, BWD_Y }; /* the backward's inputs */

static struct maxpool_dims dims_of(const struct shape *s)
{
    const int64_t k = shape_param(s, 'k', 2);
    struct maxpool_dims d;
    char why[200];
    if (maxpool_dims_of(s->dim[0], s->dim[1], s->dim[2], s->dim[3], k, k, shape_param(s, 's', k),
                        shape_param(s, 'p', 0), &d, why, sizeof why))
        d.oh = d.ow = 0; /* check_shape refused such shapes first */
    return d;
}

#define ADAPT(v)                                                                               \
    static void fwd_##v(const struct launch_args *a, cudaStream_t s)                           \
    {                                                                                          \
        maxpool_forward_##v(a->in[0], a->out[FWD_Y], (uint8_t *)a->out[FWD_ARGMAX],            \
                            dims_of(&a->p->shape), a->p->dtype, s);                            \
    }                                                                                          \
    static void bwd_##v(const struct launch_args *a, cudaStream_t s)                           \
    {                                                                                          \
        maxpool_backward_##v(a->in[BWD_DY], (const uint8_t *)a->in[BWD_ARGMAX], a->out[0],     \
                             dims_of(&a->p->shape), a->p->dtype, s);                           \
    }
ADAPT(v1)
ADAPT(v2)
ADAPT(v3)
ADAPT(v4)

/* The library call, api.h's entry points: they pick the rung. */
static void fwd_api(const struct launch_args *a, cudaStream_t s)
{
    maxpool_forward(a->in[0], a->out[FWD_Y], (uint8_t *)a->out[FWD_ARGMAX],
                    dims_of(&a->p->shape), a->p->dtype, s);
}

static void bwd_api(const struct launch_args *a, cudaStream_t s)
{
    maxpool_backward(a->in[BWD_DY], (const uint8_t *)a->in[BWD_ARGMAX], a->out[0],
                     dims_of(&a->p->shape), a->p->dtype, s);
}

/* cuDNN writes y alone: the rung table marks the argmax as not written. */
static void fwd_vendor(const struct launch_args *a, cudaStream_t s)
{
    maxpool_forward_vendor(a->in[0], a->out[FWD_Y], dims_of(&a->p->shape), a->p->dtype, s);
}

static void bwd_vendor(const struct launch_args *a, cudaStream_t s)
{
    maxpool_backward_vendor(a->in[BWD_X], a->in[BWD_Y], a->in[BWD_DY], a->out[0],
                            dims_of(&a->p->shape), a->p->dtype, s);
}

static void fwd_exercise(const struct launch_args *a, cudaStream_t s)
{
    maxpool_forward_exercise((const float *)a->in[0], (float *)a->out[FWD_Y],
                             (uint8_t *)a->out[FWD_ARGMAX], dims_of(&a->p->shape), s);
}

/* cuDNN takes int dimensions. */
static const char *vendor_unsupported(const struct problem *p)
{
    const struct shape *s = &p->shape;
    for (int i = 0; i < 4; i++)
        if (s->dim[i] > 0x7fffffff)
            return "cuDNN takes int dimensions";
    return p->in[0].count > 0x7fffffff ? "cuDNN tensors hold fewer than 2^31 elements" : NULL;
}

#define RUNG(n, v, what, why_not, fwd_not_written)                                             \
    {.name = n, .idea = what, .launch = {fwd_##v, bwd_##v}, .dtypes = DT_FLOATS, .min_cc = 0,   \
     .unsupported = why_not, .shown_for_error = NULL,                                          \
     .outputs_not_written = {fwd_not_written, 0}}
static const struct rung rungs[] = {
    RUNG("v1_naive", v1, "a thread per output; backward scatters with atomics", NULL, 0),
    RUNG("v2_coalesced", v2, "rows of outputs, 2x2 vectorised; backward gathers", NULL, 0),
    RUNG("v3_vector_gather", v3, "backward: several inputs a thread, wide stores, no atomics",
         NULL, 0),
    RUNG("v4_register_windows", v4, "forward: 3x3 windows unrolled over registers, 4 outputs a "
         "thread", NULL, 0),
    RUNG("api", api, "the library: api.h's maxpool_forward and maxpool_backward pick the rung",
         NULL, 0),
    RUNG("vendor", vendor, "cuDNN cudnnPoolingForward/Backward, max, deterministic (no argmax)",
         vendor_unsupported, 1u << FWD_ARGMAX),
};

static const struct rung exercise = {
    .name = "exercise",
    .idea = "your fp32 thread-per-output forward in exercise.cu",
    .launch = {fwd_exercise},
    .dtypes = 1u << DT_FP32,
    .min_cc = 0,
    .unsupported = NULL,
    .shown_for_error = NULL,
};

static const char *const exercise_shapes[] = {"1x1x1x1-k1", "1x1x7x7-k2", "2x3x7x9-k3s2p1",
                                              "3x5x16x16-k2", "1x2x9x8-k3s1p1", NULL};

static const struct preset presets[] = {
    {"seed", "8x64x128x128-k2s2p0", "the reference report's: 2x2, stride 2"},
    {"large", "64x128x224x224-k2s2p0", "2x2, stride 2, 1.6 GB of fp32 in"},
    {"overlap", "32x64x112x112-k3s2p1", "a ResNet stem: 3x3 windows overlapping, stride 2"},
    {"sanitize", "2x3x7x9-k3s2p1", "small and odd, for make sanitize"},
};

static int check_shape(const struct shape *s, char *why, size_t why_len)
{
    if (s->ndims != 4) {
        snprintf(why, why_len, "max pooling takes NxCxHxW-kKsSpP; this shape has %d dimensions",
                 s->ndims);
        return -1;
    }
    if (s->has_lead) {
        snprintf(why, why_len, "max pooling's window parameters start with a letter (k2s2p0)");
        return -1;
    }
    for (int i = 0; i < s->nparams; i++)
        if (s->param_name[i] != 'k' && s->param_name[i] != 's' && s->param_name[i] != 'p') {
            snprintf(why, why_len, "window parameter '%c' is not k (window), s (stride) or p "
                     "(padding)", s->param_name[i]);
            return -1;
        }
    const int64_t k = shape_param(s, 'k', 2);
    struct maxpool_dims d;
    if (maxpool_dims_of(s->dim[0], s->dim[1], s->dim[2], s->dim[3], k, k,
                        shape_param(s, 's', k), shape_param(s, 'p', 0), &d, why, why_len))
        return -1;
    /* Past 2^40 elements in x no machine holds the tensors; below, this one's memory is
     * checked when they are allocated. */
    if ((double)d.n * (double)d.c * (double)d.h * (double)d.w > 1099511627776.0) {
        snprintf(why, why_len, "x holds more than 2^40 elements, past any memory");
        return -1;
    }
    return 0;
}

static void describe(struct problem *p)
{
    const struct maxpool_dims d = dims_of(&p->shape);
    const size_t in = (size_t)(d.n * d.c * d.h * d.w), out = (size_t)(d.n * d.c * d.oh * d.ow);
    const size_t argmax = (size_t)maxpool_argmax_bytes(d);
    const enum dtype t = p->dtype;
    const double es = (double)dtype_size(t);
    if (p->pass == FWD) {
        p->n_in = 1;
        p->in[0] = tensor_of("x", t, in);
        p->n_out = 2;
        p->out[FWD_Y] = tensor_of("y", t, out);
        p->out[FWD_ARGMAX] = tensor_of("argmax", DT_U8, argmax);
        /* The fewest: x once, y once, the packed argmax. */
        p->bytes = (double)in * es + (double)out * es + (double)argmax;
        p->reduction_len = 1;
    } else {
        p->n_in = 4;
        p->in[BWD_DY] = tensor_of("dy", t, out);
        p->in[BWD_ARGMAX] = tensor_of("argmax", DT_U8, argmax);
        p->in[BWD_X] = tensor_of("x", t, in);
        p->in[BWD_Y] = tensor_of("y", t, out);
        p->n_out = 1;
        p->out[0] = tensor_of("dx", t, in);
        /* The fewest: dy and the argmax, dx once. */
        p->bytes = (double)out * es + (double)argmax + (double)in * es;
        /* Overlapping windows add up to ceil(K / S)^2 terms into one dx. */
        const int64_t cover = (d.kh + d.s - 1) / d.s;
        p->reduction_len = (size_t)(cover * cover);
    }
    p->flops = 0;
}

/* x uniform in [-1, 1]: ties are rare in fp32 and happen in fp16 (2^11 values), where the
 * first-maximum rule decides. The backward's argmax and y come from the reference forward. */
static void fill(struct problem *p, struct rng *r)
{
    const struct maxpool_dims d = dims_of(&p->shape);
    if (p->pass == FWD) {
        fill_uniform(p->host_in[0], p->dtype, p->in[0].count, r, -1.0, 1.0);
        return;
    }
    fill_uniform(p->host_in[BWD_X], p->dtype, p->in[BWD_X].count, r, -1.0, 1.0);
    fill_uniform(p->host_in[BWD_DY], p->dtype, p->in[BWD_DY].count, r, -1.0, 1.0);
    const size_t out = p->in[BWD_Y].count;
    double *y = (double *)host_alloc(out * sizeof *y);
    uint8_t *window = (uint8_t *)host_alloc(out);
    maxpool_forward_reference(p->host_in[BWD_X], p->dtype, d, y, NULL, window);
    maxpool_pack_argmax(window, d, (uint8_t *)p->host_in[BWD_ARGMAX]);
    for (size_t o = 0; o < out; o++)
        store_from_double(p->host_in[BWD_Y], p->dtype, o, y[o]);
    free(y);
    free(window);
}

static void reference(struct problem *p)
{
    const struct maxpool_dims d = dims_of(&p->shape);
    if (p->pass == FWD) {
        const size_t out = p->out[FWD_Y].count, bytes = p->out[FWD_ARGMAX].count;
        uint8_t *window = (uint8_t *)host_alloc(out), *packed = (uint8_t *)host_alloc(bytes);
        maxpool_forward_reference(p->host_in[0], p->dtype, d, p->ref_out[FWD_Y], NULL, window);
        maxpool_pack_argmax(window, d, packed);
        for (size_t b = 0; b < bytes; b++)
            p->ref_out[FWD_ARGMAX][b] = packed[b];
        free(window);
        free(packed);
        return;
    }
    /* The backward's reference scatters through plane indices found again from x: it shares
     * nothing with the packed argmax the rungs read but the forward reference. */
    const size_t out = p->in[BWD_DY].count;
    double *dy = (double *)host_alloc(out * sizeof *dy), *y = (double *)host_alloc(out * sizeof *y);
    int32_t *plane = (int32_t *)host_alloc(out * sizeof *plane);
    for (size_t o = 0; o < out; o++)
        dy[o] = load_as_double(p->host_in[BWD_DY], p->dtype, o);
    maxpool_forward_reference(p->host_in[BWD_X], p->dtype, d, y, plane, NULL);
    maxpool_backward_reference(dy, plane, d, p->ref_out[0]);
    free(dy);
    free(y);
    free(plane);
}

extern "C" const struct chapter maxpool_chapter = {
    .id = "06-maxpool",
    .title = "2D max pooling, NCHW, forward and backward",
    .shape_help = "NxCxHxW-kKsSpP: a K x K window, stride S (default K), padding P (default 0)",
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
};

#ifndef KL_NO_MAIN
int main(int argc, char **argv)
{
    return ladder_main(&maxpool_chapter, argc, argv);
}
#endif
