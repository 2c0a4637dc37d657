/* Chapter 04: the CPU reference on its own (known values, bad labels, finite differences), the
 * label check and the shapes; then every rung against the reference on the GPU, at odd shapes,
 * with bad labels, with large magnitudes and with misaligned logits. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <criterion/redirect.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cross_entropy.h"
#include "gpu.h"

enum { FWD, BWD, FWD_BWD };

/* ---- The reference against values worked out by hand. */

Test(ce_reference, two_equal_logits_cost_ln2)
{
    const float x[] = {0.0f, 0.0f};
    const int32_t label[] = {0};
    double loss, dx[2];
    ce_forward_reference(x, DT_FP32, label, 1, 2, &loss);
    ce_backward_reference(x, DT_FP32, label, 1, 2, dx);
    cr_expect(fabs(loss - log(2.0)) < 1e-15, "loss %.17g, want ln 2", loss);
    cr_expect(fabs(dx[0] + 0.5) < 1e-15 && fabs(dx[1] - 0.5) < 1e-15,
              "dx (%g, %g), want (-1/2, 1/2)", dx[0], dx[1]);
}

/* Two rows: the mean divides by N, and logits of 1000 (exp overflows even in double) give the
 * same answer as logits of 0, because the row's maximum is subtracted first. */
Test(ce_reference, mean_over_rows_and_large_logits)
{
    const float x[] = {0.0f, 0.0f, 1000.0f, 1000.0f};
    const int32_t labels[] = {0, 1};
    double loss, dx[4];
    ce_forward_reference(x, DT_FP32, labels, 2, 2, &loss);
    ce_backward_reference(x, DT_FP32, labels, 2, 2, dx);
    const double want[] = {-0.25, 0.25, 0.25, -0.25};
    cr_expect(fabs(loss - log(2.0)) < 1e-15, "loss %.17g, want ln 2", loss);
    for (int i = 0; i < 4; i++)
        cr_expect(fabs(dx[i] - want[i]) < 1e-15, "dx[%d] = %g, want %g", i, dx[i], want[i]);
}

Test(ce_reference, four_classes_and_one_class)
{
    const float x4[] = {0, 0, 0, 0};
    const int32_t label3[] = {3};
    double loss, dx[4];
    ce_forward_reference(x4, DT_FP32, label3, 1, 4, &loss);
    ce_backward_reference(x4, DT_FP32, label3, 1, 4, dx);
    cr_expect(fabs(loss - log(4.0)) < 1e-15, "loss %.17g, want ln 4", loss);
    const double want[] = {0.25, 0.25, 0.25, -0.75};
    for (int i = 0; i < 4; i++)
        cr_expect(fabs(dx[i] - want[i]) < 1e-15, "dx[%d] = %g, want %g", i, dx[i], want[i]);

    /* One class: the label is certain, whatever the logit. */
    const float x1[] = {-37.5f};
    const int32_t label0[] = {0};
    ce_forward_reference(x1, DT_FP32, label0, 1, 1, &loss);
    ce_backward_reference(x1, DT_FP32, label0, 1, 1, dx);
    cr_expect_eq(loss, 0.0);
    cr_expect_eq(dx[0], 0.0);
}

/* Logits (0, 1, 2), label 2: loss = log(e^0 + e^1 + e^2) - 2 = log(1 + e^-1 + e^-2). */
Test(ce_reference, three_classes_by_hand)
{
    const float x[] = {0, 1, 2};
    const int32_t label[] = {2};
    double loss, dx[3];
    ce_forward_reference(x, DT_FP32, label, 1, 3, &loss);
    ce_backward_reference(x, DT_FP32, label, 1, 3, dx);
    const double z = 1 + exp(1.0) + exp(2.0);
    cr_expect(fabs(loss - log(1 + exp(-1.0) + exp(-2.0))) < 1e-14, "loss %.17g", loss);
    cr_expect(fabs(dx[0] - 1 / z) < 1e-15 && fabs(dx[1] - exp(1.0) / z) < 1e-15 &&
                  fabs(dx[2] - (exp(2.0) / z - 1)) < 1e-15,
              "dx (%g, %g, %g)", dx[0], dx[1], dx[2]);
}

Test(ce_reference, reads_fp16_as_stored)
{
    const uint16_t x[] = {half_from_float(0.333f), half_from_float(0.0f)};
    const int32_t label[] = {1};
    double loss;
    ce_forward_reference(x, DT_FP16, label, 1, 2, &loss);
    const double a = (double)half_to_float(half_from_float(0.333f));
    cr_expect(fabs(loss - log(1 + exp(a))) < 1e-15, "the reference must see the rounded fp16 "
              "logit: loss %.17g", loss);
    cr_expect(fabs(loss - log(1 + exp(0.333))) > 1e-6, "0.333 is not an fp16 value");
}

