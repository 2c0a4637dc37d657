/* The GPU in use, and the roofs every rung is measured against, read at program start. */
#ifndef KL_DEVICE_H
#define KL_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct device_info {
    char name[256];
    int cc;                 /* compute capability as 10 * major + minor: 90 on Hopper */
    int sms;
    size_t l2_bytes;
    size_t total_mem;
    int runtime_version, driver_version; /* 13000 = 13.0 */
    size_t cudnn_version;   /* 91400 = 9.14.0 */
};

/* Opens device 0. Returns 0, or -1 with why set when there is no usable GPU. */
int device_open(struct device_info *d, char *why, size_t why_len);

/* Device-to-device copy bandwidth in GB/s (bytes read plus bytes written), the memory roof. */
double measure_copy_gbps(const struct device_info *d);

/* "9.0", "13.0", "9.14.0" */
void format_cc(int cc, char *buf, size_t len);
void format_cuda_version(int v, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
