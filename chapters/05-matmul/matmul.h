/* Chapter 05, matmul: C = A B, row-major, any M, N, K; and the transposed forms A^T B, A B^T.
 *
 * A is M x K, B is K x N, C is M x N, all row-major, of one element type (fp32, or fp16 with
 * fp32 accumulation); A^T B reads A stored K x M, A B^T reads B stored N x K (api.h). Each
 * rung's launcher takes device pointers and the dimensions; the chapter table in main.cu wraps
 * them for the harness. v1 to v10 compute A B alone; v11 and the vendor rung take every form.
 * matmul() in api.h is the entry point the later chapters call (convolution as im2col + GEMM and
 * its two gradients, the CNN's linear layers, need the three forms). */
#ifndef MATMUL_H
#define MATMUL_H

#include <stdint.h>

#include "api.h"
#include "ladder.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MATMUL_RUNG(v)                                                                         \
    void matmul_##v(const void *a, const void *b, void *c, struct matmul_dims d, enum dtype t, \
                    cudaStream_t s);
MATMUL_RUNG(v1)
MATMUL_RUNG(v2)
MATMUL_RUNG(v3) /* also in api.h */
MATMUL_RUNG(v4)
MATMUL_RUNG(v5)
MATMUL_RUNG(v6)
MATMUL_RUNG(v7)
MATMUL_RUNG(v8)
MATMUL_RUNG(v9)
MATMUL_RUNG(v10)
MATMUL_RUNG(vendor)
MATMUL_RUNG(vendor_mma_sync)
#undef MATMUL_RUNG

/* The rungs that take every form: v11 (split K over a cluster) and cuBLAS with the matching
 * transposes. matmul_v11_splits is how many blocks v11 splits K over at d on this GPU (1 below
 * compute capability 9.0), for the tests. */
void matmul_v11(enum matmul_form form, const void *a, const void *b, void *c,
                struct matmul_dims d, enum dtype t, cudaStream_t s);
int matmul_v11_splits(struct matmul_dims d);
void matmul_vendor_form(enum matmul_form form, const void *a, const void *b, void *c,
                        struct matmul_dims d, enum dtype t, cudaStream_t s);

/* NULL where one of cuBLAS's sm_80 tensor-core (mma.sync) kernels takes the shape, else why not
 * (vendor.cu). */
const char *matmul_vendor_mma_sync_unsupported(struct matmul_dims d);

/* NULL where v10 can run on this GPU, else why not (it is built for sm_90a alone). */
const char *matmul_v10_unsupported(void);

void matmul_exercise(const void *a, const void *b, void *c, struct matmul_dims d, enum dtype t,
                     cudaStream_t s);

/* The CPU reference (reference.c), accumulating in double, of C = op(A) op(B) in any form
 * (matmul_reference: A B). The plain ones compute every element; the _sampled ones only `rows`
 * rows and `cols` columns spread over C (first and last included), leaving verify_unchecked()
 * elsewhere, for sizes whose full reference would take minutes. */
void matmul_reference_form(enum matmul_form form, const void *a, const void *b, enum dtype t,
                           struct matmul_dims d, double *c);
void matmul_reference_form_sampled(enum matmul_form form, const void *a, const void *b,
                                   enum dtype t, struct matmul_dims d, int rows, int cols,
                                   double *c);
void matmul_reference(const void *a, const void *b, enum dtype t, struct matmul_dims d,
                      double *c);
void matmul_reference_sampled(const void *a, const void *b, enum dtype t, struct matmul_dims d,
                              int rows, int cols, double *c);

extern const struct chapter matmul_chapter;

#ifdef __cplusplus
}
#endif
#endif
