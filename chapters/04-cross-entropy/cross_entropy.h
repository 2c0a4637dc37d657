/* Chapter 04, cross-entropy: the mean loss over N rows of C logits with integer labels, and its
 * gradient.
 *
 *   loss = (1/N) sum_n (logsumexp(x_n) - x_n[label_n])
 *   dx   = (softmax(x) - onehot(label)) / N          (the gradient of the mean loss)
 *
 * Every rung has one launcher that does what its non-NULL outputs ask: the loss (fwd), the
 * gradient (bwd), or both in one go (fwd_bwd, the pass a training step runs). x and dx hold
 * n_rows x n_classes elements of type t, row-major; labels holds n_rows int32; loss is one fp32.
 * A label outside [0, n_classes) is never used as an index: its row's loss and gradient are NaN,
 * as the reference's are, so the loss is NaN. ce_check_labels says which label was bad. */
#ifndef CROSS_ENTROPY_H
#define CROSS_ENTROPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ladder.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CE_RUNG(v)                                                                             \
    void ce_##v(const void *x, const int32_t *labels, float *loss, void *dx, size_t n_rows,     \
                size_t n_classes, enum dtype t, cudaStream_t s);
CE_RUNG(v1)
CE_RUNG(v2)
CE_RUNG(v3)
CE_RUNG(v4)
CE_RUNG(v5)
CE_RUNG(v6)
CE_RUNG(v7)
CE_RUNG(v8)
CE_RUNG(vendor)
#undef CE_RUNG

/* v5's launcher with the choice v6 makes: early = programmatic dependent launch (sm_90). */
void ce_v5_launch(const void *x, const int32_t *labels, float *loss, void *dx, size_t n_rows,
                  size_t n_classes, enum dtype t, bool early, cudaStream_t s);

/* v7's kernels' static shared memory in bytes modulo 128, OR-ed over all of them. A kernel's
 * ring, in dynamic shared memory, starts where its static variables end, so 0 means every ring
 * starts on a 128-byte line, as its refills need (for the tests). */
size_t ce_v7_ring_misalignment(void);

/* The classroom kernel (exercise.cu): the forward loss only, fp32 only. */
void ce_forward_exercise(const float *x, const int32_t *labels, float *loss, size_t n_rows,
                         size_t n_classes, cudaStream_t s);

/* Host check of labels before a launch: -1 when every label lies in [0, n_classes), else the
 * index of the first one that does not, with a one-line message in why naming it and its
 * value. The kernels need no such check to stay in bounds; a caller uses it to say what was
 * wrong before it spends a launch on a NaN. */
int64_t ce_check_labels(const int32_t *labels, size_t n_rows, size_t n_classes, char *why,
                        size_t why_len);

/* The CPU reference (reference.c), in double, reading x through load_as_double.
 * ce_forward_reference writes the mean loss into *loss; ce_backward_reference writes the
 * n_rows x n_classes gradient into dx. A bad label makes its row NaN in both. */
void ce_forward_reference(const void *x, enum dtype t, const int32_t *labels, size_t n_rows,
                          size_t n_classes, double *loss);
void ce_backward_reference(const void *x, enum dtype t, const int32_t *labels, size_t n_rows,
                           size_t n_classes, double *dx);
/* logsumexp of row `row`, with the row's maximum subtracted first. */
double ce_row_logsumexp(const void *x, enum dtype t, size_t row, size_t n_classes);

extern const struct chapter ce_chapter;

#ifdef __cplusplus
}
#endif
#endif
