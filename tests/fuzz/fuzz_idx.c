/* Fuzz target: a pair of IDX files through chapter 10's idx_load. The input is the two files
 * back to back after a 2-byte little-endian length: that many bytes (or what there is) are the
 * images file, the rest the labels file. Each goes to an in-memory file (memfd), which
 * idx_load opens by its /proc/self/fd name, so a gzip-compressed part is read as one.
 *
 * Beyond no crash, no leak and no sanitizer report, it checks what the program relies on:
 * the status is 0 or 2; a refusal comes with a one-line message that starts with the name of
 * one of the two files, and leaves the set empty; an accepted pair has at least one image of
 * 28x28 and labels 0 to 9. Where neither part is gzip (which zlib recognises by its first two
 * bytes, 1f 8b), the verdict must be the one the format gives (plain_pair_is_valid) and the
 * pixels and labels read the bytes of the input. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "10-train-cnn/idx.h"
#include "fuzz.h"

#define SIDE 28

struct part {
    const uint8_t *bytes;
    size_t len;
};

static uint32_t big_endian_u32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static int is_gzip(struct part p)
{
    return p.len >= 2 && p.bytes[0] == 0x1f && p.bytes[1] == 0x8b;
}

/* The format, read straight from the spec: a pair idx_load must take. */
static int plain_pair_is_valid(struct part images, struct part labels)
{
    if (images.len < 16 || labels.len < 8 || big_endian_u32(images.bytes) != 0x803 ||
        big_endian_u32(labels.bytes) != 0x801)
        return 0;
    const uint64_t count = big_endian_u32(images.bytes + 4);
    if (count == 0 || big_endian_u32(images.bytes + 8) != SIDE ||
        big_endian_u32(images.bytes + 12) != SIDE || big_endian_u32(labels.bytes + 4) != count ||
        images.len != 16 + count * SIDE * SIDE || labels.len != 8 + count)
        return 0;
    for (uint64_t i = 0; i < count; i++)
        if (labels.bytes[8 + i] > 9)
            return 0;
    return 1;
}

/* The in-memory file fd, now holding exactly p. */
static void refill(int fd, struct part p)
{
    FUZZ_CHECK(ftruncate(fd, 0) == 0, "ftruncate");
    FUZZ_CHECK(p.len == 0 || pwrite(fd, p.bytes, p.len, 0) == (ssize_t)p.len, "pwrite");
}

static int memory_file(char *path, size_t len)
{
    const int fd = memfd_create("fuzz_idx", 0);
    FUZZ_CHECK(fd >= 0, "memfd_create");
    snprintf(path, len, "/proc/self/fd/%d", fd);
    return fd;
}

static void check_refusal(const char *err, size_t err_len, const struct idx_set *set,
                          const char *images_path, const char *labels_path)
{
    FUZZ_CHECK(memchr(err, '\0', err_len) != NULL, "the message is unterminated");
    FUZZ_CHECK(strchr(err, '\n') == NULL, "the message is not one line: %s", err);
    const char *named = !strncmp(err, images_path, strlen(images_path))   ? images_path
                        : !strncmp(err, labels_path, strlen(labels_path)) ? labels_path
                                                                          : NULL;
    FUZZ_CHECK(named && !strncmp(err + strlen(named), ": ", 2) && err[strlen(named) + 2],
               "the message does not start with a file's name and what is wrong: %s", err);
    FUZZ_CHECK(!set->images && !set->labels && set->count == 0, "a refused set is not empty");
}

static void check_accepted(const struct idx_set *set, struct part images, struct part labels)
{
    FUZZ_CHECK(set->count >= 1 && set->rows == SIDE && set->cols == SIDE && set->images &&
                   set->labels,
               "accepted %lld images of %dx%d", (long long)set->count, set->rows, set->cols);
    for (int64_t i = 0; i < set->count; i++)
        FUZZ_CHECK(set->labels[i] <= 9, "label %lld is %d", (long long)i, set->labels[i]);
    if (!is_gzip(images))
        FUZZ_CHECK(!memcmp(set->images, images.bytes + 16, (size_t)set->count * SIDE * SIDE),
                   "the pixels are not the file's");
    if (!is_gzip(labels))
        FUZZ_CHECK(!memcmp(set->labels, labels.bytes + 8, (size_t)set->count),
                   "the labels are not the file's");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int images_fd = -1, labels_fd = -1;
    static char images_path[64], labels_path[64];
    if (images_fd < 0) {
        images_fd = memory_file(images_path, sizeof images_path);
        labels_fd = memory_file(labels_path, sizeof labels_path);
    }
    const size_t said = size >= 2 ? (size_t)data[0] | (size_t)data[1] << 8 : 0;
    const size_t rest = size >= 2 ? size - 2 : 0;
    const struct part images = {data + (size >= 2 ? 2 : size), said < rest ? said : rest};
    const struct part labels = {images.bytes + images.len, rest - images.len};
    refill(images_fd, images);
    refill(labels_fd, labels);

    struct idx_set set;
    char err[1024];
    memset(err, 'x', sizeof err);
    const int rc = idx_load(images_path, labels_path, &set, err, sizeof err);
    FUZZ_CHECK(rc == 0 || rc == 2, "idx_load returned %d", rc);
    if (rc)
        check_refusal(err, sizeof err, &set, images_path, labels_path);
    else
        check_accepted(&set, images, labels);
    if (!is_gzip(images) && !is_gzip(labels))
        FUZZ_CHECK((rc == 0) == plain_pair_is_valid(images, labels), "idx_load %s a pair the "
                   "format %s: %s", rc ? "refused" : "took", rc ? "allows" : "refuses",
                   rc ? err : "");
    idx_free(&set);
    return 0;
}
