/* net.h's initial weights and its parameter file. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idx.h"
#include "net.h"
#include "rng.h"

#define PARAM_MAGIC "KLCNN01\n"
#define MAGIC_LEN 8
#define PARAM_FILE_BYTES (MAGIC_LEN + 4 * (size_t)CNN_PARAM_TOTAL)

/* A standard normal by Box-Muller from two uniforms; 1 - u lies in (0, 1], so the log is
 * finite. Only the cosine half is used: one normal from each pair, simply. */
static double standard_normal(struct rng *r)
{
    const double u = 1.0 - rng_uniform(r, 0, 1), v = rng_uniform(r, 0, 1);
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

static int is_bias(int i)
{
    return i == CNN_CONV1_B || i == CNN_CONV2_B || i == CNN_FC1_B || i == CNN_FC2_B;
}

/* He-normal (std sqrt(2 / fan_in), so that ReLU layers keep their activations' scale), drawn
 * from one generator in the order of the flat array; biases zero, drawing nothing. */
void cnn_init_params(float *params, uint64_t seed)
{
    struct rng r = rng_seeded(seed);
    for (int i = 0; i < CNN_PARAMS; i++) {
        float *p = params + cnn_param_offset(i);
        const double std = sqrt(2.0 / (double)cnn_param_fan_in[i]);
        for (int64_t e = 0; e < cnn_param_elems[i]; e++)
            p[e] = is_bias(i) ? 0.0f : (float)(std * standard_normal(&r));
    }
}

/* fp32 as 4 little-endian bytes, whatever the host's byte order. */
static void put_le_float(uint8_t *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    for (int k = 0; k < 4; k++)
        b[k] = (uint8_t)(u >> (8 * k));
}

static float get_le_float(const uint8_t *b)
{
    uint32_t u = 0;
    for (int k = 0; k < 4; k++)
        u |= (uint32_t)b[k] << (8 * k);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int cnn_save_params(const char *path, const float *params, char *err, size_t err_len)
{
    uint8_t *bytes = malloc(PARAM_FILE_BYTES);
    if (!bytes)
        return cnn_refuse_file(err, err_len, path, "out of memory for the parameter file");
    memcpy(bytes, PARAM_MAGIC, MAGIC_LEN);
    for (size_t i = 0; i < CNN_PARAM_TOTAL; i++)
        put_le_float(bytes + MAGIC_LEN + 4 * i, params[i]);
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(bytes);
        return cnn_refuse_file(err, err_len, path, "cannot create: %s", strerror(errno));
    }
    const size_t wrote = fwrite(bytes, 1, PARAM_FILE_BYTES, f);
    const int write_errno = errno;
    free(bytes);
    if (fclose(f) != 0 || wrote != PARAM_FILE_BYTES) /* fclose flushes: a full disk shows here */
        return cnn_refuse_file(err, err_len, path, "cannot write: %s",
                      strerror(wrote != PARAM_FILE_BYTES ? write_errno : errno));
    return 0;
}

/* The whole file into bytes (PARAM_FILE_BYTES + 1, so that a longer file shows); *len is how
 * much it held, up to that. */
static int read_param_file(const char *path, uint8_t *bytes, size_t *len, char *err,
                           size_t err_len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cnn_refuse_file(err, err_len, path, "cannot open: %s", strerror(errno));
    *len = fread(bytes, 1, PARAM_FILE_BYTES + 1, f);
    const int failed = ferror(f), read_errno = errno;
    fclose(f);
    if (failed)
        return cnn_refuse_file(err, err_len, path, "cannot read: %s", strerror(read_errno));
    return 0;
}

/* The magic, the exact length, and finite values: a NaN or infinity would only show later,
 * as a loss of NaN. */
static int check_param_file(const char *path, const uint8_t *bytes, size_t len, char *err,
                            size_t err_len)
{
    if (len < MAGIC_LEN || memcmp(bytes, PARAM_MAGIC, MAGIC_LEN) != 0)
        return cnn_refuse_file(err, err_len, path,
                      "not a parameter file of net.h (it does not start with KLCNN01)");
    if (len < PARAM_FILE_BYTES)
        return cnn_refuse_file(err, err_len, path, "truncated: %zu bytes, not the %zu of a parameter "
                      "file (8 of header, then %d fp32)", len, PARAM_FILE_BYTES, CNN_PARAM_TOTAL);
    if (len > PARAM_FILE_BYTES)
        return cnn_refuse_file(err, err_len, path, "trailing bytes: longer than the %zu of a parameter "
                      "file (8 of header, then %d fp32)", PARAM_FILE_BYTES, CNN_PARAM_TOTAL);
    for (int i = 0; i < CNN_PARAMS; i++) {
        const uint8_t *tensor = bytes + MAGIC_LEN + 4 * cnn_param_offset(i);
        for (int64_t e = 0; e < cnn_param_elems[i]; e++)
            if (!isfinite(get_le_float(tensor + 4 * e)))
                return cnn_refuse_file(err, err_len, path, "%s[%lld] is %g, not a finite number",
                              cnn_param_name[i], (long long)e, get_le_float(tensor + 4 * e));
    }
    return 0;
}

int cnn_load_params(const char *path, float *params, char *err, size_t err_len)
{
    uint8_t *bytes = malloc(PARAM_FILE_BYTES + 1);
    if (!bytes)
        return cnn_refuse_file(err, err_len, path, "out of memory for the parameter file");
    size_t len = 0;
    int rc = read_param_file(path, bytes, &len, err, err_len);
    if (!rc)
        rc = check_param_file(path, bytes, len, err, err_len);
    if (!rc)
        for (size_t i = 0; i < CNN_PARAM_TOTAL; i++)
            params[i] = get_le_float(bytes + MAGIC_LEN + 4 * i);
    free(bytes);
    return rc;
}