/* dL/dx for the mean loss by central differences of the forward reference. */
Test(ce_reference, backward_matches_finite_differences)
{
    enum { N = 3, C = 5 };
    float x[N * C];
    int32_t labels[N];
    struct rng r = rng_seeded(4);
    for (int i = 0; i < N * C; i++)
        x[i] = (float)rng_uniform(&r, -3, 3);
    for (int n = 0; n < N; n++)
        labels[n] = (int32_t)rng_below(&r, C);
    double dx[N * C];
    ce_backward_reference(x, DT_FP32, labels, N, C, dx);
    const double h = 1e-3;
    for (int i = 0; i < N * C; i++) {
        float saved = x[i], plus = (float)(saved + h), minus = (float)(saved - h);
        double lp, lm;
        x[i] = plus;
        ce_forward_reference(x, DT_FP32, labels, N, C, &lp);
        x[i] = minus;
        ce_forward_reference(x, DT_FP32, labels, N, C, &lm);
        x[i] = saved;
        double fd = (lp - lm) / ((double)plus - (double)minus);
        cr_expect(fabs(fd - dx[i]) < 1e-7, "element %d: finite difference %.9g, backward %.9g",
                  i, fd, dx[i]);
    }
}

/* ---- Bad labels: caught by the host check, NaN rows in the reference. */

Test(ce_labels, check_names_the_first_bad_index_and_value)
{
    char why[128] = "";
    const int32_t negative[] = {0, 9, -3, 10};
    cr_expect_eq(ce_check_labels(negative, 4, 10, why, sizeof why), 2);
    cr_expect_str_eq(why, "label 2 is -3; labels must lie in [0, 10)");

    const int32_t one_past[] = {0, 10};
    cr_expect_eq(ce_check_labels(one_past, 2, 10, why, sizeof why), 1);
    cr_expect_str_eq(why, "label 1 is 10; labels must lie in [0, 10)");

    const int32_t extreme[] = {INT32_MIN};
    cr_expect_eq(ce_check_labels(extreme, 1, 10, why, sizeof why), 0);
    cr_expect(strstr(why, "-2147483648") != NULL, "%s", why);

    const int32_t good[] = {0, 9, 5};
    strcpy(why, "untouched");
    cr_expect_eq(ce_check_labels(good, 3, 10, why, sizeof why), -1);
    cr_expect_str_eq(why, "untouched");
}

