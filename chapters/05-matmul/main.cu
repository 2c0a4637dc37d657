/* Chapter 05, matmul: the rung table and the program.
 *
 * Shapes are N (a square N x N x N product) or MxNxK, C being M x N, all matrices row-major.
 * Three passes, each reading A and B and writing C, the same sizes and FLOPs:
 *   fwd  C = A B      A stored M x K, B stored K x N
 *   atb  C = A^T B    A stored K x M (a weight gradient's product), B stored K x N
 *   abt  C = A B^T    A stored M x K, B stored N x K (a linear layer's forward)
 * v1 to v10 compute fwd alone; v11, the api row and the vendor rung all three. */
#include <stdio.h>
#include <stdlib.h>

#include "matmul.h"

/* A full reference above this many multiply-adds would take seconds (4096^3 is 6.9 x 10^10);
 * beyond, it computes SAMPLED rows and SAMPLED columns of C and the table says "sampled". */
#define FULL_REFERENCE_MACS (1ll << 31)
#define SAMPLED 16

/* M and N index the grid's y dimension in some rungs: 65535 blocks of 16 rows (v3's tiles and
 * the exercise's). */
#define MAX_MN (65535 * 16)

/* describe() has written every shape as MxNxK. */
static struct matmul_dims dims_of(const struct problem *p)
{
    const int64_t *d = p->shape.dim;
    const struct matmul_dims md = {d[0], d[1], d[2]};
    return md;
}

/* The passes, in api.h's order of the forms. */
enum { FWD, ATB, ABT };
static const enum matmul_form form_of_pass[] = {MATMUL_AB, MATMUL_ATB, MATMUL_ABT};

#define ADAPT(v)                                                                               \
    static void fwd_##v(const struct launch_args *a, cudaStream_t s)                           \
    {                                                                                          \
        matmul_##v(a->in[0], a->in[1], a->out[0], dims_of(a->p), a->p->dtype, s);             \
    }
ADAPT(v1)
ADAPT(v2)
ADAPT(v3)
ADAPT(v4)
ADAPT(v5)
ADAPT(v6)
ADAPT(v7)
ADAPT(v8)
ADAPT(v9)
ADAPT(v10)
ADAPT(vendor_mma_sync)
ADAPT(exercise)

/* The rungs of every form: the pass says which. */
#define ADAPT_FORMS(v, call)                                                                   \
    static void v##_form(const struct launch_args *a, cudaStream_t s)                          \
    {                                                                                          \
        call(form_of_pass[a->p->pass], a->in[0], a->in[1], a->out[0], dims_of(a->p),          \
             a->p->dtype, s);                                                                  \
    }
ADAPT_FORMS(v11, matmul_v11)
ADAPT_FORMS(vendor, matmul_vendor_form)
ADAPT_FORMS(api, matmul) /* the library call, api.h's matmul: it picks the rung */

static const char *v10_why_not(const struct problem *p)
{
    (void)p;
    return matmul_v10_unsupported();
}

static const char *vendor_mma_sync_why_not(const struct problem *p)
{
    return matmul_vendor_mma_sync_unsupported(dims_of(p));
}

