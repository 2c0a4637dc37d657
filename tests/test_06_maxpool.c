/* Chapter 06: the CPU reference on its own (known windows, ties, NaN, padding, the backward
 * against finite differences), the shape checks, then every rung against the reference on
 * the GPU. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <criterion/redirect.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gpu.h"
#include "maxpool.h"

static struct maxpool_dims dims(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                                int64_t s, int64_t p)
{
    struct maxpool_dims d;
    char why[200];
    cr_assert_eq(maxpool_dims_of(n, c, h, w, k, k, s, p, &d, why, sizeof why), 0, "%s", why);
    return d;
}

/* The dims of a parsed NxCxHxW-kKsSpP shape, with main.cu's defaults (S = K, P = 0). */
static struct maxpool_dims dims_of_shape(const struct shape *sh)
{
    const int64_t k = shape_param(sh, 'k', 2);
    return dims(sh->dim[0], sh->dim[1], sh->dim[2], sh->dim[3], k, shape_param(sh, 's', k),
                shape_param(sh, 'p', 0));
}

/* A 4x4 plane, 2x2 windows, stride 2: four windows with known maxima, one of them a tie. */
Test(maxpool_reference, known_windows_and_first_of_ties)
{
    const float x[] = {1, 5, 2, 2, /**/ 3, 0, 2, 2, /**/ -1, -2, 7, 0, /**/ -3, -1, 0, 7};
    const struct maxpool_dims d = dims(1, 1, 4, 4, 2, 2, 0);
    double y[4];
    int32_t plane[4];
    uint8_t window[4];
    maxpool_forward_reference(x, DT_FP32, d, y, plane, window);
    const double y_want[] = {5, 2, -1, 7};
    const int32_t plane_want[] = {1, 2, 8, 10}; /* the tie of 2s: the first, (0, 2) */
    const uint8_t window_want[] = {1, 0, 0, 0};
    for (int o = 0; o < 4; o++) {
        cr_expect_eq(y[o], y_want[o], "y[%d] = %g", o, y[o]);
        cr_expect_eq(plane[o], plane_want[o], "plane index %d is %d", o, plane[o]);
        cr_expect_eq(window[o], window_want[o], "window index %d is %d", o, window[o]);
    }
}

/* 3x3 windows, stride 2, padding 1 on a 3x3 plane: the padding never wins, even against
 * negative values, and the window index counts the padded positions. */
Test(maxpool_reference, padding_never_wins)
{
    const float x[] = {-5, -4, -3, /**/ -2, -1, -6, /**/ -7, -8, -9};
    const struct maxpool_dims d = dims(1, 1, 3, 3, 3, 2, 1);
    cr_assert_eq(d.oh, 2);
    cr_assert_eq(d.ow, 2);
    double y[4];
    int32_t plane[4];
    uint8_t window[4];
    maxpool_forward_reference(x, DT_FP32, d, y, plane, window);
    /* window (0, 0) covers rows -1..1, cols -1..1: max -1 at (1, 1), window position 2*3+2 */
    cr_expect_eq(y[0], -1);
    cr_expect_eq(plane[0], 4);
    cr_expect_eq(window[0], 8);
    /* window (1, 1) covers rows 1..3, cols 1..3: -1 at (1, 1), window position 0 */
    cr_expect_eq(y[3], -1);
    cr_expect_eq(plane[3], 4);
    cr_expect_eq(window[3], 0);
}

Test(maxpool_reference, nan_propagates_and_takes_the_gradient)
{
    const float x[] = {1, NAN, 3, NAN};
    const struct maxpool_dims d = dims(1, 1, 2, 2, 2, 2, 0);
    double y[1];
    int32_t plane[1];
    uint8_t window[1];
    maxpool_forward_reference(x, DT_FP32, d, y, plane, window);
    cr_expect(isnan(y[0]));
    cr_expect_eq(plane[0], 1, "the first NaN wins");
    const double dy = 2.5;
    double dx[4];
    maxpool_backward_reference(&dy, plane, d, dx);
    cr_expect_eq(dx[1], 2.5);
    cr_expect_eq(dx[0] + dx[2] + dx[3], 0);
}

