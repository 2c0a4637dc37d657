#include "device.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "check.h"
#include "stats.h"

/* Why no GPU can be used, in words that point at the cause. The runtime says "driver version
 * is insufficient" both when the driver is too old and when there is no driver at all, so ask
 * the driver library itself which it is. */
static void explain_no_gpu(cudaError_t err, char *why, size_t why_len)
{
    void *driver = err == cudaErrorInsufficientDriver ? dlopen("libcuda.so.1", RTLD_LAZY) : NULL;
    int (*get_version)(int *) = driver ? (int (*)(int *))dlsym(driver, "cuDriverGetVersion")
                                       : NULL;
    int driver_version = 0, runtime_version = 0;
    if (err == cudaSuccess || err == cudaErrorNoDevice)
        snprintf(why, why_len, "no NVIDIA GPU found (the driver lists none)");
    else if (err == cudaErrorInsufficientDriver && get_version && !get_version(&driver_version) &&
             cudaRuntimeGetVersion(&runtime_version) == cudaSuccess && driver_version > 0) {
        char drv[16], rt[16];
        format_cuda_version(driver_version, drv, sizeof drv);
        format_cuda_version(runtime_version, rt, sizeof rt);
        snprintf(why, why_len, "the NVIDIA driver supports CUDA %s, older than this build's "
                 "runtime, CUDA %s: update the driver", drv, rt);
    } else if (err == cudaErrorInsufficientDriver)
        snprintf(why, why_len, "no NVIDIA GPU or driver found");
    else
        snprintf(why, why_len, "no usable NVIDIA GPU (%s)", cudaGetErrorString(err));
    if (driver)
        dlclose(driver);
}

int device_open(struct device_info *d, char *why, size_t why_len)
{
    memset(d, 0, sizeof *d);
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        explain_no_gpu(err, why, why_len);
        cudaGetLastError(); /* clear the sticky error of the failed query */
        return -1;
    }
    struct cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    CUDA_CHECK(cudaSetDevice(0));
    snprintf(d->name, sizeof d->name, "%s", prop.name);
    d->cc = prop.major * 10 + prop.minor;
    d->sms = prop.multiProcessorCount;
    d->l2_bytes = (size_t)prop.l2CacheSize;
    d->total_mem = prop.totalGlobalMem;
    CUDA_CHECK(cudaRuntimeGetVersion(&d->runtime_version));
    CUDA_CHECK(cudaDriverGetVersion(&d->driver_version));
    d->cudnn_version = cudnnGetVersion();
    return 0;
}

double measure_copy_gbps(const struct device_info *d)
{
    /* 1 GiB each way, or what fits; at least 16x the L2 so the copy streams from memory. */
    size_t free_bytes, total;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    size_t bytes = (size_t)1 << 30;
    while (bytes > 16 * d->l2_bytes && 2 * bytes > free_bytes / 2)
        bytes /= 2;
    void *src, *dst;
    CUDA_CHECK(cudaMalloc(&src, bytes));
    CUDA_CHECK(cudaMalloc(&dst, bytes));
    CUDA_CHECK(cudaMemset(src, 1, bytes));
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    enum { WARMUP = 3, SAMPLES = 15 };
    double gbps[SAMPLES];
    for (int i = 0; i < WARMUP + SAMPLES; i++) {
        CUDA_CHECK(cudaEventRecord(start, 0));
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0));
        CUDA_CHECK(cudaEventRecord(stop, 0));
        CUDA_CHECK(cudaEventSynchronize(stop));
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        if (i >= WARMUP)
            gbps[i - WARMUP] = 2.0 * (double)bytes / (ms * 1e6);
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    CUDA_CHECK(cudaFree(src));
    CUDA_CHECK(cudaFree(dst));
    return summarize(gbps, SAMPLES).median;
}

void format_cc(int cc, char *buf, size_t len)
{
    snprintf(buf, len, "%d.%d", cc / 10, cc % 10);
}

void format_cuda_version(int v, char *buf, size_t len)
{
    snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}
