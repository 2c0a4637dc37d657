/* The IDX loader (idx.h). Both headers are read and checked before either file's data, so a
 * pair that cannot be used is refused before 47 MB are decompressed; the data are then read
 * into buffers that grow as bytes arrive, never sized from a header alone, so a header that
 * claims more than its file holds costs no more memory than the file does. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "idx.h"
#include "net.h"

#define IMAGES_MAGIC 0x00000803u    /* unsigned bytes, 3 dimensions */
#define LABELS_MAGIC 0x00000801u    /* unsigned bytes, 1 dimension */
#define LABEL_LIMIT 10              /* labels are 0 to LABEL_LIMIT - 1 */
#define FIRST_BUFFER (1u << 16)     /* a data buffer's first size; it doubles from there */
#define READ_CHUNK (1u << 30)       /* gzread counts in unsigned and returns an int */
#define PATH_LEN 4096

/* An open IDX file, and its name for the messages. */
struct idx_file {
    const char *path;
    gzFile gz;
};

/* Writes "path: what is wrong" into err; returns 2, the status of bad input. */
int cnn_refuse_file(char *err, size_t err_len, const char *path, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(err, err_len, "%s: %s", path, what);
    return 2;
}

/* Why the last read failed: the system's reason, or zlib's (a corrupt gzip stream), which
 * zlib writes after the file's name, already at the head of the message. */
static int refuse_unreadable(const struct idx_file *f, char *err, size_t err_len)
{
    const int saved_errno = errno;
    int code;
    const char *zlib_says = gzerror(f->gz, &code);
    const size_t len = strlen(f->path);
    if (!strncmp(zlib_says, f->path, len) && !strncmp(zlib_says + len, ": ", 2))
        zlib_says += len + 2;
    return cnn_refuse_file(err, err_len, f->path, "cannot read: %s",
                  code == Z_ERRNO ? strerror(saved_errno) : zlib_says);
}

static uint32_t big_endian_u32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static int open_file(struct idx_file *f, char *err, size_t err_len)
{
    errno = 0;
    f->gz = gzopen(f->path, "rb");
    if (!f->gz)
        return cnn_refuse_file(err, err_len, f->path, "cannot open: %s",
                      errno ? strerror(errno) : "out of memory");
    gzbuffer(f->gz, 1u << 17);
    return 0;
}

static void close_file(struct idx_file *f)
{
    if (f->gz)
        gzclose(f->gz);
    f->gz = NULL;
}

/* Reads up to `want` bytes into buf: how many it got (fewer only at the end of the file,
 * or where a gzip stream is cut short), or -1 on a read error. */
static int64_t read_up_to(gzFile gz, uint8_t *buf, uint64_t want)
{
    uint64_t got = 0;
    while (got < want) {
        const unsigned ask = want - got < READ_CHUNK ? (unsigned)(want - got) : READ_CHUNK;
        const int n = gzread(gz, buf + got, ask);
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (uint64_t)n;
    }
    return (int64_t)got;
}

/* The header: the magic number, then `ndims` big-endian sizes into dims. */
static int read_header(struct idx_file *f, uint32_t magic, const char *kind, uint32_t *dims,
                       int ndims, char *err, size_t err_len)
{
    uint8_t bytes[16];
    const int64_t size = 4 * (ndims + 1);
    const int64_t got = read_up_to(f->gz, bytes, (uint64_t)size);
    if (got < 0)
        return refuse_unreadable(f, err, err_len);
    /* the magic first, where there is one: the files swapped say so, however short */
    if (got >= 4 && big_endian_u32(bytes) != magic)
        return cnn_refuse_file(err, err_len, f->path,
                      "magic number 0x%08" PRIx32 ", not the 0x%08" PRIx32 " of an IDX %s file",
                      big_endian_u32(bytes), magic, kind);
    if (got < size)
        return cnn_refuse_file(err, err_len, f->path,
                      "truncated: %" PRId64 " bytes, shorter than the %" PRId64
                      "-byte header of an IDX %s file", got, size, kind);
    for (int i = 0; i < ndims; i++)
        dims[i] = big_endian_u32(bytes + 4 + 4 * i);
    return 0;
}

/* The images' header: count, rows, cols. Sets *count and *bytes, the size of the data. */
static int read_images_header(struct idx_file *f, uint64_t *count, uint64_t *bytes, char *err,
                              size_t err_len)
{
    uint32_t dims[3];
    int rc = read_header(f, IMAGES_MAGIC, "images", dims, 3, err, err_len);
    if (rc)
        return rc;
    const uint64_t n = dims[0], plane = (uint64_t)dims[1] * dims[2]; /* below 2^64 */
    if (plane && n > (uint64_t)INT64_MAX / plane)
        return cnn_refuse_file(err, err_len, f->path,
                      "%" PRIu64 " images of %" PRIu32 "x%" PRIu32 " pixels: the size overflows",
                      n, dims[1], dims[2]);
    if (dims[1] != CNN_SIDE || dims[2] != CNN_SIDE)
        return cnn_refuse_file(err, err_len, f->path,
                      "images of %" PRIu32 "x%" PRIu32 "; this chapter's network takes %dx%d",
                      dims[1], dims[2], CNN_SIDE, CNN_SIDE);
    if (n == 0)
        return cnn_refuse_file(err, err_len, f->path, "holds no images (its count is 0)");
    *count = n;
    *bytes = n * plane;
    return 0;
}

/* The labels' header: its count must be the images'. */
static int read_labels_header(struct idx_file *f, const struct idx_file *images, uint64_t count,
                              char *err, size_t err_len)
{
    uint32_t n;
    int rc = read_header(f, LABELS_MAGIC, "labels", &n, 1, err, err_len);
    if (rc)
        return rc;
    if (n != count)
        return cnn_refuse_file(err, err_len, f->path, "%" PRIu32 " labels, but %s holds %" PRIu64
                      " images", n, images->path, count);
    return 0;
}

