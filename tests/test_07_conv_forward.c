/* Chapter 07: the CPU reference against hand-computed convolutions, the shape checks and the
 * program's one-line refusals, then every rung of the table against the reference on the GPU
 * at odd shapes in both dtypes (vendor_nhwc on its fwd_nhwc pass), and the exercise checker.
 * The library's entry point, conv2d_forward, called directly (on buffers of one's own, in one
 * graph and on two streams), is tested with the other chapters' in test_api.c. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <criterion/redirect.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "conv.h"
#include "gpu.h"
#include "rung_note.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static struct conv2d_dims dims(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                               int64_t r, int64_t stride, int64_t pad)
{
    struct conv2d_dims d;
    char why[200];
    cr_assert_eq(conv2d_dims_of(n, c, h, w, k, r, r, stride, pad, &d, why, sizeof why), 0, "%s",
                 why);
    return d;
}

/* The dims of a parsed NxCxHxW-KkRsSpP shape, with main.cu's defaults (R 1, S 1, P 0). */
static struct conv2d_dims dims_of_shape(const struct shape *sh)
{
    return dims(sh->dim[0], sh->dim[1], sh->dim[2], sh->dim[3], sh->lead,
                shape_param(sh, 'k', 1), shape_param(sh, 's', 1), shape_param(sh, 'p', 0));
}

static void expect_outputs(const double *y, const double *want, size_t n, const char *what)
{
    for (size_t o = 0; o < n; o++)
        cr_expect_eq(y[o], want[o], "%s: y[%zu] is %g, not %g", what, o, y[o], want[o]);
}

/* ---- the CPU reference, on cases small enough to work out by hand ---- */

/* A 1x1 filter scales each pixel: y = w x, and with two filters, two scaled copies. */
Test(conv_reference, one_by_one_filter_scales)
{
    const float x[] = {1, -2, 3, 0.5f, 4, -6};
    const float w[] = {2.5f, -0.5f};
    const struct conv2d_dims d = dims(1, 1, 2, 3, 2, 1, 1, 0);
    cr_assert(d.p == 2 && d.q == 3);
    double y[12];
    conv2d_forward_reference(x, w, NULL, DT_FP32, d, CONV2D_LINEAR, 1, y);
    const double want[] = {2.5, -5, 7.5, 1.25, 10, -15, -0.5, 1, -1.5, -0.25, -2, 3};
    expect_outputs(y, want, COUNT(want), "1x1");
}

/* The layouts: channels are summed, images and filters kept apart, y is N x K x P x Q. */
Test(conv_reference, sums_channels_and_keeps_images_and_filters_apart)
{
    /* x: 2 images of 2 channels of 1x2; w: 3 filters of 2 channels of 1x1. */
    const float x[] = {1, 2, 10, 20, /**/ 3, 4, 30, 40};
    const float w[] = {1, 0, /**/ 0, 1, /**/ 2, -1};
    const struct conv2d_dims d = dims(2, 2, 1, 2, 3, 1, 1, 0);
    double y[12];
    conv2d_forward_reference(x, w, NULL, DT_FP32, d, CONV2D_LINEAR, 1, y);
    const double want[] = {1, 2, 10, 20, -8, -16, /**/ 3, 4, 30, 40, -24, -32};
    expect_outputs(y, want, COUNT(want), "NCHW x KCRS");
}

/* A 3x3 all-ones filter with padding 1 sums each 3x3 neighbourhood: the corners sum four
 * pixels, the edges six, the interior nine. */
static const float ramp_3x4[] = {1, 2, 3, 4, /**/ 5, 6, 7, 8, /**/ 9, 10, 11, 12};
static const float ones_3x3[] = {1, 1, 1, 1, 1, 1, 1, 1, 1};

Test(conv_reference, all_ones_3x3_sums_neighbourhoods)
{
    const struct conv2d_dims d = dims(1, 1, 3, 4, 1, 3, 1, 1);
    cr_assert(d.p == 3 && d.q == 4);
    double y[12];
    conv2d_forward_reference(ramp_3x4, ones_3x3, NULL, DT_FP32, d, CONV2D_LINEAR, 1, y);
    const double want[] = {14, 24, 30, 22, /**/ 33, 54, 63, 45, /**/ 30, 48, 54, 38};
    expect_outputs(y, want, COUNT(want), "3x3 ones, padding 1");
}

