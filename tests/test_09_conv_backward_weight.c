/* Chapter 09: the CPU reference against hand-computed weight and bias gradients, then against
 * chapter 07's forward reference (central differences of the loss it defines, and the adjoint
 * identity), the shape checks and the program's one-line refusals, then every rung of the
 * table against the reference on the GPU at odd shapes in both dtypes and both NCHW passes
 * (vendor_nhwc on its bwd_weight_nhwc pass), with the shapes each rung must take, and the
 * exercise checker. The library's entry point, conv2d_backward_weight, called directly (on
 * buffers of one's own, in one graph, on two streams, and twice for the same bits), is tested
 * with the other chapters' in test_api.c. */
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
#include "wgrad.h"

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

static void expect_values(const double *got, const double *want, size_t n, const char *name,
                          const char *what)
{
    for (size_t i = 0; i < n; i++)
        cr_expect_eq(got[i], want[i], "%s: %s[%zu] is %g, not %g", what, name, i, got[i],
                     want[i]);
}

/* ---- the CPU reference, on cases small enough to work out by hand ---- */

/* A 1x1 filter: dw[k, c] = sum over n, h, w of dy[n, k, h, w] x[n, c, h, w], each channel of x
 * against each filter's dy, summed over the images; db[k] sums dy[n, k] alone. x is
 * N x C x H x W, dy N x K x P x Q, dw K x C x R x S. */
Test(wgrad_reference, one_by_one_filter_correlates_channels_with_filters)
{
    /* x: 2 images of 2 channels of 1x2; dy: 2 images of 2 filters of 1x2. */
    const float x[] = {1, 2, 3, -1, /**/ 0.5f, -2, 1, 1};
    const float dy[] = {1, -1, 2, 0, /**/ 4, 1, -1, 3};
    const struct conv2d_dims d = dims(2, 2, 1, 2, 2, 1, 1, 0);
    cr_assert(d.p == 1 && d.q == 2);
    double dw[4], db[2];
    wgrad_reference(x, dy, DT_FP32, d, 1, dw, db);
    /* dw[0, 0] = (1 - 2) + (2 - 2) = -1; dw[0, 1] = (3 + 1) + (4 + 1) = 9;
     * dw[1, 0] = (2 + 0) + (-0.5 - 6) = -4.5; dw[1, 1] = (6 + 0) + (-1 + 3) = 8.
     * db[0] = 1 - 1 + 4 + 1 = 5; db[1] = 2 + 0 - 1 + 3 = 4. */
    const double want_dw[] = {-1, 9, -4.5, 8}, want_db[] = {5, 4};
    expect_values(dw, want_dw, COUNT(want_dw), "dw", "1x1");
    expect_values(db, want_db, COUNT(want_db), "db", "1x1");
}

/* A 3x3 filter with padding 1 at stride 1 on the ramp 1..12 (3 x 4), dy all ones: dw[r, s]
 * sums x over the pixels tap (r, s) reaches, (p + r - 1, q + s - 1) for every output (p, q),
 * which are the rows 0-1 (r = 0), 0-2 (r = 1) or 1-2 (r = 2) and the columns 0-2 (s = 0),
 * 0-3 (s = 1) or 1-3 (s = 2): the padding takes a row or a column from the edge taps. */
static const float ramp_3x4[] = {1, 2, 3, 4, /**/ 5, 6, 7, 8, /**/ 9, 10, 11, 12};

