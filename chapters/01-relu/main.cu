/* Chapter 01, ReLU: the rung table and the program.
 *
 * Shapes are the tensor's dimensions joined by x (1024x1024); ReLU is elementwise, so only
 * their product matters. Passes: fwd reads x and writes y (2 arrays); bwd reads x and dy and
 * writes dx (3 arrays). */
#include <stdio.h>

#include "api.h"
#include "relu.h"

/* The harness hands a rung a problem; the launchers take pointers and a count. */
#define ADAPT(v)                                                                               \
    static void fwd_##v(const struct launch_args *a, cudaStream_t s)                           \
    {                                                                                          \
        relu_forward_##v(a->in[0], a->out[0], a->p->in[0].count, a->p->dtype, s);              \
    }                                                                                          \
    static void bwd_##v(const struct launch_args *a, cudaStream_t s)                           \
    {                                                                                          \
        relu_backward_##v(a->in[0], a->in[1], a->out[0], a->p->in[0].count, a->p->dtype, s);   \
    }
ADAPT(v1)
ADAPT(v2)
ADAPT(v3)
ADAPT(v4)
ADAPT(v5)
ADAPT(vendor)

/* The library call, api.h's entry points: they pick the rung. */
static void fwd_api(const struct launch_args *a, cudaStream_t s)
{
    relu_forward(a->in[0], a->out[0], (struct relu_dims){a->p->in[0].count}, a->p->dtype, s);
}

static void bwd_api(const struct launch_args *a, cudaStream_t s)
{
    relu_backward(a->in[0], a->in[1], a->out[0], (struct relu_dims){a->p->in[0].count},
                  a->p->dtype, s);
}

static void fwd_exercise(const struct launch_args *a, cudaStream_t s)
{
    relu_forward_exercise(a->in[0], a->out[0], a->p->in[0].count, a->p->dtype, s);
}

/* cuDNN takes int dimensions; vendor.cu lays the tensor out as rows of 1024 or a single row. */
static const char *vendor_unsupported(const struct problem *p)
{
    size_t n = p->in[0].count;
    size_t cols = n % 1024 == 0 ? 1024 : n;
    return cols > 0x7fffffff || n / cols > 0x7fffffff ? "cuDNN takes int dimensions" : NULL;
}

/* v1 and v5 launch a block per 256 elements or more; the grid holds 2^31 - 1 blocks. */
static const char *naive_unsupported(const struct problem *p)
{
    return p->in[0].count / 256 >= 0x7fffffff ? "more than 2^39 elements" : NULL;
}

#define RUNG(n, v, what, why_not)                                                              \
    {.name = n, .idea = what, .launch = {fwd_##v, bwd_##v}, .dtypes = DT_FLOATS, .min_cc = 0,   \
     .unsupported = why_not, .shown_for_error = NULL}
static const struct rung rungs[] = {
    RUNG("v1_naive", v1, "one thread per element", naive_unsupported),
    RUNG("v2_grid_stride", v2, "grid sized to the GPU, each thread loops", NULL),
    RUNG("v3_vector", v3, "128-bit loads and stores, scalar tail", NULL),
    RUNG("v4_vector_ilp", v4, "4 vectors in flight per thread", NULL),
    RUNG("v5_one_shot", v5, "no loop: one-shot blocks, 2 vectors per thread",
         naive_unsupported),
    RUNG("api", api, "the library: api.h's relu_forward and relu_backward pick the rung",
         naive_unsupported),
    RUNG("vendor", vendor, "cuDNN cudnnActivationForward/Backward, RELU", vendor_unsupported),
};

static const struct rung exercise = {
    .name = "exercise",
    .idea = "your fp32 float4 kernel in exercise.cu",
    .launch = {fwd_exercise},
    .dtypes = 1u << DT_FP32,
    .min_cc = 0,
    .unsupported = NULL,
    .shown_for_error = NULL,
};

static const char *const exercise_shapes[] = {"1", "2", "31", "1023", "1048579", NULL};

static const struct preset presets[] = {
    {"seed", "1024x1024", "the reference report's ReLU"},
    {"large", "268435456", "2^28 elements, 1 GiB in fp32: far past the L2"},
    {"sanitize", "4099", "small and odd, for make sanitize"},
};

static int check_shape(const struct shape *s, char *why, size_t why_len)
{
    if (s->nparams || s->has_lead) {
        snprintf(why, why_len, "ReLU takes no window parameters");
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
        p->in[0] = tensor_of("x", t, n);
        p->in[1] = tensor_of("dy", t, n);
        p->n_out = 1;
        p->out[0] = tensor_of("dx", t, n);
    }
    p->bytes = (double)(p->n_in + p->n_out) * (double)n * (double)dtype_size(t);
    p->flops = 0;
    p->reduction_len = 1;
}

/* Half the inputs negative, so both branches of ReLU are taken everywhere. */
static void fill(struct problem *p, struct rng *r)
{
    for (int i = 0; i < p->n_in; i++)
        fill_uniform(p->host_in[i], p->in[i].type, p->in[i].count, r, -4.0, 4.0);
}

static void reference(struct problem *p)
{
    if (p->pass == 0)
        relu_forward_reference(p->host_in[0], p->dtype, p->in[0].count, p->ref_out[0]);
    else
        relu_backward_reference(p->host_in[0], p->host_in[1], p->dtype, p->in[0].count,
                                p->ref_out[0]);
}

extern "C" const struct chapter relu_chapter = {
    .id = "01-relu",
    .title = "ReLU forward and backward",
    .shape_help = "the tensor's dimensions joined by x, e.g. 1024x1024 or 268435456",
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
    return ladder_main(&relu_chapter, argc, argv);
}
#endif
