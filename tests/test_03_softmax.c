/* Chapter 03: the CPU reference on its own, then every rung against it on the GPU. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <criterion/redirect.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gpu.h"
#include "softmax.h"

/* ---- the reference ---- */

Test(softmax_reference, known_values)
{
    const float x[] = {0.0f, logf(2.0f), logf(3.0f)};
    const struct softmax_dims d = {1, 3, 1, 1};
    double y[3];
    softmax_forward_reference(x, DT_FP32, d, y);
    for (int c = 0; c < 3; c++)
        cr_expect(fabs(y[c] - (c + 1) / 6.0) < 1e-7, "softmax(0, ln 2, ln 3)[%d] = %.9f, not %d/6",
                  c, y[c], c + 1);
}

/* N = 2, C = 3, H x W = 1 x 2: row (n, s) holds its channels at n 6 + c 2 + s. Each row is
 * (0, ln 2, ln 3) plus its own constant, which softmax ignores; rows 1 and 3 are reversed. */
Test(softmax_reference, strided_rows)
{
    const float l2 = logf(2.0f), l3 = logf(3.0f);
    const float x[12] = {
        0 + 1.f, l3 - 2.f, l2 + 1.f, l2 - 2.f, l3 + 1.f, 0 - 2.f, /* n = 0: c-major, s inner */
        0 + 3.f, l3 + 4.f, l2 + 3.f, l2 + 4.f, l3 + 3.f, 0 + 4.f, /* n = 1 */
    };
    const struct softmax_dims d = {2, 3, 1, 2};
    double y[12];
    softmax_forward_reference(x, DT_FP32, d, y);
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < 3; c++) {
            double want0 = (c + 1) / 6.0, want1 = (3 - c) / 6.0;
            cr_expect(fabs(y[n * 6 + c * 2 + 0] - want0) < 2e-6, "n %d c %d s 0: %.9f not %.9f",
                      n, c, y[n * 6 + c * 2], want0);
            cr_expect(fabs(y[n * 6 + c * 2 + 1] - want1) < 2e-6, "n %d c %d s 1: %.9f not %.9f",
                      n, c, y[n * 6 + c * 2 + 1], want1);
        }
}

/* Large magnitudes: exp(1000) overflows a double, so only a max-subtracted softmax gets this. */
Test(softmax_reference, large_values_are_stable)
{
    const float x[] = {1000.0f, 1001.0f, -60000.0f, 60000.0f};
    const struct softmax_dims d = {2, 2, 1, 1};
    double y[4];
    softmax_forward_reference(x, DT_FP32, d, y);
    const double e = exp(1.0);
    cr_expect(fabs(y[0] - 1 / (1 + e)) < 1e-15 && fabs(y[1] - e / (1 + e)) < 1e-15,
              "softmax(1000, 1001) = (%g, %g)", y[0], y[1]);
    cr_expect(y[2] == 0 && y[3] == 1, "softmax(-60000, 60000) = (%g, %g)", y[2], y[3]);
}

Test(softmax_reference, constant_row_and_single_channel)
{
    float x[7];
    for (int i = 0; i < 7; i++)
        x[i] = 3.25f;
    double y[7];
    softmax_forward_reference(x, DT_FP32, (struct softmax_dims){1, 7, 1, 1}, y);
    for (int i = 0; i < 7; i++)
        cr_expect(fabs(y[i] - 1 / 7.0) < 1e-15, "a constant row gives 1/C, not %g", y[i]);
    softmax_forward_reference(x, DT_FP32, (struct softmax_dims){1, 1, 7, 1}, y);
    for (int i = 0; i < 7; i++)
        cr_expect_eq(y[i], 1.0, "C = 1 gives exactly 1, not %.17g", y[i]);
}

