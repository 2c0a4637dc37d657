/* Chapter 08: the CPU reference against hand-computed input gradients, then against chapter
 * 07's forward reference (the adjoint identity, and central differences of the loss it
 * defines), the shape checks and the program's one-line refusals, then every rung of the table
 * against the reference on the GPU at odd shapes in both dtypes (vendor_nhwc on its
 * bwd_input_nhwc pass), and the exercise checker. The library's entry point,
 * conv2d_backward_input, called directly (on buffers of one's own, in one graph and on two
 * streams), is tested with the other chapters' in test_api.c. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <criterion/redirect.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "conv.h"
#include "dgrad.h"
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

static struct conv2d_dims dims_of_text(const char *text)
{
    struct shape sh;
    char why[256] = "";
    cr_assert_eq(shape_parse(text, &sh, why, sizeof why), 0, "%s: %s", text, why);
    return dims_of_shape(&sh);
}

static size_t count_x(struct conv2d_dims d) { return (size_t)(d.n * d.c * d.h * d.w); }
static size_t count_w(struct conv2d_dims d) { return (size_t)(d.k * d.c * d.r * d.s); }
static size_t count_y(struct conv2d_dims d) { return (size_t)(d.n * d.k * d.p * d.q); }

static void expect_inputs(const double *dx, const double *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        cr_expect_eq(dx[i], want[i], "%s: dx[%zu] is %g, not %g", what, i, dx[i], want[i]);
}

/* ---- the CPU reference, on cases small enough to work out by hand ---- */

/* A 1x1 filter: dx[c, h, w] = sum over k of w[k, c] dy[k, h, w], here with one channel and
 * two filters, dx = 2.5 dy[0] - 0.5 dy[1]. */
Test(dgrad_reference, one_by_one_filter_sums_the_filters)
{
    const float dy[] = {1, -2, 3, 0.5f, 4, -6, /**/ 2, 4, -2, 1, 0, 6};
    const float w[] = {2.5f, -0.5f};
    const struct conv2d_dims d = dims(1, 1, 2, 3, 2, 1, 1, 0);
    cr_assert(d.p == 2 && d.q == 3);
    double dx[6];
    dgrad_reference(dy, w, DT_FP32, d, 1, dx);
    /* 2.5 * 1 - 0.5 * 2 = 1.5, 2.5 * -2 - 0.5 * 4 = -7, 2.5 * 3 - 0.5 * -2 = 8.5,
     * 2.5 * 0.5 - 0.5 * 1 = 0.75, 2.5 * 4 - 0.5 * 0 = 10, 2.5 * -6 - 0.5 * 6 = -18. */
    const double want[] = {1.5, -7, 8.5, 0.75, 10, -18};
    expect_inputs(dx, want, COUNT(want), "1x1");
}

/* The layouts: the filters are summed into each channel, images kept apart; dy is
 * N x K x P x Q, w K x C x R x S, dx N x C x H x W. */
Test(dgrad_reference, sums_filters_and_keeps_images_and_channels_apart)
{
    /* dy: 2 images of 3 filters of 1x2; w: 3 filters of 2 channels of 1x1, w[k] = (w[k, 0],
     * w[k, 1]) = (1, 0), (0, 1), (2, -1). So dx[n, 0] = dy[n, 0] + 2 dy[n, 2] and
     * dx[n, 1] = dy[n, 1] - dy[n, 2]. */
    const float dy[] = {1, 2, 10, 20, 100, 200, /**/ 3, 4, 30, 40, 300, 400};
    const float w[] = {1, 0, /**/ 0, 1, /**/ 2, -1};
    const struct conv2d_dims d = dims(2, 2, 1, 2, 3, 1, 1, 0);
    double dx[8];
    dgrad_reference(dy, w, DT_FP32, d, 1, dx);
    /* Image 0: 1 + 200 = 201, 2 + 400 = 402; 10 - 100 = -90, 20 - 200 = -180. Image 1:
     * 3 + 600, 4 + 800; 30 - 300, 40 - 400. */
    const double want[] = {201, 402, -90, -180, /**/ 603, 804, -270, -360};
    expect_inputs(dx, want, COUNT(want), "NKPQ x KCRS");
}

