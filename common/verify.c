#include "verify.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define UNCHECKED_BITS 0x7ff4c0ffee5eed00ull /* a signalling NaN: no arithmetic produces one */

double verify_unchecked(void)
{
    uint64_t bits = UNCHECKED_BITS;
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

int verify_is_unchecked(double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return bits == UNCHECKED_BITS;
}

struct tolerance tolerance_for(enum dtype t, size_t reduction_len)
{
    double growth = sqrt((double)(reduction_len ? reduction_len : 1));
    struct tolerance tol;
    switch (t) {
    case DT_FP16: /* one rounding of the output: 2^-11 relative, plus fp32 accumulation */
        tol.atol = 1e-5 * growth;
        tol.rtol = 1e-3 + 1e-5 * growth;
        break;
    case DT_I32:
    case DT_U8:
        tol.atol = 0;
        tol.rtol = 0;
        break;
    case DT_FP32:
    default:
        tol.atol = 1e-6 * growth;
        tol.rtol = 1e-5 * growth;
        break;
    }
    return tol;
}

struct verify_result verify(const void *out, enum dtype t, const double *ref, size_t n,
                            struct tolerance tol)
{
    struct verify_result r = {1, 0, 0, 0, 0, 0, 0, 0, 0, n};
    double err2 = 0, ref2 = 0;
    /* The absolute part grows with the output's largest value when that is above 1: rounding
     * errors follow the magnitude of what was added, so a sum near 0 among sums near 700 may
     * carry the error of its neighbours. It never shrinks below tol.atol: an output that is
     * small by cancellation (softmax backward on a constant row) carries the error of its
     * larger terms, and fp16 cannot resolve differences below its subnormal spacing. */
    double ref_max = 1;
    for (size_t i = 0; i < n; i++)
        if (isfinite(ref[i]) && fabs(ref[i]) > ref_max)
            ref_max = fabs(ref[i]);
    double atol = tol.atol * ref_max;
    for (size_t i = 0; i < n; i++) {
        if (verify_is_unchecked(ref[i]))
            continue;
        r.n_checked++;
        double o = load_as_double(out, t, i), e = ref[i];
        int bad;
        if (isnan(e) || isnan(o)) {
            bad = !(isnan(e) && isnan(o));
        } else if (isinf(e) || isinf(o)) {
            bad = o != e;
        } else {
            double diff = fabs(o - e);
            bad = !(diff <= atol + tol.rtol * fabs(e));
            if (diff > r.max_abs_err)
                r.max_abs_err = diff;
            if (e != 0 && diff / fabs(e) > r.max_rel_err)
                r.max_rel_err = diff / fabs(e);
            err2 += diff * diff;
            ref2 += e * e;
        }
        if (bad) {
            if (r.ok) {
                r.first_bad = i;
                r.bad_out = o;
                r.bad_ref = e;
            }
            r.ok = 0;
            r.n_bad++;
        }
    }
    if (!r.ok && (isnan(r.bad_out) || isinf(r.bad_out)))
        r.max_abs_err = INFINITY; /* a NaN or infinity where a number belongs is no small error */
    r.norm_rel_err = ref2 > 0 ? sqrt(err2 / ref2) : (err2 > 0 ? INFINITY : 0);
    return r;
}
