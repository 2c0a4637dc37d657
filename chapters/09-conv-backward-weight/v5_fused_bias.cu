/* v5, db fused: the bias gradient summed from the dy tiles the product already holds.
 *
 * Idea: db[k] = sum over n, p, q of dy[n, k, p, q] is the row sum of the product's left
 * operand, dY. v3 and v4 stage every element of dY in shared memory for the product, so the
 * blocks of the first column tile (the first channels and taps) add their rows while they are
 * there, store them as one more float of their slice's sums, and the second pass adds those
 * slices with the rest (split_fma.cuh, split_mma.cuh, WITH_BIAS). The other rungs sum db with
 * chapter 02's bias_grad after the product: a second pass over dy, its whole N K P Q read
 * again from memory, and a launch.
 * What changed from v3 (fp32) and v4 (fp16, where v4 takes the shape): a few shared-memory
 * reads a step in a quarter of the blocks' first threads; dy is read once, not twice.
 * Expected: saves chapter 02's pass, its best rung's time at N K P Q elements: at resnet
 * 6.4 M dy elements, 12.8 MB in fp16, about 5 us plus a launch; at chapter 10's second layer
 * at batch 32 (200704 elements) mostly the launch, 2-3 us of 10-15.
 * Measured (H200), with db: seed 238 us fp32, 182 fp16; v3 or v4 then bias_grad: 246, 192. */
#include "split_fma.cuh"
#include "split_mma.cuh"

template <typename T>
static void backward(const T *x, const T *dy, T *dw, T *db, conv2d_dims d, void *workspace,
                     cudaStream_t s)
{
    const bool tensor_cores = sizeof(T) == 2 && !split_mma_unsupported(d, DT_FP16);
    if (tensor_cores && db)
        launch_split_mma<true>((const __half *)x, (const __half *)dy, (__half *)dw,
                               (__half *)db, d, workspace, s);
    else if (tensor_cores)
        launch_split_mma<false>((const __half *)x, (const __half *)dy, (__half *)dw, NULL, d,
                                workspace, s);
    else if (db)
        launch_split_fma<T, true>(x, dy, dw, db, d, workspace, s);
    else
        launch_split_fma<T, false>(x, dy, dw, db, d, workspace, s);
}

WGRAD_LAUNCHER(v5, 1)