/* A 3x3 all-ones filter with padding 1 at stride 1: every output (p, q) whose window covers
 * (h, w) adds dy[p, q] once, and those are the outputs p = h - 1 .. h + 1 (within dy), so dx
 * sums the 3x3 neighbourhood of dy: the corners four elements, the edges six, the interior
 * nine. (The filter is symmetric, so the numbers are the forward's of chapter 07's test.) */
static const float ramp_3x4[] = {1, 2, 3, 4, /**/ 5, 6, 7, 8, /**/ 9, 10, 11, 12};
static const float ones_3x3[] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
static const float one_to_nine[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};

Test(dgrad_reference, all_ones_3x3_sums_neighbourhoods)
{
    const struct conv2d_dims d = dims(1, 1, 3, 4, 1, 3, 1, 1);
    cr_assert(d.p == 3 && d.q == 4);
    double dx[12];
    dgrad_reference(ramp_3x4, ones_3x3, DT_FP32, d, 1, dx);
    /* dx[0, 0] = 1 + 2 + 5 + 6 = 14; dx[0, 1] = 1 + 2 + 3 + 5 + 6 + 7 = 24;
     * dx[1, 1] = 1 + 2 + 3 + 5 + 6 + 7 + 9 + 10 + 11 = 54; dx[2, 3] = 7 + 8 + 11 + 12 = 38. */
    const double want[] = {14, 24, 30, 22, /**/ 33, 54, 63, 45, /**/ 30, 48, 54, 38};
    expect_inputs(dx, want, COUNT(want), "3x3 ones, padding 1");
}

/* Stride 2, 3x3 ones, no padding, on a 5x5 input: P = Q = (5 - 3) / 2 + 1 = 2, windows on rows
 * 0-2 and 2-4. Rows 0 and 1 lie under window 0 only, row 2 under both (tap 2 of the first,
 * tap 0 of the second), rows 3 and 4 under window 1 only; the same for the columns. So
 * dx[h, w] sums dy[p, q] over the windows covering h and w: pixel (0, 0) gets one tap of one
 * output, dy[0, 0]; pixel (2, 2) one tap of each of the four. */
Test(dgrad_reference, stride_2_adds_where_the_windows_overlap)
{
    const float dy[] = {1, 2, /**/ 3, 4};
    const struct conv2d_dims d = dims(1, 1, 5, 5, 1, 3, 2, 0);
    cr_assert(d.p == 2 && d.q == 2);
    double dx[25];
    dgrad_reference(dy, ones_3x3, DT_FP32, d, 1, dx);
    /* Rows 0, 1: 1, 1, 1 + 2, 2, 2. Row 2: 1 + 3, 1 + 3, 1 + 2 + 3 + 4, 2 + 4, 2 + 4.
     * Rows 3, 4: 3, 3, 3 + 4, 4, 4. */
    const double want[] = {1, 1, 3, 2, 2, /**/ 1, 1, 3, 2, 2, /**/ 4, 4, 10, 6, 6,
                           /**/ 3, 3, 7, 4, 4, /**/ 3, 3, 7, 4, 4};
    expect_inputs(dx, want, COUNT(want), "3x3 ones, stride 2");
}

/* A 4x4 input under a 3x3 filter at stride 2 without padding: P = Q = (4 - 3) / 2 + 1 = 1, one
 * window on rows and columns 0-2. Each of its pixels gets one tap, dx[h, w] = dy w[h, w];
 * the last row and column, which no window covers, get 0. */
