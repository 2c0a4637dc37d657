/* Chapter 01: the CPU reference on its own, then every rung against it on the GPU. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <criterion/redirect.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gpu.h"
#include "relu.h"

Test(relu_reference, known_values)
{
    const float x[] = {-2.0f, -0.5f, -0.0f, 0.0f, 0.25f, 3.0f, NAN};
    const float dy[] = {1, 2, 3, 4, 5, 6, 7};
    const double y_want[] = {0, 0, 0, 0, 0.25, 3, NAN};
    const double dx_want[] = {0, 0, 0, 0, 5, 6, 0};
    double y[7], dx[7];
    relu_forward_reference(x, DT_FP32, 7, y);
    relu_backward_reference(x, dy, DT_FP32, 7, dx);
    for (int i = 0; i < 6; i++) {
        cr_expect_eq(y[i], y_want[i], "relu(%g) = %g", (double)x[i], y[i]);
        cr_expect_eq(dx[i], dx_want[i], "dx at x = %g is %g", (double)x[i], dx[i]);
    }
    cr_expect(isnan(y[6]), "NaN propagates forward");
    cr_expect_eq(dx[6], 0);
}

Test(relu_reference, reads_fp16_as_stored)
{
    const uint16_t x[] = {half_from_float(-1.5f), half_from_float(0.333f)};
    double y[2];
    relu_forward_reference(x, DT_FP16, 2, y);
    cr_expect_eq(y[0], 0);
    cr_expect_eq(y[1], (double)half_to_float(half_from_float(0.333f)),
                 "the reference must see the rounded fp16 value");
}

/* dL/dx for L = sum(dy * relu(x)) by central differences of the forward reference. */
Test(relu_reference, backward_matches_finite_differences)
{
    enum { N = 257 };
    double x[N], dy[N], dx[N], yp[N], ym[N];
    struct rng r = rng_seeded(5);
    for (int i = 0; i < N; i++) {
        x[i] = rng_uniform(&r, -2, 2);
        if (fabs(x[i]) < 0.01)
            x[i] = 0.5; /* keep the kink out of reach of the step */
        dy[i] = rng_uniform(&r, -1, 1);
    }
    float xf[N], dyf[N];
    for (int i = 0; i < N; i++)
        xf[i] = (float)x[i], dyf[i] = (float)dy[i];
    relu_backward_reference(xf, dyf, DT_FP32, N, dx);
    const double h = 1e-3;
    for (int i = 0; i < N; i++) {
        float plus = (float)(xf[i] + h), minus = (float)(xf[i] - h);
        relu_forward_reference(&plus, DT_FP32, 1, yp);
        relu_forward_reference(&minus, DT_FP32, 1, ym);
        double fd = dyf[i] * (yp[0] - ym[0]) / ((double)plus - (double)minus);
        cr_expect(fabs(fd - dx[i]) < 1e-6, "x = %g: finite difference %g, backward %g", x[i], fd,
                  dx[i]);
    }
}

/* Every rung x pass; each test runs both dtypes at every size below. */
struct rung_pass {
    int rung, pass;
};

static const char *const sizes[] = {"1", "2", "31", "1023", "1048579", "3x5x7"};

static void free_params(struct criterion_test_params *crp)
{
    cr_free(crp->params);
}

ParameterizedTestParameters(relu_gpu, rung_matches_reference)
{
    int n = relu_chapter.n_rungs * relu_chapter.n_passes;
    struct rung_pass *params = cr_malloc(sizeof *params * (size_t)n);
    for (int i = 0; i < n; i++)
        params[i] = (struct rung_pass){i / relu_chapter.n_passes, i % relu_chapter.n_passes};
    return cr_make_param_array(struct rung_pass, params, (size_t)n, free_params);
}

ParameterizedTestParameters(relu_gpu, rung_handles_unaligned_pointers)
{
    return relu_gpu_rung_matches_reference_param();
}

ParameterizedTest(struct rung_pass *rp, relu_gpu, rung_matches_reference, NEEDS_GPU)
{
    const struct rung *r = &relu_chapter.rungs[rp->rung];
    const char *pass = relu_chapter.passes[rp->pass];
    for (int t = DT_FP32; t <= DT_FP16; t++) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            struct verify_result v;
            char why[256] = "";
            int rc = ladder_check(&relu_chapter, r, rp->pass, (enum dtype)t, sizes[s],
                                  1000 + s, &v, why, sizeof why);
            cr_expect_eq(rc, 0, "%s %s %s at %s: %s element %zu is %g, reference %g", r->name,
                         pass, dtype_name(t), sizes[s], rc == 1 ? "wrong:" : why, v.first_bad,
                         v.bad_out, v.bad_ref);
        }
    }
}

/* Pointers that are not 16-byte aligned: the rung under test runs element 0 on its own, then
 * elements 1..n-1 from pointers one element past the aligned ones, so the vector rungs must
 * take their scalar paths and still write every element. */
static const struct rung *shifted_rung;