/* Overlapping windows (3x3, stride 1): a position chosen by several windows gets their sum. */
Test(maxpool_reference, overlapping_windows_add_up)
{
    float x[25];
    for (int i = 0; i < 25; i++)
        x[i] = (float)(i == 12 ? 100 : i % 7);
    const struct maxpool_dims d = dims(1, 1, 5, 5, 3, 1, 0);
    double y[9], dx[25], dy[9];
    int32_t plane[9];
    maxpool_forward_reference(x, DT_FP32, d, y, plane, NULL);
    for (int o = 0; o < 9; o++)
        dy[o] = 1;
    maxpool_backward_reference(dy, plane, d, dx);
    cr_expect_eq(dx[12], 9, "the centre wins all nine windows");
}

/* dL/dx for L = sum(dy * maxpool(x)) by central differences of the forward reference, on
 * overlapping windows with padding; x distinct enough that no step changes an argmax. */
Test(maxpool_reference, backward_matches_finite_differences)
{
    enum { H = 7, W = 6, C = 2 };
    const struct maxpool_dims d = dims(1, C, H, W, 3, 2, 1);
    const int64_t outs = C * d.oh * d.ow;
    double x[C * H * W], dy[64], dx[C * H * W], yp[64], ym[64];
    int32_t plane[64];
    cr_assert(outs <= 64);
    struct rng r = rng_seeded(11);
    for (int i = 0; i < C * H * W; i++)
        x[i] = (double)((i * 37) % (C * H * W)) + rng_uniform(&r, 0.1, 0.4);
    for (int64_t o = 0; o < outs; o++)
        dy[o] = rng_uniform(&r, -1, 1);
    float xf[C * H * W];
    for (int i = 0; i < C * H * W; i++)
        xf[i] = (float)x[i];
    double y[64];
    maxpool_forward_reference(xf, DT_FP32, d, y, plane, NULL);
    maxpool_backward_reference(dy, plane, d, dx);
    const float h = 1e-2f;
    for (int i = 0; i < C * H * W; i++) {
        const float keep = xf[i], plus = keep + h, minus = keep - h;
        xf[i] = plus;
        maxpool_forward_reference(xf, DT_FP32, d, yp, NULL, NULL);
        xf[i] = minus;
        maxpool_forward_reference(xf, DT_FP32, d, ym, NULL, NULL);
        xf[i] = keep;
        double fd = 0; /* over the step the floats really took */
        for (int64_t o = 0; o < outs; o++)
            fd += dy[o] * (yp[o] - ym[o]) / ((double)plus - (double)minus);
        cr_expect(fabs(fd - dx[i]) < 1e-4, "x[%d]: finite difference %g, backward %g", i, fd,
                  dx[i]);
    }
}

Test(maxpool_reference, reads_fp16_as_stored)
{
    const uint16_t x[] = {half_from_float(0.1f), half_from_float(0.3333f), half_from_float(-2),
                          half_from_float(0.2f)};
    const struct maxpool_dims d = dims(1, 1, 2, 2, 2, 2, 0);
    double y[1];
    maxpool_forward_reference(x, DT_FP16, d, y, NULL, NULL);
    cr_expect_eq(y[0], (double)half_to_float(half_from_float(0.3333f)));
}

/* The packed argmax: 2 bits an output up to 4 window positions, 4 up to 16, 8 beyond, output
 * o at bit (o % per_byte) bits of byte o / per_byte, and the last byte's spare bits 0. */
