/* Chapter 01, ReLU: the rung table and the program.
 *
 * Shapes are the tensor's dimensions joined by x (1024x1024); ReLU is elementwise, so only
 * their product matters. Passes: fwd reads x and writes y (2 arrays); bwd reads x and dy and
 * writes dx (3 arrays). */
#include <stdio.h>

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

static const struct rung rungs[] = {
    {"v1_naive", "one thread per element", {fwd_v1, bwd_v1}, DT_FLOATS, 0, naive_unsupported},
    {"v2_grid_stride", "grid sized to the GPU, each thread loops", {fwd_v2, bwd_v2}, DT_FLOATS,
     0, NULL},
    {"v3_vector", "128-bit loads and stores, scalar tail", {fwd_v3, bwd_v3}, DT_FLOATS, 0, NULL},
    {"v4_vector_ilp", "4 vectors in flight per thread", {fwd_v4, bwd_v4}, DT_FLOATS, 0, NULL},
    {"v5_one_shot", "no loop: one-shot blocks, 2 vectors per thread", {fwd_v5, bwd_v5},
     DT_FLOATS, 0, naive_unsupported},
    {"vendor", "cuDNN cudnnActivationForward/Backward, RELU", {fwd_vendor, bwd_vendor},
     DT_FLOATS, 0, vendor_unsupported},
};

static const struct rung exercise = {
    "exercise", "your fp32 float4 kernel in exercise.cu", {fwd_exercise, NULL},
    1u << DT_FP32, 0, NULL};

static const char *const exercise_shapes[] = {"1", "2", "31", "1023", "1048579", NULL};

static const struct preset presets[] = {
    {"seed", "1024x1024", "the reference report's ReLU"},
    {"large", "268435456", "2^28 elements, 1 GiB in fp32: far past the L2"},
};

static int check_shape(const struct shape *s, char *why, size_t why_len)
{
    if (s->nparams) {
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
    "01-relu",
    "ReLU forward and backward",
    "the tensor's dimensions joined by x, e.g. 1024x1024 or 268435456",
    {"fwd", "bwd"},
    2,
    presets,
    sizeof presets / sizeof presets[0],
    rungs,
    sizeof rungs / sizeof rungs[0],
    check_shape,
    describe,
    fill,
    reference,
    &exercise,
    exercise_shapes,
};

#ifndef KL_NO_MAIN
int main(int argc, char **argv)
{
    return ladder_main(&relu_chapter, argc, argv);
}
#endif
