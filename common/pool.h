/* Device memory for a problem: a pool of input/output sets, so that timed launches can each
 * read inputs no earlier launch left in the L2 (README.md, Timing). */
#ifndef KL_POOL_H
#define KL_POOL_H

#include "ladder.h"

#ifdef __cplusplus
extern "C" {
#endif

struct pool {
    char *base;
    size_t stride;                       /* bytes of one set, tensors 256-byte aligned */
    size_t in_off[KL_MAX_TENSORS], out_off[KL_MAX_TENSORS];
    /* One workspace for every set: the launches of a sample run in order on one stream, as
     * the entry points' contract allows, and it stays in the L2 as a rung's own scratch
     * would in a program that calls it again and again. */
    void *workspace;
    size_t workspace_bytes;
    int nsets;
};

/* Bytes of one set of p's tensors. */
size_t pool_set_bytes(const struct problem *p);

/* How many sets of p's tensors fit in free GPU memory beside a workspace of workspace_bytes;
 * 0 with a message in why if none. */
size_t pool_sets_that_fit(const struct problem *p, size_t workspace_bytes, char *why,
                          size_t why_len);

/* Allocates up to want sets (at least one) and a workspace of workspace_bytes, and copies p's
 * inputs into each set. Returns 0, or -1 with a message in why when not even one set fits in
 * GPU memory. */
int pool_create(struct pool *pl, const struct problem *p, size_t workspace_bytes, int want,
                char *why, size_t why_len);

/* Zeroes the workspace, as a rung's first launch on it expects. */
void pool_zero_workspace(const struct pool *pl, cudaStream_t s);
void pool_destroy(struct pool *pl);

struct launch_args pool_args(const struct pool *pl, const struct problem *p, int set);

/* Fills set's outputs with NaN (all bits set is NaN in fp32 and fp16 alike). */
void pool_poison_outputs(const struct pool *pl, const struct problem *p, int set,
                         cudaStream_t s);

/* Runs launch once on set 0, outputs poisoned and workspaces zeroed first, and compares every output with the
 * reference, except those in the mask not_written (1u << i). */
struct verify_result pool_verify(const struct pool *pl, const struct problem *p, launch_fn launch,
                                 unsigned not_written, cudaStream_t s, int *bad_tensor);

#ifdef __cplusplus
}
#endif
#endif