Test(dgrad_reference, stride_2_leaves_uncovered_pixels_0)
{
    const float dy[] = {2};
    const struct conv2d_dims d = dims(1, 1, 4, 4, 1, 3, 2, 0);
    cr_assert(d.p == 1 && d.q == 1);
    double dx[16];
    dgrad_reference(dy, one_to_nine, DT_FP32, d, 1, dx);
    const double want[] = {2, 4, 6, 0, /**/ 8, 10, 12, 0, /**/ 14, 16, 18, 0, /**/ 0, 0, 0, 0};
    expect_inputs(dx, want, COUNT(want), "3x3 1..9, stride 2, P 1");
}

/* A 1x1 filter at stride 2 on 3x3: outputs (p, q) read only the pixels (2 p, 2 q), so those
 * get w dy[p, q] and the pixels between them, under no tap, get 0. */
Test(dgrad_reference, stride_2_skips_pixels_between_the_taps)
{
    const float dy[] = {3, -1, /**/ 2, 5}, w[] = {2};
    const struct conv2d_dims d = dims(1, 1, 3, 3, 1, 1, 2, 0);
    cr_assert(d.p == 2 && d.q == 2);
    double dx[9];
    dgrad_reference(dy, w, DT_FP32, d, 1, dx);
    const double want[] = {6, 0, -2, /**/ 0, 0, 0, /**/ 4, 0, 10};
    expect_inputs(dx, want, COUNT(want), "1x1, stride 2");
}

/* The taps' order. With the filter 1..9 (not symmetric), padding 1 and a single 1 at dy's
 * centre, only output (1, 1) contributes: tap (r, s) of its window lies on pixel
 * (1 + r - 1, 1 + s - 1) = (r, s), so dx is w itself, as stored. Flipping the filter (true
 * convolution's transpose, or the forward's response to a single 1) would give 9..1. */
