/* The network of chapter 10, the reference report's CNN, as plain numbers that the GPU step,
 * the vendor step, the CPU reference and the PyTorch script share:
 *
 *   x [n,1,28,28] -> conv1 1->16 3x3 pad 1 (+bias) -> ReLU -> maxpool 2x2 -> [n,16,14,14]
 *   -> conv2 16->32 3x3 pad 1 (+bias) -> ReLU -> maxpool 2x2 -> [n,32,7,7] = [n,1568]
 *   -> fc1 1568->128 (+bias) -> ReLU -> fc2 128->10 (+bias) -> softmax cross-entropy (mean)
 *
 * The parameters live in one flat fp32 array, in the order of enum cnn_param, each tensor in
 * PyTorch's layout: a convolution's weight [out][in][3][3], a linear layer's [out][in]. So one
 * SGD update covers them all, and --save-init writes the array as PyTorch's state_dict holds it.
 * Pixels enter as bytes / 255 (0 to 1), as torchvision's ToTensor gives them. */
#ifndef CNN_NET_H
#define CNN_NET_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CNN_SIDE 28                 /* input images are CNN_SIDE x CNN_SIDE, one channel */
#define CNN_PIXELS (CNN_SIDE * CNN_SIDE)
#define CNN_C1 16                   /* conv1's filters */
#define CNN_C2 32                   /* conv2's filters */
#define CNN_FLAT (CNN_C2 * 7 * 7)   /* 1568: the second pool's output, flattened */
#define CNN_HIDDEN 128
#define CNN_CLASSES 10

enum cnn_param { CNN_CONV1_W, CNN_CONV1_B, CNN_CONV2_W, CNN_CONV2_B,
                 CNN_FC1_W, CNN_FC1_B, CNN_FC2_W, CNN_FC2_B, CNN_PARAMS };

/* Elements of each parameter tensor, and its fan-in (He-normal: std = sqrt(2 / fan_in)). */
static const int64_t cnn_param_elems[CNN_PARAMS] = {
    CNN_C1 * 1 * 9, CNN_C1, CNN_C2 * CNN_C1 * 9, CNN_C2,
    CNN_HIDDEN * CNN_FLAT, CNN_HIDDEN, CNN_CLASSES * CNN_HIDDEN, CNN_CLASSES};
static const int64_t cnn_param_fan_in[CNN_PARAMS] = {9, 9, CNN_C1 * 9, CNN_C1 * 9,
                                                     CNN_FLAT, CNN_FLAT, CNN_HIDDEN, CNN_HIDDEN};
static const char *const cnn_param_name[CNN_PARAMS] = {
    "conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
    "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};

#define CNN_PARAM_TOTAL 206922      /* the sum of cnn_param_elems */

/* Where parameter i starts in the flat array. */
static inline int64_t cnn_param_offset(int i)
{
    int64_t off = 0;
    for (int j = 0; j < i; j++)
        off += cnn_param_elems[j];
    return off;
}

/* He-normal weights, std sqrt(2 / fan_in), drawn tensor after tensor in the flat array's order
 * from common/rng.h's generator seeded with `seed` (a Box-Muller normal from each pair of
 * uniforms); biases zero (net.c). */
void cnn_init_params(float *params, uint64_t seed);

/* The parameter file of --save-init and --load-init: the 8 bytes "KLCNN01\n", then the
 * CNN_PARAM_TOTAL floats of the flat array, little-endian fp32. Both return 0, or 2 with a
 * one-line message in err naming the file and what is wrong. */
int cnn_save_params(const char *path, const float *params, char *err, size_t err_len);
int cnn_load_params(const char *path, float *params, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
