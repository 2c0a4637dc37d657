/* Chapter 02: the CPU reference on its own, then every rung against it on the GPU. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <criterion/redirect.h>
#include <math.h>
#include <string.h>

#include "bias_grad.h"
#include "check.h"
#include "gpu.h"

Test(bias_grad_reference, known_values)
{
    /* n = 2, c = 2, hw = 3: channel 0 holds 1..3 and 10..12, channel 1 holds -1, 0.5, 0.5 and
     * 4, 4, 4. */
    const float dy[] = {1, 2, 3, -1, 0.5f, 0.5f, 10, 11, 12, 4, 4, 4};
    struct bias_grad_size z = {2, 2, 3};
    double db[2];
    bias_grad_reference(dy, DT_FP32, z, db);
    cr_expect_eq(db[0], 39);
    cr_expect_eq(db[1], 12);
}

/* db is the gradient of L(b) = sum dy * (x + b[c]) with respect to b: check it against central
 * differences of that forward, computed here in double. */
Test(bias_grad_reference, matches_finite_differences)
{
    enum { N = 3, C = 4, HW = 5 };
    float dy[N * C * HW];
    double x[N * C * HW], b[C], db[C];
    struct rng r = rng_seeded(11);
    for (int i = 0; i < N * C * HW; i++) {
        dy[i] = (float)rng_uniform(&r, -1, 1);
        x[i] = rng_uniform(&r, -1, 1);
    }
    for (int c = 0; c < C; c++)
        b[c] = rng_uniform(&r, -1, 1);
    struct bias_grad_size z = {N, C, HW};
    bias_grad_reference(dy, DT_FP32, z, db);
    const double h = 1e-4;
    for (int k = 0; k < C; k++) {
        double loss[2];
        for (int side = 0; side < 2; side++) {
            double bk = b[k] + (side ? h : -h), sum = 0;
            for (int n = 0; n < N; n++)
                for (int c = 0; c < C; c++)
                    for (int i = 0; i < HW; i++)
                        sum += dy[(n * C + c) * HW + i] * (x[(n * C + c) * HW + i] +
                                                           (c == k ? bk : b[c]));
            loss[side] = sum;
        }
        double fd = (loss[1] - loss[0]) / (2 * h);
        cr_expect(fabs(fd - db[k]) < 1e-8 * (1 + fabs(db[k])), "channel %d: fd %.12g, db %.12g",
                  k, fd, db[k]);
    }
}

Test(bias_grad_reference, reads_fp16_as_stored)
{
    uint16_t dy[3] = {half_from_float(0.1f), half_from_float(0.2f), half_from_float(0.3f)};
    struct bias_grad_size z = {1, 1, 3};
    double db;
    bias_grad_reference(dy, DT_FP16, z, &db);
    double want = (double)half_to_float(dy[0]) + half_to_float(dy[1]) + half_to_float(dy[2]);
    cr_expect_eq(db, want);
}

/* C = 1 and 3, N = 1 and 3, spatial sizes that are no multiple of any block, a pack or a
 * chunk (v4 cuts rows into 4096 fp32 or 8192 fp16 elements), and rows whose starts are not
 * 16-byte aligned (hw odd). */
static const char *const shapes[] = {"1x1x1x1", "3x1x7x7",  "2x3x13x1",  "1x5x33x17",
                                     "4x64x9x11", "2x3x64x64", "1x1x130x130", "3x3x91x91"};

static int is_demonstration(int rung)
{
    return bias_grad_chapter.rungs[rung].shown_for_error != NULL;
}

ParameterizedTestParameters(bias_grad_gpu, rung_matches_reference)
{
    static int rungs[16];
    for (int i = 0; i < bias_grad_chapter.n_rungs; i++)
        rungs[i] = i;
    return cr_make_param_array(int, rungs, (size_t)bias_grad_chapter.n_rungs);
}

ParameterizedTest(int *rung, bias_grad_gpu, rung_matches_reference, NEEDS_GPU)
{
    const struct rung *r = &bias_grad_chapter.rungs[*rung];
    if (is_demonstration(*rung))
        cr_skip_test("%s is shown for its error; see fp16_sums_are_inexact", r->name);
    for (int t = DT_FP32; t <= DT_FP16; t++) {
        if (!(r->dtypes & (1u << t)))
            continue;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            struct verify_result v;
            char why[256] = "";
            int rc = ladder_check(&bias_grad_chapter, r, 0, (enum dtype)t, shapes[s], 100 + s, &v,
                                  why, sizeof why);
            SKIP_IF_GPU_LACKS_RUNG(rc, why);
            cr_expect_eq(rc, 0, "%s %s at %s: %s db[%zu] is %g, reference %g", r->name,
                         dtype_name(t), shapes[s], rc == 1 ? "wrong:" : why, v.first_bad,
                         v.bad_out, v.bad_ref);
        }
    }
}

/* The chapter's claim: the same kernel with fp16 sums is far less accurate than with fp32 sums
 * (v3), at the seed shape, and still writes a finite value for every channel. */