Test(dgrad_reference, a_single_output_spreads_the_filter_unflipped)
{
    const float dy[] = {0, 0, 0, /**/ 0, 1, 0, /**/ 0, 0, 0};
    const struct conv2d_dims d = dims(1, 1, 3, 3, 1, 3, 1, 1);
    cr_assert(d.p == 3 && d.q == 3);
    double dx[9];
    dgrad_reference(dy, one_to_nine, DT_FP32, d, 1, dx);
    const double want[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    expect_inputs(dx, want, COUNT(want), "3x3 1..9, dy one at the centre");
}

/* Two outputs at once, at the corners: dy[0, 0] = 1 puts tap (r, s) on pixel (r - 1, s - 1),
 * so pixel (h, w) gets w[h + 1, w + 1] for h, w <= 1; dy[2, 2] = 100 puts it on (r + 1, s + 1),
 * so pixel (h, w) gets 100 w[h - 1, w - 1] for h, w >= 1. Pixel (1, 1) gets both:
 * w[2, 2] + 100 w[0, 0] = 9 + 100. */
Test(dgrad_reference, two_outputs_spread_their_taps_in_order)
{
    const float dy[] = {1, 0, 0, /**/ 0, 0, 0, /**/ 0, 0, 100};
    const struct conv2d_dims d = dims(1, 1, 3, 3, 1, 3, 1, 1);
    double dx[9];
    dgrad_reference(dy, one_to_nine, DT_FP32, d, 1, dx);
    /* Row 0: w[1, 1] = 5, w[1, 2] = 6, 0. Row 1: w[2, 1] = 8, 109, 100 w[0, 1] = 200.
     * Row 2: 0, 100 w[1, 0] = 400, 100 w[1, 1] = 500. */
    const double want[] = {5, 6, 0, /**/ 8, 109, 200, /**/ 0, 400, 500};
    expect_inputs(dx, want, COUNT(want), "3x3 1..9, dy at two corners");
}

/* With `every` = 4 only the elements whose NCHW index is a multiple of 4 are computed, and
 * they agree with the full reference; the others are left as they were. */
Test(dgrad_reference, sampled_computes_every_nth_element)
{
    const struct conv2d_dims d = dims(2, 3, 7, 6, 4, 3, 2, 1);
    float dy[2 * 4 * 4 * 3], w[4 * 3 * 3 * 3];
    cr_assert(count_y(d) == COUNT(dy) && count_w(d) == COUNT(w));
    struct rng r = rng_seeded(7);
    fill_uniform(dy, DT_FP32, COUNT(dy), &r, -1, 1);
    fill_uniform(w, DT_FP32, COUNT(w), &r, -1, 1);
    double full[2 * 3 * 7 * 6], part[2 * 3 * 7 * 6];
    for (size_t i = 0; i < COUNT(part); i++)
        part[i] = -7;
    dgrad_reference(dy, w, DT_FP32, d, 1, full);
    dgrad_reference(dy, w, DT_FP32, d, 4, part);
    for (size_t i = 0; i < COUNT(part); i++)
        cr_expect_eq(part[i], i % 4 ? -7 : full[i], "dx[%zu] is %g", i, part[i]);
}

Test(dgrad_reference, reads_fp16_as_stored)
{
    const uint16_t dy[] = {half_from_float(0.1f), half_from_float(-0.3f)};
    const uint16_t w[] = {half_from_float(0.7f)};
    const struct conv2d_dims d = dims(1, 1, 1, 2, 1, 1, 1, 0);
    double dx[2];
    dgrad_reference(dy, w, DT_FP16, d, 1, dx);
    for (int i = 0; i < 2; i++) {
        const double want = (double)half_to_float(dy[i]) * (double)half_to_float(w[0]);
        cr_expect_eq(dx[i], want, "dx[%d] is %.17g, not %.17g", i, dx[i], want);
    }
}

/* ---- against chapter 07's forward: dx is the transpose, and the gradient ---- */

/* Strides 1, 2 and 3, padding 0 to 3 (past a 1x1 filter, and as wide as a 5x5 filter's),
 * 1x1, 3x3 and 5x5 filters, C = 1 and K = 1, H and W that the stride does not divide, and an
 * input smaller than the filter. */
static const char *const adjoint_shapes[] = {
    "1x1x7x9-1k3s1p0",   "2x3x9x7-5k3s2p1",    "3x5x17x13-7k5s2p2", "1x2x11x10-3k5s3p3",
    "2x1x8x8-4k1s2p0",   "2x4x6x5-1k1s1p1",    "1x3x10x11-2k3s3p2", "2x2x5x5-3k5s1p3",
    "1x1x2x3-2k3s1p2",   "2x6x13x12-4k3s2p0",  "1x37x11x9-70k3s3p1", "3x4x9x9-1k5s2p1",
};

/* Random fp32 x, w and dy for d, from seed. */
static void random_problem(struct conv2d_dims d, uint64_t seed, float **x, float **w, float **dy)
{
    struct rng r = rng_seeded(seed);
    *x = host_alloc(count_x(d) * sizeof **x);
    *w = host_alloc(count_w(d) * sizeof **w);
    *dy = host_alloc(count_y(d) * sizeof **dy);
    cr_assert(*x && *w && *dy);
    fill_uniform(*x, DT_FP32, count_x(d), &r, -1, 1);
    fill_uniform(*w, DT_FP32, count_w(d), &r, -1, 1);
    fill_uniform(*dy, DT_FP32, count_y(d), &r, -1, 1);
}

static double dot(const float *a, const double *b, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (double)a[i] * b[i];
    return sum;
}

static double norm_of_floats(const float *a, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (double)a[i] * a[i];
    return sqrt(sum);
}

static double norm_of_doubles(const double *a, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += a[i] * a[i];
    return sqrt(sum);
}

/* <conv(x, w), dy> = <x, conv^T(dy, w)>: both sides sum the same products
 * x[n, c, h, w] w[k, c, r, s] dy[n, k, p, q], in another order, so they agree to rounding.
 * The scale is |conv(x, w)| |dy|, which bounds the left side (Cauchy-Schwarz) and does not
 * vanish where the random sums happen to cancel. */
Test(dgrad_reference, is_the_transpose_of_chapter_07s_forward)
{
    for (size_t i = 0; i < COUNT(adjoint_shapes); i++) {
        const struct conv2d_dims d = dims_of_text(adjoint_shapes[i]);
        float *x, *w, *dy;
        random_problem(d, 100 + i, &x, &w, &dy);
        double *y = host_alloc(count_y(d) * sizeof *y), *dx = host_alloc(count_x(d) * sizeof *dx);
        cr_assert(y && dx);
        conv2d_forward_reference(x, w, NULL, DT_FP32, d, CONV2D_LINEAR, 1, y);
        dgrad_reference(dy, w, DT_FP32, d, 1, dx);
        const double forward = dot(dy, y, count_y(d)), backward = dot(x, dx, count_x(d));
        const double scale = norm_of_doubles(y, count_y(d)) * norm_of_floats(dy, count_y(d));
        cr_assert_gt(scale, 0, "%s: conv(x, w) or dy is all zeros", adjoint_shapes[i]);
        cr_expect_leq(fabs(forward - backward), 1e-12 * scale,
                      "%s: <conv(x, w), dy> = %.17g but <x, conv^T(dy, w)> = %.17g (scale %g)",
                      adjoint_shapes[i], forward, backward, scale);
        free(x);
        free(w);
        free(dy);
        free(y);
        free(dx);
    }
}

/* conv(x, w) by chapter 07's reference into y, with element i of x replaced by v (and put
 * back after). */
static void forward_at(float *x, size_t i, float v, const float *w, struct conv2d_dims d,
                       double *y)
{
    const float kept = x[i];
    x[i] = v;
    conv2d_forward_reference(x, w, NULL, DT_FP32, d, CONV2D_LINEAR, 1, y);
    x[i] = kept;
}

/* dx is the gradient of L(x) = <conv(x, w), dy>: a central difference of L in one element of
 * x gives dx there. L is linear in x, so the difference is exact but for rounding, the less
 * of it as the two outputs are subtracted element by element (those x[i] does not reach come
 * out identical) before the sum with dy; the step is the difference of the two perturbed
 * values as fp32 holds them, not quite the 2e-3 asked for. The elements: both ends, the last
 * pixel of the first plane (past the last window in 1x2x8x8-3k3s2p0, whose 3x3 windows at
 * stride 2 stop at row and column 6: gradient 0), and a few at random. */
Test(dgrad_reference, is_the_gradient_of_the_forward)
{
    static const char *const fd_shapes[] = {"2x3x9x7-5k3s2p1", "1x2x8x8-3k3s2p0",
                                            "3x5x17x13-7k5s2p2", "2x4x6x5-1k1s1p1"};
    const double h = 1e-3;
    for (size_t t = 0; t < COUNT(fd_shapes); t++) {
        const struct conv2d_dims d = dims_of_text(fd_shapes[t]);
        float *x, *w, *dy;
        random_problem(d, 200 + t, &x, &w, &dy);
        const size_t n = count_x(d), ny = count_y(d);
        double *up_y = host_alloc(ny * sizeof *up_y), *down_y = host_alloc(ny * sizeof *down_y);
        double *dx = host_alloc(n * sizeof *dx);
        cr_assert(up_y && down_y && dx);
        dgrad_reference(dy, w, DT_FP32, d, 1, dx);
        struct rng r = rng_seeded(300 + t);
        size_t at[8] = {0, n - 1, (size_t)(d.h * d.w - 1), n / 2};
        for (size_t j = 4; j < COUNT(at); j++)
            at[j] = (size_t)rng_below(&r, n);
        for (size_t j = 0; j < COUNT(at); j++) {
            const size_t i = at[j];
            const float up = (float)(x[i] + h), down = (float)(x[i] - h);
            forward_at(x, i, up, w, d, up_y);
            forward_at(x, i, down, w, d, down_y);
            double change = 0;
            for (size_t o = 0; o < ny; o++)
                change += (double)dy[o] * (up_y[o] - down_y[o]);
            const double diff = change / ((double)up - (double)down);
            cr_expect_leq(fabs(diff - dx[i]), 1e-10 * (1 + fabs(dx[i])),
                          "%s: dL/dx[%zu] is %.12g by central differences, dx[%zu] %.12g",
                          fd_shapes[t], i, diff, i, dx[i]);
        }
        free(x);
        free(w);
        free(dy);
        free(up_y);
        free(down_y);
        free(dx);
    }
}

/* ---- shapes ---- */

static int shape_refused(const char *text, const char *reason)
{
    struct shape s;
    char why[256] = "";
    const int rc = shape_parse(text, &s, why, sizeof why) ||
                   dgrad_chapter.check_shape(&s, why, sizeof why);
    cr_expect(strstr(why, reason) != NULL, "%s: the reason was '%s', not '%s'", text, why,
              reason);
    return rc != 0 && strstr(why, reason) != NULL;
}

/* A bad shape and what its refusal must say: chapter 07's list, since a shape is the forward's
 * and chapter 07's conv2d_dims_of checks it (so its tensors keep the forward's names: x is dx's
 * shape, y dy's). */
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

Test(dgrad_shape, bad_shapes_say_what_is_wrong)
{
    for (size_t i = 0; i < COUNT(bad_shapes); i++)
        cr_expect(shape_refused(bad_shapes[i].shape, bad_shapes[i].reason), "%s must be refused",
                  bad_shapes[i].shape);
    /* One element short of 2^31 is taken (checked here, never allocated). */
    struct shape s;
    char why[256] = "";
    cr_expect(shape_parse("1x1x1x2147483647-1k1", &s, why, sizeof why) == 0 &&
                  dgrad_chapter.check_shape(&s, why, sizeof why) == 0,
              "dx and dy of 2^31 - 1 elements refused: %s", why);
}

static void free_params(struct criterion_test_params *crp)
{
    cr_free(crp->params);
}

/* The program refuses each bad shape before anything else: exit 2, nothing on stdout, one
 * line on stderr saying why. The parameters are indices into bad_shapes (a worker gets them
 * through shared memory, where pointers into the runner's statics would not survive). */
ParameterizedTestParameters(dgrad_program, bad_shape_exits_2_in_one_line)
{
    int *which = cr_malloc(sizeof *which * COUNT(bad_shapes));
    for (size_t i = 0; i < COUNT(bad_shapes); i++)
        which[i] = (int)i;
    return cr_make_param_array(int, which, COUNT(bad_shapes), free_params);
}

ParameterizedTest(int *which, dgrad_program, bad_shape_exits_2_in_one_line,
                  .init = redirect_output)
{
    const struct bad_shape *bad = &bad_shapes[*which];
    const char *argv[] = {"08-conv-backward-input", "--shape", bad->shape};
    cr_expect_eq(ladder_main(&dgrad_chapter, 3, (char **)argv), KL_EXIT_USAGE,
                 "--shape %s must be refused", bad->shape);
    char out[4096], err[4096];
    read_redirected(cr_get_redirected_stdout(), out, sizeof out);
    read_redirected(cr_get_redirected_stderr(), err, sizeof err);
    cr_expect_str_eq(out, "", "nothing but the one line: stdout had %s", out);
    cr_expect_eq(count_lines(err), 1, "one line: %s", err);
    cr_expect(strstr(err, bad->reason) != NULL, "the line was: %s", err);
}

Test(dgrad_program, runs_and_exits_0, .init = redirect_output)
{
    const char *argv[] = {"08-conv-backward-input", "--shape", "2x3x9x7-5k3s2p1", "--iters", "3"};
    cr_expect_eq(ladder_main(&dgrad_chapter, 5, (char **)argv), KL_EXIT_OK);
}

/* ---- every rung on the GPU ---- */

/* Chapter 07's odd shapes (C = 1 and K = 1, N = 1, 1x1 to 7x7 filters, strides 1 to 3,
 * padding 0 to 3 and past a 1x1 filter, inputs smaller than the filter, sizes no tile divides,
 * reductions K R S past 300 with C past 128), then strides that do not divide H or W: rows
 * and columns no window reaches, which must come out 0, and a 1x1 filter at stride 2, under
 * which three pixels in four get 0. v5 finds its stride-1 shapes here, v6 every phase count
 * from 1 to 9. */
static const char *const shapes[] = {
    "1x1x1x1-1k1",          "1x3x7x7-1k7s1p3",     "3x5x17x13-7k5s2p2", "5x7x9x11-3k1s1p0",
    "2x3x9x7-5k3s2p1",      "1x1x2x3-2k3s1p2",     "2x19x15x23-33k3s1p1",
    "1x37x11x9-70k3s3p1",   "4x16x14x14-32k3s1p1", "3x4x31x33-8k3s1p1", "1x2x5x5-3k5s1p3",
    "2x40x12x10-130k3s1p1", "1x24x9x13-136k5s1p2", "2x3x6x5-4k1s2p1",   "2x2x10x10-3k5s3p3",
    "3x1x12x12-5k3s1p0",    "2x1x28x28-16k3s1p1",  "2x5x10x9-6k3s2p0",  "1x4x11x11-3k2s2p0",
    "2x3x8x8-4k1s2p0",      "2x6x14x13-5k3s3p0",
};

/* cuDNN's backward-data algorithms, as the vendor rungs note them for the table. */
static bool names_a_cudnn_algorithm(const char *noted)
{
    static const char *const algorithms[] = {"ALGO_0", "ALGO_1",   "FFT",
                                             "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
    for (size_t i = 0; noted && i < COUNT(algorithms); i++)
        if (!strcmp(noted, algorithms[i]))
            return true;
    return false;
}

struct rung_pass {
    int rung, pass;
};

/* Every (rung, pass) the table has a launcher for: vendor_nhwc on bwd_input_nhwc, the rest on
 * bwd_input. */
ParameterizedTestParameters(dgrad_gpu, rung_matches_reference)
{
    const struct chapter *ch = &dgrad_chapter;
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
ParameterizedTest(struct rung_pass *rp, dgrad_gpu, rung_matches_reference, NEEDS_GPU)
{
    const struct chapter *ch = &dgrad_chapter;
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
            const int rc = ladder_check(ch, r, rp->pass, (enum dtype)t, shapes[s], 800 + s, &v,
                                        why, sizeof why);
            const char *noted = kl_take_rung_note();
            SKIP_IF_GPU_LACKS_RUNG(rc, why);
            if (rc == -1 && !strncmp(why, "unsupported", 11)) {
                snprintf(declined, sizeof declined, "%s at %s: %s", dtype_name(t), shapes[s], why);
                continue;
            }
            ran++;
            /* v2's and v3's fp16 columns round each product, then their sum: two roundings. */
            if (r->shown_for_error && t == DT_FP16 && rc == 1)
                cr_expect_lt(v.norm_rel_err, 2e-3, "%s fp16 at %s: relative error %g, more than "
                             "two roundings", r->name, shapes[s], v.norm_rel_err);
            else
                cr_expect_eq(rc, 0, "%s %s %s at %s: %s element %zu is %g, reference %g",
                             r->name, ch->passes[rp->pass], dtype_name(t), shapes[s],
                             rc == 1 ? "wrong:" : why, v.first_bad, v.bad_out, v.bad_ref);
            if (vendor)
                cr_expect(names_a_cudnn_algorithm(noted), "%s %s at %s noted '%s', not one of "
                          "cuDNN's backward-data algorithms", r->name, dtype_name(t), shapes[s],
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

static void bwd_v1(const struct launch_args *a, cudaStream_t s)
{
    dgrad_v1(a->in[0], a->in[1], a->out[0], dims_of_shape(&a->p->shape), a->p->dtype,
             a->workspace, s);
}

Test(dgrad_exercise, checker_fails_the_stub, NEEDS_GPU)
{
    expect_checker_fails_the_stub(&dgrad_chapter);
}

Test(dgrad_exercise, checker_passes_a_correct_kernel, NEEDS_GPU)
{
    expect_checker_passes(&dgrad_chapter, 0, bwd_v1);
}
