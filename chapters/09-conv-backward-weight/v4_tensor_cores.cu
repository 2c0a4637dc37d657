/* v4, tensor cores: v3's split product on mma.sync, fp16 in, fp32 sums.
 *
 * Idea: the product is the same (dw = dY col over slices of N P Q), but each warp now issues
 * 16 x 8 x 16 tensor-core products. Their operands want the reduction (pixels) in pairs along
 * a register, and a B row of 8 channels at one pixel: so x is staged channels-last, the R rows
 * under a 16-pixel segment of one output row, and every tap (r, s) is read as a window shifted
 * by s along those rows (split_mma.cuh): one staging of x serves the R S taps, and each dy
 * fragment a warp loads serves its 9 taps. A block holds 64 filters x 32 channels x 9 taps of
 * sums; the N P Q side is cut into slices as in v3, the slices added by a second pass
 * (split.cu) in order.
 * What changed from v3: the multiply-adds move from FMA units (64 FLOP/clk a quadrant) to
 * tensor cores (1024), and a loaded x element serves all the taps that cover it instead of
 * being gathered once per tap. Segments waste what lies past Q (14 of 16 used at 14x14).
 * Expected: loads, not the tensor cores, bound it: each segment moves R (15 + S) x 32 x-pairs
 * and 64 x 16 dy values through registers into shared memory for 18 mma a warp. Perhaps
 * 80-100 TFLOP/s, chapter 07's v5's rate: 50-60 us at the seed (cuDNN 83), 75-90 at resnet.
 * Limits: fp16; R (15 stride + S) <= 128 (3x3 up to stride 2, 5x5 and 7x7 at stride 1).
 * Measured (H200): seed 183 us (26.3 TFLOP/s, 0.46x cuDNN's 84.9); resnet 265 (1.10x). */
#include "split_mma.cuh"

extern "C" const char *wgrad_v4_unsupported(struct conv2d_dims d, enum dtype t)
{
    return split_mma_unsupported(d, t);
}

template <typename T>
static void backward(const T *x, const T *dy, T *dw, T *db, conv2d_dims d, void *workspace,
                     cudaStream_t s)
{
    (void)db;
    launch_split_mma<false>((const __half *)x, (const __half *)dy, (__half *)dw, NULL, d,
                            workspace, s);
}

WGRAD_LAUNCHER(v4, 0)
