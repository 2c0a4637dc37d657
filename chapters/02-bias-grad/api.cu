/* Chapter 02's entry point (api.h): a rung by the shape of the rows it sums.
 *
 * dy is N x C rows of H W contiguous elements. The rules come from the sweep,
 * bench/results/h200/02-bias-grad.csv (the H200, graph replay, cold L2):
 * - H W = 1 (a linear layer's bias, 256x1000x1x1): every row is one element, and v2's
 *   atomics, one an element, win by 11x over the next rung;
 * - H W < 512 (64x512x14x14): v4's chunks of 4096 elements are mostly empty; v3's block per
 *   channel wins, by 1.7x (fp32) and 2.0x (fp16) over v4;
 * - fp16 over 2^19 elements a channel (N H W; 64x256x112x112, 802816): v6's tensor-core sums
 *   lead v4 by 11%; below (64x256x56x56, 200704) v4 leads by 3.5%, and v6 needs sm_80;
 * - otherwise v4, the chapter's general rung. */
#include "api.h"
#include "bias_grad.cuh"

#define V6_FROM_ELEMENTS_A_CHANNEL ((int64_t)1 << 19)

extern "C" size_t bias_grad_workspace_bytes(struct bias_grad_dims d, enum dtype t)
{
    (void)t;
    /* v2's C sums, or v4's and v6's partials: a float a chunk of each of the N x C rows. */
    const int64_t hw = d.h * d.w;
    const int64_t chunks = (hw + BIAS_GRAD_MIN_CHUNK - 1) / BIAS_GRAD_MIN_CHUNK;
    const int64_t floats = d.n * d.c * chunks > d.c ? d.n * d.c * chunks : d.c;
    return (size_t)floats * sizeof(float);
}

extern "C" void bias_grad(const void *dy, void *db, struct bias_grad_dims d, enum dtype t,
                          void *workspace, cudaStream_t s)
{
    const struct bias_grad_size z = {d.n, d.c, d.h * d.w};
    if (z.hw == 1)
        bias_grad_v2(dy, db, z, t, workspace, s);
    else if (z.hw < 512)
        bias_grad_v3(dy, db, z, t, s);
    else if (t == DT_FP16 && z.n * z.hw >= V6_FROM_ELEMENTS_A_CHANNEL && kl_device_cc() >= 80)
        bias_grad_v6(dy, db, z, t, workspace, s);
    else
        bias_grad_v4(dy, db, z, t, workspace, s);
}
