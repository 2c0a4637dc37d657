/* Copies from global to shared memory that bypass the registers (cp.async, compute capability
 * 8.0 on). A thread issues any number of 16-byte copies, closes them into a group with
 * kl_copies_commit(), and later waits until at most N of its groups are still in flight with
 * kl_copies_wait<N>(): so a block can have the next tiles or rows on their way while it works
 * on one that has landed. The waits cover this thread's copies only; a block barrier after the
 * wait makes every thread's copies visible to all. Below 8.0 a copy is an ordinary load and
 * store, finished at once, and the commits and waits are empty. */
#ifndef KL_ASYNC_COPY_CUH
#define KL_ASYNC_COPY_CUH

#include <cuda_runtime.h>

/* 16 bytes from global to shared memory; `.cg` leaves L1 alone (the data is used once).
 * WHOLE_LINE asks the L2, when the copy misses, for the whole 128-byte line around the 16 bytes
 * (`.L2::128B`) rather than the sectors they touch. */
template <bool WHOLE_LINE = false>
__device__ __forceinline__ void kl_copy16_async(uint4 *to, const uint4 *from)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned shared = (unsigned)__cvta_generic_to_shared(to);
    if constexpr (WHOLE_LINE)
        asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(shared),
                     "l"(from)
                     : "memory");
    else
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared), "l"(from)
                     : "memory");
#else
    *to = *from;
#endif
}

/* 4 bytes from global to shared memory through L1 (`.ca`), for copies narrower than 16 bytes
 * (a gather, a matrix whose rows are no multiple of 16 bytes); `in` false writes 0 and reads
 * nothing (src_bytes 0), so a tile's edges are zero-filled in the same instruction. */
__device__ __forceinline__ void kl_copy4_async(float *to, const float *from, bool in)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(
                     (unsigned)__cvta_generic_to_shared(to)),
                 "l"(from), "r"(in ? 4 : 0)
                 : "memory");
#else
    *to = in ? *from : 0.f;
#endif
}

/* Closes this thread's copies issued since the last commit into one group (possibly empty). */
__device__ __forceinline__ void kl_copies_commit()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/* Waits until at most `pending` of this thread's groups, the newest, are still in flight. */
template <int pending> __device__ __forceinline__ void kl_copies_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
#endif
}

/* Commits this thread's open copies and waits for all of them. */
__device__ __forceinline__ void kl_copies_wait_all()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

#endif
