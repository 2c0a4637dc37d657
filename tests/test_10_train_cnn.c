/* Chapter 10: the host side first, on the CPU: the IDX loader on files each test writes (good,
 * and bad in every way the loader refuses, plain and gzip-compressed), the installed
 * Fashion-MNIST, the initial weights and the parameter file, and the CPU reference of the
 * network, on cases worked by hand and against central differences of its own loss. Then, on
 * the GPU, one step of ours (with and without its fusions) and of the vendor against that
 * reference at batches of 8 and 5 in both dtypes, an epoch of graph replays against the same
 * steps launched one by one, the epoch's order, and the program's refusals. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "10-train-cnn/check_step.h"
#include "10-train-cnn/idx.h"
#include "10-train-cnn/net.h"
#include "10-train-cnn/reference.h"
#include "10-train-cnn/train.h"
#include "10-train-cnn/vendor.h"
#include "check.h"
#include "gpu.h"
#include "rng.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ================================ CPU: files in a folder ================================ */

/* Each test of the suites below writes its files into a folder of its own, removed after. */
static char test_dir[64];

static void make_test_dir(void)
{
    snprintf(test_dir, sizeof test_dir, "/tmp/kl-test10-XXXXXX");
    cr_assert(mkdtemp(test_dir), "cannot make a temporary folder");
}

static void remove_test_dir(void)
{
    DIR *d = opendir(test_dir);
    if (!d)
        return;
    char path[512];
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(path, sizeof path, "%s/%s", test_dir, e->d_name);
        if (remove(path) != 0)
            rmdir(path);
    }
    closedir(d);
    rmdir(test_dir);
}

/* test_dir/name, in a buffer that lives until the next four calls. */
static const char *in_dir(const char *name)
{
    static char paths[4][512];
    static int next;
    char *p = paths[next++ % 4];
    snprintf(p, sizeof paths[0], "%s/%s", test_dir, name);
    return p;
}