Test(maxpool_reference, argmax_packs_in_as_few_bits_as_the_window_needs)
{
    cr_expect_eq(dims(1, 1, 4, 4, 1, 1, 0).argmax_bits, 2);
    cr_expect_eq(dims(1, 1, 4, 4, 2, 2, 0).argmax_bits, 2);
    cr_expect_eq(dims(1, 1, 9, 9, 3, 2, 1).argmax_bits, 4);
    cr_expect_eq(dims(1, 1, 9, 9, 4, 4, 0).argmax_bits, 4);
    cr_expect_eq(dims(1, 1, 9, 9, 5, 5, 0).argmax_bits, 8);

    const struct maxpool_dims two = dims(1, 1, 2, 10, 2, 2, 0); /* 5 outputs: 2 bytes */
    const uint8_t positions2[] = {1, 3, 0, 2, 3};
    uint8_t packed[4] = {0xaa, 0xaa, 0xaa, 0xaa};
    cr_assert_eq(maxpool_argmax_bytes(two), 2);
    maxpool_pack_argmax(positions2, two, packed);
    cr_expect_eq(packed[0], 1 | 3 << 2 | 0 << 4 | 2 << 6, "byte 0 is 0x%02x", packed[0]);
    cr_expect_eq(packed[1], 3, "byte 1 is 0x%02x", packed[1]);
    cr_expect_eq(packed[2], 0xaa, "no byte past the argmax is written");

    const struct maxpool_dims four = dims(1, 1, 3, 9, 3, 3, 0); /* 3 outputs: 2 bytes */
    const uint8_t positions4[] = {8, 5, 7};
    cr_assert_eq(maxpool_argmax_bytes(four), 2);
    maxpool_pack_argmax(positions4, four, packed);
    cr_expect_eq(packed[0], 8 | 5 << 4, "byte 0 is 0x%02x", packed[0]);
    cr_expect_eq(packed[1], 7, "byte 1 is 0x%02x", packed[1]);

    const struct maxpool_dims eight = dims(1, 1, 5, 10, 5, 5, 0); /* 2 outputs */
    const uint8_t positions8[] = {24, 13};
    cr_assert_eq(maxpool_argmax_bytes(eight), 2);
    maxpool_pack_argmax(positions8, eight, packed);
    cr_expect_eq(packed[0], 24);
    cr_expect_eq(packed[1], 13);
}

/* ---- shapes ---- */

static int shape_refused(const char *text, const char *reason)
{
    struct shape s;
    char why[256] = "";
    int rc = shape_parse(text, &s, why, sizeof why) ||
             maxpool_chapter.check_shape(&s, why, sizeof why);
    return rc != 0 && strstr(why, reason) != NULL;
}

Test(maxpool_shape, bad_parameters_say_what_is_wrong)
{
    cr_expect(shape_refused("8x64x128x128-k2s0", "stride"));
    cr_expect(shape_refused("8x64x128x128-k2s2p2", "padding must be below the window"));
    cr_expect(shape_refused("1x1x3x3-k5s1p0", "larger than the padded"));
    cr_expect(shape_refused("1x1x3x3-k0", "at least 1x1"));
    cr_expect(shape_refused("1x1x30x30-k16", "at most 255"));
    cr_expect(shape_refused("8x64x128", "NxCxHxW"));
    cr_expect(shape_refused("8x64x128x128-q2", "not k"));
    const char *good[] = {"1x1x1x1-k1", "8x64x128x128-k2s2p0", "32x64x112x112-k3s2p1",
                          "2x3x7x9-k3s2p1", "1x1x5x5-k5"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        struct shape s;
        char why[256] = "";
        cr_expect(shape_parse(good[i], &s, why, sizeof why) == 0 &&
                      maxpool_chapter.check_shape(&s, why, sizeof why) == 0,
                  "%s refused: %s", good[i], why);
    }
}

/* Each H x W plane holds at most 2^31 - 1 elements (maxpool_dims_of, api.cu: int32 indices):
 * 1x1x1x2147483647 with a 1x1 window is taken (checked here, never allocated), a plane of 2^31
 * is refused before anything else: exit 2, nothing on stdout, one line on stderr saying why. */
