/* Verification: a GPU output against the CPU reference.
 *
 * The reference is computed in double from the very inputs the GPU read. An element passes when
 * |out - ref| <= atol * max(1, max|ref|) + rtol * |ref| (the max over the whole output); NaN passes only where the reference is NaN too, so an
 * output left unwritten (the harness fills outputs with NaN before every run) always fails.
 * Tolerances live here and nowhere else. */
#ifndef KL_VERIFY_H
#define KL_VERIFY_H

#include <stddef.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tolerance {
    double atol, rtol;
};

/* The tolerance for an output of type t, each element a reduction over reduction_len terms
 * (1 for elementwise operations). Rounding error of a sum grows about as the square root of its
 * length, so both bounds do. */
struct tolerance tolerance_for(enum dtype t, size_t reduction_len);

struct verify_result {
    int ok;
    size_t n_bad;
    double max_abs_err;   /* max |out - ref| */
    double max_rel_err;   /* max |out - ref| / |ref| over elements with ref != 0 */
    double norm_rel_err;  /* ||out - ref|| / ||ref|| (2-norms); 0 when both are 0 */
    size_t first_bad;     /* index of the first failing element, when !ok */
    double bad_out, bad_ref;
    size_t n_checked;     /* elements compared: fewer than n_total when the reference sampled */
    size_t n_total;
};

/* The value a sampled reference leaves in the elements it did not compute (a full reference
 * would take too long: an 8192^3 matmul is 5.5 x 10^11 multiply-adds in double). verify skips
 * them and counts the rest in n_checked. It is a NaN with a payload no arithmetic produces, so
 * an unwritten output (NaN) is still caught wherever the reference did compute. */
double verify_unchecked(void);
int verify_is_unchecked(double v);

/* Compares n elements of out (type t, host memory) against ref, skipping the unchecked ones. */
struct verify_result verify(const void *out, enum dtype t, const double *ref, size_t n,
                            struct tolerance tol);

#ifdef __cplusplus
}
#endif
#endif