/* The next size of a buffer that grows toward `bytes`. */
static uint64_t next_capacity(uint64_t cap, uint64_t bytes)
{
    const uint64_t next = cap ? 2 * cap : FIRST_BUFFER;
    return next < bytes ? next : bytes;
}

/* After the data, nothing: not a byte more, and no error at the end of a gzip stream (a
 * damaged check value, or a trailer cut off). */
static int expect_end(struct idx_file *f, uint64_t bytes, char *err, size_t err_len)
{
    uint8_t extra;
    const int64_t got = read_up_to(f->gz, &extra, 1);
    int code;
    gzerror(f->gz, &code);
    if (got < 0 || (code != Z_OK && code != Z_BUF_ERROR))
        return refuse_unreadable(f, err, err_len);
    if (got > 0)
        return cnn_refuse_file(err, err_len, f->path,
                      "trailing bytes: the file goes on past the %" PRIu64
                      " bytes of data its header gives", bytes);
    if (code == Z_BUF_ERROR)
        return cnn_refuse_file(err, err_len, f->path, "truncated: its gzip stream ends early");
    return 0;
}

/* Exactly `bytes` bytes of data, into a new buffer *out, and the end of the file. */
static int read_data(struct idx_file *f, uint64_t bytes, uint8_t **out, char *err,
                     size_t err_len)
{
    uint8_t *buf = NULL;
    uint64_t have = 0, cap = 0;
    while (have < bytes) {
        cap = next_capacity(cap, bytes);
        uint8_t *grown = realloc(buf, (size_t)cap);
        if (!grown) {
            free(buf);
            return cnn_refuse_file(err, err_len, f->path, "out of memory at %" PRIu64 " bytes", cap);
        }
        buf = grown;
        const int64_t got = read_up_to(f->gz, buf + have, cap - have);
        if (got < 0) {
            free(buf);
            return refuse_unreadable(f, err, err_len);
        }
        have += (uint64_t)got;
        if (have < cap)
            break; /* the end of the file */
    }
    int rc = have < bytes ? cnn_refuse_file(err, err_len, f->path,
                                   "truncated: its header gives %" PRIu64
                                   " bytes of data, the file holds %" PRIu64, bytes, have)
                          : expect_end(f, bytes, err, err_len);
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    return 0;
}

static int check_labels(const struct idx_file *f, const uint8_t *labels, uint64_t count,
                        char *err, size_t err_len)
{
    for (uint64_t i = 0; i < count; i++)
        if (labels[i] >= LABEL_LIMIT)
            return cnn_refuse_file(err, err_len, f->path, "label %" PRIu64 " is %u; labels are 0 to %d",
                          i, labels[i], LABEL_LIMIT - 1);
    return 0;
}

int idx_load(const char *images_path, const char *labels_path, struct idx_set *set, char *err,
             size_t err_len)
{
    memset(set, 0, sizeof *set);
    struct idx_file images = {images_path, NULL}, labels = {labels_path, NULL};
    uint64_t count = 0, pixels = 0;
    int rc = open_file(&images, err, err_len);
    if (!rc)
        rc = read_images_header(&images, &count, &pixels, err, err_len);
    if (!rc)
        rc = open_file(&labels, err, err_len);
    if (!rc)
        rc = read_labels_header(&labels, &images, count, err, err_len);
    if (!rc)
        rc = read_data(&images, pixels, &set->images, err, err_len);
    if (!rc)
        rc = read_data(&labels, count, &set->labels, err, err_len);
    if (!rc)
        rc = check_labels(&labels, set->labels, count, err, err_len);
    close_file(&images);
    close_file(&labels);
    if (rc) {
        idx_free(set);
        return rc;
    }
    set->count = (int64_t)count;
    set->rows = set->cols = CNN_SIDE;
    return 0;
}

/* dir/name.gz if that exists, else dir/name, into path. */
static int find_file(const char *dir, const char *name, char *path, char *err, size_t err_len)
{
    const int len = snprintf(path, PATH_LEN, "%s/%s.gz", dir, name);
    if (len < 0 || len >= PATH_LEN)
        return cnn_refuse_file(err, err_len, dir, "the folder's name is too long");
    if (access(path, F_OK) == 0)
        return 0;
    snprintf(path, PATH_LEN, "%s/%s", dir, name);
    if (access(path, F_OK) == 0)
        return 0;
    return cnn_refuse_file(err, err_len, dir, "holds neither %s.gz nor %s", name, name);
}

int idx_load_dir(const char *dir, int train, struct idx_set *set, char *err, size_t err_len)
{
    memset(set, 0, sizeof *set);
    struct stat st;
    if (stat(dir, &st) != 0)
        return cnn_refuse_file(err, err_len, dir, "cannot open the folder: %s", strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return cnn_refuse_file(err, err_len, dir, "not a folder (the IDX files' folder is wanted)");
    const char *prefix = train ? "train" : "t10k";
    char images_name[32], labels_name[32], images_path[PATH_LEN], labels_path[PATH_LEN];
    snprintf(images_name, sizeof images_name, "%s-images-idx3-ubyte", prefix);
    snprintf(labels_name, sizeof labels_name, "%s-labels-idx1-ubyte", prefix);
    int rc = find_file(dir, images_name, images_path, err, err_len);
    if (!rc)
        rc = find_file(dir, labels_name, labels_path, err, err_len);
    return rc ? rc : idx_load(images_path, labels_path, set, err, err_len);
}

void idx_free(struct idx_set *set)
{
    free(set->images);
    free(set->labels);
    memset(set, 0, sizeof *set);
}
