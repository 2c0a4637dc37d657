/* v5, the transpose as a convolution: at stride 1, chapter 07's forward on the flipped filter.
 *
 * Idea: at stride 1 the input gradient is itself a forward convolution (dgrad.cuh): dx is dy
 * correlated with w' = w with filters and channels swapped and its taps turned around,
 * w'[c, k, r, s] = w[k, c, R - 1 - r, S - 1 - s], at padding R - 1 - pad. So one small kernel
 * writes w' (K C R S elements: 74 KB at resnet in fp16) and chapter 07's conv2d_forward does
 * the rest: dy becomes its x, with K channels, and dx its y, with C filters. Every rung of
 * that chapter comes with it: its tensor-core implicit GEMM (v5) in fp16, its Winograd (v6) in
 * fp32 for 3x3, its implicit GEMM (v4) elsewhere, and the rule that picks among them.
 * What changed from v4: nothing of v4's kernel is left; the lesson is that the gradient of a
 * stride-1 convolution needs no kernel of its own. At stride 2 the same trick would correlate
 * with a dy stuffed with zeros, as v4 does; v6 splits the work instead.
 * Cost: the forward's, on a problem of the same FLOPs (C and K swap places), plus one launch
 * and 2 K C R S elements of traffic for w'.
 * Expected: chapter 07's times at the swapped shape: large about its 54 us in fp16 (K' = 32
 * filters, half of what the forward had: perhaps 60-70 us), resnet about 85 us in fp16 and
 * 133 us in fp32; 1.5-3x cuDNN's backward-data, which these layers' anchors put near its
 * forward.
 * Limits: stride 1, a square filter and pad <= R - 1 (the flipped padding must be at least
 * 0), else unsupported: v6 and v4 take the rest.
 * Measured (H200): large 45.4 us fp16 (3.86x cuDNN) and 91.9 fp32 (2.33x); resnet 82.9 fp16
 * (1.44x) and 133 fp32 (1.00x); at the seed the flip's launch is most of v5's 7.56 us. */
#include "dgrad.cuh"

#define THREADS 256

/* flipped[c, k, r, s] = w[k, c, R - 1 - r, S - 1 - s]: C filters of K channels. */
template <typename T>
__global__ void flip_filters(const T *__restrict__ w, T *__restrict__ flipped, conv2d_dims d)
{
    const int rs = (int)(d.r * d.s), elements = (int)(d.c * d.k) * rs;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < elements;
         e += gridDim.x * blockDim.x) {
        const int c = e / ((int)d.k * rs), k = e / rs % (int)d.k, tap = e % rs;
        flipped[e] = w[(k * (int)d.c + c) * rs + (rs - 1 - tap)];
    }
}

extern "C" const char *dgrad_v5_unsupported(struct conv2d_dims d, enum dtype t)
{
    (void)t;
    if (d.stride != 1)
        return "stride > 1: the flipped filter would need a zero-stuffed dy (v6 splits it)";
    if (d.r != d.s)
        return "a non-square filter: its two flipped paddings differ";
    if (d.pad > d.r - 1)
        return "padding past R - 1: the flipped padding would be negative";
    return NULL;
}

/* The forward that computes dx: dy (N x K x P x Q) as its input, C filters of w'. */
static conv2d_dims forward_dims(conv2d_dims d)
{
    conv2d_dims f;
    char why[200];
    if (conv2d_dims_of(d.n, d.k, d.p, d.q, d.c, d.r, d.s, 1, d.r - 1 - d.pad, &f, why,
                       sizeof why) || f.p != d.h || f.q != d.w) {
        fprintf(stderr, "v5: no forward convolution gives dx's shape: %s\n", why);
        exit(KL_EXIT_USAGE); /* dgrad_v5_unsupported's shapes never get here */
    }
    return f;
}

static size_t flipped_bytes(conv2d_dims d, enum dtype t)
{
    return dgrad_align((size_t)(d.k * d.c * d.r * d.s) * dtype_size(t));
}

extern "C" size_t dgrad_v5_workspace_bytes(struct conv2d_dims d, enum dtype t)
{
    if (dgrad_v5_unsupported(d, t))
        return 0;
    return flipped_bytes(d, t) + conv2d_forward_workspace_bytes(forward_dims(d), t);
}

template <typename T>
static void backward(const T *dy, const T *w, T *dx, conv2d_dims d, void *workspace,
                     cudaStream_t s)
{
    const enum dtype t = sizeof(T) == 4 ? DT_FP32 : DT_FP16;
    flip_filters<T><<<dgrad_blocks(d.c * d.k * d.r * d.s, THREADS), THREADS, 0, s>>>(
        w, (T *)workspace, d);
    LAUNCH_CHECK();
    conv2d_forward(dy, workspace, NULL, dx, forward_dims(d), CONV2D_LINEAR, t,
                   (char *)workspace + flipped_bytes(d, t), s);
    kl_note_rung("v5"); /* chapter 07 noted its rung: the row must name this one */
}

DGRAD_LAUNCHER(v5)