Test(maxpool_shape, refuses_just_past_the_index_limit, .init = redirect_output)
{
    struct shape s;
    char why[256] = "";
    cr_expect(shape_parse("1x1x1x2147483647-k1", &s, why, sizeof why) == 0 &&
                  maxpool_chapter.check_shape(&s, why, sizeof why) == 0,
              "a plane of 2^31 - 1 elements refused: %s", why);
    cr_expect(shape_refused("1x1x1x2147483648-k1", "at most 2^31 - 1 elements"));
    cr_expect(shape_refused("1x1x2x1073741824-k1", "at most 2^31 - 1 elements"));

    const char *argv[] = {"06-maxpool", "--shape", "1x1x1x2147483648-k1"};
    cr_expect_eq(ladder_main(&maxpool_chapter, 3, (char **)argv), KL_EXIT_USAGE,
                 "--shape 1x1x1x2147483648-k1 must be refused");
    char out[4096], err[4096];
    read_redirected(cr_get_redirected_stdout(), out, sizeof out);
    read_redirected(cr_get_redirected_stderr(), err, sizeof err);
    cr_expect_str_eq(out, "", "nothing but the one line: stdout had %s", out);
    cr_expect_eq(count_lines(err), 1, "one line: %s", err);
    cr_expect(strstr(err, "at most 2^31 - 1 elements") != NULL, "the line was: %s", err);
}

/* Found by make fuzz (tests/fuzz): a window and padding near 2^32 passed the window check, its
 * k * k positions past 2^63 (undefined; it wrapped to 0), and the run then looped over windows of
 * 2^64 positions. */
Test(maxpool_shape, huge_windows_are_refused)
{
    cr_expect(shape_refused("1x1x1x1-k4294967296p4294967295", "at most 255 positions"));
    cr_expect(shape_refused("2x2x7x9-p214748364846k419949107565", "at most 255 positions"));
    cr_expect(shape_refused("1x1x1x1-k256p255", "at most 255 positions"));
}

Test(maxpool_program, bad_shapes_exit_2, .init = redirect_output)
{
    const char *bad[] = {"8x64x128x128-k2s0", "1x1x3x3-k4", "2x2x8x8-k2p2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *argv[] = {"06-maxpool", "--shape", bad[i]};
        cr_expect_eq(ladder_main(&maxpool_chapter, 3, (char **)argv), KL_EXIT_USAGE,
                     "--shape %s must be refused", bad[i]);
    }
}

Test(maxpool_program, runs_and_exits_0, .init = redirect_output)
{
    const char *argv[] = {"06-maxpool", "--shape", "2x3x7x9-k3s2p1", "--iters", "3"};
    cr_expect_eq(ladder_main(&maxpool_chapter, 5, (char **)argv), KL_EXIT_OK);
}

/* ---- every rung on the GPU ---- */

struct rung_pass {
    int rung, pass;
};

/* The presets' windows at odd sizes: H or W not divisible by the stride, 7x7 inputs, C = 1,
 * N = 1 and 3, a window as large as the input, overlapping windows with and without padding,
 * a stride larger than the window (gaps no window covers, whose dx must be 0), the 2x2
 * paths' cases (4 or 8 outputs a thread, H odd: a row in no window, and even) and v4's 3x3
 * windows with stride 1 and 2, with and without padding. */
static const char *const shapes[] = {
    "1x1x1x1-k1",    "1x1x7x7-k2",     "3x1x7x7-k2",     "1x3x8x8-k2",    "3x2x9x7-k2s2",
    "2x3x7x9-k3s2p1", "1x2x12x12-k3s1p1", "2x2x7x7-k7",   "1x4x10x11-k2s3", "3x5x17x16-k3s2p1",
    "2x16x33x32-k2", "1x1x5x5-k4s1p2", "2x3x8x16-k2",     "3x4x10x24-k2",  "2x2x9x17-k3s2",
    "1x3x6x10-k3s1",
};

static void free_params(struct criterion_test_params *crp)
{
    cr_free(crp->params);
}

ParameterizedTestParameters(maxpool_gpu, rung_matches_reference)
{
    int n = maxpool_chapter.n_rungs * maxpool_chapter.n_passes;
    struct rung_pass *params = cr_malloc(sizeof *params * (size_t)n);
    for (int i = 0; i < n; i++)
        params[i] = (struct rung_pass){i / maxpool_chapter.n_passes, i % maxpool_chapter.n_passes};
    return cr_make_param_array(struct rung_pass, params, (size_t)n, free_params);
}