Test(wgrad_reference, padded_3x3_sums_what_each_tap_reaches)
{
    const float ones[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    const struct conv2d_dims d = dims(1, 1, 3, 4, 1, 3, 1, 1);
    cr_assert(d.p == 3 && d.q == 4);
    double dw[9], db[1];
    wgrad_reference(ramp_3x4, ones, DT_FP32, d, 1, dw, db);
    /* The rows' sums over columns 0-2, 0-3 and 1-3: 6, 10, 9; 18, 26, 21; 30, 42, 33. So
     * dw[0, 0] = 6 + 18, dw[0, 1] = 10 + 26, dw[1, 1] = 10 + 26 + 42 = 78, dw[2, 2] = 21 + 33. */
    const double want[] = {24, 36, 30, /**/ 54, 78, 63, /**/ 48, 68, 54};
    expect_values(dw, want, COUNT(want), "dw", "3x3, padding 1");
    cr_expect_eq(db[0], 12, "db is %g, not the 12 ones of dy", db[0]);
}

/* The order of the taps. dy is 1 at output (0, 0) and 100 at (2, 3), 0 elsewhere, so
 * dw[r, s] = x[r - 1, s - 1] + 100 x[1 + r, 2 + s], each 0 off x: the windows of the two
 * outputs, as stored, not flipped. */
Test(wgrad_reference, one_hot_dy_gives_the_windows_unflipped)
{
    const float dy[12] = {1, 0, 0, 0, /**/ 0, 0, 0, 0, /**/ 0, 0, 0, 100};
    const struct conv2d_dims d = dims(1, 1, 3, 4, 1, 3, 1, 1);
    double dw[9];
    wgrad_reference(ramp_3x4, dy, DT_FP32, d, 1, dw, NULL);
    /* Output (0, 0): row 0 of its window lies in the padding, then 0, x[0, 0], x[0, 1] = 1, 2
     * and 0, x[1, 0], x[1, 1] = 5, 6. Output (2, 3): x[1, 2], x[1, 3] = 7, 8 and x[2, 2],
     * x[2, 3] = 11, 12 (times 100), its last row and column in the padding. */
    const double want[] = {700, 800, 0, /**/ 1100, 1201, 2, /**/ 0, 5, 6};
    expect_values(dw, want, COUNT(want), "dw", "3x3, padding 1, dy at two corners");
}

/* Stride 2, 3x3, no padding, on the 5x5 ramp x[h, w] = 5 h + w + 1: P = Q = 2, and tap (r, s)
 * of output (p, q) reads x[2 p + r, 2 q + s]. So dw[r, s] = sum dy[p, q] (10 p + 2 q) +
 * (5 r + s + 1) sum dy; with dy = 1, 2, 3, 4 that is 0 + 4 + 30 + 48 = 82, plus
 * 10 (5 r + s + 1). */
Test(wgrad_reference, stride_2_reads_every_other_pixel)
{
    float x[25];
    for (int i = 0; i < 25; i++)
        x[i] = (float)(i + 1);
    const float dy[] = {1, 2, /**/ 3, 4};
    const struct conv2d_dims d = dims(1, 1, 5, 5, 1, 3, 2, 0);
    cr_assert(d.p == 2 && d.q == 2);
    double dw[9], db[1];
    wgrad_reference(x, dy, DT_FP32, d, 1, dw, db);
    const double want[] = {92, 102, 112, /**/ 142, 152, 162, /**/ 192, 202, 212};
    expect_values(dw, want, COUNT(want), "dw", "3x3, stride 2");
    cr_expect_eq(db[0], 10, "db is %g, not 1 + 2 + 3 + 4", db[0]);
}

/* A 1x1 filter at stride 2 on the 3x3 ramp 1..9: the outputs read only x[0, 0], x[0, 2],
 * x[2, 0] and x[2, 2] = 1, 3, 7, 9, so dw = 3 - 3 + 14 + 45, and the pixels between are
 * never read. */
Test(wgrad_reference, stride_2_skips_the_pixels_between)
{
    float x[9];
    for (int i = 0; i < 9; i++)
        x[i] = (float)(i + 1);
    const float dy[] = {3, -1, /**/ 2, 5};
    const struct conv2d_dims d = dims(1, 1, 3, 3, 1, 1, 2, 0);
    cr_assert(d.p == 2 && d.q == 2);
    double dw[1];
    wgrad_reference(x, dy, DT_FP32, d, 1, dw, NULL);
    cr_expect_eq(dw[0], 59, "dw is %g, not 59", dw[0]);
    x[1] = x[3] = x[4] = x[5] = x[7] = 1000; /* the pixels no output reads */
    wgrad_reference(x, dy, DT_FP32, d, 1, dw, NULL);
    cr_expect_eq(dw[0], 59, "dw is %g after changing pixels no output reads", dw[0]);
}

/* One row of input and a 3x3 filter with padding 1: the taps of rows 0 and 2 of the filter
 * lie in the padding for every output, so their gradient is 0; row 1 is a 1D correlation. */
Test(wgrad_reference, taps_that_only_see_padding_get_0)
{
    const float x[] = {1, 2, 3}, dy[] = {1, 10, 100};
    const struct conv2d_dims d = dims(1, 1, 1, 3, 1, 3, 1, 1);
    cr_assert(d.p == 1 && d.q == 3);
    double dw[9];
    wgrad_reference(x, dy, DT_FP32, d, 1, dw, NULL);
    /* dw[1, 0] = dy[1] x[0] + dy[2] x[1] = 10 + 200, dw[1, 1] = 1 + 20 + 300,
     * dw[1, 2] = dy[0] x[1] + dy[1] x[2] = 2 + 30. */
    const double want[] = {0, 0, 0, /**/ 210, 321, 32, /**/ 0, 0, 0};
    expect_values(dw, want, COUNT(want), "dw", "1x3 under 3x3, padding 1");
}

/* db sums dy over the images and pixels of each filter, and nothing of x: the same dy with
 * another x gives the same db. */
Test(wgrad_reference, db_sums_dy_per_filter)
{
    const struct conv2d_dims d = dims(3, 2, 5, 4, 3, 3, 2, 1);
    float x[3 * 2 * 5 * 4], dy[3 * 3 * 3 * 2];
    cr_assert(count_x(d) == COUNT(x) && count_y(d) == COUNT(dy));
    struct rng r = rng_seeded(5);
    fill_uniform(x, DT_FP32, COUNT(x), &r, -1, 1);
    fill_uniform(dy, DT_FP32, COUNT(dy), &r, -1, 1);
    double dw[2 * 3 * 3 * 3], db[3], again[3];
    wgrad_reference(x, dy, DT_FP32, d, 1, dw, db);
    for (size_t i = 0; i < COUNT(x); i++)
        x[i] = 2 * x[i] + 1;
    wgrad_reference(x, dy, DT_FP32, d, 1, dw, again);
    for (int64_t k = 0; k < d.k; k++) {
        double sum = 0;
        for (int64_t n = 0; n < d.n; n++)
            for (int64_t i = 0; i < d.p * d.q; i++)
                sum += dy[(n * d.k + k) * d.p * d.q + i];
        cr_expect_eq(db[k], sum, "db[%lld] is %.17g, not %.17g", (long long)k, db[k], sum);
        cr_expect_eq(again[k], db[k], "db[%lld] changed with x", (long long)k);
    }
}

/* With `every` = 4 only the elements of dw whose KCRS index is a multiple of 4 are computed,
 * and they agree with the full reference; the others are left as they were; db is whole. */
Test(wgrad_reference, sampled_computes_every_nth_weight_and_all_of_db)
{
    const struct conv2d_dims d = dims(2, 3, 7, 6, 4, 3, 2, 1);
    float x[2 * 3 * 7 * 6], dy[2 * 4 * 4 * 3];
    cr_assert(count_x(d) == COUNT(x) && count_y(d) == COUNT(dy));
    struct rng r = rng_seeded(7);
    fill_uniform(x, DT_FP32, COUNT(x), &r, -1, 1);
    fill_uniform(dy, DT_FP32, COUNT(dy), &r, -1, 1);
    double full[4 * 3 * 3 * 3], part[4 * 3 * 3 * 3], db_full[4], db_part[4];
    for (size_t i = 0; i < COUNT(part); i++)
        part[i] = -7;
    wgrad_reference(x, dy, DT_FP32, d, 1, full, db_full);
    wgrad_reference(x, dy, DT_FP32, d, 4, part, db_part);
    for (size_t i = 0; i < COUNT(part); i++)
        cr_expect_eq(part[i], i % 4 ? -7 : full[i], "dw[%zu] is %g", i, part[i]);
    expect_values(db_part, db_full, COUNT(db_full), "db", "sampled");
}

Test(wgrad_reference, reads_fp16_as_stored)
{
    const uint16_t x[] = {half_from_float(0.1f), half_from_float(-0.3f)};
    const uint16_t dy[] = {half_from_float(0.7f), half_from_float(0.2f)};
    const struct conv2d_dims d = dims(1, 1, 1, 2, 1, 1, 1, 0);
    double dw[1], db[1];
    wgrad_reference(x, dy, DT_FP16, d, 1, dw, db);
    const double want = (double)half_to_float(x[0]) * (double)half_to_float(dy[0]) +
                        (double)half_to_float(x[1]) * (double)half_to_float(dy[1]);
    cr_expect_eq(dw[0], want, "dw is %.17g, not %.17g", dw[0], want);
    const double sum = (double)half_to_float(dy[0]) + (double)half_to_float(dy[1]);
    cr_expect_eq(db[0], sum, "db is %.17g, not %.17g", db[0], sum);
}

/* ---- against chapter 07's forward: dw and db are its gradients ---- */

/* Random fp32 x, w, b and g (the loss's weights on y) for d, from seed. */
struct random_problem {
    float *x, *w, *b, *g;
};

static struct random_problem random_problem(struct conv2d_dims d, uint64_t seed)
{
    struct rng r = rng_seeded(seed);
    struct random_problem p = {host_alloc(count_x(d) * sizeof(float)),
                               host_alloc(count_w(d) * sizeof(float)),
                               host_alloc((size_t)d.k * sizeof(float)),
                               host_alloc(count_y(d) * sizeof(float))};
    cr_assert(p.x && p.w && p.b && p.g);
    fill_uniform(p.x, DT_FP32, count_x(d), &r, -1, 1);
    fill_uniform(p.w, DT_FP32, count_w(d), &r, -1, 1);
    fill_uniform(p.b, DT_FP32, (size_t)d.k, &r, -1, 1);
    fill_uniform(p.g, DT_FP32, count_y(d), &r, -1, 1);
    return p;
}

static void random_problem_free(struct random_problem *p)
{
    free(p->x);
    free(p->w);
    free(p->b);
    free(p->g);
}

/* conv(x, w) + b by chapter 07's reference into y, with one element of w or b (`at`) set to
 * v (and put back after). */
static void forward_at(struct random_problem *p, float *at, float v, struct conv2d_dims d,
                       double *y)
{
    const float kept = *at;
    *at = v;
    conv2d_forward_reference(p->x, p->w, p->b, DT_FP32, d, CONV2D_LINEAR, 1, y);
    *at = kept;
}

/* dL/d(*at) of L = <conv(x, w) + b, g> by central differences. L is linear in *at, so the
 * difference is exact but for rounding, the less of it as the two outputs are subtracted
 * element by element before the sum with g; the step is the difference of the two perturbed
 * values as fp32 holds them, not quite the 2e-3 asked for. */
static double central_difference(struct random_problem *p, float *at, struct conv2d_dims d,
                                 double *up_y, double *down_y)
{
    const double h = 1e-3;
    const float up = (float)(*at + h), down = (float)(*at - h);
    forward_at(p, at, up, d, up_y);
    forward_at(p, at, down, d, down_y);
    double change = 0;
    for (size_t o = 0; o < count_y(d); o++)
        change += (double)p->g[o] * (up_y[o] - down_y[o]);
    return change / ((double)up - (double)down);
}

/* Strides 1 to 3, padding 0 to 3 (past a 1x1 filter, and as wide as a 5x5 filter's), 1x1 to
 * 5x5 filters, C = 1 and K = 1, H and W the stride does not divide, an input smaller than the
 * filter, and one row under a 3x3 filter, whose outer rows of taps only ever see padding. */
static const char *const gradient_shapes[] = {
    "1x1x7x9-1k3s1p0",  "2x3x9x7-5k3s2p1",   "3x5x17x13-7k5s2p2", "1x2x11x10-3k5s3p3",
    "2x1x8x8-4k1s2p0",  "2x4x6x5-1k1s1p1",   "1x3x10x11-2k3s3p2", "2x2x5x5-3k5s1p3",
    "1x1x2x3-2k3s1p2",  "2x6x13x12-4k3s2p0", "2x2x1x3-3k3s1p1",   "3x4x9x9-1k5s2p1",
};

/* dw and db are the gradient of L(w, b) = <conv(x, w) + b, g> with respect to w and b: dw =
 * wgrad(x, g), db[k] = the sum of g over filter k's outputs. The elements: both ends of w,
 * the corner tap (0, 0) of the first filter's last channel (in rows of taps that see only
 * padding in 2x2x1x3-3k3s1p1: gradient 0), two at random, and every element of b. */
Test(wgrad_reference, is_the_gradient_of_the_forward)
{
    for (size_t t = 0; t < COUNT(gradient_shapes); t++) {
        const struct conv2d_dims d = dims_of_text(gradient_shapes[t]);
        struct random_problem p = random_problem(d, 200 + t);
        const size_t nw = count_w(d);
        double *up_y = host_alloc(count_y(d) * sizeof *up_y);
        double *down_y = host_alloc(count_y(d) * sizeof *down_y);
        double *dw = host_alloc(nw * sizeof *dw), *db = host_alloc((size_t)d.k * sizeof *db);
        cr_assert(up_y && down_y && dw && db);
        wgrad_reference(p.x, p.g, DT_FP32, d, 1, dw, db);
        struct rng r = rng_seeded(300 + t);
        const size_t at[5] = {0, nw - 1, (size_t)(d.c * d.r * d.s - d.r * d.s),
                              (size_t)rng_below(&r, nw), (size_t)rng_below(&r, nw)};
        for (size_t j = 0; j < COUNT(at); j++) {
            const size_t i = at[j];
            const double diff = central_difference(&p, &p.w[i], d, up_y, down_y);
            cr_expect_leq(fabs(diff - dw[i]), 1e-10 * (1 + fabs(dw[i])),
                          "%s: dL/dw[%zu] is %.12g by central differences, dw[%zu] %.12g",
                          gradient_shapes[t], i, diff, i, dw[i]);
        }
        for (int64_t k = 0; k < d.k; k++) {
            const double diff = central_difference(&p, &p.b[k], d, up_y, down_y);
            cr_expect_leq(fabs(diff - db[k]), 1e-10 * (1 + fabs(db[k])),
                          "%s: dL/db[%lld] is %.12g by central differences, db %.12g",
                          gradient_shapes[t], (long long)k, diff, db[k]);
        }
        random_problem_free(&p);
        free(up_y);
        free(down_y);
        free(dw);
        free(db);
    }
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

/* <conv(x, w), dy> = <w, wgrad(x, dy)>: both sides sum the same products x[n, c, h, w]
 * w[k, c, r, s] dy[n, k, p, q], in another order, so they agree to rounding. The scale is
 * |conv(x, w)| |dy|, which bounds the left side (Cauchy-Schwarz) and does not vanish where the
 * random sums happen to cancel. */
Test(wgrad_reference, is_the_adjoint_of_chapter_07s_forward_in_w)
{
    for (size_t i = 0; i < COUNT(gradient_shapes); i++) {
        const struct conv2d_dims d = dims_of_text(gradient_shapes[i]);
        struct random_problem p = random_problem(d, 100 + i);
        double *y = host_alloc(count_y(d) * sizeof *y), *dw = host_alloc(count_w(d) * sizeof *dw);
        cr_assert(y && dw);
        conv2d_forward_reference(p.x, p.w, NULL, DT_FP32, d, CONV2D_LINEAR, 1, y);
        wgrad_reference(p.x, p.g, DT_FP32, d, 1, dw, NULL);
        double forward = 0, backward = 0;
        for (size_t o = 0; o < count_y(d); o++)
            forward += (double)p.g[o] * y[o];
        for (size_t j = 0; j < count_w(d); j++)
            backward += (double)p.w[j] * dw[j];
        const double scale = norm_of_doubles(y, count_y(d)) * norm_of_floats(p.g, count_y(d));
        cr_assert_gt(scale, 0, "%s: conv(x, w) or dy is all zeros", gradient_shapes[i]);
        cr_expect_leq(fabs(forward - backward), 1e-12 * scale,
                      "%s: <conv(x, w), dy> = %.17g but <w, wgrad(x, dy)> = %.17g (scale %g)",
                      gradient_shapes[i], forward, backward, scale);
        random_problem_free(&p);
        free(y);
        free(dw);
    }
}

/* ---- shapes ---- */

static int shape_refused(const char *text, const char *reason)
{
    struct shape s;
    char why[256] = "";
    const int rc = shape_parse(text, &s, why, sizeof why) ||
                   wgrad_chapter.check_shape(&s, why, sizeof why);
    cr_expect(strstr(why, reason) != NULL, "%s: the reason was '%s', not '%s'", text, why,
              reason);
    return rc != 0 && strstr(why, reason) != NULL;
}

/* A bad shape and what its refusal must say: chapter 07's list, since a shape is the forward's
 * and chapter 07's conv2d_dims_of checks it (so its tensors keep the forward's names: w is
 * dw's shape, y dy's). */
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

Test(wgrad_shape, bad_shapes_say_what_is_wrong)
{
    for (size_t i = 0; i < COUNT(bad_shapes); i++)
        cr_expect(shape_refused(bad_shapes[i].shape, bad_shapes[i].reason), "%s must be refused",
                  bad_shapes[i].shape);
    /* One element short of 2^31 is taken (checked here, never allocated). */
    struct shape s;
    char why[256] = "";
    cr_expect(shape_parse("1x1x1x2147483647-1k1", &s, why, sizeof why) == 0 &&
                  wgrad_chapter.check_shape(&s, why, sizeof why) == 0,
              "x and dy of 2^31 - 1 elements refused: %s", why);
}

/* Every preset is a shape the chapter takes; the first is the seed, and the 2D presets have
 * one channel and one filter, the shapes the 2d rungs are for. */
Test(wgrad_shape, presets_are_shapes_it_takes)
{
    cr_expect_str_eq(wgrad_chapter.presets[0].name, "seed");
    for (int i = 0; i < wgrad_chapter.n_presets; i++) {
        const struct preset *pr = &wgrad_chapter.presets[i];
        struct shape s;
        char why[256] = "";
        cr_expect(shape_parse(pr->shape, &s, why, sizeof why) == 0 &&
                      wgrad_chapter.check_shape(&s, why, sizeof why) == 0,
                  "preset %s, %s: %s", pr->name, pr->shape, why);
        if (strstr(pr->name, "2d")) {
            const struct conv2d_dims d = dims_of_text(pr->shape);
            cr_expect(d.c == 1 && d.k == 1, "preset %s has C = %lld and K = %lld", pr->name,
                      (long long)d.c, (long long)d.k);
        }
    }
}

static void free_params(struct criterion_test_params *crp)
{
    cr_free(crp->params);
}

/* The program refuses each bad shape before anything else: exit 2, nothing on stdout, one
 * line on stderr saying why. The parameters are indices into bad_shapes (a worker gets them
 * through shared memory, where pointers into the runner's statics would not survive). */
ParameterizedTestParameters(wgrad_program, bad_shape_exits_2_in_one_line)
{
    int *which = cr_malloc(sizeof *which * COUNT(bad_shapes));
    for (size_t i = 0; i < COUNT(bad_shapes); i++)
        which[i] = (int)i;
    return cr_make_param_array(int, which, COUNT(bad_shapes), free_params);
}

ParameterizedTest(int *which, wgrad_program, bad_shape_exits_2_in_one_line,
                  .init = redirect_output)
{
    const struct bad_shape *bad = &bad_shapes[*which];
    const char *argv[] = {"09-conv-backward-weight", "--shape", bad->shape};
    cr_expect_eq(ladder_main(&wgrad_chapter, 3, (char **)argv), KL_EXIT_USAGE,
                 "--shape %s must be refused", bad->shape);
    char out[4096], err[4096];
    read_redirected(cr_get_redirected_stdout(), out, sizeof out);
    read_redirected(cr_get_redirected_stderr(), err, sizeof err);
    cr_expect_str_eq(out, "", "nothing but the one line: stdout had %s", out);
    cr_expect_eq(count_lines(err), 1, "one line: %s", err);
    cr_expect(strstr(err, bad->reason) != NULL, "the line was: %s", err);
}

Test(wgrad_program, runs_and_exits_0, .init = redirect_output)
{
    const char *argv[] = {"09-conv-backward-weight", "--shape", "2x3x9x7-5k3s2p1", "--iters",
                          "3"};
    cr_expect_eq(ladder_main(&wgrad_chapter, 5, (char **)argv), KL_EXIT_OK);
}

Test(wgrad_program, runs_the_2d_preset_and_exits_0, .init = redirect_output)
{
    const char *argv[] = {"09-conv-backward-weight", "--preset", "sanitize-2d", "--iters", "3"};
    cr_expect_eq(ladder_main(&wgrad_chapter, 5, (char **)argv), KL_EXIT_OK);
}

/* ---- every rung on the GPU ---- */

/* The 2D kernel's shapes (C = K = 1: odd H and W, N = 1, a 5x5 filter at stride 2, one row
 * under a 3x3 filter, a 1x1 filter at stride 2, and a reduction N P Q of 32760, long enough
 * for the split rungs to take many slices); few channels for v6 (C = 1 to 4, chapter 10's
 * first layer, C R S at v6's 36 and past it); then shapes no tile divides: 1x1 to 7x7
 * filters, strides 1 to 3 (v4 declines the 7x7, the 5x5 at stride 2 and the 3x3 at stride
 * 3), padding 0 to 3 and past a 1x1 filter, inputs smaller than the filter, C and K of 17,
 * 19, 37 and 70, K C R S past 10,000, and a reduction of 16368 over 12 filters of 8 channels;
 * last, two with many of v7's bands a block (70 and 34 output columns: bands across a row). */
static const char *const shapes[] = {
    "1x1x5x7-1k3s1p1",     "3x1x17x9-1k3s1p1",     "2x1x9x7-1k5s2p2",   "1x1x1x1-1k1",
    "2x1x1x3-1k3s1p1",     "5x1x6x6-1k1s2p0",      "8x1x65x63-1k3s1p1", "3x3x11x9-5k3s1p1",
    "2x1x28x28-16k3s1p1",  "1x4x7x5-7k5s2p2",      "1x4x7x5-7k3s2p1",   "1x1x2x3-2k3s1p2",
    "2x2x8x6-3k3s1p0",
    "3x5x17x13-7k5s2p2",   "5x7x9x11-3k1s1p0",     "2x17x10x12-19k3s1p1", "1x3x7x7-1k7s1p3",
    "2x64x27x27-32k3s2p1", "2x3x9x7-5k3s2p1",      "1x37x11x9-70k3s3p1", "2x2x10x10-3k5s3p3",
    "2x3x6x5-4k1s2p1",     "1x4x11x11-3k2s2p0",    "2x40x12x10-130k3s1p1", "16x8x33x31-12k3s1p1",
    "4x16x14x14-32k3s1p1", "3x20x40x70-40k3s1p1", "2x16x61x67-24k3s2p1",
};

/* cuDNN's backward-filter algorithms, as the vendor rungs note them for the table. */
static bool names_a_cudnn_algorithm(const char *noted)
{
    static const char *const algorithms[] = {"ALGO_0", "ALGO_1",   "FFT", "ALGO_3", "WINOGRAD",
                                             "WINOGRAD_NONFUSED", "FFT_TILING"};
    for (size_t i = 0; noted && i < COUNT(algorithms); i++)
        if (!strcmp(noted, algorithms[i]))
            return true;
    return false;
}

/* Whether rung `name` must take d in dtype t, by the limits its table row and its file give:
 * v1, v3, v5 and the library every shape; v4 every fp16 shape whose R filter rows under a
 * 16-pixel segment, R (15 stride + S), fit its 128 staged pixels; v6 up to 4 channels and 36
 * sums a filter (C R S); v7 filters up to 3 x 3; the 2d rungs one channel and one filter; cuDNN
 * every shape of int sizes, which all of these are. v2's columns may not fit, so it is never
 * held to a shape. */
static bool must_take(const char *name, struct conv2d_dims d, enum dtype t)
{
    static const char *const always[] = {"v1_naive", "v3_split_k", "v5_fused_bias", "api",
                                         "vendor",   "vendor_nhwc"};
    for (size_t i = 0; i < COUNT(always); i++)
        if (!strcmp(name, always[i]))
            return true;
    if (!strcmp(name, "v4_tensor_cores"))
        return t == DT_FP16 && d.r * (15 * d.stride + d.s) <= 128;
    if (!strcmp(name, "v6_few_channels"))
        return d.c <= 4 && d.c * d.r * d.s <= 36;
    if (!strcmp(name, "v7_filter_taps"))
        return d.r <= 3 && d.s <= 3;
    if (!strncmp(name, "2d_", 3))
        return d.c == 1 && d.k == 1;
    return false;
}

struct rung_pass {
    int rung, pass;
};

/* Every (rung, pass) the table has a launcher for: vendor_nhwc on bwd_weight_nhwc, v5 on
 * bwd_weight_bias, the rest on bwd_weight and bwd_weight_bias. */
ParameterizedTestParameters(wgrad_gpu, rung_matches_reference)
{
    const struct chapter *ch = &wgrad_chapter;
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

/* Each shape in each dtype the rung has: verified, or declined as unsupported where the rung
 * need not take it (must_take); and each rung must run at some shape. Every launcher notes
 * what ran: a rung of the table (its own name, or the one it handed the shape to), or for
 * the vendor's, one of cuDNN's algorithms. */
ParameterizedTest(struct rung_pass *rp, wgrad_gpu, rung_matches_reference, NEEDS_GPU)
{
    const struct chapter *ch = &wgrad_chapter;
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
            const int rc = ladder_check(ch, r, rp->pass, (enum dtype)t, shapes[s], 900 + s, &v,
                                        why, sizeof why);
            const char *noted = kl_take_rung_note();
            SKIP_IF_GPU_LACKS_RUNG(rc, why);
            if (rc == -1 && !strncmp(why, "unsupported", 11)) {
                cr_expect(!must_take(r->name, dims_of_text(shapes[s]), (enum dtype)t),
                          "%s %s %s must take %s, but said: %s", r->name, ch->passes[rp->pass],
                          dtype_name(t), shapes[s], why);
                snprintf(declined, sizeof declined, "%s at %s: %s", dtype_name(t), shapes[s], why);
                continue;
            }
            ran++;
            /* cuDNN's fp16 kernels may round more than once: two roundings' worth. */
            if (r->shown_for_error && t == DT_FP16 && rc == 1)
                cr_expect_lt(v.norm_rel_err, 2e-3, "%s fp16 at %s: relative error %g, more than "
                             "two roundings", r->name, shapes[s], v.norm_rel_err);
            else
                cr_expect_eq(rc, 0, "%s %s %s at %s: %s element %zu is %g, reference %g",
                             r->name, ch->passes[rp->pass], dtype_name(t), shapes[s],
                             rc == 1 ? "wrong:" : why, v.first_bad, v.bad_out, v.bad_ref);
            if (vendor)
                cr_expect(names_a_cudnn_algorithm(noted), "%s %s at %s noted '%s', not one of "
                          "cuDNN's backward-filter algorithms", r->name, dtype_name(t), shapes[s],
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
    wgrad_v1(a->in[0], a->in[1], a->out[0], NULL, dims_of_shape(&a->p->shape), a->p->dtype,
             a->workspace, s);
}

Test(wgrad_exercise, checker_fails_the_stub, NEEDS_GPU)
{
    expect_checker_fails_the_stub(&wgrad_chapter);
}

Test(wgrad_exercise, checker_passes_a_correct_kernel, NEEDS_GPU)
{
    expect_checker_passes(&wgrad_chapter, 0, bwd_v1);
}