Test(bias_grad_gpu, fp16_sums_are_inexact, NEEDS_GPU)
{
    struct verify_result half_sums, float_sums;
    char why[256] = "";
    const struct rung *v5 = rung_named(&bias_grad_chapter, "v5_fp16_accumulate");
    const struct rung *v3 = rung_named(&bias_grad_chapter, "v3_shared_tree");
    int rc5 = ladder_check(&bias_grad_chapter, v5, 0, DT_FP16, "32x128x64x64", 1, &half_sums, why,
                           sizeof why);
    int rc3 = ladder_check(&bias_grad_chapter, v3, 0, DT_FP16, "32x128x64x64", 1, &float_sums, why,
                           sizeof why);
    cr_assert(rc5 == 0 || rc5 == 1, "%s", why);
    cr_assert_eq(rc3, 0, "%s", why);
    cr_expect(isfinite(half_sums.max_abs_err), "an fp16-sum output is NaN or infinite");
    cr_expect(half_sums.max_abs_err > 10 * float_sums.max_abs_err,
              "fp16 sums err %g, fp32 sums err %g", half_sums.max_abs_err,
              float_sums.max_abs_err);
}

/* v6 adds on the tensor cores: its sums must be as accurate as v4's fp32 adds (both round the
 * same sums to fp16 at the end), not v5's fp16 sums; at the seed shape and at one whose rows
 * are not 16-byte aligned (hw odd: the scalar path takes part of each row). */
Test(bias_grad_gpu, tensor_core_sums_are_as_accurate_as_fp32_adds, NEEDS_GPU)
{
    const char *const at[] = {"32x128x64x64", "3x64x91x91"};
    const struct rung *v6 = rung_named(&bias_grad_chapter, "v6_tensor_core_sum");
    const struct rung *v4 = rung_named(&bias_grad_chapter, "v4_split_shuffle");
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        struct verify_result mma, adds;
        char why[256] = "";
        int rc6 = ladder_check(&bias_grad_chapter, v6, 0, DT_FP16, at[i], 7, &mma, why,
                               sizeof why);
        SKIP_IF_GPU_LACKS_RUNG(rc6, why);
        cr_assert_eq(rc6, 0, "v6 at %s: %s", at[i], why);
        int rc4 = ladder_check(&bias_grad_chapter, v4, 0, DT_FP16, at[i], 7, &adds, why,
                               sizeof why);
        cr_assert_eq(rc4, 0, "v4 at %s: %s", at[i], why);
        cr_expect(mma.max_abs_err <= 1.5 * adds.max_abs_err,
                  "at %s: tensor-core sums err %g, fp32 adds err %g", at[i], mma.max_abs_err,
                  adds.max_abs_err);
    }
}

/* The exercise checker fails the untouched stub and passes a correct kernel (v3's). */
Test(bias_grad_exercise, checker_fails_the_stub, NEEDS_GPU)
{
    expect_checker_fails_the_stub(&bias_grad_chapter);
}

static void bwd_v3(const struct launch_args *a, cudaStream_t s)
{
    const int64_t *d = a->p->shape.dim;
    struct bias_grad_size z = {d[0], d[1], d[2] * d[3]};
    bias_grad_v3(a->in[0], a->out[0], z, a->p->dtype, s);
}

Test(bias_grad_exercise, checker_passes_a_correct_kernel, NEEDS_GPU)
{
    expect_checker_passes(&bias_grad_chapter, 0, bwd_v3);
}

/* v4's and v6's grids have a block for each chunk of BIAS_GRAD_MIN_CHUNK (4096) elements of
 * every row: N C chunks must stay below 2^31, checked before anything is allocated. */
Test(bias_grad_program, refuses_just_past_the_grid_limit, .init = redirect_output)
{
    struct shape s;
    char why[256] = "";
    cr_assert_eq(shape_parse("1x2147483647x1x1", &s, why, sizeof why), 0);
    cr_expect_eq(bias_grad_chapter.check_shape(&s, why, sizeof why), 0, "refused: %s", why);
    cr_assert_eq(shape_parse("1x2147483648x1x1", &s, why, sizeof why), 0);
    cr_expect_neq(bias_grad_chapter.check_shape(&s, why, sizeof why), 0);
    cr_expect(strstr(why, "below 2^31") != NULL, "the reason was: %s", why);
    /* 2^30 rows of 2 chunks each (4097 elements): one chunk past the grid. */
    cr_assert_eq(shape_parse("1073741824x1x1x4097", &s, why, sizeof why), 0);
    cr_expect_neq(bias_grad_chapter.check_shape(&s, why, sizeof why), 0);
    const char *argv[] = {"02-bias-grad", "--shape", "1x2147483648x1x1"};
    cr_expect_eq(ladder_main(&bias_grad_chapter, 3, (char **)argv), KL_EXIT_USAGE);
}

Test(bias_grad_program, rejects_bad_shapes, .init = redirect_output)
{
    const char *bad[] = {"32x128x64", "1x2x3x4x5", "0x1x1x1", "4x4x4x4-k2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *argv[] = {"02-bias-grad", "--shape", bad[i]};
        cr_expect_eq(ladder_main(&bias_grad_chapter, 3, (char **)argv), KL_EXIT_USAGE, "%s",
                     bad[i]);
    }
}