static void write_file(const char *path, const uint8_t *bytes, size_t len, int gzip)
{
    if (gzip) {
        gzFile gz = gzopen(path, "wb");
        cr_assert(gz, "cannot create %s", path);
        cr_assert_eq(gzwrite(gz, bytes, (unsigned)len), (int)len, "cannot write %s", path);
        cr_assert_eq(gzclose(gz), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        cr_assert(f, "cannot create %s", path);
        cr_assert_eq(fwrite(bytes, 1, len, f), len, "cannot write %s", path);
        cr_assert_eq(fclose(f), 0);
    }
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Keeps the first `len` bytes of the file (of its compressed bytes, for a .gz). */
static void cut_file(const char *path, long len)
{
    cr_assert_eq(truncate(path, len), 0, "cannot cut %s", path);
}

/* A refusal: status 2, and one line that starts with the file's name and says `what`. */
static void expect_refused(int rc, const char *err, const char *path, const char *what)
{
    cr_expect_eq(rc, 2, "status %d for %s (said: %s)", rc, path, err);
    const size_t len = strlen(path);
    cr_expect(!strncmp(err, path, len) && !strncmp(err + len, ": ", 2),
              "the message does not start with '%s: ': %s", path, err);
    cr_expect(strstr(err, what) != NULL, "the message does not say '%s': %s", what, err);
    cr_expect(strchr(err, '\n') == NULL, "the message is not one line: %s", err);
}

/* ================================ CPU: the IDX loader ================================ */

TestSuite(idx, .init = make_test_dir, .fini = remove_test_dir);

/* A pair of IDX files as the test wants them: the good pair is 3 images of 28x28 with
 * labels 9, 0, 4; each field can be made wrong, and each file cut or lengthened. */
struct pair {
    uint32_t images_magic, labels_magic;
    uint32_t images_count, labels_count, rows, cols;
    uint8_t labels[3];
    long images_extra, labels_extra; /* bytes added (> 0) or cut (< 0) after the data */
};

static struct pair good_pair(void)
{
    struct pair p = {0x803, 0x801, 3, 3, 28, 28, {9, 0, 4}, 0, 0};
    return p;
}

static uint8_t pixel(size_t i)
{
    return (uint8_t)(i * 13 + i / 784);
}

static void put_be32(uint8_t *b, uint32_t v)
{
    b[0] = (uint8_t)(v >> 24), b[1] = (uint8_t)(v >> 16), b[2] = (uint8_t)(v >> 8);
    b[3] = (uint8_t)v;
}

/* The images file: its header, then the data of 3 images of 28x28 and images_extra. */
static size_t images_bytes(const struct pair *p, uint8_t *b)
{
    put_be32(b, p->images_magic);
    put_be32(b + 4, p->images_count);
    put_be32(b + 8, p->rows);
    put_be32(b + 12, p->cols);
    const size_t len = 16 + 3 * 784 + p->images_extra;
    for (size_t i = 16; i < len; i++)
        b[i] = pixel(i - 16);
    return len;
}

static size_t labels_bytes(const struct pair *p, uint8_t *b)
{
    put_be32(b, p->labels_magic);
    put_be32(b + 4, p->labels_count);
    const size_t len = 8 + 3 + p->labels_extra;
    for (size_t i = 8; i < len; i++)
        b[i] = i < 11 ? p->labels[i - 8] : 0;
    return len;
}

/* Writes the pair as test_dir/images[.gz] and test_dir/labels[.gz]; their paths. */
static void write_pair(const struct pair *p, int gzip, const char **images, const char **labels)
{
    uint8_t b[16 + 3 * 784 + 16];
    *images = in_dir(gzip ? "images.gz" : "images");
    *labels = in_dir(gzip ? "labels.gz" : "labels");
    write_file(*images, b, images_bytes(p, b), gzip);
    write_file(*labels, b, labels_bytes(p, b), gzip);
}

/* The pair, written plain and then gzip-compressed, is refused each time, the message naming
 * the labels file (labels_named) or the images file. */
static void expect_pair_refused(const struct pair *p, int labels_named, const char *what)
{
    for (int gzip = 0; gzip < 2; gzip++) {
        const char *images, *labels;
        write_pair(p, gzip, &images, &labels);
        struct idx_set set;
        char err[512] = "";
        const int rc = idx_load(images, labels, &set, err, sizeof err);
        expect_refused(rc, err, labels_named ? labels : images, what);
        cr_expect(!set.images && !set.labels && set.count == 0, "a refused set is not empty");
        idx_free(&set);
    }
}

Test(idx, loads_a_good_pair_plain_and_gzip)
{
    const struct pair p = good_pair();
    for (int gzip = 0; gzip < 2; gzip++) {
        const char *images, *labels;
        write_pair(&p, gzip, &images, &labels);
        struct idx_set set;
        char err[512] = "";
        cr_assert_eq(idx_load(images, labels, &set, err, sizeof err), 0, "%s", err);
        cr_expect_eq(set.count, 3);
        cr_expect(set.rows == 28 && set.cols == 28, "%dx%d", set.rows, set.cols);
        for (size_t i = 0; i < 3 * 784; i++)
            cr_assert_eq(set.images[i], pixel(i), "%s: pixel %zu", images, i);
        cr_expect(set.labels[0] == 9 && set.labels[1] == 0 && set.labels[2] == 4,
                  "labels %d %d %d", set.labels[0], set.labels[1], set.labels[2]);
        idx_free(&set);
        cr_expect(!set.images && !set.labels && set.count == 0, "idx_free leaves it empty");
    }
}

Test(idx, refuses_truncated_data)
{
    struct pair p = good_pair();
    p.images_extra = -1;
    expect_pair_refused(&p, 0, "truncated");
    p = good_pair();
    p.labels_extra = -1;
    expect_pair_refused(&p, 1, "truncated");
}

Test(idx, refuses_a_truncated_header)
{
    const char *images, *labels;
    const struct pair p = good_pair();
    write_pair(&p, 0, &images, &labels);
    struct idx_set set;
    char err[512] = "";
    cut_file(images, 10);
    expect_refused(idx_load(images, labels, &set, err, sizeof err), err, images, "header");
    write_pair(&p, 0, &images, &labels);
    cut_file(labels, 7);
    expect_refused(idx_load(images, labels, &set, err, sizeof err), err, labels, "header");
    cut_file(images, 0);
    expect_refused(idx_load(images, labels, &set, err, sizeof err), err, images, "truncated");
}

/* A gzip file cut in its compressed stream, and one whose data are whole but whose 8-byte
 * trailer (the check value and length) is cut off. */
Test(idx, refuses_a_cut_gzip_stream)
{
    const char *images, *labels;
    const struct pair p = good_pair();
    struct idx_set set;
    char err[512] = "";
    write_pair(&p, 1, &images, &labels);
    cut_file(images, file_size(images) / 2);
    expect_refused(idx_load(images, labels, &set, err, sizeof err), err, images, "truncated");
    write_pair(&p, 1, &images, &labels);
    cut_file(labels, file_size(labels) - 8);
    expect_refused(idx_load(images, labels, &set, err, sizeof err), err, labels, "truncated");
}

/* A damaged byte in the trailer's CRC: the data decompress, the check does not match. */
Test(idx, refuses_a_gzip_stream_whose_check_fails)
{
    const char *images, *labels;
    const struct pair p = good_pair();
    write_pair(&p, 1, &images, &labels);
    const long size = file_size(images);
    FILE *f = fopen(images, "r+b");
    cr_assert(f);
    fseek(f, size - 8, SEEK_SET);
    const int crc_byte = fgetc(f);
    fseek(f, size - 8, SEEK_SET);
    fputc(crc_byte ^ 0x5a, f);
    fclose(f);
    struct idx_set set;
    char err[512] = "";
    expect_refused(idx_load(images, labels, &set, err, sizeof err), err, images,
                   "cannot read: incorrect data check");
}

Test(idx, refuses_trailing_bytes)
{
    struct pair p = good_pair();
    p.images_extra = 1;
    expect_pair_refused(&p, 0, "trailing bytes");
    p = good_pair();
    p.labels_extra = 5;
    expect_pair_refused(&p, 1, "trailing bytes");
}

Test(idx, refuses_a_wrong_magic)
{
    struct pair p = good_pair();
    p.images_magic = 0x801;
    expect_pair_refused(&p, 0, "magic number 0x00000801, not the 0x00000803");
    p = good_pair();
    p.labels_magic = 0x01080000; /* the right magic, little-endian */
    expect_pair_refused(&p, 1, "magic number 0x01080000, not the 0x00000801");
}

Test(idx, refuses_the_files_swapped)
{
    const char *images, *labels;
    const struct pair p = good_pair();
    write_pair(&p, 0, &images, &labels);
    struct idx_set set;
    char err[512] = "";
    expect_refused(idx_load(labels, images, &set, err, sizeof err), err, labels, "magic");
}

Test(idx, refuses_counts_that_disagree)
{
    struct pair p = good_pair();
    p.labels_count = 2;
    p.labels_extra = -1;
    expect_pair_refused(&p, 1, "2 labels, but");
    /* the message names the images file too */
    const char *images, *labels;
    write_pair(&p, 0, &images, &labels);
    struct idx_set set;
    char err[512] = "";
    cr_expect_eq(idx_load(images, labels, &set, err, sizeof err), 2);
    cr_expect(strstr(err, images) && strstr(err, "holds 3 images"), "%s", err);
}

Test(idx, refuses_a_label_past_9)
{
    struct pair p = good_pair();
    p.labels[1] = 10;
    expect_pair_refused(&p, 1, "label 1 is 10; labels are 0 to 9");
    p.labels[1] = 255;
    expect_pair_refused(&p, 1, "label 1 is 255");
}

Test(idx, refuses_images_other_than_28x28)
{
    struct pair p = good_pair();
    p.rows = 27, p.cols = 29;
    expect_pair_refused(&p, 0, "images of 27x29; this chapter's network takes 28x28");
    p = good_pair();
    p.rows = 56, p.cols = 14; /* exactly 784 pixels an image, the wrong shape */
    expect_pair_refused(&p, 0, "images of 56x14");
}

Test(idx, refuses_sizes_that_overflow)
{
    struct pair p = good_pair();
    p.images_count = p.labels_count = 0xffffffffu;
    p.rows = p.cols = 0xffffffffu;
    expect_pair_refused(&p, 0, "overflows");
    p.rows = p.cols = 1u << 16; /* 2^31 images of 2^32 pixels: 2^63 bytes, 1 past INT64_MAX */
    p.images_count = p.labels_count = 1u << 31;
    expect_pair_refused(&p, 0, "overflows");
}

/* A header that claims more images than the file holds is refused as truncated, without
 * first allocating what the header claims (2^32 - 1 images would be 3.4 TB). */
Test(idx, refuses_a_header_claiming_billions_of_images)
{
    struct pair p = good_pair();
    p.images_count = p.labels_count = 0xffffffffu;
    expect_pair_refused(&p, 0, "truncated");
}

Test(idx, refuses_an_empty_set)
{
    struct pair p = good_pair();
    p.images_count = p.labels_count = 0;
    expect_pair_refused(&p, 0, "no images");
}

Test(idx, refuses_files_it_cannot_open_or_read)
{
    const char *images, *labels;
    const struct pair p = good_pair();
    write_pair(&p, 0, &images, &labels);
    struct idx_set set;
    char err[512] = "";
    const char *missing = in_dir("no-such-file");
    expect_refused(idx_load(missing, labels, &set, err, sizeof err), err, missing,
                   "cannot open: No such file or directory");
    expect_refused(idx_load(images, missing, &set, err, sizeof err), err, missing, "cannot open");
    expect_refused(idx_load(test_dir, labels, &set, err, sizeof err), err, test_dir,
                   "cannot read: Is a directory");
}

/* The messages are cut to the buffer given, and stay terminated. */
Test(idx, cuts_its_message_to_the_buffer)
{
    struct idx_set set;
    char err[16];
    memset(err, 'x', sizeof err);
    cr_expect_eq(idx_load(in_dir("no-such-file"), in_dir("nor-this"), &set, err, sizeof err), 2);
    cr_expect(memchr(err, '\0', sizeof err) && strlen(err) == sizeof err - 1, "%.16s", err);
}

static void write_named_pair(const char *prefix, int gzip, const struct pair *p)
{
    char images[64], labels[64];
    snprintf(images, sizeof images, "%s-images-idx3-ubyte%s", prefix, gzip ? ".gz" : "");
    snprintf(labels, sizeof labels, "%s-labels-idx1-ubyte%s", prefix, gzip ? ".gz" : "");
    uint8_t b[16 + 3 * 784 + 16];
    write_file(in_dir(images), b, images_bytes(p, b), gzip);
    write_file(in_dir(labels), b, labels_bytes(p, b), gzip);
}

/* The program refuses a training set smaller than a batch (here 3 images against 32), before
 * any step could read past it, in one line naming the folder. */
Test(idx, the_program_refuses_fewer_images_than_a_batch)
{
    const struct pair p = good_pair();
    write_named_pair("train", 0, &p);
    write_named_pair("t10k", 0, &p);
    char args[600], said[2048];
    snprintf(args, sizeof args, "--data %s --batch 32 --variant cpu", test_dir);
    const int rc = run_program("10-train-cnn", args, said, sizeof said);
    cr_expect_eq(rc, KL_EXIT_USAGE, "exit %d (%s)", rc, said);
    cr_expect_eq(count_lines(said), 1, "one line, not: %s", said);
    cr_expect(strstr(said, test_dir) && strstr(said, "fewer than a batch of 32"), "said %s", said);
}

/* The training pair compressed, the test pair plain: both found. */
Test(idx, finds_the_files_in_a_folder)
{
    struct pair p = good_pair();
    write_named_pair("train", 1, &p);
    p.labels[0] = 7;
    write_named_pair("t10k", 0, &p);
    struct idx_set train, test;
    char err[512] = "";
    cr_assert_eq(idx_load_dir(test_dir, 1, &train, err, sizeof err), 0, "%s", err);
    cr_assert_eq(idx_load_dir(test_dir, 0, &test, err, sizeof err), 0, "%s", err);
    cr_expect(train.count == 3 && test.count == 3);
    cr_expect(train.labels[0] == 9 && test.labels[0] == 7, "the pairs are mixed up");
    idx_free(&train);
    idx_free(&test);
}

/* Where both names exist, the .gz is the one read: here the plain pair is bad. */
Test(idx, prefers_the_gzip_name)
{
    struct pair p = good_pair();
    write_named_pair("train", 1, &p);
    p.images_magic = 0;
    write_named_pair("train", 0, &p);
    struct idx_set set;
    char err[512] = "";
    cr_expect_eq(idx_load_dir(test_dir, 1, &set, err, sizeof err), 0, "%s", err);
    idx_free(&set);
}

Test(idx, refuses_a_folder_that_is_not_there)
{
    struct idx_set set;
    char err[512] = "";
    const char *missing = in_dir("no-such-folder");
    expect_refused(idx_load_dir(missing, 1, &set, err, sizeof err), err, missing,
                   "cannot open the folder: No such file or directory");
    const struct pair p = good_pair();
    const char *images, *labels;
    write_pair(&p, 0, &images, &labels);
    expect_refused(idx_load_dir(images, 1, &set, err, sizeof err), err, images, "not a folder");
}

Test(idx, says_which_file_a_folder_lacks)
{
    struct idx_set set;
    char err[512] = "";
    expect_refused(idx_load_dir(test_dir, 0, &set, err, sizeof err), err, test_dir,
                   "neither t10k-images-idx3-ubyte.gz nor t10k-images-idx3-ubyte");
    const struct pair p = good_pair();
    write_named_pair("train", 0, &p);
    cr_assert_eq(remove(in_dir("train-labels-idx1-ubyte")), 0);
    expect_refused(idx_load_dir(test_dir, 1, &set, err, sizeof err), err, test_dir,
                   "neither train-labels-idx1-ubyte.gz nor train-labels-idx1-ubyte");
}

/* ============================ CPU: the installed Fashion-MNIST ============================ */

/* Debian's dataset-fashion-mnist: 60,000 training and 10,000 test images of 28x28, 6,000 and
 * 1,000 of each class (Zalando's README), the training set starting with an ankle boot (9), two
 * T-shirts (0) and a dress (3), the test set with an ankle boot and a pullover (2). */
static void expect_fashion_mnist(int train, int64_t count, const uint8_t *first_labels)
{
    if (access(IDX_DEFAULT_DIR, R_OK) != 0)
        cr_skip_test("no Fashion-MNIST at " IDX_DEFAULT_DIR " (make deps installs it)");
    struct idx_set set;
    char err[512] = "";
    cr_assert_eq(idx_load_dir(IDX_DEFAULT_DIR, train, &set, err, sizeof err), 0, "%s", err);
    cr_expect_eq(set.count, count);
    cr_expect(set.rows == 28 && set.cols == 28);
    int64_t per_class[10] = {0};
    for (int64_t i = 0; i < set.count; i++)
        per_class[set.labels[i]]++; /* idx_load has checked that each is 0 to 9 */
    for (int c = 0; c < 10; c++)
        cr_expect_eq(per_class[c], count / 10, "class %d: %lld images", c,
                     (long long)per_class[c]);
    for (int i = 0; i < 4; i++)
        cr_expect_eq(set.labels[i], first_labels[i], "label %d", i);
    int top = 0;
    for (int i = 0; i < 784; i++)
        top = set.images[i] > top ? set.images[i] : top;
    cr_expect_gt(top, 200, "the first image's brightest pixel is %d", top);
    idx_free(&set);
}

Test(fashion_mnist, training_set)
{
    expect_fashion_mnist(1, 60000, (const uint8_t[]){9, 0, 0, 3});
}

Test(fashion_mnist, test_set)
{
    expect_fashion_mnist(0, 10000, (const uint8_t[]){9, 2, 1, 1});
}

/* ============================ CPU: initial weights (net.c) ============================ */

static float init_a[CNN_PARAM_TOTAL], init_b[CNN_PARAM_TOTAL];

Test(net_init, offsets_cover_the_flat_array)
{
    cr_expect_eq(cnn_param_offset(CNN_PARAMS), CNN_PARAM_TOTAL);
    cr_expect_eq(cnn_param_offset(CNN_FC1_W), 16 * 9 + 16 + 32 * 16 * 9 + 32);
}

Test(net_init, the_same_seed_gives_the_same_weights)
{
    cnn_init_params(init_a, 7);
    cnn_init_params(init_b, 7);
    cr_expect_eq(memcmp(init_a, init_b, sizeof init_a), 0);
    cnn_init_params(init_b, 8);
    int64_t same = 0;
    for (int64_t i = cnn_param_offset(CNN_FC1_W); i < cnn_param_offset(CNN_FC1_B); i++)
        same += init_a[i] == init_b[i];
    cr_expect_lt(same, 10, "seeds 7 and 8 share %lld of fc1's weights", (long long)same);
}

Test(net_init, biases_are_zero_and_weights_finite)
{
    cnn_init_params(init_a, 1);
    for (int t = 0; t < CNN_PARAMS; t++) {
        const float *p = init_a + cnn_param_offset(t);
        const int bias = t == CNN_CONV1_B || t == CNN_CONV2_B || t == CNN_FC1_B || t == CNN_FC2_B;
        for (int64_t e = 0; e < cnn_param_elems[t]; e++) {
            if (bias)
                cr_assert_eq(p[e], 0.0f, "%s[%lld] is %g", cnn_param_name[t], (long long)e, p[e]);
            else
                cr_assert(isfinite(p[e]) && p[e] != 0.0f, "%s[%lld] is %g", cnn_param_name[t],
                          (long long)e, p[e]);
        }
    }
}

/* A tensor's sample mean and std against He-normal's 0 and sqrt(2 / fan_in), and the share of
 * samples within one std of 0, 68.3% for a normal (a uniform of that std has 57.7%). */
static void expect_he_normal(int t, double tolerance)
{
    const float *p = init_a + cnn_param_offset(t);
    const int64_t n = cnn_param_elems[t];
    const double want = sqrt(2.0 / (double)cnn_param_fan_in[t]);
    double sum = 0, sum_sq = 0;
    int64_t within = 0;
    for (int64_t e = 0; e < n; e++) {
        sum += p[e];
        sum_sq += (double)p[e] * p[e];
        within += fabs(p[e]) < want;
    }
    const double mean = sum / n, std = sqrt(sum_sq / n - mean * mean);
    cr_expect_lt(fabs(std / want - 1), tolerance, "%s: std %g, want %g", cnn_param_name[t], std,
                 want);
    cr_expect_lt(fabs(mean), tolerance * want, "%s: mean %g", cnn_param_name[t], mean);
    cr_expect_lt(fabs((double)within / n - 0.6827), tolerance, "%s: %.4f within one std",
                 cnn_param_name[t], (double)within / n);
}

/* fc1's 200,704 weights put the sample std within 0.2% of the true one (one standard error);
 * conv2's 4,608 within 1%. */
Test(net_init, weights_are_he_normal)
{
    cnn_init_params(init_a, 12345);
    expect_he_normal(CNN_FC1_W, 0.01);
    expect_he_normal(CNN_CONV2_W, 0.05);
    expect_he_normal(CNN_FC2_W, 0.1);
}

/* ============================ CPU: the parameter file (net.c) ============================ */

TestSuite(net_file, .init = make_test_dir, .fini = remove_test_dir);

#define PARAM_FILE_BYTES (8 + 4 * (long)CNN_PARAM_TOTAL)

Test(net_file, round_trip)
{
    cnn_init_params(init_a, 3);
    init_a[CNN_PARAM_TOTAL - 1] = -1.5f; /* fc2's last bias, so that it is not zero */
    const char *path = in_dir("init.bin");
    char err[512] = "";
    cr_assert_eq(cnn_save_params(path, init_a, err, sizeof err), 0, "%s", err);
    cr_expect_eq(file_size(path), PARAM_FILE_BYTES);
    memset(init_b, 0, sizeof init_b);
    cr_assert_eq(cnn_load_params(path, init_b, err, sizeof err), 0, "%s", err);
    cr_expect_eq(memcmp(init_a, init_b, sizeof init_a), 0);

    /* the bytes: the magic, then little-endian fp32; -1.5f is 0xbfc00000 */
    uint8_t head[12], tail[4];
    FILE *f = fopen(path, "rb");
    cr_assert(f);
    cr_assert_eq(fread(head, 1, 12, f), 12);
    fseek(f, -4, SEEK_END);
    cr_assert_eq(fread(tail, 1, 4, f), 4);
    fclose(f);
    cr_expect_eq(memcmp(head, "KLCNN01\n", 8), 0);
    uint32_t first;
    memcpy(&first, &init_a[0], 4);
    cr_expect(head[8] == (first & 0xff) && head[11] == first >> 24, "the first float");
    cr_expect(tail[0] == 0 && tail[1] == 0 && tail[2] == 0xc0 && tail[3] == 0xbf,
              "the last float's bytes %02x %02x %02x %02x", tail[0], tail[1], tail[2], tail[3]);
}

/* A refused file leaves the parameters as they were. */
static void expect_load_refused(const char *path, const char *what)
{
    for (size_t i = 0; i < CNN_PARAM_TOTAL; i++)
        init_b[i] = 42.0f;
    char err[512] = "";
    expect_refused(cnn_load_params(path, init_b, err, sizeof err), err, path, what);
    for (size_t i = 0; i < CNN_PARAM_TOTAL; i++)
        cr_assert_eq(init_b[i], 42.0f, "a refused load wrote parameter %zu", i);
}

static const char *saved_params(void)
{
    cnn_init_params(init_a, 5);
    const char *path = in_dir("params.bin");
    char err[512] = "";
    cr_assert_eq(cnn_save_params(path, init_a, err, sizeof err), 0, "%s", err);
    return path;
}

Test(net_file, refuses_a_missing_file)
{
    expect_load_refused(in_dir("none.bin"), "cannot open");
}

Test(net_file, refuses_a_wrong_magic)
{
    const char *path = saved_params();
    FILE *f = fopen(path, "r+b");
    cr_assert(f);
    fputs("KLCNN02\n", f);
    fclose(f);
    expect_load_refused(path, "KLCNN01");
    cut_file(path, 0);
    expect_load_refused(path, "KLCNN01");
}

Test(net_file, refuses_a_file_of_the_wrong_length)
{
    const char *path = saved_params();
    cut_file(path, PARAM_FILE_BYTES - 1);
    expect_load_refused(path, "truncated: 827695 bytes, not the 827696");
    cut_file(path, 8);
    expect_load_refused(path, "truncated");
    path = saved_params();
    FILE *f = fopen(path, "ab");
    cr_assert(f);
    fputc(0, f);
    fclose(f);
    expect_load_refused(path, "trailing bytes");
}

/* fc1.weight[5] made NaN: named by tensor and index. */
Test(net_file, refuses_a_value_that_is_not_finite)
{
    cnn_init_params(init_a, 5);
    init_a[cnn_param_offset(CNN_FC1_W) + 5] = NAN;
    const char *path = in_dir("nan.bin");
    char err[512] = "";
    cr_assert_eq(cnn_save_params(path, init_a, err, sizeof err), 0, "%s", err);
    expect_load_refused(path, "fc1.weight[5] is nan");
}

Test(net_file, says_when_it_cannot_save)
{
    cnn_init_params(init_a, 5);
    const char *path = in_dir("no-such-folder/params.bin");
    char err[512] = "";
    expect_refused(cnn_save_params(path, init_a, err, sizeof err), err, path, "cannot create");
}

/* ============================ CPU: the reference (reference.c) ============================ */

static double params[CNN_PARAM_TOTAL], grads[CNN_PARAM_TOTAL];

static double *tensor(int t)
{
    return params + cnn_param_offset(t);
}

static const double *grad_of(int t)
{
    return grads + cnn_param_offset(t);
}

/* With every parameter zero the logits are zero: the loss is ln 10, every row predicts class
 * 0 (the first of ten equal maxima), and dL/dz = (1/10 - onehot) / n. fc2's input is ReLU(0)
 * = 0, so only fc2's bias has a gradient: 1/10 - (the share of labels j) for class j, and
 * dL/d(fc1's output) = W2^T dL/dz = 0 stops the rest. */
Test(cnn_reference, zero_parameters_give_ln_10_and_a_known_gradient)
{
    memset(params, 0, sizeof params);
    static float images[4 * CNN_PIXELS];
    struct rng r = rng_seeded(11);
    for (size_t i = 0; i < COUNT(images); i++)
        images[i] = (float)rng_uniform(&r, 0, 1);
    const int32_t labels[4] = {3, 0, 7, 3};
    int correct = -1;
    const double loss = cnn_cpu_gradient(params, images, labels, 4, grads, &correct);
    cr_expect(fabs(loss - log(10.0)) < 1e-15, "loss %.17g, not ln 10", loss);
    cr_expect_eq(correct, 1, "%d right: only the label 0 is predicted", correct);
    const double share[CNN_CLASSES] = {0.25, 0, 0, 0.5, 0, 0, 0, 0.25, 0, 0};
    for (int j = 0; j < CNN_CLASSES; j++)
        cr_expect(fabs(grad_of(CNN_FC2_B)[j] - (0.1 - share[j])) < 1e-15, "fc2.bias[%d]: %g",
                  j, grad_of(CNN_FC2_B)[j]);
    for (int64_t i = 0; i < cnn_param_offset(CNN_FC2_B); i++)
        cr_assert_eq(grads[i], 0.0, "gradient %lld is %g, not 0", (long long)i, grads[i]);
    int again = -1;
    cr_expect_eq(cnn_cpu_loss(params, images, labels, 4, &again), loss);
    cr_expect_eq(again, 1);
}

/* One path through every layer, worked by hand. conv1's filter 0 is the identity (its centre
 * tap 1), conv2's filter 0 passes conv1's channel 0 the same way, fc1's unit 0 takes the first
 * flattened input, pool2[0][0][0], and fc2's class 1 weighs that unit by 2; everything else is
 * zero. So the logits are z = (0, 2m, 0, ...), m the largest pixel of the image's top-left
 * 4x4, which here is 0.9 three times: at (0,1) and (1,0), in pool1's window (0,0), and at
 * (1,2), in window (0,1). The first in row-major order wins each window, so pool1 gives 0.9
 * from (0,1) and from (1,2), pool2's window takes pool1's (0,0), and the whole gradient
 * flows back to pixel (0,1). With g = dL/dz1 (the mean of softmax(z)[1] - [label = 1] over
 * the batch) and pad() zero outside the image:
 *   dL/d fc2.weight[1][0] = g m,      dL/d fc1.weight[0][0] = 2g m,   dL/d fc1.bias[0] = 2g,
 *   dL/d conv2.weight[0][0][r][s] = 2g pool1pad(r - 1, s - 1),         dL/d conv2.bias[0] = 2g,
 *   dL/d conv1.weight[0][0][r][s] = 2g xpad(0 + r - 1, 1 + s - 1),     dL/d conv1.bias[0] = 2g.
 * The last line pins both the tie rule and the orientation of the taps (a correlation, as
 * PyTorch's, not a flipped convolution). Two more weights change no activation but test
 * ReLU's gradient at 0: conv2's filter 0 also reads conv1's channel 1, and fc2's class 3 reads
 * fc1's unit 1, both of whose inputs are exactly 0 (zero weights and bias); a gradient of 1 at
 * 0 would give conv1.bias[1] and fc1.bias[1] one, a gradient of 0 gives them none. */
static float path_image[CNN_PIXELS];

static double xpad(int h, int w)
{
    return h < 0 || w < 0 ? 0.0 : (double)path_image[h * CNN_SIDE + w];
}

static void set_up_one_path(void)
{
    for (int i = 0; i < CNN_PIXELS; i++)
        path_image[i] = 0.05f;
    path_image[0 * 28 + 0] = 0.2f, path_image[0 * 28 + 1] = 0.9f, path_image[0 * 28 + 2] = 0.3f;
    path_image[1 * 28 + 0] = 0.9f, path_image[1 * 28 + 1] = 0.4f, path_image[1 * 28 + 2] = 0.9f;
    memset(params, 0, sizeof params);
    tensor(CNN_CONV1_W)[(0 * 1 + 0) * 9 + 4] = 1;      /* conv1 [0][0][1][1] */
    tensor(CNN_CONV2_W)[(0 * 16 + 0) * 9 + 4] = 1;     /* conv2 [0][0][1][1] */
    tensor(CNN_FC1_W)[0 * CNN_FLAT + 0] = 1;           /* fc1 [0][0] */
    tensor(CNN_FC2_W)[1 * CNN_HIDDEN + 0] = 2;         /* fc2 [1][0] */
    tensor(CNN_CONV2_W)[(0 * 16 + 1) * 9 + 4] = 1;     /* conv2 [0][1][1][1], reads 0 */
    tensor(CNN_FC2_W)[3 * CNN_HIDDEN + 1] = 1;         /* fc2 [3][1], reads 0 */
}

static void expect_near(double got, double want, const char *what)
{
    cr_expect(fabs(got - want) <= 1e-14 + 1e-12 * fabs(want), "%s: %.17g, want %.17g", what, got,
              want);
}

Test(cnn_reference, one_path_worked_by_hand)
{
    set_up_one_path();
    static float images[2 * CNN_PIXELS];
    memcpy(images, path_image, sizeof path_image);
    memcpy(images + CNN_PIXELS, path_image, sizeof path_image);
    const int32_t labels[2] = {1, 4};
    const double m = (double)0.9f, a = 2 * m;
    const double p1 = exp(a) / (9 + exp(a)), g = p1 - 0.5;
    int correct = -1;
    const double loss = cnn_cpu_gradient(params, images, labels, 2, grads, &correct);
    expect_near(loss, log(9 + exp(a)) - a / 2, "loss");
    cr_expect_eq(correct, 1, "both predict class 1: %d right", correct);

    expect_near(grad_of(CNN_FC2_W)[1 * CNN_HIDDEN], g * m, "fc2.weight[1][0]");
    expect_near(grad_of(CNN_FC2_B)[1], g, "fc2.bias[1]");
    expect_near(grad_of(CNN_FC2_B)[4], 1 / (9 + exp(a)) - 0.5, "fc2.bias[4]");
    expect_near(grad_of(CNN_FC1_W)[0], 2 * g * m, "fc1.weight[0][0]");
    expect_near(grad_of(CNN_FC1_B)[0], 2 * g, "fc1.bias[0]");
    const double pool1[2][2] = {{m, m}, {0.05f, 0.05f}};
    for (int r = 0; r < 3; r++)
        for (int s = 0; s < 3; s++) {
            const double want = r && s ? 2 * g * pool1[r - 1][s - 1] : 0;
            expect_near(grad_of(CNN_CONV2_W)[r * 3 + s], want, "conv2.weight[0][0]");
            expect_near(grad_of(CNN_CONV1_W)[r * 3 + s], 2 * g * xpad(r - 1, s), "conv1.weight");
        }
    expect_near(grad_of(CNN_CONV2_B)[0], 2 * g, "conv2.bias[0]");
    expect_near(grad_of(CNN_CONV1_B)[0], 2 * g, "conv1.bias[0]");
    cr_expect_eq(grad_of(CNN_CONV1_B)[1], 0, "conv1.bias[1]: ReLU's gradient at 0");
    cr_expect_eq(grad_of(CNN_FC1_B)[1], 0, "fc1.bias[1]: ReLU's gradient at 0");
}

/* The logits, and the loss and count worked from them, agree with cnn_cpu_loss. */
Test(cnn_reference, logits_agree_with_the_loss)
{
    static float init[CNN_PARAM_TOTAL];
    cnn_init_params(init, 21);
    for (int i = 0; i < CNN_PARAM_TOTAL; i++)
        params[i] = init[i];
    enum { N = 5 };
    static float images[N * CNN_PIXELS];
    struct rng r = rng_seeded(22);
    for (size_t i = 0; i < COUNT(images); i++)
        images[i] = (float)rng_uniform(&r, 0, 1);
    const int32_t labels[N] = {0, 1, 2, 3, 4};
    double logits[N * CNN_CLASSES], sum = 0;
    cnn_cpu_logits(params, images, N, logits);
    int right = 0;
    for (int n = 0; n < N; n++) {
        const double *z = logits + n * CNN_CLASSES;
        double top = z[0], s = 0;
        int best = 0;
        for (int j = 1; j < CNN_CLASSES; j++)
            if (z[j] > top)
                top = z[j], best = j;
        for (int j = 0; j < CNN_CLASSES; j++)
            s += exp(z[j] - top);
        sum += top + log(s) - z[labels[n]];
        right += best == labels[n];
    }
    int correct = -1;
    expect_near(cnn_cpu_loss(params, images, labels, N, &correct), sum / N, "loss");
    cr_expect_eq(correct, right);
}

/* A label outside 0-9 has no logit: the loss is NaN, not a read past the row. */
Test(cnn_reference, a_label_out_of_range_gives_nan)
{
    memset(params, 0, sizeof params);
    static float images[2 * CNN_PIXELS];
    const int32_t labels[2] = {3, 10};
    cr_expect(isnan(cnn_cpu_loss(params, images, labels, 2, NULL)));
    cr_expect(isnan(cnn_cpu_gradient(params, images, labels, 2, grads, NULL)));
    cr_expect(isnan(grads[cnn_param_offset(CNN_FC2_B)]));
}

Test(cnn_reference, sgd_steps_against_the_gradient)
{
    for (int i = 0; i < CNN_PARAM_TOTAL; i++)
        params[i] = i % 7 - 3, grads[i] = (i % 5) * 0.25;
    cnn_cpu_sgd(params, grads, 0.5);
    for (int i = 0; i < CNN_PARAM_TOTAL; i++)
        cr_assert_eq(params[i], (i % 7 - 3) - 0.5 * ((i % 5) * 0.25), "parameter %d", i);
}

/* The backward against central differences of the forward's own loss: at He-normal weights
 * and small random biases, on 3 random images, for 6 random parameters of every tensor and
 * the one with the largest gradient (so that each tensor is tested where its gradient is not
 * small). A step of 1e-5 relative keeps the difference's error near 1e-10; the weights being
 * random, a ReLU or a pooling window changing sides within a step is unlikely, and the tensor's
 * largest gradient must not be tiny, so the comparison is never of zeros alone. */
static double loss_at(const float *images, const int32_t *labels, int64_t i, double value)
{
    const double kept = params[i];
    params[i] = value;
    const double loss = cnn_cpu_loss(params, images, labels, 3, NULL);
    params[i] = kept;
    return loss;
}

static int64_t largest_gradient(int t)
{
    int64_t best = cnn_param_offset(t);
    for (int64_t i = best; i < cnn_param_offset(t) + cnn_param_elems[t]; i++)
        if (fabs(grads[i]) > fabs(grads[best]))
            best = i;
    return best;
}

static void expect_difference_matches(const float *images, const int32_t *labels, int t,
                                      int64_t i)
{
    const double h = 1e-5 * fmax(fabs(params[i]), 0.01);
    const double fd = (loss_at(images, labels, i, params[i] + h) -
                       loss_at(images, labels, i, params[i] - h)) / (2 * h);
    const double err = fabs(fd - grads[i]);
    cr_expect(err <= 1e-4 * fmax(fabs(fd), fabs(grads[i])) + 1e-9,
              "%s, element %lld: backward %.10g, central difference %.10g",
              cnn_param_name[t], (long long)(i - cnn_param_offset(t)), grads[i], fd);
}

Test(cnn_reference, gradient_matches_central_differences, .timeout = 120)
{
    static float init[CNN_PARAM_TOTAL], images[3 * CNN_PIXELS];
    cnn_init_params(init, 2024);
    struct rng r = rng_seeded(99);
    for (int i = 0; i < CNN_PARAM_TOTAL; i++)
        params[i] = init[i] != 0 ? init[i] : rng_uniform(&r, -0.1, 0.1); /* biases */
    for (size_t i = 0; i < COUNT(images); i++)
        images[i] = (float)rng_uniform(&r, 0, 1);
    const int32_t labels[3] = {2, 9, 5};
    const double loss = cnn_cpu_gradient(params, images, labels, 3, grads, NULL);
    expect_near(loss, cnn_cpu_loss(params, images, labels, 3, NULL), "the two losses");
    for (int t = 0; t < CNN_PARAMS; t++) {
        const int64_t top = largest_gradient(t);
        cr_expect_gt(fabs(grads[top]), 1e-5, "%s: the largest gradient is %g",
                     cnn_param_name[t], grads[top]);
        expect_difference_matches(images, labels, t, top);
        for (int k = 0; k < 6; k++) {
            const int64_t i = cnn_param_offset(t) + (int64_t)rng_below(&r, cnn_param_elems[t]);
            expect_difference_matches(images, labels, t, i);
        }
    }
}

/* ---- on the GPU: a step of ours and of the vendor against the CPU reference ---- */

/* Random images and labels, and He-normal weights, for a step check. */
static void random_batch(int n, uint64_t seed, uint8_t *images, uint8_t *labels)
{
    struct rng r = rng_seeded(seed);
    for (int i = 0; i < n * CNN_PIXELS; i++)
        images[i] = (uint8_t)rng_below(&r, 256);
    for (int i = 0; i < n; i++)
        labels[i] = (uint8_t)rng_below(&r, CNN_CLASSES);
}

static int vendor_ctx_for_test(void **ctx, struct cnn_state *st, char *why, size_t why_len)
{
    return cnn_vendor_create((struct cnn_vendor **)ctx, st, 0, why, why_len);
}

static void vendor_free_for_test(void *ctx) { cnn_vendor_destroy((struct cnn_vendor *)ctx); }

struct step_case {
    int vendor;
    enum dtype t;
    int n;
    unsigned fusions; /* of ours */
};

static void expect_step_right(struct step_case c)
{
    static float params[CNN_PARAM_TOTAL];
    uint8_t images[8 * CNN_PIXELS], labels[8];
    random_batch(c.n, 7 + (uint64_t)c.n, images, labels);
    cnn_init_params(params, 3);
    struct step_check res;
    char why[256] = "";
    const int rc = cnn_check_step(c.vendor ? cnn_vendor_step : cnn_ours_step,
                                  c.vendor ? vendor_ctx_for_test : NULL,
                                  c.vendor ? vendor_free_for_test : NULL, c.fusions, c.t, c.n,
                                  images,
                                  labels, params, 0.01f, &res, why, sizeof why);
    cr_assert_eq(rc, 0, "%s", why);
    cr_expect(res.ok,
              "%s (fusions %#x) %s at batch %d: %s off by %.3e (bound %.1e); loss %.6f, not %.6f",
              c.vendor ? "vendor" : "ours", c.fusions, dtype_name(c.t), c.n, res.worst,
              res.worst_rel_err,
              step_tolerance(c.t), res.loss, res.loss_ref);
    cr_expect(res.loss_ref > 1.0 && res.loss_ref < 10.0, "an untrained loss near ln 10: %g",
              res.loss_ref);
    if (c.t == DT_FP32)
        cr_expect_eq(res.correct, res.correct_ref, "%d hits counted, the reference's %d",
                     res.correct, res.correct_ref);
}

Test(cnn_gpu, ours_fp32_batch_8, NEEDS_GPU)
{
    expect_step_right((struct step_case){0, DT_FP32, 8, CNN_ALL_FUSIONS});
}

Test(cnn_gpu, ours_fp32_batch_5, NEEDS_GPU)
{
    expect_step_right((struct step_case){0, DT_FP32, 5, CNN_ALL_FUSIONS});
}

Test(cnn_gpu, ours_fp16_batch_8, NEEDS_GPU)
{
    expect_step_right((struct step_case){0, DT_FP16, 8, CNN_ALL_FUSIONS});
}

Test(cnn_gpu, ours_fp16_batch_5, NEEDS_GPU)
{
    expect_step_right((struct step_case){0, DT_FP16, 5, CNN_ALL_FUSIONS});
}

Test(cnn_gpu, vendor_fp32_batch_8, NEEDS_GPU)
{
    expect_step_right((struct step_case){1, DT_FP32, 8, 0});
}

Test(cnn_gpu, vendor_fp32_batch_5, NEEDS_GPU)
{
    expect_step_right((struct step_case){1, DT_FP32, 5, 0});
}

Test(cnn_gpu, vendor_fp16_batch_8, NEEDS_GPU)
{
    expect_step_right((struct step_case){1, DT_FP16, 8, 0});
}

Test(cnn_gpu, vendor_fp16_batch_5, NEEDS_GPU)
{
    expect_step_right((struct step_case){1, DT_FP16, 5, 0});
}


Test(cnn_gpu, unfused_fp32_batch_5, NEEDS_GPU)
{
    expect_step_right((struct step_case){0, DT_FP32, 5, 0});
}

Test(cnn_gpu, unfused_fp16_batch_8, NEEDS_GPU)
{
    expect_step_right((struct step_case){0, DT_FP16, 8, 0});
}

Test(cnn_gpu, pool_relu_fused_alone_fp32_batch_5, NEEDS_GPU)
{
    expect_step_right((struct step_case){0, DT_FP32, 5, CNN_FUSE_POOL_RELU});
}

Test(cnn_gpu, fc2_fused_alone_fp16_batch_5, NEEDS_GPU)
{
    expect_step_right((struct step_case){0, DT_FP16, 5, CNN_FUSE_FC2});
}

/* An epoch of graph replays (two full batches and a shorter last one, each taking its batch by
 * the device's step counter) must leave the weights that the same steps launched one by one
 * leave, and count and log the same. Not to the bit: chapter 02's bias gradient of a linear
 * layer adds with float atomics, in whatever order the blocks come. */
static void train_tiny_epoch(int use_graph, enum dtype t, float *params, struct epoch_result *e)
{
    enum { IMAGES = 21, BATCH = 8 };
    static uint8_t images[IMAGES * CNN_PIXELS];
    uint8_t labels[IMAGES];
    random_batch(IMAGES, 11, images, labels);
    struct cnn_state st;
    char why[256];
    cr_assert_eq(cnn_state_create(&st, t, BATCH, 0.05f, images, labels, IMAGES, why, sizeof why),
                 0, "%s", why);
    cnn_init_params(params, 5);
    cnn_state_set_params(&st, params);
    struct trainer tr;
    trainer_init(&tr, &st, cnn_ours_step, NULL, use_graph);
    cr_expect_eq(tr.full_steps, 2);
    cr_expect_eq(tr.tail, 5);
    int32_t order[IMAGES];
    cnn_epoch_order(9, 0, IMAGES, order);
    trainer_epoch(&tr, order, 0, e);
    cnn_state_get_params(&st, params);
    trainer_destroy(&tr);
    cnn_state_destroy(&st);
}

static void expect_graph_replays_match_launches(enum dtype t)
{
    static float by_graph[CNN_PARAM_TOTAL], by_launch[CNN_PARAM_TOTAL], init[CNN_PARAM_TOTAL];
    struct epoch_result g, l;
    train_tiny_epoch(1, t, by_graph, &g);
    train_tiny_epoch(0, t, by_launch, &l);
    cnn_init_params(init, 5);
    double diff = 0, norm = 0;
    for (int i = 0; i < CNN_PARAM_TOTAL; i++) {
        diff += ((double)by_graph[i] - by_launch[i]) * ((double)by_graph[i] - by_launch[i]);
        norm += (double)by_launch[i] * by_launch[i];
    }
    cr_expect_lt(sqrt(diff / norm), t == DT_FP32 ? 1e-6 : 1e-3,
                 "%s: the replayed epoch's weights differ from the launched one's by %.3e",
                 dtype_name(t), sqrt(diff / norm));
    cr_expect_neq(memcmp(by_graph, init, sizeof init), 0, "the epoch changed no weight");
    cr_expect_eq(g.correct, l.correct);
    cr_expect_eq(g.images, 21);
    cr_expect(fabs(g.mean_loss - l.mean_loss) < 1e-4 && g.mean_loss > 0, "mean losses %g and %g",
              g.mean_loss, l.mean_loss);
}

Test(cnn_gpu, graph_replays_match_launches_fp32, NEEDS_GPU)
{
    expect_graph_replays_match_launches(DT_FP32);
}

Test(cnn_gpu, graph_replays_match_launches_fp16, NEEDS_GPU)
{
    expect_graph_replays_match_launches(DT_FP16);
}

/* ---- the epoch's order, and the program's refusals ---- */

Test(cnn_order, is_a_permutation_that_changes_by_epoch)
{
    enum { N = 1000 };
    static int32_t a[N], b[N];
    int seen[N] = {0};
    cnn_epoch_order(1, 0, N, a);
    cnn_epoch_order(1, 1, N, b);
    for (int i = 0; i < N; i++) {
        cr_assert(a[i] >= 0 && a[i] < N);
        seen[a[i]]++;
    }
    for (int i = 0; i < N; i++)
        cr_expect_eq(seen[i], 1, "%d appears %d times", i, seen[i]);
    cr_expect_neq(memcmp(a, b, sizeof a), 0, "epochs 0 and 1 share an order");
    int fixed = 0;
    for (int i = 0; i < N; i++)
        fixed += a[i] == i;
    cr_expect_lt(fixed, 10, "%d of %d in place: no shuffle", fixed, N);
}

struct bad_flag {
    const char *args, *says;
};

static const struct bad_flag bad_flags[] = {
    {"--batch 0", "--batch"},
    {"--batch 32,x", "--batch"},
    {"--batch 70000", "--batch"},
    {"--lr -1", "--lr"},
    {"--lr abc", "--lr"},
    {"--epochs 0", "--epochs"},
    {"--variant fast", "--variant"},
    {"--dtype fp64", "--dtype"},
    {"--preset huge", "--preset"},
    {"--iters 3", "--iters"},
    {"--seed -2", "--seed"},
    {"--frobnicate", "--frobnicate"},
    {"--data /nonexistent-kl-dir", "/nonexistent-kl-dir"},
    {"--load-init /nonexistent-kl-file", "/nonexistent-kl-file"},
};

Test(cnn_program, refuses_bad_flags_in_one_line)
{
    for (size_t i = 0; i < sizeof bad_flags / sizeof bad_flags[0]; i++) {
        char said[2048];
        const int rc = run_program("10-train-cnn", bad_flags[i].args, said, sizeof said);
        cr_expect_eq(rc, KL_EXIT_USAGE, "%s: exit %d (%s)", bad_flags[i].args, rc, said);
        cr_expect_eq(count_lines(said), 1, "%s: one line, not: %s", bad_flags[i].args, said);
        cr_expect(strstr(said, bad_flags[i].says) != NULL, "%s: said %s", bad_flags[i].args,
                  said);
    }
}

Test(cnn_program, help_and_list_exit_0)
{
    char said[4096];
    cr_expect_eq(run_program("10-train-cnn", "--help", said, sizeof said), 0);
    cr_expect(strstr(said, "--batch") != NULL);
    cr_expect_eq(run_program("10-train-cnn", "--list", said, sizeof said), 0);
    cr_expect(strstr(said, "vendor") != NULL);
}

/* ---- the exercise's checker: it fails the stub, naming an element, and passes fused.cu ---- */

Test(cnn_exercise, checker_fails_the_stub, NEEDS_GPU)
{
    FILE *log = tmpfile();
    cr_assert(log);
    cr_expect_eq(cnn_exercise_verify(cnn_pool_relu_backward_exercise, 1, log), 1);
    char text[4096] = "";
    rewind(log);
    text[fread(text, 1, sizeof text - 1, log)] = '\0';
    cr_expect(strstr(text, "WRONG at element 0") != NULL, "the checker said: %s", text);
    fclose(log);
}

Test(cnn_exercise, checker_passes_the_fused_kernel, NEEDS_GPU)
{
    FILE *log = tmpfile();
    cr_assert(log);
    cr_expect_eq(cnn_exercise_verify(cnn_pool_relu_backward_fp32, 1, log), 0);
    fclose(log);
}
