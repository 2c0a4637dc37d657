/* The tensor-core instructions of compute capability 8.0 on, one wrapper each, for the kernels
 * that multiply fp16 tiles held in shared memory: ldmatrix to read the operands, mma.sync to
 * multiply them, and a barrier over part of a block. cp.async is in async_copy.cuh.
 *
 * mma.sync.m16n8k16 (fp16 in, fp32 sums) is one warp-wide instruction for a 16 x 8 tile of
 * sums += a 16 x 16 tile of A times a 16 x 8 tile of B. Its operands are registers in a layout
 * the PTX ISA fixes. With g = lane / 4 and t = lane % 4, lane `lane` holds
 *   A: a[0] = A[g][2t, 2t+1],   a[1] = A[g+8][2t, 2t+1],
 *      a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]
 *   B: b[0] = B[2t, 2t+1][g],  b[1] = B[2t+8, 2t+9][g]          (pairs along k, the reduction)
 *   C: c[0], c[1] = C[g][2t, 2t+1],  c[2], c[3] = C[g+8][2t, 2t+1]
 * ldmatrix reads four 8 x 8 tiles of 16-bit elements from shared memory: lanes 8i to 8i + 7
 * give the addresses of tile i's eight rows, 16 bytes each, anywhere in shared memory (16-byte
 * aligned), and each lane receives, for each tile, the pair at row lane / 4, columns
 * 2 (lane % 4) and + 1. That is exactly the pair an operand register wants when a row of the
 * tile is a row of A (an m index, 8 consecutive k) or a column of B (an n index, 8 consecutive
 * k): A's four registers are four tiles, and two B fragments (two n8 tiles, k 0-7 and 8-15 each)
 * are another four. The .trans form transposes each tile on the way, for operands stored with
 * k across rows instead. Because every lane names its own row, the rows need not be evenly
 * spaced: a kernel can point them at any 16-byte rows it has staged (a convolution's input
 * pixels under one filter tap, say).
 *
 * Shared addresses are 32-bit addresses of the .shared window (kl_shared_address). Every
 * wrapper needs compute capability 8.0 (ldmatrix alone would do with 7.5); below, it traps, and
 * kernels that use them guard their bodies so that nothing runs there. */
#ifndef KL_MMA_SYNC_CUH
#define KL_MMA_SYNC_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define KL_MMA_SYNC_OK 1
#else
#define KL_MMA_SYNC_OK 0
#endif

/* The .shared-window address of a pointer into this block's shared memory. */
__device__ __forceinline__ uint32_t kl_shared_address(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Four 8 x 8 tiles of 16-bit elements: lanes 8i .. 8i + 7 address the rows of tile i; r[i] gets
 * the lane's pair of tile i (row lane / 4, columns 2 (lane % 4) and + 1). */
__device__ __forceinline__ void kl_ldmatrix_x4(uint32_t r[4], uint32_t addr)
{
#if KL_MMA_SYNC_OK
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#elif defined(__CUDA_ARCH__)
    (void)r, (void)addr;
    __trap();
#else
    (void)r, (void)addr;
#endif
}

/* The same with each tile transposed: r[i] holds rows 2 (lane % 4) and + 1 of column lane / 4. */
__device__ __forceinline__ void kl_ldmatrix_x4_trans(uint32_t r[4], uint32_t addr)
{
#if KL_MMA_SYNC_OK
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#elif defined(__CUDA_ARCH__)
    (void)r, (void)addr;
    __trap();
#else
    (void)r, (void)addr;
#endif
}

/* acc (16 x 8, fp32) += a (16 x 16, fp16, row-major) times b (16 x 8, fp16, column-major), in
 * the register layouts above. */
__device__ __forceinline__ void kl_mma_16816(float acc[4], const uint32_t a[4], const uint32_t b[2])
{
#if KL_MMA_SYNC_OK
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(__CUDA_ARCH__)
    (void)acc, (void)a, (void)b;
    __trap();
#else
    (void)acc, (void)a, (void)b;
#endif
}

/* A barrier for `threads` threads (whole warps) of the block on hardware barrier `id` (1-15;
 * 0 is __syncthreads'): a block split into groups that work on their own tiles lets each group
 * wait for its own warps only. Like __syncthreads, it orders the shared-memory accesses of the
 * threads that take part. */
__device__ __forceinline__ void kl_barrier(int id, int threads)
{
#if defined(__CUDA_ARCH__)
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#else
    (void)id, (void)threads;
#endif
}

#endif