static void launch_shifted(const struct launch_args *a, cudaStream_t s)
{
    struct problem q = *a->p;
    struct launch_args b = *a;
    size_t n = q.in[0].count, esize = dtype_size(q.dtype);
    b.p = &q;
    for (int i = 0; i < q.n_in; i++)
        q.in[i].count = 1;
    q.out[0].count = 1;
    shifted_rung->launch[q.pass](&b, s);
    if (n == 1)
        return;
    for (int i = 0; i < q.n_in; i++) {
        q.in[i].count = n - 1;
        b.in[i] = (const char *)a->in[i] + esize;
    }
    q.out[0].count = n - 1;
    b.out[0] = (char *)a->out[0] + esize;
    shifted_rung->launch[q.pass](&b, s);
}

ParameterizedTest(struct rung_pass *rp, relu_gpu, rung_handles_unaligned_pointers, NEEDS_GPU)
{
    shifted_rung = &relu_chapter.rungs[rp->rung];
    struct rung shifted = *shifted_rung;
    shifted.launch[rp->pass] = launch_shifted;
    for (int t = DT_FP32; t <= DT_FP16; t++) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            struct verify_result v;
            char why[256] = "";
            int rc = ladder_check(&relu_chapter, &shifted, rp->pass, (enum dtype)t, sizes[s], 7,
                                  &v, why, sizeof why);
            cr_expect_eq(rc, 0, "%s %s %s at %s, unaligned: %s element %zu is %g, reference %g",
                         shifted.name, relu_chapter.passes[rp->pass], dtype_name(t), sizes[s],
                         rc == 1 ? "wrong:" : why, v.first_bad, v.bad_out, v.bad_ref);
        }
    }
}

/* The exercise checker fails the untouched stub and passes a correct kernel (v3's forward,
 * which is what the exercise asks for). */
static void fwd_v3(const struct launch_args *a, cudaStream_t s)
{
    relu_forward_v3(a->in[0], a->out[0], a->p->in[0].count, a->p->dtype, s);
}

Test(relu_exercise, checker_fails_the_stub, NEEDS_GPU)
{
    expect_checker_fails_the_stub(&relu_chapter);
}

Test(relu_exercise, checker_passes_a_correct_kernel, NEEDS_GPU)
{
    expect_checker_passes(&relu_chapter, 0, fwd_v3);
}

/* The program end to end: exit 0 on a small odd shape (with a GPU every rung verified; without
 * one the CPU reference timed), and exit 3 with a message for a shape no memory holds. */
Test(relu_program, runs_and_exits_0, .init = redirect_output)
{
    const char *argv[] = {"01-relu", "--shape", "3x1021", "--iters", "3"};
    cr_expect_eq(ladder_main(&relu_chapter, 5, (char **)argv), KL_EXIT_OK);
}

Test(relu_program, too_large_for_memory_exits_3, .init = redirect_output)
{
    const char *argv[] = {"01-relu", "--shape", "100000x100000x1000", "--iters", "1"};
    cr_expect_eq(ladder_main(&relu_chapter, 5, (char **)argv), KL_EXIT_CUDA);
    fflush(stderr);
    cr_expect_stderr_neq_str("", "a message must say what ran out");
}

/* ReLU's rungs index in 64 bits (size_t), so its only bound is the shape parser's: 2^48
 * elements, which keeps every count and byte count exact. 2^48 elements are taken (checked
 * here, never allocated); 2^48 + 1 = 65537 x 4294901761 are refused before anything else:
 * exit 2, nothing on stdout, one line on stderr saying why. */
Test(relu_shape, refuses_just_past_the_index_limit, .init = redirect_output)
{
    struct shape s;
    char why[256] = "";
    cr_expect(shape_parse("65536x4294967296", &s, why, sizeof why) == 0 &&
                  relu_chapter.check_shape(&s, why, sizeof why) == 0,
              "2^48 elements refused: %s", why);
    why[0] = '\0';
    cr_expect(shape_parse("65537x4294901761", &s, why, sizeof why) != 0 ||
                  relu_chapter.check_shape(&s, why, sizeof why) != 0,
              "2^48 + 1 elements taken");
    cr_expect(strstr(why, "more than 2^48 elements") != NULL, "the reason was: %s", why);

    const char *argv[] = {"01-relu", "--shape", "65537x4294901761"};
    cr_expect_eq(ladder_main(&relu_chapter, 3, (char **)argv), KL_EXIT_USAGE,
                 "--shape 65537x4294901761 must be refused");
    char out[4096], err[4096];
    read_redirected(cr_get_redirected_stdout(), out, sizeof out);
    read_redirected(cr_get_redirected_stderr(), err, sizeof err);
    cr_expect_str_eq(out, "", "nothing but the one line: stdout had %s", out);
    cr_expect_eq(count_lines(err), 1, "one line: %s", err);
    cr_expect(strstr(err, "more than 2^48 elements") != NULL, "the line was: %s", err);
}