Test(softmax_reference, rows_sum_to_one)
{
    enum { N = 3, C = 7, H = 2, W = 5, COUNT = N * C * H * W };
    float x[COUNT];
    struct rng r = rng_seeded(11);
    for (int i = 0; i < COUNT; i++)
        x[i] = (float)rng_uniform(&r, -80, 80);
    double y[COUNT];
    softmax_forward_reference(x, DT_FP32, (struct softmax_dims){N, C, H, W}, y);
    for (int n = 0; n < N; n++)
        for (int s = 0; s < H * W; s++) {
            double sum = 0;
            for (int c = 0; c < C; c++) {
                double v = y[n * C * H * W + c * H * W + s];
                cr_expect(v >= 0 && v <= 1, "y = %g is no probability", v);
                sum += v;
            }
            cr_expect(fabs(sum - 1) < 1e-12, "row (%d, %d) sums to %.17g", n, s, sum);
        }
}

Test(softmax_reference, reads_fp16_as_stored)
{
    const uint16_t x[] = {half_from_float(0.333f), half_from_float(0.0f)};
    double y[2];
    softmax_forward_reference(x, DT_FP16, (struct softmax_dims){1, 2, 1, 1}, y);
    const double v = half_to_float(half_from_float(0.333f));
    cr_expect(fabs(y[0] - exp(v) / (exp(v) + 1)) < 1e-15,
              "the reference must see the rounded fp16 value");
}

Test(softmax_reference, backward_known_values)
{
    const float y[] = {0.5f, 0.5f}, dy[] = {1.0f, 0.0f};
    double dx[2];
    softmax_backward_reference(y, dy, DT_FP32, (struct softmax_dims){1, 2, 1, 1}, dx);
    cr_expect(dx[0] == 0.25 && dx[1] == -0.25, "dx = (%g, %g), not (0.25, -0.25)", dx[0], dx[1]);
}

/* dL/dx for L = sum(dy * softmax(x)) by central differences of the forward reference, against
 * the backward reference given y = softmax(x). */
Test(softmax_reference, backward_matches_finite_differences)
{
    enum { N = 2, C = 5, H = 1, W = 3, COUNT = N * C * H * W };
    const struct softmax_dims d = {N, C, H, W};
    float x[COUNT], dy[COUNT], y[COUNT];
    double yd[COUNT], dx[COUNT], yp[COUNT], ym[COUNT];
    struct rng r = rng_seeded(5);
    for (int i = 0; i < COUNT; i++) {
        x[i] = (float)rng_uniform(&r, -2, 2);
        dy[i] = (float)rng_uniform(&r, -1, 1);
    }
    softmax_forward_reference(x, DT_FP32, d, yd);
    for (int i = 0; i < COUNT; i++)
        y[i] = (float)yd[i];
    softmax_backward_reference(y, dy, DT_FP32, d, dx);
    const float h = 1.0f / 1024;
    for (int i = 0; i < COUNT; i++) {
        const float keep = x[i], plus = keep + h, minus = keep - h;
        x[i] = plus;
        softmax_forward_reference(x, DT_FP32, d, yp);
        x[i] = minus;
        softmax_forward_reference(x, DT_FP32, d, ym);
        x[i] = keep;
        double lp = 0, lm = 0;
        for (int k = 0; k < COUNT; k++)
            lp += dy[k] * yp[k], lm += dy[k] * ym[k];
        double fd = (lp - lm) / ((double)plus - (double)minus);
        cr_expect(fabs(fd - dx[i]) < 2e-6, "x[%d]: finite difference %.9f, backward %.9f", i, fd,
                  dx[i]);
    }
}

/* ---- every rung on the GPU ---- */

struct rung_pass {
    int rung, pass;
};

/* The odd shapes (N = 1, 3; C = 1, 7, 1000, 4099; H W = 1, 49), then the edges between
 * the rungs' mappings: one thread per row up to 16 (backward) or 32 (forward) channels, a warp
 * per row, a block per row, rows staged in shared memory (past 16384 values), streamed rows
 * (past the stage), strided rows past 1024 channels, N H W not a multiple of any block,
 * rows pipelined through a resident block, several per block (v7), and images held on chip
 * (v8, v9): 1, 2 or 4 positions a thread, clusters of 1 to 8 blocks with a shorter last slab,
 * more images than fit the GPU at once, and teams of 2 to 5 blocks taking 2 or 3 images each
 * in turn (70x600x14x14). */
