/* Bulk copies by the tensor-memory accelerator (sm_90): one instruction moves a contiguous run
 * of bytes (a multiple of 16, both ends 16-byte aligned) between global and shared memory,
 * without the threads' registers or per-thread addresses. A load's bytes are counted on an
 * mbarrier in shared memory: the thread that issues the copies first tells the barrier how
 * many bytes to expect, and any thread waits on it until they have all landed. Stores are
 * grouped per thread like cp.async's copies. Below sm_90 these compile to nothing; callers
 * run them on compute capability 9.0 only. */
#ifndef KL_BULK_COPY_CUH
#define KL_BULK_COPY_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KL_BULK_COPY 1
#endif

__device__ __forceinline__ unsigned kl_shared_address(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

/* A barrier that completes its phase on one arrival plus the bytes it was told to expect. */
__device__ __forceinline__ void kl_mbarrier_init(uint64_t *bar)
{
#ifdef KL_BULK_COPY
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(kl_shared_address(bar)) : "memory");
#else
    (void)bar;
#endif
}

/* Makes barriers' initialisation visible to the copy engine before any copy uses them. */
__device__ __forceinline__ void kl_mbarrier_init_fence()
{
#ifdef KL_BULK_COPY
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

/* The one arrival, telling bar how many bytes its phase waits for. */
__device__ __forceinline__ void kl_mbarrier_expect_bytes(uint64_t *bar, unsigned bytes)
{
#ifdef KL_BULK_COPY
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                     kl_shared_address(bar)),
                 "r"(bytes)
                 : "memory");
#else
    (void)bar, (void)bytes;
#endif
}

/* Waits until the phase of bar with this parity (0 for its first, 1 for its second, 0 again
 * for its third...) has completed: every byte it expected has landed. */
__device__ __forceinline__ void kl_mbarrier_wait_parity(uint64_t *bar, unsigned parity)
{
#ifdef KL_BULK_COPY
    unsigned done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(kl_shared_address(bar)), "r"(parity)
                     : "memory");
#else
    (void)bar, (void)parity;
#endif
}

/* Global to this block's shared memory, counted on bar. */
__device__ __forceinline__ void kl_bulk_load(void *to, const void *from, unsigned bytes,
                                             uint64_t *bar)
{
#ifdef KL_BULK_COPY
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];" ::"r"(kl_shared_address(to)),
                 "l"(from), "r"(bytes), "r"(kl_shared_address(bar))
                 : "memory");
#else
    (void)to, (void)from, (void)bytes, (void)bar;
#endif
}

/* Orders this thread's ordinary writes to shared memory before later bulk copies read it:
 * every writing thread calls it, then the block synchronises, then one thread stores. */
__device__ __forceinline__ void kl_fence_before_bulk_store()
{
#ifdef KL_BULK_COPY
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

/* This block's shared memory to global memory, as one group of this thread's stores. */
__device__ __forceinline__ void kl_bulk_store(void *to, const void *from, unsigned bytes)
{
#ifdef KL_BULK_COPY
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(to),
                 "r"(kl_shared_address(from)), "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#else
    (void)to, (void)from, (void)bytes;
#endif
}

/* Waits until every bulk store of this thread has read its shared memory, which may then be
 * reused or released; the writes themselves are complete when the kernel is. */
__device__ __forceinline__ void kl_bulk_stores_wait_read()
{
#ifdef KL_BULK_COPY
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
#endif
}

/* The same for all of this thread's stores but the newest group. */
__device__ __forceinline__ void kl_bulk_stores_wait_read_but_newest()
{
#ifdef KL_BULK_COPY
    asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
#endif
}

#endif
