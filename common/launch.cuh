/* Kernel launches that need more than <<<grid, block, shared, stream>>>: thread-block clusters
 * and programmatic dependent launch, both sm_90 features, set as attributes of
 * cudaLaunchKernelEx.
 *  - cluster: blocks per cluster along x (1 = none). The blocks of a cluster run at the same
 *    time on neighbouring SMs and may read each other's shared memory. grid.x must be a
 *    multiple of it; 8 is the most every sm_90 GPU guarantees.
 *  - early: the kernel may be launched before the previous kernel in the stream has finished,
 *    as soon as every block of that kernel has called kl_let_next_grid_start() (kernels.cuh).
 *    Its blocks then wait in kl_wait_for_previous_grid() instead of waiting to be launched, so
 *    the launch and the block start-up of back-to-back kernels overlap. */
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

#endif