static const char *const shapes[] = {
    "1x1x1x1",     "3x1x1x1",      "1x1x7x7",     "3x1x7x7",     "1x7x1x1",      "3x7x1x1",
    "1x7x7x7",     "3x7x7x7",      "1x1000x1x1",  "3x1000x1x1",  "1x1000x7x7",   "3x1000x7x7",
    "1x4099x1x1",  "3x4099x1x1",   "1x4099x7x7",  "3x4099x7x7",  "1000x10x1x1",  "7x16x1x1",
    "7x17x1x1",    "5x32x1x1",     "5x33x1x1",    "3x20x5x5",    "2x40x1x2",     "5x1024x1x1",
    "2x513x3x5",   "2x1024x2x3",   "2x1025x2x3",  "2x16411x1x1", "2x32768x1x1",  "1x40000x1x1",
    "1x100003x1x1", "1x200003x1x1", "3x12288x1x1", "1000x2048x1x1", "2x1000x14x14", "2x3001x4x4",
    "1x6007x8x8",  "3x40x1x2",     "2x1000x5x5",  "2x1000x2x7",  "600x40x2x2",  "70x600x14x14",
};

static void free_params(struct criterion_test_params *crp)
{
    cr_free(crp->params);
}

static struct criterion_test_params every_rung_and_pass(void)
{
    int n = softmax_chapter.n_rungs * softmax_chapter.n_passes;
    struct rung_pass *params = cr_malloc(sizeof *params * (size_t)n);
    for (int i = 0; i < n; i++)
        params[i] = (struct rung_pass){i / softmax_chapter.n_passes, i % softmax_chapter.n_passes};
    return cr_make_param_array(struct rung_pass, params, (size_t)n, free_params);
}

/* Verifies rung (as given, or a copy with another fill) at every shape in both dtypes. */
static void expect_verified(const struct chapter *ch, const struct rung *r, int pass,
                            const char *const *list, size_t count, const char *what)
{
    for (int t = DT_FP32; t <= DT_FP16; t++) {
        for (size_t s = 0; s < count; s++) {
            struct verify_result v;
            char why[256] = "";
            int rc = ladder_check(ch, r, pass, (enum dtype)t, list[s], 1000 + s, &v, why,
                                  sizeof why);
            SKIP_IF_GPU_LACKS_RUNG(rc, why);
            cr_expect_eq(rc, 0, "%s %s %s at %s%s: %s element %zu is %g, reference %g",
                         r->name, ch->passes[pass], dtype_name(t), list[s], what,
                         rc == 1 ? "wrong:" : why, v.first_bad, v.bad_out, v.bad_ref);
        }
    }
}

ParameterizedTestParameters(softmax_gpu, rung_matches_reference)
{
    return every_rung_and_pass();
}

ParameterizedTest(struct rung_pass *rp, softmax_gpu, rung_matches_reference, NEEDS_GPU)
{
    expect_verified(&softmax_chapter, &softmax_chapter.rungs[rp->rung], rp->pass, shapes,
                    sizeof shapes / sizeof shapes[0], "");
}

/* Special inputs: a copy of the chapter with another fill. */
static const char *const special_shapes[] = {"3x7x1x1", "3x1000x7x7", "3x4099x1x1",
                                             "2x32768x1x1", "1x40000x1x1"};

/* Logits of large magnitude: +-80 in fp32; in fp16 up to +-60000, which only a max-subtracted
 * softmax survives. Backward: y the softmax of such logits (mostly 0 or 1). */
