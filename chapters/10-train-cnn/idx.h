/* The MNIST-format (IDX) files of chapter 10's data: an images file and a labels file, read
 * through zlib, which takes gzip-compressed and plain files alike.
 *
 * An IDX file is a big-endian header, then the bytes of its array:
 *   images: magic 0x00000803 (unsigned bytes, 3 dimensions), count, rows, cols, then
 *           count * rows * cols pixels, image after image, each row-major;
 *   labels: magic 0x00000801 (unsigned bytes, 1 dimension), count, then count labels.
 * The loader takes a pair only if it is exactly that: the magic numbers, images of net.h's
 * CNN_SIDE x CNN_SIDE, the same count (at least 1) in both files, every label 0 to 9, and each
 * file exactly as long as its header says. Anything else is refused in one line that names the
 * file and what is wrong, before any of it is used. */
#ifndef CNN_IDX_H
#define CNN_IDX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where Debian's dataset-fashion-mnist puts the four files. */
#define IDX_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"

struct idx_set {
    int64_t count;      /* images, and labels */
    int rows, cols;     /* each image's size: CNN_SIDE x CNN_SIDE */
    uint8_t *images;    /* count * rows * cols pixels, 0 to 255 */
    uint8_t *labels;    /* count labels, 0 to 9 */
};

/* Reads the pair into *set. Returns 0, or 2 with a one-line message in err that names the file
 * and what is wrong; *set is then empty (idx_free may still be called on it). */
int idx_load(const char *images_path, const char *labels_path, struct idx_set *set, char *err,
             size_t err_len);

/* The training pair (train = 1: train-images-idx3-ubyte, train-labels-idx1-ubyte) or the test
 * pair (train = 0: t10k-...) in dir, each file by its name with .gz if that exists, else
 * without. Returns as idx_load does. */
int idx_load_dir(const char *dir, int train, struct idx_set *set, char *err, size_t err_len);

/* Frees what idx_load allocated and empties *set. */
void idx_free(struct idx_set *set);

/* Writes "path: what is wrong" into err and returns 2: the one-line refusal of a bad file, for
 * the data files here and net.c's weights file. */
__attribute__((format(printf, 4, 5))) int cnn_refuse_file(char *err, size_t err_len,
                                                          const char *path, const char *fmt,
                                                          ...);

#ifdef __cplusplus
}
#endif
#endif