/* Stride 2 keeps every other row and column of the stride-1 result: P = (3 + 2 - 3) / 2 + 1
 * = 2, Q = (4 + 2 - 3) / 2 + 1 = 2 (the floor drops column 3). */
Test(conv_reference, stride_2_subsamples)
{
    const struct conv2d_dims d = dims(1, 1, 3, 4, 1, 3, 2, 1);
    cr_assert(d.p == 2 && d.q == 2);
    double y[4];
    conv2d_forward_reference(ramp_3x4, ones_3x3, NULL, DT_FP32, d, CONV2D_LINEAR, 1, y);
    const double want[] = {14, 30, 30, 54};
    expect_outputs(y, want, COUNT(want), "3x3 ones, stride 2");
}

/* A 2x2 input under a 3x3 filter with padding 2: a 4x4 output, each element the taps that
 * land inside. The filter 1..9 is not symmetric, so a flipped filter (true convolution, not
 * the cross-correlation api.h defines) would give other numbers: y[0] would be 1, not 9. */
Test(conv_reference, input_smaller_than_the_filter)
{
    const float x[] = {1, 2, 3, 4};
    const float w[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const struct conv2d_dims d = dims(1, 1, 2, 2, 1, 3, 1, 2);
    cr_assert(d.p == 4 && d.q == 4);
    double y[16];
    conv2d_forward_reference(x, w, NULL, DT_FP32, d, CONV2D_LINEAR, 1, y);
    /* y[0, 0]: only x[0, 0] under tap (2, 2): 9. y[1, 1]: x under taps (1..2, 1..2):
     * 1 * 5 + 2 * 6 + 3 * 8 + 4 * 9 = 77. */
    const double want[] = {9, 26, 23, 14, /**/ 33, 77, 67, 36, /**/ 21, 47, 37, 18,
                           /**/ 9, 18, 11, 4};
    expect_outputs(y, want, COUNT(want), "2x2 under 3x3, padding 2");
}

/* Padding wider than a 1x1 filter: a border of outputs that see only zeros, so only the bias. */
Test(conv_reference, padding_past_the_filter_leaves_the_bias)
{
    const float x[] = {1, 2, 3, 4}, w[] = {3}, b[] = {0.5f};
    const struct conv2d_dims d = dims(1, 1, 2, 2, 1, 1, 1, 1);
    cr_assert(d.p == 4 && d.q == 4);
    double y[16];
    conv2d_forward_reference(x, w, b, DT_FP32, d, CONV2D_LINEAR, 1, y);
    const double want[] = {0.5, 0.5, 0.5, 0.5, /**/ 0.5, 3.5, 6.5, 0.5, /**/ 0.5, 9.5, 12.5, 0.5,
                           /**/ 0.5, 0.5, 0.5, 0.5};
    expect_outputs(y, want, COUNT(want), "1x1, padding 1, bias");
}

/* The bias is added before the ReLU: b[k] shifts filter k's outputs, and the ReLU clips what
 * is still negative. */
Test(conv_reference, bias_then_relu)
{
    const float x[] = {-1, 2}, w[] = {1, -1}, b[] = {0.5f, 0.25f};
    const struct conv2d_dims d = dims(1, 1, 1, 2, 2, 1, 1, 0);
    double linear[4], relu[4];
    conv2d_forward_reference(x, w, b, DT_FP32, d, CONV2D_LINEAR, 1, linear);
    conv2d_forward_reference(x, w, b, DT_FP32, d, CONV2D_RELU, 1, relu);
    const double want_linear[] = {-0.5, 2.5, 1.25, -1.75}, want_relu[] = {0, 2.5, 1.25, 0};
    expect_outputs(linear, want_linear, 4, "bias");
    expect_outputs(relu, want_relu, 4, "bias and ReLU");
}

/* With `every` = 4 only the outputs whose NKPQ index is a multiple of 4 are computed, and they
 * agree with the full reference; the others are left as they were. */
Test(conv_reference, sampled_computes_every_nth_output)
{
    const struct conv2d_dims d = dims(2, 3, 5, 6, 4, 3, 1, 1);
    const size_t nx = 2 * 3 * 5 * 6, nw = 4 * 3 * 3 * 3, ny = 2 * 4 * 5 * 6;
    float x[2 * 3 * 5 * 6], w[4 * 3 * 3 * 3], b[4];
    struct rng r = rng_seeded(7);
    fill_uniform(x, DT_FP32, nx, &r, -1, 1);
    fill_uniform(w, DT_FP32, nw, &r, -1, 1);
    fill_uniform(b, DT_FP32, 4, &r, -1, 1);
    double full[2 * 4 * 5 * 6], part[2 * 4 * 5 * 6];
    for (size_t o = 0; o < ny; o++)
        part[o] = -7;
    conv2d_forward_reference(x, w, b, DT_FP32, d, CONV2D_RELU, 1, full);
    conv2d_forward_reference(x, w, b, DT_FP32, d, CONV2D_RELU, 4, part);
    for (size_t o = 0; o < ny; o++)
        cr_expect_eq(part[o], o % 4 ? -7 : full[o], "y[%zu] is %g", o, part[o]);
}

Test(conv_reference, reads_fp16_as_stored)
{
    const uint16_t x[] = {half_from_float(0.1f), half_from_float(-0.3f)};
    const uint16_t w[] = {half_from_float(0.7f)}, b[] = {half_from_float(0.01f)};
    const struct conv2d_dims d = dims(1, 1, 1, 2, 1, 1, 1, 0);
    double y[2];
    conv2d_forward_reference(x, w, b, DT_FP16, d, CONV2D_LINEAR, 1, y);
    for (int i = 0; i < 2; i++) {
        const double want = (double)half_to_float(x[i]) * (double)half_to_float(w[0]) +
                            (double)half_to_float(b[0]);
        cr_expect_eq(y[i], want, "y[%d] is %.17g, not %.17g", i, y[i], want);
    }
}

/* ---- shapes ---- */

static int shape_refused(const char *text, const char *reason)
{
    struct shape s;
    char why[256] = "";
    const int rc = shape_parse(text, &s, why, sizeof why) ||
                   conv2d_chapter.check_shape(&s, why, sizeof why);
    cr_expect(strstr(why, reason) != NULL, "%s: the reason was '%s', not '%s'", text, why,
              reason);
    return rc != 0 && strstr(why, reason) != NULL;
}

/* A bad shape and what its refusal must say. Negative padding cannot be written: '-' only
 * separates the window parameters, so "p-1" is a parameter without a number; an output of
 * size zero cannot arise, since the filter must fit the padded input. */
struct bad_shape {
    const char *shape, *reason;
};

static const struct bad_shape bad_shapes[] = {
    {"2x4x8x8-8k3s0p1", "stride must be at least 1"},
    {"1x1x2x2-1k5s1p1", "larger than the padded 4x4 input"},
    {"2x4x8x8-k3", "K, the filters, is missing"},
    {"2x4x8x8-8k3q1", "window parameter 'q' is not k"},
    {"2x4x8-8k3", "four dimensions"},
    {"2x4x8x8x2-8k3", "four dimensions"},
    {"2x4x8x8-8k0", "at least 1"},
    {"2x4x8x8-0k3", "at least 1"},
    {"2x4x8x8-8k3p-1", "'p' needs a number"},
    {"65536x65536x1x1-1k1", "x holds 4.295e+09 elements"},
    {"1x1x1x1-3000000000k1", "w holds 3e+09 elements"},
    {"1x2048x1024x1024-1k1", "x holds 2.147e+09 elements"},
    {"1x1x2x2-2048k1p511", "y holds 2.147e+09 elements"},
};

Test(conv_shape, bad_shapes_say_what_is_wrong)
{
    for (size_t i = 0; i < COUNT(bad_shapes); i++)
        cr_expect(shape_refused(bad_shapes[i].shape, bad_shapes[i].reason), "%s must be refused",
                  bad_shapes[i].shape);
    /* One element short of 2^31 is taken (checked here, never allocated). */
    struct shape s;
    char why[256] = "";
    cr_expect(shape_parse("1x1x1x2147483647-1k1", &s, why, sizeof why) == 0 &&
                  conv2d_chapter.check_shape(&s, why, sizeof why) == 0,
              "x and y of 2^31 - 1 elements refused: %s", why);
}

/* P = (H + 2 pad - R) / stride + 1 and the same for Q, floored; filter 1, stride 1 and
 * padding 0 where the shape does not say. */
Test(conv_shape, output_sizes)
{
    const struct {
        const char *shape;
        int64_t p, q;
    } cases[] = {{"3x5x17x13-7k5s2p2", 9, 7}, {"1x1x2x3-2k3s1p2", 4, 5},
                 {"1x37x11x9-70k3s3p1", 4, 3}, {"2x4x8x8-8k3", 6, 6},
                 {"2x4x8x8-8", 8, 8},          {"2x3x6x5-4k1s2p1", 4, 4},
                 {"1x1x1x1-1k1", 1, 1},        {"32x64x56x56-128k3s2p1", 28, 28}};
    for (size_t i = 0; i < COUNT(cases); i++) {
        struct shape s;
        char why[256] = "";
        cr_assert(shape_parse(cases[i].shape, &s, why, sizeof why) == 0 &&
                      conv2d_chapter.check_shape(&s, why, sizeof why) == 0,
                  "%s refused: %s", cases[i].shape, why);
        const struct conv2d_dims d = dims_of_shape(&s);
        cr_expect(d.p == cases[i].p && d.q == cases[i].q, "%s: P x Q is %lldx%lld, not %lldx%lld",
                  cases[i].shape, (long long)d.p, (long long)d.q, (long long)cases[i].p,
                  (long long)cases[i].q);
    }
}

static void free_params(struct criterion_test_params *crp)
{
    cr_free(crp->params);
}

/* The program refuses each bad shape before anything else (a tensor of 2^32 elements is
 * refused, not allocated): exit 2, nothing on stdout, one line on stderr saying why. The
 * parameters are indices into bad_shapes: a test's worker gets them through shared memory,
 * where pointers into the runner's own statics would not survive. */
ParameterizedTestParameters(conv_program, bad_shape_exits_2_in_one_line)
{
    int *which = cr_malloc(sizeof *which * COUNT(bad_shapes));
    for (size_t i = 0; i < COUNT(bad_shapes); i++)
        which[i] = (int)i;
    return cr_make_param_array(int, which, COUNT(bad_shapes), free_params);
}

ParameterizedTest(int *which, conv_program, bad_shape_exits_2_in_one_line,
                  .init = redirect_output)
{
    const struct bad_shape *bad = &bad_shapes[*which];
    const char *argv[] = {"07-conv-forward", "--shape", bad->shape};
    cr_expect_eq(ladder_main(&conv2d_chapter, 3, (char **)argv), KL_EXIT_USAGE,
                 "--shape %s must be refused", bad->shape);
    char out[4096], err[4096];
    read_redirected(cr_get_redirected_stdout(), out, sizeof out);
    read_redirected(cr_get_redirected_stderr(), err, sizeof err);
    cr_expect_str_eq(out, "", "nothing but the one line: stdout had %s", out);
    cr_expect_eq(count_lines(err), 1, "one line: %s", err);
    cr_expect(strstr(err, bad->reason) != NULL, "the line was: %s", err);
}

Test(conv_program, runs_and_exits_0, .init = redirect_output)
{
    const char *argv[] = {"07-conv-forward", "--shape", "2x3x9x7-5k3s2p1", "--iters", "3"};
    cr_expect_eq(ladder_main(&conv2d_chapter, 5, (char **)argv), KL_EXIT_OK);
}

/* ---- every rung on the GPU ---- */

/* Odd shapes: C = 1 and K = 1, N = 1, 1x1, 3x3, 5x5 and 7x7 filters, strides 1, 2 and 3,
 * padding 0 to 3, padding past a 1x1 filter, inputs smaller than the filter, sizes no tile
 * divides, and reductions C R S past 300 with K past 128 (several tiles of each). Each rung
 * that takes a limited set of shapes finds some here: v6 3x3 stride 1, v7 C <= 4, v5 fp16. */
static const char *const shapes[] = {
    "1x1x1x1-1k1",         "1x3x7x7-1k7s1p3",      "3x5x17x13-7k5s2p2", "5x7x9x11-3k1s1p0",
    "2x3x9x7-5k3s2p1",     "1x1x2x3-2k3s1p2",      "2x19x15x23-33k3s1p1",
    "1x37x11x9-70k3s3p1",  "4x16x14x14-32k3s1p1",  "3x4x31x33-8k3s1p1", "1x2x5x5-3k5s1p3",
    "2x40x12x10-130k3s1p1", "1x24x9x13-136k5s1p2", "2x3x6x5-4k1s2p1",   "2x2x10x10-3k5s3p3",
    "3x1x12x12-5k3s1p0",   "2x1x28x28-16k3s1p1",
};

/* cuDNN's algorithms, as the vendor rungs note them for the table. */
static bool names_a_cudnn_algorithm(const char *noted)
{
    static const char *const algorithms[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM",
                                             "DIRECT", "FFT", "FFT_TILING", "WINOGRAD",
                                             "WINOGRAD_NONFUSED"};
    for (size_t i = 0; noted && i < COUNT(algorithms); i++)
        if (!strcmp(noted, algorithms[i]))
            return true;
    return false;
}

struct rung_pass {
    int rung, pass;
};

/* Every (rung, pass) the table has a launcher for: vendor_nhwc on fwd_nhwc, the rest on fwd. */
ParameterizedTestParameters(conv_gpu, rung_matches_reference)
{
    const struct chapter *ch = &conv2d_chapter;
    size_t n = 0;
    for (int i = 0; i < ch->n_rungs * ch->n_passes; i++)
        n += ch->rungs[i / ch->n_passes].launch[i % ch->n_passes] != NULL;
    struct rung_pass *params = cr_malloc(sizeof *params * n);
    n = 0;
    for (int i = 0; i < ch->n_rungs * ch->n_passes; i++)
        if (ch->rungs[i / ch->n_passes].launch[i % ch->n_passes])
            params[n++] = (struct rung_pass){i / ch->n_passes, i % ch->n_passes};
    return cr_make_param_array(struct rung_pass, params, n, free_params);
}

/* Each shape in each dtype the rung has: verified, or declined as unsupported; but each rung
 * must run at some shape. Every launcher notes what ran: a rung of the table (its own name, or
 * the one it handed the shape to), or for the vendor's, one of cuDNN's algorithms. */
ParameterizedTest(struct rung_pass *rp, conv_gpu, rung_matches_reference, NEEDS_GPU)
{
    const struct chapter *ch = &conv2d_chapter;
    const struct rung *r = &ch->rungs[rp->rung];
    const bool vendor = !strncmp(r->name, "vendor", 6);
    int ran = 0;
    char declined[256] = "";
    for (int t = DT_FP32; t <= DT_FP16; t++) {
        if (!(r->dtypes & (1u << t)))
            continue;
        for (size_t s = 0; s < COUNT(shapes); s++) {
            struct verify_result v = {0};
            char why[256] = "";
            kl_take_rung_note();
            const int rc = ladder_check(ch, r, rp->pass, (enum dtype)t, shapes[s], 700 + s, &v,
                                        why, sizeof why);
            const char *noted = kl_take_rung_note();
            SKIP_IF_GPU_LACKS_RUNG(rc, why);
            if (rc == -1 && !strncmp(why, "unsupported", 11)) {
                snprintf(declined, sizeof declined, "%s at %s: %s", dtype_name(t), shapes[s], why);
                continue;
            }
            ran++;
            /* cuDNN's fp16 rows round twice (conv, then the bias): two roundings' worth. */
            if (r->shown_for_error && t == DT_FP16 && rc == 1)
                cr_expect_lt(v.norm_rel_err, 2e-3, "%s fp16 at %s: relative error %g, more than "
                             "two roundings", r->name, shapes[s], v.norm_rel_err);
            else
                cr_expect_eq(rc, 0, "%s %s %s at %s: %s element %zu is %g, reference %g",
                             r->name, ch->passes[rp->pass], dtype_name(t), shapes[s],
                             rc == 1 ? "wrong:" : why, v.first_bad, v.bad_out, v.bad_ref);
            if (vendor)
                cr_expect(names_a_cudnn_algorithm(noted), "%s %s at %s noted '%s', not one of "
                          "cuDNN's algorithms", r->name, dtype_name(t), shapes[s],
                          noted ? noted : "nothing");
            else
                cr_expect(noted != NULL, "%s %s at %s noted no rung", r->name, dtype_name(t),
                          shapes[s]);
        }
    }
    cr_expect_gt(ran, 0, "%s %s ran at none of the test's shapes (the last refusal: %s)",
                 r->name, ch->passes[rp->pass], declined);
}

/* ---- the exercise checker fails the untouched stub and passes a correct kernel (v1's) ---- */

static void fwd_v1(const struct launch_args *a, cudaStream_t s)
{
    conv2d_forward_v1(a->in[0], a->in[1], a->in[2], a->out[0], dims_of_shape(&a->p->shape),
                      CONV2D_LINEAR, a->p->dtype, a->workspace, s);
}

Test(conv_exercise, checker_fails_the_stub, NEEDS_GPU)
{
    expect_checker_fails_the_stub(&conv2d_chapter);
}

Test(conv_exercise, checker_passes_a_correct_kernel, NEEDS_GPU)
{
    expect_checker_passes(&conv2d_chapter, 0, fwd_v1);
}
