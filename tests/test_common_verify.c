/* Verification must catch a wrong value, a NaN and an element left unwritten, and must pass
 * outputs that differ from the reference only by rounding. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "verify.h"

#define N 64

static double ref[N];
static float out[N];

static void setup(void)
{
    for (int i = 0; i < N; i++) {
        ref[i] = (i - 20) * 0.37;
        out[i] = (float)ref[i];
    }
}

TestSuite(verify, .init = setup);

Test(verify, passes_rounded_values)
{
    struct verify_result r = verify(out, DT_FP32, ref, N, tolerance_for(DT_FP32, 1));
    cr_expect(r.ok);
    cr_expect_eq(r.n_bad, 0);
    cr_expect(r.max_abs_err < 1e-6 && r.norm_rel_err < 1e-7);
}

Test(verify, catches_a_wrong_value)
{
    out[17] += 1e-3f;
    out[40] = -out[40];
    struct verify_result r = verify(out, DT_FP32, ref, N, tolerance_for(DT_FP32, 1));
    cr_expect(!r.ok);
    cr_expect_eq(r.first_bad, 17);
    cr_expect_eq(r.n_bad, 2);
    cr_expect_float_eq(r.bad_ref, ref[17], 1e-12);
    cr_expect(r.max_abs_err > 1e-3);
}

Test(verify, catches_nan_and_unwritten)
{
    uint32_t poison = 0xffffffffu; /* what the harness writes before every run */
    memcpy(&out[5], &poison, sizeof poison);
    out[9] = NAN;
    struct verify_result r = verify(out, DT_FP32, ref, N, tolerance_for(DT_FP32, 1));
    cr_expect(!r.ok);
    cr_expect_eq(r.first_bad, 5);
    cr_expect_eq(r.n_bad, 2);
    cr_expect(isnan(r.bad_out));
}

Test(verify, nan_matches_only_nan_and_inf_only_itself)
{
    ref[3] = NAN;
    out[3] = NAN;
    ref[4] = INFINITY;
    out[4] = INFINITY;
    cr_expect(verify(out, DT_FP32, ref, N, tolerance_for(DT_FP32, 1)).ok);
    out[4] = -INFINITY;
    cr_expect(!verify(out, DT_FP32, ref, N, tolerance_for(DT_FP32, 1)).ok);
    out[4] = INFINITY;
    out[3] = 0;
    cr_expect(!verify(out, DT_FP32, ref, N, tolerance_for(DT_FP32, 1)).ok);
}

Test(verify, fp16_tolerance_is_one_rounding)
{
    uint16_t h[N];
    for (int i = 0; i < N; i++)
        h[i] = half_from_float((float)ref[i]);
    cr_expect(verify(h, DT_FP16, ref, N, tolerance_for(DT_FP16, 1)).ok);
    h[30] = (uint16_t)(h[30] + 4); /* at least 3.5 units in the last place off */
    struct verify_result r = verify(h, DT_FP16, ref, N, tolerance_for(DT_FP16, 1));
    cr_expect(!r.ok);
    cr_expect_eq(r.first_bad, 30);
}

Test(verify, tolerance_grows_with_reduction_length)
{
    struct tolerance a = tolerance_for(DT_FP32, 1), b = tolerance_for(DT_FP32, 4096);
    cr_expect(b.atol > a.atol && b.rtol > a.rtol);
    cr_expect(tolerance_for(DT_FP16, 1).rtol > a.rtol);
}

/* A sampled reference: the elements it left unchecked are skipped whatever the output holds
 * there, and counted out of n_checked; the checked ones are still held to the tolerance. */
Test(verify, skips_only_unchecked_elements)
{
    for (int i = 0; i < N; i += 3)
        ref[i] = verify_unchecked();
    out[0] = 1e6f;  /* unchecked: ignored */
    out[3] = NAN;   /* unchecked: ignored */
    struct verify_result r = verify(out, DT_FP32, ref, N, tolerance_for(DT_FP32, 1));
    cr_expect(r.ok);
    cr_expect_eq(r.n_total, N);
    cr_expect_eq(r.n_checked, N - (N + 2) / 3);
    out[4] += 1.f; /* checked */
    r = verify(out, DT_FP32, ref, N, tolerance_for(DT_FP32, 1));
    cr_expect(!r.ok);
    cr_expect_eq(r.first_bad, 4);
    cr_expect(!verify_is_unchecked(NAN) && !verify_is_unchecked(0.0));
    cr_expect(verify_is_unchecked(verify_unchecked()));
}