static void fill_large(struct problem *p, struct rng *r)
{
    double a = p->dtype == DT_FP16 ? 60000 : 80;
    fill_uniform(p->host_in[0], p->dtype, p->in[0].count, r, -a, a);
    if (p->pass == 1) {
        size_t n = p->in[0].count;
        double *y = malloc(n * sizeof *y);
        cr_assert(y);
        softmax_forward_reference(p->host_in[0], p->dtype,
                                  (struct softmax_dims){p->shape.dim[0], p->shape.dim[1],
                                                        p->shape.dim[2], p->shape.dim[3]},
                                  y);
        for (size_t i = 0; i < n; i++)
            store_from_double(p->host_in[0], p->dtype, i, y[i]);
        free(y);
        fill_uniform(p->host_in[1], p->dtype, n, r, -1, 1);
    }
}

/* Logits in [1000, 1008]: close together, so the answer is no one-hot, yet exp(1000) overflows
 * fp32 (and fp16 far sooner) without the max subtracted. Forward only: the backward's y is a
 * probability. */
static void fill_offset(struct problem *p, struct rng *r)
{
    fill_uniform(p->host_in[0], p->dtype, p->in[0].count, r, 1000, 1008);
}

/* Every row constant: y = 1/C forward; y = 1/C and dy constant backward, so dx = 0. */
static void fill_constant(struct problem *p, struct rng *r)
{
    (void)r;
    size_t n = p->in[0].count;
    for (size_t i = 0; i < n; i++)
        store_from_double(p->host_in[0], p->dtype, i,
                          p->pass == 0 ? 3.25 : 1.0 / (double)p->shape.dim[1]);
    if (p->pass == 1)
        for (size_t i = 0; i < n; i++)
            store_from_double(p->host_in[1], p->dtype, i, 0.5);
}

ParameterizedTestParameters(softmax_gpu, special_inputs)
{
    return every_rung_and_pass();
}

ParameterizedTest(struct rung_pass *rp, softmax_gpu, special_inputs, NEEDS_GPU)
{
    struct chapter ch = softmax_chapter;
    const struct rung *r = &softmax_chapter.rungs[rp->rung];
    const size_t count = sizeof special_shapes / sizeof special_shapes[0];
    ch.fill = fill_large;
    expect_verified(&ch, r, rp->pass, special_shapes, count, " with large magnitudes");
    if (rp->pass == 0) {
        ch.fill = fill_offset;
        expect_verified(&ch, r, rp->pass, special_shapes, count, " with logits near 1000");
    }
    ch.fill = fill_constant;
    expect_verified(&ch, r, rp->pass, special_shapes, count, " with constant rows");
}

/* C = 1: every output is exactly 1 forward (exp(0) / exp(0)) and exactly 0 backward
 * (y = 1, so dy - y dy = 0). cuDNN's arithmetic is not ours to promise: the vendor rung need
 * only meet the tolerance, which rung_matches_reference checks. */
ParameterizedTestParameters(softmax_gpu, single_channel_is_exact)
{
    return every_rung_and_pass();
}

ParameterizedTest(struct rung_pass *rp, softmax_gpu, single_channel_is_exact, NEEDS_GPU)
{
    const struct rung *r = &softmax_chapter.rungs[rp->rung];
    if (!strcmp(r->name, "vendor"))
        cr_skip_test("the vendor rung is checked against the tolerance only");
    static const char *const ones[] = {"1x1x1x1", "5x1x1x1", "3x1x7x7", "1000x1x1x1"};
    for (int t = DT_FP32; t <= DT_FP16; t++)
        for (size_t s = 0; s < sizeof ones / sizeof ones[0]; s++) {
            struct verify_result v;
            char why[256] = "";
            int rc = ladder_check(&softmax_chapter, r, rp->pass, (enum dtype)t, ones[s], 3, &v,
                                  why, sizeof why);
            SKIP_IF_GPU_LACKS_RUNG(rc, why);
            cr_expect(rc == 0 && v.max_abs_err == 0, "%s %s %s at %s: error %g (%s)", r->name,
                      softmax_chapter.passes[rp->pass], dtype_name(t), ones[s], v.max_abs_err,
                      rc == 0 ? "not exact" : why);
        }
}