#define RUNG(n, v, what)                                                                       \
    {.name = n, .idea = what, .launch = {fwd_##v}, .dtypes = DT_FLOATS, .min_cc = 0,            \
     .unsupported = NULL, .shown_for_error = NULL}
/* A rung that computes all three passes (fwd, atb, abt) with one launcher. */
#define RUNG_FORMS(n, launch_fn, what)                                                         \
    {.name = n, .idea = what, .launch = {launch_fn, launch_fn, launch_fn}, .dtypes = DT_FLOATS, \
     .min_cc = 0, .unsupported = NULL, .shown_for_error = NULL}
static const struct rung rungs[] = {
    RUNG("v1_naive", v1, "a thread per element of C, the warp down a column: uncoalesced"),
    RUNG("v2_coalesced", v2, "a thread per element of C, the warp along a row"),
    RUNG("v3_shared_tiles", v3, "16x16 tiles of A and B staged in shared memory"),
    RUNG("v4_1d_blocking", v4, "8 outputs a thread in a column: registers reuse B"),
    RUNG("v5_2d_blocking", v5, "an 8x8 block of outputs a thread: an outer product a step"),
    RUNG("v6_vectorized", v6, "v5 with A's tile transposed and 4-wide loads and stores"),
    RUNG("v7_warp_tiles", v7, "warp tiles, conflict-free 16-byte shared loads, double buffering"),
    {.name = "v8_wmma", .idea = "tensor cores through WMMA fragments, fp16 in, fp32 sums",
     .launch = {fwd_v8}, .dtypes = 1u << DT_FP16, .min_cc = 70, .unsupported = NULL,
     .shown_for_error = NULL},
    {.name = "v9_mma_sync", .idea = "mma.sync fed by ldmatrix from a multi-stage cp.async ring",
     .launch = {fwd_v9}, .dtypes = 1u << DT_FP16, .min_cc = 80, .unsupported = NULL,
     .shown_for_error = NULL},
    {.name = "v10_wgmma", .idea = "Hopper warpgroup MMA fed by TMA: producer and consumers",
     .launch = {fwd_v10}, .dtypes = 1u << DT_FP16, .min_cc = 90, .unsupported = v10_why_not,
     .shown_for_error = NULL},
    RUNG_FORMS("v11_split_k_cluster", v11_form, "small tiles, K split over a cluster, every form"),
    RUNG_FORMS("api", api_form, "the library: api.h's matmul picks the rung"),
    RUNG_FORMS("vendor", vendor_form, "cuBLAS: Sgemm in pedantic math (no TF32), GemmEx fp16/fp32"),
    {.name = "vendor_mma_sync", .idea = "cuBLAS's fastest kernel built for sm_80 (mma.sync), as v9",
     .launch = {fwd_vendor_mma_sync}, .dtypes = 1u << DT_FP16, .min_cc = 80,
     .unsupported = vendor_mma_sync_why_not, .shown_for_error = NULL},
};

static const struct rung exercise = {
    .name = "exercise",
    .idea = "your fp32 shared-memory tiled matmul in exercise.cu",
    .launch = {fwd_exercise},
    .dtypes = 1u << DT_FP32,
    .min_cc = 0,
    .unsupported = NULL,
    .shown_for_error = NULL,
};

static const char *const exercise_shapes[] = {"1x1x1", "7x5x3", "17x33x65", "64x64x64",
                                              "127x129x131", NULL};

static const struct preset presets[] = {
    {"seed", "256", "the reference report's 256^3"},
    {"seed-1024", "1024", "the reference report's 1024^3"},
    {"large", "4096", "4096^3, 137 GFLOP"},
    {"large-8192", "8192", "8192^3, 1.1 TFLOP (the reference samples rows and columns)"},
    {"sanitize", "37x29x43", "small and odd, for make sanitize"},
};

static int check_shape(const struct shape *s, char *why, size_t why_len)
{
    if (s->ndims != 1 && s->ndims != 3) {
        snprintf(why, why_len, "matmul takes N (square) or MxNxK; this shape has %d dimensions",
                 s->ndims);
        return -1;
    }
    if (s->nparams || s->has_lead) {
        snprintf(why, why_len, "matmul takes no window parameters");
        return -1;
    }
    const int64_t m = s->dim[0], n = s->ndims == 3 ? s->dim[1] : m, k = s->ndims == 3 ? s->dim[2] : m;
    if (m < 1 || n < 1 || k < 1) {
        snprintf(why, why_len, "M, N and K must each be at least 1 (M = %lld, N = %lld, K = %lld)",
                 (long long)m, (long long)n, (long long)k);
        return -1;
    }
    if (m > MAX_MN || n > MAX_MN || k > 0x7fffffff) {
        snprintf(why, why_len,
                 "M and N must be at most %d and K below 2^31 (M = %lld, N = %lld, K = %lld)",
                 MAX_MN, (long long)m, (long long)n, (long long)k);
        return -1;
    }
    /* Past 2^40 elements (4 TB of fp32) no machine holds the matrices; below, the memory of
     * this one is checked when they are allocated. */
    const double elements = (double)m * (double)k + (double)k * (double)n + (double)m * (double)n;
    if (elements > 1099511627776.0) {
        snprintf(why, why_len, "A, B and C hold %.3g elements together, past any memory (2^40)",
                 elements);
        return -1;
    }
    return 0;
}

static void describe(struct problem *p)
{
    /* N alone means N x N x N; tables and CSV rows always write M x N x K. */
    if (p->shape.ndims == 1) {
        p->shape.ndims = 3;
        p->shape.dim[1] = p->shape.dim[2] = p->shape.dim[0];
        shape_format(&p->shape);
    }
    /* Every pass reads an A of M K elements and a B of K N: stored M x K and K x N for fwd, A
     * stored K x M for atb, B stored N x K for abt. */
    const struct matmul_dims d = dims_of(p);
    const enum dtype t = p->dtype;
    p->n_in = 2;
    p->in[0] = tensor_of(p->pass == ATB ? "A (K x M)" : "A (M x K)", t, (size_t)(d.m * d.k));
    p->in[1] = tensor_of(p->pass == ABT ? "B (N x K)" : "B (K x N)", t, (size_t)(d.k * d.n));
    p->n_out = 1;
    p->out[0] = tensor_of("C", t, (size_t)(d.m * d.n));
    p->bytes = (double)(d.m * d.k + d.k * d.n + d.m * d.n) * (double)dtype_size(t);
    p->flops = 2.0 * (double)d.m * (double)d.n * (double)d.k;
    p->reduction_len = (size_t)d.k;
}

/* A and B uniform in [-1, 1]: sums of K products of mean 0, so C grows as sqrt(K). */
static void fill(struct problem *p, struct rng *r)
{
    fill_uniform(p->host_in[0], p->in[0].type, p->in[0].count, r, -1.0, 1.0);
    fill_uniform(p->host_in[1], p->in[1].type, p->in[1].count, r, -1.0, 1.0);
}

static void reference(struct problem *p)
{
    const struct matmul_dims d = dims_of(p);
    const enum matmul_form form = form_of_pass[p->pass];
    if ((double)d.m * (double)d.n * (double)d.k <= (double)FULL_REFERENCE_MACS)
        matmul_reference_form(form, p->host_in[0], p->host_in[1], p->dtype, d, p->ref_out[0]);
    else
        matmul_reference_form_sampled(form, p->host_in[0], p->host_in[1], p->dtype, d, SAMPLED,
                                      SAMPLED, p->ref_out[0]);
}

extern "C" const struct chapter matmul_chapter = {
    .id = "05-matmul",
    .title = "matmul, C = A B, from a naive kernel to tensor cores",
    .shape_help = "N for N x N x N, or MxNxK: C (M x N) = A (M x K) B (K x N), row-major; "
                  "pass atb: C = A^T B, A stored K x M; abt: C = A B^T, B stored N x K",
    .passes = {"fwd", "atb", "abt"},
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
};

#ifndef KL_NO_MAIN
int main(int argc, char **argv)
{
    return ladder_main(&matmul_chapter, argc, argv);
}
#endif
