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

#include "api.h"
#include "ladder.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Blocks of a kernel whose mean goes through ce_finish_mean (cross_entropy.cuh), or clusters of
 * v5's: one partial each. Grids are capped at this and their rows loop beyond it. */
#define CE_MAX_BLOCKS 8192

/* What v3 to v8 keep between the blocks of a launch and from one launch to the next, at the
 * start of the caller's workspace, laid out alike for every rung so that one workspace serves
 * them all at any shape. Zeroed once before its first launch: every launch leaves blocks_done
 * and mean_word at 0 again, v5's loss launches count themselves in launches_done, and the
 * partials are written before they are read. Each counter has a 128-byte line to itself, so
 * that its atomics never queue behind the blocks' stores of partials into the same line (at
 * 256x1000 the lines of their own save 0.15 us of v3's 6.2). v8's span states follow at
 * CE_SPAN_STATES_OFFSET. */
struct ce_workspace {
    unsigned blocks_done;             /* ce_finish_mean: blocks that handed in their partial */
    unsigned line_of_blocks_done[31];
    unsigned launches_done;           /* v5: launches that took a mean, its slots' tag base */
    unsigned line_of_launches_done[31];
    unsigned long long mean_word;     /* v5's one atomic: clusters arrived, kept out, their sum */
    unsigned long long line_of_mean_word[15];
    float partial_sums[CE_MAX_BLOCKS];               /* ce_finish_mean: a block's sum */
    unsigned long long partial_slots[CE_MAX_BLOCKS]; /* v5: a cluster's sum under its tag */
};

/* v8's span states start on the first 256-byte boundary past the struct: in a workspace from
 * cudaMalloc they are as aligned as an allocation of their own. */
#define CE_SPAN_STATES_OFFSET ((sizeof(struct ce_workspace) + 255) / 256 * 256)

/* The bytes of workspace v3 to v8 need for n_rows x n_classes logits of type t (v8's span
 * states are the part that grows with the shape); cross_entropy_workspace_bytes (api.h). */
size_t ce_workspace_bytes(size_t n_rows, size_t n_classes, enum dtype t);

/* The rungs that keep no state: v1 and v2 zero the loss and add into it with atomics, and the
 * vendor rung keeps its log-probabilities in a buffer of its own, grown on the first call. */
#define CE_RUNG(v)                                                                             \
    void ce_##v(const void *x, const int32_t *labels, float *loss, void *dx, size_t n_rows,     \
                size_t n_classes, enum dtype t, cudaStream_t s);
CE_RUNG(v1)
CE_RUNG(v2)
CE_RUNG(vendor)
#undef CE_RUNG

/* The rungs that keep their mean's partials and counters (and v8 its span states) in
 * `workspace`: device memory of at least ce_workspace_bytes bytes, laid out as struct
 * ce_workspace, zeroed before its first launch. Launches that may run at the same time need a
 * workspace each; launches in stream order, or in one graph in order, may share one. */
#define CE_RUNG_WITH_WORKSPACE(v)                                                              \
    void ce_##v(const void *x, const int32_t *labels, float *loss, void *dx, size_t n_rows,     \
                size_t n_classes, enum dtype t, void *workspace, cudaStream_t s);
CE_RUNG_WITH_WORKSPACE(v3)
CE_RUNG_WITH_WORKSPACE(v4)
CE_RUNG_WITH_WORKSPACE(v5)
CE_RUNG_WITH_WORKSPACE(v6)
CE_RUNG_WITH_WORKSPACE(v7)
CE_RUNG_WITH_WORKSPACE(v8)
#undef CE_RUNG_WITH_WORKSPACE

/* v5's launcher with the choice v6 makes: early = programmatic dependent launch (sm_90). */
void ce_v5_launch(const void *x, const int32_t *labels, float *loss, void *dx, size_t n_rows,
                  size_t n_classes, enum dtype t, bool early, void *workspace, cudaStream_t s);

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