ParameterizedTest(struct rung_pass *rp, maxpool_gpu, rung_matches_reference, NEEDS_GPU)
{
    const struct rung *r = &maxpool_chapter.rungs[rp->rung];
    for (int t = DT_FP32; t <= DT_FP16; t++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            struct verify_result v;
            char why[256] = "";
            int rc = ladder_check(&maxpool_chapter, r, rp->pass, (enum dtype)t, shapes[s],
                                  600 + s, &v, why, sizeof why);
            cr_expect_eq(rc, 0, "%s %s %s at %s: %s element %zu is %g, reference %g", r->name,
                         maxpool_chapter.passes[rp->pass], dtype_name(t), shapes[s],
                         rc == 1 ? "wrong:" : why, v.first_bad, v.bad_out, v.bad_ref);
        }
}

/* ---- ties, NaN and infinities: x drawn from {-inf, -1, -0, 0, 1, inf, NaN}, so most windows
 * hold ties, some a NaN or only -inf beside the padding. Every rung but the vendor's (whose tie
 * rule is its own) must keep the reference's first maximum and propagate NaN as it does. */

static const double special_values[] = {-INFINITY, -1.0, -0.0, 0.0, 1.0, INFINITY, NAN};

static void fill_special(struct problem *p, struct rng *r)
{
    maxpool_chapter.fill(p, r); /* dy and the layout; x, y and the argmax are redone below */
    const struct maxpool_dims d = dims_of_shape(&p->shape);
    const int x_at = p->pass == 0 ? 0 : 2; /* main.cu: fwd reads x; bwd reads dy, argmax, x, y */
    for (size_t e = 0; e < p->in[x_at].count; e++)
        store_from_double(p->host_in[x_at], p->dtype, e, special_values[rng_below(r, 7)]);
    if (p->pass == 0)
        return;
    const size_t out = p->in[3].count;
    double *y = malloc(out * sizeof *y);
    uint8_t *window = malloc(out);
    cr_assert(y && window);
    maxpool_forward_reference(p->host_in[x_at], p->dtype, d, y, NULL, window);
    maxpool_pack_argmax(window, d, (uint8_t *)p->host_in[1]);
    for (size_t o = 0; o < out; o++)
        store_from_double(p->host_in[3], p->dtype, o, y[o]);
    free(y);
    free(window);
}

Test(maxpool_gpu, ties_nan_and_infinities_as_the_reference, NEEDS_GPU)
{
    struct chapter special = maxpool_chapter;
    special.fill = fill_special;
    const char *special_shapes[] = {"2x3x8x16-k2", "3x2x9x7-k2s2", "2x3x9x16-k3s2p1",
                                    "1x2x12x12-k3s1p1", "1x1x5x5-k4s1p2"};
    for (int ri = 0; ri < maxpool_chapter.n_rungs; ri++) {
        const struct rung *r = &maxpool_chapter.rungs[ri];
        if (!strcmp(r->name, "vendor"))
            continue;
        for (int pass = 0; pass < maxpool_chapter.n_passes; pass++)
            for (int t = DT_FP32; t <= DT_FP16; t++)
                for (size_t s = 0; s < sizeof special_shapes / sizeof special_shapes[0]; s++) {
                    struct verify_result v;
                    char why[256] = "";
                    int rc = ladder_check(&special, r, pass, (enum dtype)t, special_shapes[s],
                                          700 + s, &v, why, sizeof why);
                    cr_expect_eq(rc, 0, "%s %s %s at %s: %s element %zu is %g, reference %g",
                                 r->name, maxpool_chapter.passes[pass], dtype_name(t),
                                 special_shapes[s], rc == 1 ? "wrong:" : why, v.first_bad,
                                 v.bad_out, v.bad_ref);
                }
    }
}

/* ---- the exercise checker fails the untouched stub and passes a correct kernel (v1's
 * forward). */

static void fwd_v1(const struct launch_args *a, cudaStream_t s)
{
    maxpool_forward_v1(a->in[0], a->out[0], (uint8_t *)a->out[1], dims_of_shape(&a->p->shape),
                       a->p->dtype, s);
}

Test(maxpool_exercise, checker_fails_the_stub, NEEDS_GPU)
{
    expect_checker_fails_the_stub(&maxpool_chapter);
}

Test(maxpool_exercise, checker_passes_a_correct_kernel, NEEDS_GPU)
{
    expect_checker_passes(&maxpool_chapter, 0, fwd_v1);
}