/* Pointers that are not 16-byte aligned: the rung runs on copies of the tensors placed one
 * element past an aligned address, so the vector paths must fall back to their scalar ones.
 * The vendor rung is left out: cuDNN's alignment rules are its own, not this chapter's code. */
static const struct rung *shifted_rung;

static void launch_misaligned(const struct launch_args *a, cudaStream_t s)
{
    const struct problem *p = a->p;
    const size_t esize = dtype_size(p->dtype), bytes = p->in[0].count * esize;
    const size_t slot = bytes + 256;
    char *buf;
    CUDA_CHECK(cudaMalloc((void **)&buf, slot * (size_t)(p->n_in + p->n_out)));
    struct launch_args b = *a;
    for (int i = 0; i < p->n_in; i++) {
        b.in[i] = buf + (size_t)i * slot + esize;
        CUDA_CHECK(cudaMemcpy((void *)b.in[i], a->in[i], bytes, cudaMemcpyDeviceToDevice));
    }
    for (int i = 0; i < p->n_out; i++)
        b.out[i] = buf + (size_t)(p->n_in + i) * slot + esize;
    shifted_rung->launch[p->pass](&b, s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < p->n_out; i++)
        CUDA_CHECK(cudaMemcpy(a->out[i], b.out[i], bytes, cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaFree(buf));
}

ParameterizedTestParameters(softmax_gpu, rung_handles_unaligned_pointers)
{
    return every_rung_and_pass();
}

ParameterizedTest(struct rung_pass *rp, softmax_gpu, rung_handles_unaligned_pointers, NEEDS_GPU)
{
    if (!strcmp(softmax_chapter.rungs[rp->rung].name, "vendor"))
        cr_skip_test("the vendor rung's alignment rules are cuDNN's");
    static const char *const aligned_rows[] = {"3x64x1x1", "5x1000x1x1", "3x2048x1x1",
                                               "2x32768x1x1", "1x40000x1x1", "3x64x7x7"};
    shifted_rung = &softmax_chapter.rungs[rp->rung];
    struct rung shifted = *shifted_rung;
    shifted.launch[rp->pass] = launch_misaligned;
    expect_verified(&softmax_chapter, &shifted, rp->pass, aligned_rows,
                    sizeof aligned_rows / sizeof aligned_rows[0], ", unaligned");
}

/* ---- the exercise ---- */

/* The checker fails the untouched stub and passes a correct kernel (v4's forward, which is
 * the online softmax the exercise asks for). */
static void fwd_v4(const struct launch_args *a, cudaStream_t s)
{
    const int64_t *d = a->p->shape.dim;
    softmax_forward_v4(a->in[0], a->out[0], (struct softmax_dims){d[0], d[1], d[2], d[3]},
                       a->p->dtype, s);
}

Test(softmax_exercise, checker_fails_the_stub, NEEDS_GPU)
{
    expect_checker_fails_the_stub(&softmax_chapter);
}

Test(softmax_exercise, checker_passes_a_correct_kernel, NEEDS_GPU)
{
    expect_checker_passes(&softmax_chapter, 0, fwd_v4);
}

/* ---- the program ---- */

/* Exit 0 on a small odd shape (with a GPU every rung verified; without one the CPU reference
 * timed). */
Test(softmax_program, runs_and_exits_0, .init = redirect_output)
{
    const char *argv[] = {"03-softmax", "--shape", "3x7x5x5", "--iters", "3"};
    cr_expect_eq(ladder_main(&softmax_chapter, 5, (char **)argv), KL_EXIT_OK);
}

/* Bad shapes: a one-line message and exit 2, GPU or not. */
Test(softmax_program, bad_shapes_exit_2, .init = redirect_output)
{
    const char *const bad[] = {"8x10x28", "8x10x28x28x2", "8x10x28x28-k2", "8x10x0x28",
                               "2x2147483648x1x1", "65536x1x65536x1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *argv[] = {"03-softmax", "--shape", bad[i]};
        cr_expect_eq(ladder_main(&softmax_chapter, 3, (char **)argv), KL_EXIT_USAGE,
                     "--shape %s must be refused", bad[i]);
    }
    fflush(stderr);
    cr_expect_stderr_neq_str("", "each refusal must say why");
}

Test(softmax_program, check_shape_names_the_problem)
{
    struct shape s;
    char why[256];
    cr_assert_eq(shape_parse("8x10x28", &s, why, sizeof why), 0);
    cr_expect_neq(softmax_chapter.check_shape(&s, why, sizeof why), 0);
    cr_expect(strstr(why, "4 dimensions") != NULL, "the reason was: %s", why);
    cr_assert_eq(shape_parse("8x10x28x28-k2", &s, why, sizeof why), 0);
    cr_expect_neq(softmax_chapter.check_shape(&s, why, sizeof why), 0);
    cr_expect(strstr(why, "window") != NULL, "the reason was: %s", why);
    cr_assert_eq(shape_parse("8x10x28x28", &s, why, sizeof why), 0);
    cr_expect_eq(softmax_chapter.check_shape(&s, why, sizeof why), 0);
}

/* A row's loops step in int up to 256 channels past C: C = 2^31 - 257 is taken, one more is
 * refused, and the program says so in one line with exit 2, before any allocation. */
Test(softmax_program, refuses_just_past_the_index_limit, .init = redirect_output)
{
    struct shape s;
    char why[256] = "";
    cr_assert_eq(shape_parse("1x2147483391x1x1", &s, why, sizeof why), 0);
    cr_expect_eq(softmax_chapter.check_shape(&s, why, sizeof why), 0, "refused: %s", why);
    cr_assert_eq(shape_parse("1x2147483392x1x1", &s, why, sizeof why), 0);
    cr_expect_neq(softmax_chapter.check_shape(&s, why, sizeof why), 0);
    cr_expect(strstr(why, "at most 2^31 - 257") != NULL, "the reason was: %s", why);
    const char *argv[] = {"03-softmax", "--shape", "1x2147483392x1x1"};
    cr_expect_eq(ladder_main(&softmax_chapter, 3, (char **)argv), KL_EXIT_USAGE);
}

/* ---- the second program, build/bin/03-copy-ceiling (`make test` builds it) ---- */

/* Runs the copy ceiling with `args`: its exit status, and what it printed. */
static int run_copy_ceiling(const char *args, char *said, size_t size)
{
    return run_program("03-copy-ceiling", args, said, size);
}

Test(softmax_copy_ceiling, refuses_other_flags_and_bad_shapes)
{
    char said[512];
    cr_expect_eq(run_copy_ceiling("--iters 3", said, sizeof said), 2, "it said: %s", said);
    cr_expect(strstr(said, "takes only --shape NxCxHxW (got '--iters')") != NULL, "it said: %s",
              said);
    cr_expect_eq(run_copy_ceiling("--shape", said, sizeof said), 2, "it said: %s", said);
    cr_expect_eq(run_copy_ceiling("--shape 8x0x28x28", said, sizeof said), 2, "it said: %s",
                 said);
    cr_expect(strstr(said, "bad --shape '8x0x28x28'") != NULL, "it said: %s", said);
}

/* Its copies are checked byte for byte (here 12 bytes in fp32 and 14 in fp16 lie past the last
 * 16-byte vector)
 * and the rungs against the reference; any wrong one makes it exit 1. */
Test(softmax_copy_ceiling, verifies_its_copies_and_rungs, NEEDS_GPU)
{
    char said[8192];
    cr_expect_eq(run_copy_ceiling("--shape 3x7x5x7", said, sizeof said), 0, "it said: %s", said);
    cr_expect(strstr(said, "every copy and every rung timed verified") != NULL, "it said: %s",
              said);
    cr_expect(strstr(said, "fastest rung") != NULL, "it said: %s", said);
}