Test(ce_labels, bad_rows_are_nan_in_the_reference)
{
    const float x[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    const int32_t labels[] = {1, -1, 4};
    double loss, dx[12];
    ce_forward_reference(x, DT_FP32, labels, 3, 4, &loss);
    ce_backward_reference(x, DT_FP32, labels, 3, 4, dx);
    cr_expect(isnan(loss), "a bad label makes the loss NaN, not %g", loss);
    double row0 = 0;
    for (int c = 0; c < 4; c++) {
        cr_expect(!isnan(dx[c]), "row 0 is good: dx[%d] = %g", c, dx[c]);
        row0 += dx[c];
        cr_expect(isnan(dx[4 + c]) && isnan(dx[8 + c]), "rows 1 and 2 are NaN at %d", c);
    }
    cr_expect(fabs(row0) < 1e-15, "a good row of the gradient sums to 0, not %g", row0);
}

/* ---- Shapes and the problem's description. */

static int shape_rejected(const char *text, const char *reason)
{
    struct shape s;
    char why[192] = "";
    int rc = shape_parse(text, &s, why, sizeof why) || ce_chapter.check_shape(&s, why, sizeof why);
    return rc && strstr(why, reason) != NULL;
}

Test(ce_shape, check_shape_says_what_is_wrong)
{
    cr_expect(shape_rejected("10", "2 dimensions, not 1"));
    cr_expect(shape_rejected("2x3x4", "2 dimensions, not 3"));
    cr_expect(shape_rejected("4x5-k2", "no window parameters"));
    cr_expect(shape_rejected("2x2147483648", "labels are int32"));
    cr_expect(shape_rejected("2147483648x2", "rows"));
    const char *good[] = {"1x1", "32x10", "257x4099", "8192x50257"};
    for (int i = 0; i < 4; i++) {
        struct shape s;
        char why[192] = "";
        cr_expect(shape_parse(good[i], &s, why, sizeof why) == 0 &&
                      ce_chapter.check_shape(&s, why, sizeof why) == 0,
                  "%s: %s", good[i], why);
    }
}

/* N and C are each at most 2^31 - 1 (labels are int32; the rungs index a row and a class in
 * 32 bits): 1x2147483647 and 2147483647x1 are taken (checked here, never allocated), one more
 * in either is refused before anything else: exit 2, nothing on stdout, one line on stderr. */
Test(ce_shape, refuses_just_past_the_index_limit, .init = redirect_output)
{
    const char *good[] = {"1x2147483647", "2147483647x1"};
    for (int i = 0; i < 2; i++) {
        struct shape s;
        char why[192] = "";
        cr_expect(shape_parse(good[i], &s, why, sizeof why) == 0 &&
                      ce_chapter.check_shape(&s, why, sizeof why) == 0,
                  "%s refused: %s", good[i], why);
    }
    cr_expect(shape_rejected("1x2147483648", "labels are int32"));
    cr_expect(shape_rejected("2147483648x1", "at most 2^31 - 1 rows"));

    const char *argv[] = {"04-cross-entropy", "--shape", "1x2147483648"};
    cr_expect_eq(ladder_main(&ce_chapter, 3, (char **)argv), KL_EXIT_USAGE,
                 "--shape 1x2147483648 must be refused");
    char out[4096], err[4096];
    read_redirected(cr_get_redirected_stdout(), out, sizeof out);
    read_redirected(cr_get_redirected_stderr(), err, sizeof err);
    cr_expect_str_eq(out, "", "nothing but the one line: stdout had %s", out);
    cr_expect_eq(count_lines(err), 1, "one line: %s", err);
    cr_expect(strstr(err, "labels are int32") != NULL, "the line was: %s", err);
}

static struct problem described(const char *shape_text, int pass, enum dtype t)
{
    struct shape s;
    char why[192];
    struct problem p;
    cr_assert(shape_parse(shape_text, &s, why, sizeof why) == 0);
    cr_assert(problem_init(&p, &ce_chapter, pass, t, &s, why, sizeof why) == 0, "%s", why);
    return p;
}

Test(ce_shape, describe_counts_the_minimum_bytes)
{
    const double n = 8192, c = 50257;
    struct problem p = described("8192x50257", FWD, DT_FP32);
    cr_expect_eq(p.bytes, n * c * 4 + 4 * n + 4);
    cr_expect(p.n_out == 1 && p.out[0].type == DT_FP32 && p.out[0].count == 1);
    cr_expect_eq(p.reduction_len, (size_t)(8192 + 50257));
    p = described("8192x50257", BWD, DT_FP16);
    cr_expect_eq(p.bytes, 2 * n * c * 2 + 4 * n);
    cr_expect(p.n_out == 1 && p.out[0].type == DT_FP16 && p.out[0].count == 8192u * 50257u);
    cr_expect_eq(p.reduction_len, (size_t)50257);
    p = described("8192x50257", FWD_BWD, DT_FP16);
    cr_expect_eq(p.bytes, 2 * n * c * 2 + 4 * n + 4);
    cr_expect(p.n_out == 2 && p.out[0].type == DT_FP32 && p.out[1].type == DT_FP16,
              "the loss is fp32 whatever the logits' type");
    cr_expect(p.in[1].type == DT_I32 && p.in[1].count == 8192);
    /* fp16 lengths admit one fp16 rounding of the log-probabilities (main.cu). */
    cr_expect_eq(described("3x7", FWD, DT_FP16).reduction_len, (size_t)4096);
    cr_expect_eq(described("3x7", BWD, DT_FP16).reduction_len, (size_t)1024);
    cr_expect_eq(described("3x7", FWD_BWD, DT_FP32).reduction_len, (size_t)10);
}

/* ---- Test inputs the chapter's fill never makes. */

/* Labels out of range: one past the last class, -1, and the int32 extremes. */
static void fill_bad_labels(struct problem *p, struct rng *r)
{
    ce_chapter.fill(p, r);
    int32_t *labels = (int32_t *)p->host_in[1];
    size_t n = p->in[1].count;
    labels[n - 1] = (int32_t)p->shape.dim[1];
    if (n > 1)
        labels[0] = -1;
    if (n > 2)
        labels[1] = INT32_MIN;
    if (n > 3)
        labels[2] = INT32_MAX;
}

/* Logits in [-80, 80), a constant row 0 and a nearly one-hot row 1 (+80 among -80s). */
static void fill_large_magnitudes(struct problem *p, struct rng *r)
{
    ce_chapter.fill(p, r);
    size_t n_rows = (size_t)p->shape.dim[0], n_classes = (size_t)p->shape.dim[1];
    fill_uniform(p->host_in[0], p->dtype, p->in[0].count, r, -80.0, 80.0);
    for (size_t c = 0; c < n_classes; c++)
        store_from_double(p->host_in[0], p->dtype, c, 7.0);
    if (n_rows > 1)
        for (size_t c = 0; c < n_classes; c++)
            store_from_double(p->host_in[0], p->dtype, n_classes + c,
                              c == n_classes / 2 ? 80.0 : -80.0);
}

static struct chapter chapter_with_fill(void (*fill)(struct problem *, struct rng *))
{
    struct chapter ch = ce_chapter;
    ch.fill = fill;
    return ch;
}

/* A problem of this shape and pass in fp32, filled by `fill` and its reference computed: for
 * the tests that a fill makes what it claims. The caller frees it. */
static struct problem reference_with_fill(void (*fill)(struct problem *, struct rng *),
                                          const char *shape, int pass, uint64_t seed)
{
    struct chapter ch = chapter_with_fill(fill);
    struct problem p = described(shape, pass, DT_FP32);
    char why[192];
    cr_assert(problem_alloc_host(&p, why, sizeof why) == 0, "%s", why);
    struct rng r = rng_seeded(seed);
    ch.fill(&p, &r);
    ch.reference(&p);
    return p;
}

/* The bad-label fill really makes the reference NaN where the rungs must be: the GPU tests
 * below could not fail otherwise. */
Test(ce_labels, bad_label_fill_puts_nan_in_every_pass)
{
    for (int pass = FWD; pass <= FWD_BWD; pass++) {
        struct problem p = reference_with_fill(fill_bad_labels, "5x7", pass, 3);
        if (pass != BWD)
            cr_expect(isnan(p.ref_out[0][0]), "pass %d: the loss must be NaN", pass);
        if (pass != FWD) {
            const double *dx = p.ref_out[pass == BWD ? 0 : 1];
            for (int row = 0; row < 5; row++)
                cr_expect(isnan(dx[row * 7]) == (row != 3), "pass %d: row %d", pass, row);
        }
        problem_free(&p);
    }
}

/* ---- Every rung on the GPU. */

struct rung_pass {
    int rung, pass;
};

static void free_params(struct criterion_test_params *crp)
{
    cr_free(crp->params);
}

/* Every (rung, pass), the vendor rung included when with_vendor, for ParameterizedTest. */
static struct criterion_test_params rungs_and_passes(int with_vendor)
{
    int n = (ce_chapter.n_rungs - !with_vendor) * ce_chapter.n_passes;
    struct rung_pass *params = cr_malloc(sizeof *params * (size_t)n);
    for (int i = 0; i < n; i++)
        params[i] = (struct rung_pass){i / ce_chapter.n_passes, i % ce_chapter.n_passes};
    return cr_make_param_array(struct rung_pass, params, (size_t)n, free_params);
}

static struct criterion_test_params every_rung_and_pass(void)
{
    return rungs_and_passes(1);
}

/* Verifies rung r of chapter ch at every shape in both dtypes. */
static void check_shapes(const struct chapter *ch, const struct rung *r, int pass,
                         const char *const *shapes, size_t n_shapes, const char *what)
{
    for (int t = DT_FP32; t <= DT_FP16; t++) {
        for (size_t s = 0; s < n_shapes; s++) {
            struct verify_result v;
            char why[256] = "";
            int rc = ladder_check(ch, r, pass, (enum dtype)t, shapes[s], 1000 + s, &v, why,
                                  sizeof why);
            SKIP_IF_GPU_LACKS_RUNG(rc, why);
            cr_expect_eq(rc, 0, "%s %s %s at %s%s: %s element %zu is %g, reference %g",
                         r->name, ch->passes[pass], dtype_name(t), shapes[s], what,
                         rc == 1 ? "wrong:" : why, v.first_bad, v.bad_out, v.bad_ref);
        }
    }
}

/* N = 1, 3 and the prime 257 against C = 1, 7, 1000 and 4099; then shapes at the edges of
 * the mappings: v3's one-block case and its spread, K = 32 and the streamed rows, grids past
 * CE_MAX_BLOCKS (70001 rows of a warp, 8200 rows of a block), v4's 1024-thread rows, resident
 * blocks walking several rows of over 8 slots a thread (v7's waits, 300x50001), and rows
 * too long for shared memory in fp32 (70001) and in fp16 (120007). */
static const char *const shapes[] = {
    "1x1",     "1x7",     "1x1000",    "1x4099",    "3x1",      "3x7",     "3x1000",
    "3x4099",  "257x1",   "257x7",     "257x1000",  "257x4099", "33x10",   "8x1024",
    "32x1025", "70001x3", "8200x1031", "3x30011",   "300x50001", "3x70001", "2x120007",
};

ParameterizedTestParameters(ce_gpu, rung_matches_reference)
{
    return every_rung_and_pass();
}

ParameterizedTest(struct rung_pass *rp, ce_gpu, rung_matches_reference, NEEDS_GPU)
{
    check_shapes(&ce_chapter, &ce_chapter.rungs[rp->rung], rp->pass, shapes,
                 sizeof shapes / sizeof shapes[0], "");
}

/* Bad labels: NaN exactly where the reference has it (the loss, and the bad rows of dx), and
 * no read out of bounds (run under compute-sanitizer memcheck to see that; INT32_MIN would
 * fault without a guard). Rows 0-2 and the last are bad; the rest (none at 1x7 and 3x7) are
 * good and must stay good. */
static const char *const bad_label_shapes[] = {"1x7",   "3x7",     "6x1000",  "5x4099",
                                               "40x10", "257x7",   "6x70001", "2000x1031"};

ParameterizedTestParameters(ce_gpu, rung_handles_bad_labels)
{
    return every_rung_and_pass();
}

ParameterizedTest(struct rung_pass *rp, ce_gpu, rung_handles_bad_labels, NEEDS_GPU)
{
    struct chapter ch = chapter_with_fill(fill_bad_labels);
    check_shapes(&ch, &ce_chapter.rungs[rp->rung], rp->pass, bad_label_shapes,
                 sizeof bad_label_shapes / sizeof bad_label_shapes[0], " with bad labels");
}

static const char *const magnitude_shapes[] = {"1x1", "3x7", "3x1000", "4x4099"};

ParameterizedTestParameters(ce_gpu, rung_handles_large_magnitudes)
{
    return every_rung_and_pass();
}

ParameterizedTest(struct rung_pass *rp, ce_gpu, rung_handles_large_magnitudes, NEEDS_GPU)
{
    struct chapter ch = chapter_with_fill(fill_large_magnitudes);
    check_shapes(&ch, &ce_chapter.rungs[rp->rung], rp->pass, magnitude_shapes,
                 sizeof magnitude_shapes / sizeof magnitude_shapes[0], " with logits of +-80");
}

/* Two fills for the mean's two paths in v5 and v6, which add the rows' losses as fixed-point
 * integers where that is as exact as adding floats, and add the floats otherwise: every row
 * confidently right (logit 10 at the label, 0 elsewhere: a loss of about 0.04 a row, too small
 * for the fixed point), or confidently wrong (-500 at the label, +500 at the next class: about
 * 1000 a row, past the fixed point's room once there are 66 rows or more). */
static void fill_confident_rows(struct problem *p, struct rng *r, double at_label,
                                double at_next)
{
    ce_chapter.fill(p, r);
    const int32_t *labels = (const int32_t *)p->host_in[1];
    const size_t n_rows = (size_t)p->shape.dim[0], n_classes = (size_t)p->shape.dim[1];
    for (size_t row = 0; row < n_rows; row++) {
        const size_t label = (size_t)labels[row], next = (label + 1) % n_classes;
        for (size_t c = 0; c < n_classes; c++) {
            const double v = c == label ? at_label : c == next ? at_next : 0.0;
            store_from_double(p->host_in[0], p->dtype, row * n_classes + c, v);
        }
    }
}

static void fill_confidently_right(struct problem *p, struct rng *r)
{
    fill_confident_rows(p, r, 10.0, 0.0);
}

static void fill_confidently_wrong(struct problem *p, struct rng *r)
{
    fill_confident_rows(p, r, -500.0, 500.0);
}

static const char *const confident_shapes[] = {"3x7", "257x1000", "8200x31"};

/* The two fills make the losses they claim: about 0.04 and 1000 a row. */
Test(ce_labels, confident_fills_make_tiny_and_huge_losses)
{
    void (*fills[])(struct problem *, struct rng *) = {fill_confidently_right,
                                                      fill_confidently_wrong};
    const double want[] = {log(1.0 + 999.0 * exp(-10.0)), 1000.0};
    for (int f = 0; f < 2; f++) {
        struct problem p = reference_with_fill(fills[f], "257x1000", FWD, 5);
        cr_expect(fabs(p.ref_out[0][0] - want[f]) < 1e-6 * want[f], "fill %d: loss %.9g, want %.9g",
                  f, p.ref_out[0][0], want[f]);
        problem_free(&p);
    }
}

ParameterizedTestParameters(ce_gpu, rung_handles_tiny_and_huge_losses)
{
    return every_rung_and_pass();
}

ParameterizedTest(struct rung_pass *rp, ce_gpu, rung_handles_tiny_and_huge_losses, NEEDS_GPU)
{
    struct chapter right = chapter_with_fill(fill_confidently_right);
    struct chapter wrong = chapter_with_fill(fill_confidently_wrong);
    const size_t n = sizeof confident_shapes / sizeof confident_shapes[0];
    check_shapes(&right, &ce_chapter.rungs[rp->rung], rp->pass, confident_shapes, n,
                 " with confidently right rows");
    check_shapes(&wrong, &ce_chapter.rungs[rp->rung], rp->pass, confident_shapes, n,
                 " with confidently wrong rows");
}

/* Logits one element past a 16-byte boundary while dx stays aligned: every row then starts at
 * a different offset in the two, so the vector rungs take their scalar gradient path, and the
 * logits' rows start at new offsets. The wrapper copies the logits to a shifted scratch buffer
 * (outside any capture: ladder_check runs each launcher once, directly). */
static const struct rung *shifted_rung;

static void launch_shifted_logits(const struct launch_args *a, cudaStream_t s)
{
    size_t bytes = a->p->in[0].count * dtype_size(a->p->dtype), esize = dtype_size(a->p->dtype);
    char *scratch;
    CUDA_CHECK(cudaMalloc((void **)&scratch, bytes + esize));
    CUDA_CHECK(cudaMemcpyAsync(scratch + esize, a->in[0], bytes, cudaMemcpyDeviceToDevice, s));
    struct launch_args b = *a;
    b.in[0] = scratch + esize;
    shifted_rung->launch[a->p->pass](&b, s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaFree(scratch));
}

static const char *const shifted_shapes[] = {"5x7", "4x1028", "2x1031", "3x4099", "2x30011"};

/* Our rungs only: how cuDNN treats a misaligned tensor is not this chapter's to test. */
ParameterizedTestParameters(ce_gpu, rung_handles_misaligned_logits)
{
    return rungs_and_passes(0);
}

ParameterizedTest(struct rung_pass *rp, ce_gpu, rung_handles_misaligned_logits, NEEDS_GPU)
{
    shifted_rung = &ce_chapter.rungs[rp->rung];
    struct rung shifted = *shifted_rung;
    shifted.launch[rp->pass] = launch_shifted_logits;
    check_shapes(&ce_chapter, &shifted, rp->pass, shifted_shapes,
                 sizeof shifted_shapes / sizeof shifted_shapes[0], ", logits misaligned");
}

/* ---- The library, api.h: each entry point against the reference, then the workspace's
 * promises: calls on two streams with a workspace each, and calls captured into one graph in
 * order sharing one. */

static struct ce_dims api_dims(const struct problem *p)
{
    return (struct ce_dims){(size_t)p->shape.dim[0], (size_t)p->shape.dim[1]};
}

static void api_forward(const struct launch_args *a, cudaStream_t s)
{
    cross_entropy_forward(a->in[0], (const int32_t *)a->in[1], (float *)a->out[0],
                          api_dims(a->p), a->p->dtype, a->workspace, s);
}

static void api_backward(const struct launch_args *a, cudaStream_t s)
{
    cross_entropy_backward(a->in[0], (const int32_t *)a->in[1], a->out[0], api_dims(a->p),
                           a->p->dtype, a->workspace, s);
}

static void api_fused(const struct launch_args *a, cudaStream_t s)
{
    cross_entropy_fused(a->in[0], (const int32_t *)a->in[1], (float *)a->out[0], a->out[1],
                        api_dims(a->p), a->p->dtype, a->workspace, s);
}

/* The workspace as api.h's query sizes it, not as the chapter's table does. */
static size_t api_workspace_bytes(const struct problem *p)
{
    return cross_entropy_workspace_bytes(api_dims(p), p->dtype);
}

/* Odd shapes, and one in every branch of api.cu's rules for some pass and dtype: few rows
 * (with short and with long rows), short rows, rows of up to 1024 at 200, 1000, 2500 and 8193
 * rows, of up to 4096 (37x1031), 16384 (40x10000) and longer (33x20011, 5x50257). */
static const char *const api_shapes[] = {"1x1",      "3x7",      "5x50257",  "1025x10",
                                         "37x1031",  "200x1000", "1000x1000", "2500x1000",
                                         "8193x200", "40x10000", "33x20011"};

Test(ce_gpu, api_entry_points_match_reference, NEEDS_GPU)
{
    struct chapter ch = ce_chapter;
    ch.workspace_bytes = api_workspace_bytes;
    const struct rung api = {.name = "cross_entropy_*()",
                             .idea = "api.h",
                             .launch = {api_forward, api_backward, api_fused},
                             .dtypes = DT_FLOATS};
    for (int pass = FWD; pass <= FWD_BWD; pass++)
        check_shapes(&ch, &api, pass, api_shapes, sizeof api_shapes / sizeof api_shapes[0],
                     " through api.h");
}

/* One problem on the device for the library's three entry points, with an output of its own
 * for each call, and its reference (the fused pass's: the loss and dx). */
struct api_problem {
    struct problem p;
    struct ce_dims d;
    void *x, *dx_bwd, *dx_fused;
    int32_t *labels;
    float *loss_fwd, *loss_fused;
};

static void api_problem_open(struct api_problem *a, const char *shape, enum dtype t,
                             uint64_t seed)
{
    char why[192];
    a->p = described(shape, FWD_BWD, t);
    cr_assert(problem_alloc_host(&a->p, why, sizeof why) == 0, "%s", why);
    struct rng r = rng_seeded(seed);
    ce_chapter.fill(&a->p, &r);
    ce_chapter.reference(&a->p);
    a->d = api_dims(&a->p);
    const size_t x_bytes = a->p.in[0].count * dtype_size(t);
    CUDA_CHECK(cudaMalloc(&a->x, x_bytes));
    CUDA_CHECK(cudaMalloc(&a->dx_bwd, x_bytes));
    CUDA_CHECK(cudaMalloc(&a->dx_fused, x_bytes));
    CUDA_CHECK(cudaMalloc((void **)&a->labels, a->d.n * sizeof(int32_t)));
    CUDA_CHECK(cudaMalloc((void **)&a->loss_fwd, sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&a->loss_fused, sizeof(float)));
    CUDA_CHECK(cudaMemcpy(a->x, a->p.host_in[0], x_bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(a->labels, a->p.host_in[1], a->d.n * sizeof(int32_t),
                          cudaMemcpyHostToDevice));
}

/* NaN in every output, as the harness leaves them before a run: an output left unwritten
 * fails. */
static void api_problem_poison(const struct api_problem *a, cudaStream_t s)
{
    const size_t x_bytes = a->p.in[0].count * dtype_size(a->p.dtype);
    CUDA_CHECK(cudaMemsetAsync(a->dx_bwd, 0xff, x_bytes, s));
    CUDA_CHECK(cudaMemsetAsync(a->dx_fused, 0xff, x_bytes, s));
    CUDA_CHECK(cudaMemsetAsync(a->loss_fwd, 0xff, sizeof(float), s));
    CUDA_CHECK(cudaMemsetAsync(a->loss_fused, 0xff, sizeof(float), s));
}

static void api_problem_call(const struct api_problem *a, int pass, void *workspace,
                             cudaStream_t s)
{
    const enum dtype t = a->p.dtype;
    if (pass == FWD)
        cross_entropy_forward(a->x, a->labels, a->loss_fwd, a->d, t, workspace, s);
    else if (pass == BWD)
        cross_entropy_backward(a->x, a->labels, a->dx_bwd, a->d, t, workspace, s);
    else
        cross_entropy_fused(a->x, a->labels, a->loss_fused, a->dx_fused, a->d, t, workspace, s);
}

/* One output against the reference, with the tolerance the harness gives that pass. */
static void expect_output(const struct api_problem *a, const void *out, enum dtype t,
                          const double *ref, size_t n, int pass, const char *what,
                          const char *how)
{
    const size_t bytes = n * dtype_size(t);
    void *host = malloc(bytes);
    cr_assert(host);
    CUDA_CHECK(cudaMemcpy(host, out, bytes, cudaMemcpyDeviceToHost));
    const size_t len = described(a->p.shape.text, pass, a->p.dtype).reduction_len;
    const struct verify_result v = verify(host, t, ref, n, tolerance_for(t, len));
    cr_expect(v.ok, "%s %s %s, %s: element %zu is %g, reference %g", a->p.shape.text,
              dtype_name(a->p.dtype), what, how, v.first_bad, v.bad_out, v.bad_ref);
    free(host);
}

static void expect_reference(const struct api_problem *a, const char *how)
{
    const size_t n = a->p.in[0].count;
    const enum dtype t = a->p.dtype;
    expect_output(a, a->loss_fwd, DT_FP32, a->p.ref_out[0], 1, FWD, "forward loss", how);
    expect_output(a, a->dx_bwd, t, a->p.ref_out[1], n, BWD, "backward dx", how);
    expect_output(a, a->loss_fused, DT_FP32, a->p.ref_out[0], 1, FWD_BWD, "fused loss", how);
    expect_output(a, a->dx_fused, t, a->p.ref_out[1], n, FWD_BWD, "fused dx", how);
}

static void api_problem_close(struct api_problem *a)
{
    CUDA_CHECK(cudaFree(a->x));
    CUDA_CHECK(cudaFree(a->dx_bwd));
    CUDA_CHECK(cudaFree(a->dx_fused));
    CUDA_CHECK(cudaFree(a->labels));
    CUDA_CHECK(cudaFree(a->loss_fwd));
    CUDA_CHECK(cudaFree(a->loss_fused));
    problem_free(&a->p);
}

/* A zeroed workspace of `bytes`, as api.h asks. */
static void *zeroed_workspace(size_t bytes)
{
    void *w;
    CUDA_CHECK(cudaMalloc(&w, bytes));
    CUDA_CHECK(cudaMemset(w, 0, bytes));
    return w;
}

/* Two streams at once, each with its own workspace, each running all three entry points a few
 * times over: both problems' rungs take their means through the workspace's counter and
 * partials (v4's blocks on one, v3's warps on the other), thousands of blocks each, so a
 * counter the two shared would mix their blocks and break both losses. */
Test(ce_gpu, api_calls_on_two_streams_with_a_workspace_each, NEEDS_GPU)
{
    struct api_problem a, b;
    api_problem_open(&a, "3000x1031", DT_FP32, 11);
    api_problem_open(&b, "2500x1000", DT_FP16, 12);
    void *wa = zeroed_workspace(cross_entropy_workspace_bytes(a.d, DT_FP32));
    void *wb = zeroed_workspace(cross_entropy_workspace_bytes(b.d, DT_FP16));
    cudaStream_t sa, sb;
    CUDA_CHECK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
    api_problem_poison(&a, sa);
    api_problem_poison(&b, sb);
    for (int round = 0; round < 4; round++) {
        for (int pass = FWD; pass <= FWD_BWD; pass++) {
            api_problem_call(&a, pass, wa, sa);
            api_problem_call(&b, pass, wb, sb);
        }
    }
    CUDA_CHECK(cudaStreamSynchronize(sa));
    CUDA_CHECK(cudaStreamSynchronize(sb));
    expect_reference(&a, "on stream A");
    expect_reference(&b, "on stream B");
    CUDA_CHECK(cudaStreamDestroy(sa));
    CUDA_CHECK(cudaStreamDestroy(sb));
    CUDA_CHECK(cudaFree(wa));
    CUDA_CHECK(cudaFree(wb));
    api_problem_close(&a);
    api_problem_close(&b);
}

/* Nine calls on three problems captured into one graph, in order, all on one workspace of the
 * largest size any of them asks for; the graph replayed twice, outputs poisoned in between, so
 * the second replay finds the workspace as the first left it. The problems reach the rungs
 * that keep something there: v6's tagged slots and its one atomic (200x1000), v4's and v7's
 * block partials (300x5000), v8's span states and v7's pipelines (100x50257). The first calls
 * happen inside the capture, as a caller's may. */
Test(ce_gpu, api_calls_in_one_graph_share_a_workspace, NEEDS_GPU)
{
    struct api_problem probs[3];
    api_problem_open(&probs[0], "200x1000", DT_FP32, 21);
    api_problem_open(&probs[1], "300x5000", DT_FP16, 22);
    api_problem_open(&probs[2], "100x50257", DT_FP16, 23);
    size_t bytes = 0;
    for (int i = 0; i < 3; i++) {
        const size_t need = cross_entropy_workspace_bytes(probs[i].d, probs[i].p.dtype);
        bytes = need > bytes ? need : bytes;
    }
    void *w = zeroed_workspace(bytes);
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    /* Every problem's passes in turn, interleaved, so that each rung follows another's. */
    static const int order[][2] = {{2, FWD}, {0, FWD},     {1, FWD_BWD}, {2, BWD},    {0, FWD_BWD},
                                   {1, FWD}, {2, FWD_BWD}, {0, BWD},     {1, BWD}};
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        api_problem_call(&probs[order[i][0]], order[i][1], w, s);
    CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 2; replay++) {
        for (int i = 0; i < 3; i++)
            api_problem_poison(&probs[i], s);
        CUDA_CHECK(cudaGraphLaunch(exec, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        for (int i = 0; i < 3; i++)
            expect_reference(&probs[i], replay ? "second replay" : "first replay");
    }
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaStreamDestroy(s));
    CUDA_CHECK(cudaFree(w));
    for (int i = 0; i < 3; i++)
        api_problem_close(&probs[i]);
}

/* ---- The exercise checker fails the untouched stub and passes a correct kernel (v3's
 * forward, a warp per row). */

static void fwd_v3(const struct launch_args *a, cudaStream_t s)
{
    ce_v3(a->in[0], (const int32_t *)a->in[1], (float *)a->out[0], NULL,
          (size_t)a->p->shape.dim[0], (size_t)a->p->shape.dim[1], a->p->dtype, a->workspace, s);
}

/* v7's rings start where its kernels' static shared memory ends: a static variable that left a
 * part of a line there would move every ring off its 128-byte lines, and the refills with it
 * (the fp32 forward at the large preset ran at 89.8% of the roof that way, 105.0% on a line). */
Test(ce_gpu, v7_rings_start_on_a_line, NEEDS_GPU)
{
    cr_expect_eq(ce_v7_ring_misalignment(), 0,
                 "a v7 kernel's static shared memory is %zu bytes past a 128-byte line",
                 ce_v7_ring_misalignment());
}

Test(ce_exercise, checker_fails_the_stub, NEEDS_GPU)
{
    expect_checker_fails_the_stub(&ce_chapter);
}

Test(ce_exercise, checker_passes_a_correct_kernel, NEEDS_GPU)
{
    expect_checker_passes(&ce_chapter, FWD, fwd_v3);
}

/* ---- The program end to end. */

Test(ce_program, runs_and_exits_0, .init = redirect_output)
{
    const char *argv[] = {"04-cross-entropy", "--shape", "3x1021", "--iters", "3"};
    cr_expect_eq(ladder_main(&ce_chapter, 5, (char **)argv), KL_EXIT_OK);
}

Test(ce_program, bad_shape_exits_2_with_one_line, .init = redirect_output)
{
    const char *argv[] = {"04-cross-entropy", "--shape", "10"};
    cr_expect_eq(ladder_main(&ce_chapter, 3, (char **)argv), KL_EXIT_USAGE);
    fflush(stderr);
    cr_expect_stderr_eq_str("04-cross-entropy: --shape '10': cross-entropy takes NxC, rows by "
                            "classes: 2 dimensions, not 1 (NxC: N rows (samples) of C logits "
                            "(classes), e.g. 32x10 or 8192x50257)\n");
}
