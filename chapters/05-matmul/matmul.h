/* Chapter 05, matmul: C = A B, row-major, any M, N, K.
 *
 * A is M x K, B is K x N, C is M x N, all row-major, of one element type (fp32, or fp16 with
 * fp32 accumulation). Each rung's launcher takes device pointers and the dimensions; the chapter
 * table in main.cu wraps them for the harness. matmul() in api.h is the entry point the later
 * chapters call (convolution as im2col + GEMM and its two gradients need the three forms). */
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

/* NULL where one of cuBLAS's sm_80 tensor-core (mma.sync) kernels takes the shape, else why not
 * (vendor.cu). */
const char *matmul_vendor_mma_sync_unsupported(struct matmul_dims d);

/* NULL where v10 can run on this GPU, else why not (it is built for sm_90a alone). */
const char *matmul_v10_unsupported(void);

void matmul_exercise(const void *a, const void *b, void *c, struct matmul_dims d, enum dtype t,
                     cudaStream_t s);

/* The CPU reference (reference.c), accumulating in double. matmul_reference computes every
 * element; matmul_reference_sampled only `rows` rows and `cols` columns spread over C (first and
 * last included), leaving verify_unchecked() elsewhere, for sizes whose full reference would
 * take minutes. */
void matmul_reference(const void *a, const void *b, enum dtype t, struct matmul_dims d,
                      double *c);
void matmul_reference_sampled(const void *a, const void *b, enum dtype t, struct matmul_dims d,
                              int rows, int cols, double *c);

extern const struct chapter matmul_chapter;

#ifdef __cplusplus
}
#endif
#endif
