/* Kernel launches that need more than <<<grid, block, shared, stream>>>: thread-block clusters
 * and programmatic dependent launch, both sm_90 features, set as attributes of
 * cudaLaunchKernelEx.
 *  - cluster: blocks per cluster along x (1 = none). The blocks of a cluster run at the same
 *    time on neighbouring SMs and may read each other's shared memory. grid.x must be a
 *    multiple of it; 8 is the most every sm_90 GPU guarantees.
 *  - early: the kernel may be launched before the previous kernel in the stream has finished,
 *    as soon as every block of that kernel has called kl_let_next_grid_start() (kernels.cuh).
 *    Its blocks then wait in kl_wait_for_previous_grid() instead of waiting to be launched, so
 *    the launch and the block start-up of back-to-back kernels overlap.
 * Also here: the device's compute capability, the one-time grant of more than 48 KB of shared
 * memory to a kernel, the relaxed capture mode that lets such set-up through a graph capture,
 * and functions of the driver library reached through the runtime. */
#ifndef KL_LAUNCH_CUH
#define KL_LAUNCH_CUH

#include "check.h"
#include "kernels.cuh"

struct kl_launch_opts {
    unsigned cluster;
    bool early;
};

template <typename... Params, typename... Args>
void kl_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
               cudaStream_t s, struct kl_launch_opts o, Args... args)
{
    cudaLaunchAttribute attr[2];
    unsigned n = 0;
    if (o.cluster > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = o.cluster;
        attr[n].val.clusterDim.y = 1;
        attr[n].val.clusterDim.z = 1;
        n++;
    }
    if (o.early) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n].val.programmaticStreamSerializationAllowed = 1;
        n++;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = shared_bytes;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = n;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
    LAUNCH_CHECK();
}

/* A function of the driver library, as the driver of CUDA `version` (12000 for 12.0) spells
 * it, or NULL where this driver has none. The runtime hands out its address, so the program
 * need not link libcuda. */
static inline void *kl_driver_function(const char *name, unsigned version)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult found;
    CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found));
    return found == cudaDriverEntryPointSuccess ? fn : NULL;
}

/* One-time set-up (cudaFuncSetAttribute, cudaMalloc) belongs outside graph capture. The
 * harness makes every launcher's first call outside capture, but a caller's own graph may not,
 * so set-up runs in relaxed capture mode, which lets such calls through a capture in progress. */
static inline cudaStreamCaptureMode kl_capture_relax(void)
{
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    return mode;
}

static inline void kl_capture_restore(cudaStreamCaptureMode mode)
{
    CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
}

/* A device buffer of at least `need` bytes: *buf, of *have bytes, replaced by a larger one when
 * a larger problem comes, and kept otherwise. Inside a capture (a caller's, never the harness's)
 * the old buffer may belong to nodes already captured, and cudaFree would synchronise: it is
 * left allocated. */
static inline void *kl_grow_buffer(void **buf, size_t *have, size_t need, cudaStream_t s)
{
    if (need > *have) {
        const cudaStreamCaptureMode mode = kl_capture_relax();
        cudaStreamCaptureStatus capturing;
        CUDA_CHECK(cudaStreamIsCapturing(s, &capturing));
        if (*buf && capturing == cudaStreamCaptureStatusNone)
            CUDA_CHECK(cudaFree(*buf));
        CUDA_CHECK(cudaMalloc(buf, need));
        kl_capture_restore(mode);
        *have = need;
    }
    return *buf;
}

/* Compute capability of the current device as 10 * major + minor (90 on Hopper), asked of the
 * driver once per device: launchers use it to pick a kernel or a launch attribute. */
static inline int kl_device_cc(void)
{
    return 10 * kl_device_attribute(cudaDevAttrComputeCapabilityMajor) +
           kl_device_attribute(cudaDevAttrComputeCapabilityMinor);
}

/* Raises the dynamic shared memory `kernel` may take to the device's opt-in maximum (227 KB on
 * an H100 or H200, against 48 KB by default) less its static shared memory, and returns that
 * room in bytes. Callers keep the answer: it is asked once per kernel. */
static inline size_t kl_grant_shared_memory(const void *kernel)
{
    const cudaStreamCaptureMode mode = kl_capture_relax();
    const int optin = kl_device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    cudaFuncAttributes fa;
    CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
    const size_t room = (size_t)optin - fa.sharedSizeBytes;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)room));
    kl_capture_restore(mode);
    return room;
}

#endif
