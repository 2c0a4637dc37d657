/* The library boundary of chapters 01 to 09: each api.h's entry points against the chapter's
 * CPU reference, in fp32 and fp16.
 *
 * First through each chapter's "api" rung (ladder_check), at shapes that take every branch of
 * its api.cu's rule. On compute capability 9.0, the H200's, whose sweep the rules come from,
 * each case also checks which rung ran (the launchers' rung notes): a shape that stopped
 * taking its branch would otherwise go on passing while it tested some other rung.
 * Then as a program of one's own calls them: on device buffers it allocated itself, several
 * calls captured into one CUDA graph sharing one workspace, and two calls at the same time on
 * two streams with a workspace each, as the api.h contracts allow. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "01-relu/api.h"
#include "02-bias-grad/api.h"
#include "03-softmax/api.h"
#include "05-matmul/api.h"
#include "06-maxpool/api.h"
#include "07-conv-forward/api.h"
#include "08-conv-backward-input/api.h"
#include "09-conv-backward-weight/api.h"
#include "bias_grad.h"
#include "check.h"
#include "conv.h"
#include "dgrad.h"
#include "gpu.h"
#include "matmul.h"
#include "maxpool.h"
#include "relu.h"
#include "rung_note.h"
#include "softmax.h"
#include "verify.h"
#include "wgrad.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The compute capability the rules were measured on: only there is the rung each shape runs
 * known. Elsewhere the tests still verify every output. */
#define RULES_CC 90

/* Whether a rung note names rung `want`, given as its number ("v3") or in full. A launcher
 * that hands a shape to another rung's notes that rung last, so the note is whose kernels ran. */
static bool is_rung(const char *noted, const char *want)
{
    const size_t len = strlen(want);
    return noted && !strncmp(noted, want, len) && (noted[len] == '\0' || noted[len] == '_');
}

/* ---- every branch of each rule, through the chapter's "api" rung ---- */

/* One shape of one pass, and the rung the rule picks there on RULES_CC in fp32 and fp16. */
struct api_case {
    int pass;
    const char *shape;
    const char *fp32, *fp16;
};

static void expect_cases_verified(const struct chapter *ch, const struct api_case *cases,
                                  size_t count)
{
    const struct rung *api = rung_named(ch, "api");
    const bool know_rungs = gpu_cc() == RULES_CC;
    for (size_t i = 0; i < count; i++) {
        const struct api_case *c = &cases[i];
        for (int t = DT_FP32; t <= DT_FP16; t++) {
            const char *want = t == DT_FP32 ? c->fp32 : c->fp16;
            struct verify_result v = {0};
            char why[256] = "";
            kl_take_rung_note();
            const int rc = ladder_check(ch, api, c->pass, (enum dtype)t, c->shape, 700 + i, &v,
                                        why, sizeof why);
            const char *ran = kl_take_rung_note();
            SKIP_IF_GPU_LACKS_RUNG(rc, why);
            cr_expect_eq(rc, 0, "%s %s %s at %s: %s element %zu is %g, reference %g", ch->id,
                         ch->passes[c->pass], dtype_name(t), c->shape, rc == 1 ? "wrong:" : why,
                         v.first_bad, v.bad_out, v.bad_ref);
            if (know_rungs)
                cr_expect(is_rung(ran, want), "%s %s %s at %s ran %s; the rule picks %s",
                          ch->id, ch->passes[c->pass], dtype_name(t), c->shape,
                          ran ? ran : "no noted rung", want);
        }
    }
}

/* ReLU: v1 up to 2^18 elements (both sides of it), v5 beyond; the fp16 backward v3 up to
 * 2^22, v5 past it. Odd counts leave the vector rungs a scalar tail. */
static const struct api_case relu_cases[] = {
    {0, "1000", "v1", "v1"},         {0, "3x5x7", "v1", "v1"},
    {0, "262144", "v1", "v1"},       {0, "262145", "v5", "v5"},
    {0, "4194307", "v5", "v5"},      {1, "1000", "v1", "v1"},
    {1, "3x5x7", "v1", "v1"},        {1, "262144", "v1", "v1"},
    {1, "262145", "v5", "v3"},       {1, "4194304", "v5", "v3"},
    {1, "4194307", "v5", "v5"},
};

Test(api_gpu, relu_takes_every_branch, NEEDS_GPU)
{
    expect_cases_verified(&relu_chapter, relu_cases, COUNT(relu_cases));
}

/* Bias gradient: H W = 1 v2; H W < 512 v3 (511, odd shapes); from 512 v4; the fp16 sums from
 * 2^19 elements a channel (N H W) v6, on both sides of 2^19. */
static const struct api_case bias_grad_cases[] = {
    {0, "1x1x1x1", "v2", "v2"},        {0, "300x77x1x1", "v2", "v2"},
    {0, "3x17x13x11", "v3", "v3"},     {0, "5x64x14x14", "v3", "v3"},
    {0, "2x3x511x1", "v3", "v3"},      {0, "2x3x32x16", "v4", "v4"},
    {0, "3x5x33x17", "v4", "v4"},      {0, "8x2x255x257", "v4", "v4"},
    {0, "8x2x256x256", "v4", "v6"},    {0, "9x3x241x243", "v4", "v6"},
};

Test(api_gpu, bias_grad_takes_every_branch, NEEDS_GPU)
{
    expect_cases_verified(&bias_grad_chapter, bias_grad_cases, COUNT(bias_grad_cases));
}

/* Softmax forward: up to 64 rows v6 (contiguous or strided); contiguous rows of up to 8 v1,
 * between v3 (to 32767), from 32768 v7; rows 7x7 (and 15x17) apart with more than 32 channels
 * v8 to C 512 in fp32 and 1000 in fp16, v9 beyond; 32 or fewer channels v3; rows 16x16 apart
 * v3, but v7 past C 512. Where a rung cannot take a shape it hands it on, and the rung noted
 * is the one that ran: v7 holds contiguous rows of at most 16384 fp32 or 32768 fp16 values
 * and gives the rest, strided rows too, to v4; v9 and v8 need C H W a multiple of 16 bytes,
 * which 1100 x 49 in fp16 is not (1104 x 49 is), and hand it through v8 and v7 to v4. */
static const struct api_case softmax_forward_cases[] = {
    {0, "8x10x1x1", "v6", "v6"},        {0, "1x40x7x7", "v6", "v6"},
    {0, "1x64x8x8", "v6", "v6"},        {0, "1000x7x1x1", "v1", "v1"},
    {0, "3000x8x1x1", "v1", "v1"},      {0, "300x100x1x1", "v3", "v3"},
    {0, "65x32767x1x1", "v3", "v3"},    {0, "65x32768x1x1", "v4", "v7"},
    {0, "66x40000x1x1", "v4", "v4"},    {0, "2x10x7x7", "v3", "v3"},
    {0, "2x40x7x7", "v8", "v8"},        {0, "2x512x7x7", "v8", "v8"},
    {0, "2x600x7x7", "v9", "v8"},       {0, "2x1000x7x7", "v9", "v8"},
    {0, "2x1100x7x7", "v9", "v4"},      {0, "2x1104x7x7", "v9", "v9"},
    {0, "2x40x15x17", "v8", "v8"},      {0, "2x8x16x16", "v3", "v3"},
    {0, "2x10x16x16", "v3", "v3"},      {0, "2x40x16x16", "v3", "v3"},
    {0, "2x600x16x16", "v4", "v4"},
};

Test(api_gpu, softmax_forward_takes_every_branch, NEEDS_GPU)
{
    expect_cases_verified(&softmax_chapter, softmax_forward_cases,
                          COUNT(softmax_forward_cases));
}

/* Softmax backward: up to 64 rows v6; contiguous rows of up to 8 v1, to 128 v3, beyond v4;
 * rows 16x16 apart v3 in fp32, and in fp16 by C: v1 to 8, v2 to 16, v6 to 64, v4 beyond;
 * rows 7x7 apart with 32 or fewer channels v3, more v8, but v9 past C 1024 (fp16: 512); in
 * fp32 rows 12x12 apart v3. Handed on (the rung noted ran): v4 gives rows whose y and dy do
 * not fit its shared memory to v2 (40000 fp32 values, 70000 fp16) and strided rows to v3's
 * strips; 1100 x 49 fp16 values, no multiple of 16 bytes, go from v9 down to v2. */
static const struct api_case softmax_backward_cases[] = {
    {1, "8x10x1x1", "v6", "v6"},        {1, "1x40x7x7", "v6", "v6"},
    {1, "1000x7x1x1", "v1", "v1"},      {1, "300x100x1x1", "v3", "v3"},
    {1, "300x128x1x1", "v3", "v3"},     {1, "300x129x1x1", "v4", "v4"},
    {1, "65x40000x1x1", "v2", "v4"},    {1, "65x70000x1x1", "v2", "v2"},
    {1, "2x8x16x16", "v3", "v1"},       {1, "2x10x16x16", "v3", "v2"},
    {1, "2x16x16x16", "v3", "v2"},      {1, "2x40x16x16", "v3", "v6"},
    {1, "2x64x16x16", "v3", "v6"},      {1, "2x600x16x16", "v3", "v3"},
    {1, "2x10x7x7", "v3", "v3"},        {1, "2x40x7x7", "v8", "v8"},
    {1, "2x600x7x7", "v8", "v9"},       {1, "2x1024x7x7", "v8", "v9"},
    {1, "2x1100x7x7", "v9", "v2"},      {1, "2x1104x7x7", "v9", "v9"},
    {1, "2x40x12x12", "v3", "v8"},
};

Test(api_gpu, softmax_backward_takes_every_branch, NEEDS_GPU)
{
    expect_cases_verified(&softmax_chapter, softmax_backward_cases,
                          COUNT(softmax_backward_cases));
}

/* Matmul A B: v11 where M or N is under 128, v7's 128 x 128 tiles would be fewer than the SMs
 * (132 on the H200) and K is 64 or more, in fp32 always, in fp16 up to 2^27 multiply-adds where N or K is no
 * multiple of 8 (17x33x65, 1023x77x513; 37x40x48's K of 48 is too short); else up to 2^27 v3 in
 * fp32, and in fp16 where N or K is no multiple of 8; else v10 in fp16 on compute capability 9.0
 * (which runs v9 itself where N or K is no multiple of 8: 600x517x515, past 2^27), and v7 in
 * fp32 (1536x1536x64: 144 tiles of 128 x 128; 520^3 and 600x517x515, past 2^27 but not skinny). A^T B and A B^T: v11 at every shape. The full
 * reference of the largest, 1.6 x 10^8 multiply-adds, takes a fraction of a second. */
static const struct api_case matmul_cases[] = {
    {0, "1x1x1", "v3", "v3"},             {0, "7x5x3", "v3", "v3"},
    {0, "17x33x65", "v11", "v11"},        {0, "1023x77x513", "v11", "v11"},
    {0, "1x8x8", "v3", "v10"},            {0, "37x40x48", "v3", "v10"},
    {0, "2000x2000x16", "v3", "v10"},     {0, "264x136x72", "v3", "v10"},
    {0, "512x512x512", "v3", "v10"},      {0, "520x520x520", "v7", "v10"},
    {0, "600x517x515", "v7", "v9"},      {0, "1536x1536x64", "v7", "v10"},
    {1, "1x1x1", "v11", "v11"},           {1, "3x5x7", "v11", "v11"},
    {1, "128x1568x32", "v11", "v11"},     {1, "10x128x1024", "v11", "v11"},
    {1, "1536x1536x64", "v11", "v11"},    {2, "1x1x1", "v11", "v11"},
    {2, "33x17x1569", "v11", "v11"},      {2, "32x128x1568", "v11", "v11"},
    {2, "129x10x1025", "v11", "v11"},     {2, "1536x1536x64", "v11", "v11"},
};

Test(api_gpu, matmul_takes_every_branch, NEEDS_GPU)
{
    expect_cases_verified(&matmul_chapter, matmul_cases, COUNT(matmul_cases));
}

/* Max pooling forward: 3x3 windows at stride 1 or 2 v4; 2x2 stride-2 windows v2 where its
 * vector path applies (OW a multiple of 4, rows of 16-byte multiples); any other window v1. H
 * and W even and odd, with and without padding. v4 wants OW a multiple of 4 and hands other
 * widths to v2 (2x3x7x9-k3s2p1: OW 5). */
static const struct api_case maxpool_forward_cases[] = {
    {0, "2x3x8x10-k2", "v1", "v1"},       {0, "2x3x7x9-k2", "v1", "v1"},
    {0, "2x3x9x8-k3s1p1", "v4", "v4"},    {0, "2x3x15x16-k3s2p1", "v4", "v4"},
    {0, "1x2x17x18-k3s2", "v4", "v4"},    {0, "2x3x7x9-k3s2p1", "v2", "v2"},
    {0, "1x2x12x12-k3s3", "v1", "v1"},    {0, "1x2x9x9-k4s1p2", "v1", "v1"},
    {0, "4x64x64x64-k2", "v2", "v2"},     {0, "2x3x16x16-k2", "v2", "v2"},
};

Test(api_gpu, maxpool_forward_takes_every_branch, NEEDS_GPU)
{
    expect_cases_verified(&maxpool_chapter, maxpool_forward_cases,
                          COUNT(maxpool_forward_cases));
}

/* Convolution forward (api.cu's rule): v7 for few channels at 3x3 stride 1 (in fp16 only at
 * C = 1); fp32 3x3 stride 1 v6, but v4 for K <= 32 on few pixels; fp16 v5 from 2^24 FLOPs,
 * below that v6 at 3x3 stride 1 and v5 elsewhere, and below 2^16 FLOPs v1 for one filter, v4
 * otherwise; everything else v4. */
static const struct api_case conv2d_forward_cases[] = {
    {0, "32x1x28x28-16k3s1p1", "v7", "v7"},  {0, "2x4x16x16-8k3s1p1", "v7", "v6"},
    {0, "4x16x14x14-32k3s1p1", "v4", "v6"},  {0, "16x16x14x14-64k3s1p1", "v6", "v5"},
    {0, "1x3x7x7-1k7s1p3", "v4", "v1"},      {0, "5x7x9x11-3k1s1p0", "v4", "v4"},
    {0, "3x5x17x13-7k5s2p2", "v4", "v5"},    {0, "2x3x9x7-5k3s2p1", "v4", "v4"},
};

Test(api_gpu, conv2d_forward_takes_every_branch, NEEDS_GPU)
{
    expect_cases_verified(&conv2d_chapter, conv2d_forward_cases,
                          COUNT(conv2d_forward_cases));
}

/* Convolution input gradient (api.cu's rule): C <= 16 up to 2^25 FLOPs (2 N K P Q C R S) v7;
 * else stride 1 with a square filter and padding at most R - 1 v5 (chapter 07's forward on
 * the flipped filter); else, at stride 1, below 2^20 FLOPs v1; else v6 (the stride phases)
 * up to stride 255, v4 past it. The FLOPs of each: 1x1x1x1-1k1 2; 2x3x9x7-5k3s1p1 34,020;
 * 3x5x17x13-7k5s2p2 330,750; 4x16x14x14-32k3s1p1 7,225,344; 32x16x14x14-32k3s2p1
 * 14,450,688; 32x16x14x14-32k3s1p1 57,802,752 (past 2^25: v5); 8x32x32x32-64k3s1p1
 * 301,989,888; 2x17x32x32-16k3s1p1 10,027,008 (C = 17: v5); 1x17x5x5-2k1s1p1 3,332 (padding
 * past a 1x1 filter, below 2^20: v1); 4x32x20x20-32k1s1p1 3,964,928 (the same past 2^20:
 * v6); 2x64x27x27-32k3s2p1 14,450,688 and 4x24x15x15-32k3s3p1 1,382,400 (strides 2 and 3);
 * 1x17x300x300-2k1s256p0 272 (stride 256: v4). */
static const struct api_case dgrad_cases[] = {
    {0, "1x1x1x1-1k1", "v7", "v7"},           {0, "2x3x9x7-5k3s1p1", "v7", "v7"},
    {0, "3x5x17x13-7k5s2p2", "v7", "v7"},     {0, "4x16x14x14-32k3s1p1", "v7", "v7"},
    {0, "32x16x14x14-32k3s2p1", "v7", "v7"},  {0, "32x16x14x14-32k3s1p1", "v5", "v5"},
    {0, "8x32x32x32-64k3s1p1", "v5", "v5"},   {0, "2x17x32x32-16k3s1p1", "v5", "v5"},
    {0, "1x17x5x5-2k1s1p1", "v1", "v1"},      {0, "4x32x20x20-32k1s1p1", "v6", "v6"},
    {0, "2x64x27x27-32k3s2p1", "v6", "v6"},   {0, "4x24x15x15-32k3s3p1", "v6", "v6"},
    {0, "1x17x300x300-2k1s256p0", "v4", "v4"},
};

Test(api_gpu, conv2d_backward_input_takes_every_branch, NEEDS_GPU)
{
    expect_cases_verified(&dgrad_chapter, dgrad_cases, COUNT(dgrad_cases));
}

/* Convolution weight gradient (api.cu's rule): one channel and one filter 2d_v3; else filters
 * up to 3 x 3 of 4 channels or more under 1.6 G multiply-adds v7 (the seed, 2.4 G, is past
 * it); else up to 4 channels and 36 sums a filter (C R S) v6; else, with db, v5; without, v4
 * in fp16 where it takes the shape (R (15 stride + S) <= 128: not a 5x5 filter at stride 2),
 * and v3. Pass 0 is bwd_weight (db NULL), pass 1 bwd_weight_bias. C = 1 with K > 1 is v6's,
 * not the 2D kernel's; C = 4 under a 5x5 filter is past v6's registers and v7's taps. */
static const struct api_case wgrad_cases[] = {
    {0, "1x1x5x7-1k3s1p1", "2d_v3", "2d_v3"},      {1, "8x1x128x128-1k3s1p1", "2d_v3", "2d_v3"},
    {1, "2x1x9x7-1k5s2p2", "2d_v3", "2d_v3"},      {0, "32x1x28x28-16k3s1p1", "v6", "v6"},
    {1, "3x3x11x9-5k3s1p1", "v6", "v6"},           {0, "1x4x7x5-7k3s2p1", "v7", "v7"},
    {1, "1x1x2x3-2k3s1p2", "v6", "v6"},            {0, "1x4x7x5-7k5s2p2", "v3", "v3"},
    {1, "1x4x7x5-7k5s2p2", "v5", "v5"},            {1, "3x5x17x13-7k5s2p2", "v5", "v5"},
    {1, "32x16x14x14-32k3s1p1", "v7", "v7"},       {0, "3x5x17x13-7k5s2p2", "v3", "v3"},
    {0, "32x16x14x14-32k3s1p1", "v7", "v7"},       {0, "2x64x27x27-32k3s2p1", "v7", "v7"},
    {0, "8x32x40x40-64k3s1p1", "v7", "v7"},        {1, "5x7x9x11-3k1s1p0", "v7", "v7"},
    {0, "3x5x17x13-7k5s1p2", "v3", "v4"},          {1, "3x5x17x13-7k5s1p2", "v5", "v5"},
    {0, "8x32x128x128-64k3s1p1", "v3", "v4"},      {1, "8x32x128x128-64k3s1p1", "v5", "v5"},
    {1, "2x3x8x8-4k3s1p1", "v6", "v6"},
};

Test(api_gpu, conv2d_backward_weight_takes_every_branch, NEEDS_GPU)
{
    expect_cases_verified(&wgrad_chapter, wgrad_cases, COUNT(wgrad_cases));
}

/* Max pooling backward: 3x3 windows at stride 1 or 2 v4, but v1 in fp32 at stride 2; other
 * windows v1 where H or W is odd, and in fp32 from 2^20 to 2^22 elements of x (both ends;
 * 786432 and 4456448 lie outside), else v3. */
static const struct api_case maxpool_backward_cases[] = {
    {1, "2x3x9x8-k3s1p1", "v4", "v4"},    {1, "2x3x7x9-k3s2p1", "v1", "v4"},
    {1, "2x3x15x16-k3s2p1", "v1", "v4"},  {1, "1x2x16x16-k3s2", "v1", "v4"},
    {1, "2x3x7x9-k2", "v1", "v1"},        {1, "2x3x8x9-k2", "v1", "v1"},
    {1, "1x2x9x9-k4s1p2", "v1", "v1"},    {1, "2x3x8x10-k2", "v3", "v3"},
    {1, "1x2x12x12-k3s3", "v3", "v3"},    {1, "3x64x64x64-k2", "v3", "v3"},
    {1, "4x64x64x64-k2", "v1", "v3"},     {1, "16x64x64x64-k2", "v1", "v3"},
    {1, "17x64x64x64-k2", "v3", "v3"},
};

Test(api_gpu, maxpool_backward_takes_every_branch, NEEDS_GPU)
{
    expect_cases_verified(&maxpool_chapter, maxpool_backward_cases,
                          COUNT(maxpool_backward_cases));
}

/* ---- direct calls on buffers of our own: one graph, then two streams ---- */

#define MAX_BUFFERS 4
#define MAX_CALLS 5

struct call;
typedef void (*call_fn)(const struct call *c, void *workspace, cudaStream_t s);

/* One call of an entry point on device buffers of its own: inputs uploaded from random host
 * data (or data the reference derived, where a backward reads a forward's results), outputs
 * filled with NaN so that an element left unwritten fails, and each output's reference. */
struct call {
    char what[96];          /* "softmax_forward fp32 64x600x7x7", for messages */
    const char *rung;       /* the rung the rule runs on RULES_CC (NULL: not pinned yet) */
    enum dtype t;
    call_fn launch;
    union {
        struct relu_dims relu;
        struct bias_grad_dims bias_grad;
        struct softmax_dims softmax;
        struct {
            struct matmul_dims d;
            enum matmul_form form;
        } matmul;
        struct maxpool_dims maxpool;
        struct {
            struct conv2d_dims d;
            enum conv2d_activation act;
        } conv;
        struct conv2d_dims dgrad; /* the forward's dims, as conv2d_backward_input takes them */
        struct conv2d_dims wgrad; /* and as conv2d_backward_weight takes them */
    } d;
    size_t workspace_bytes; /* 0 where the entry point takes none */
    size_t zero_bytes;      /* the workspace's first bytes zero after a call (0: all) */
    size_t reduction_len;   /* terms summed into one output element, for the tolerance */
    int n_in, n_out;
    void *host_in[MAX_BUFFERS];
    const void *in[MAX_BUFFERS];
    void *out[MAX_BUFFERS];
    enum dtype out_type[MAX_BUFFERS];
    size_t out_count[MAX_BUFFERS];
    double *ref[MAX_BUFFERS];
};

__attribute__((format(printf, 4, 5))) static void call_init(struct call *c, enum dtype t,
                                                           const char *rung, const char *fmt,
                                                           ...)
{
    memset(c, 0, sizeof *c);
    c->t = t;
    c->rung = rung;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->what, sizeof c->what, fmt, ap);
    va_end(ap);
}

static void *host_buffer(size_t bytes)
{
    void *p = host_alloc(bytes);
    cr_assert(p, "out of host memory (%zu bytes)", bytes);
    return p;
}

static void *random_host(enum dtype t, size_t n, struct rng *r, double lo, double hi)
{
    void *p = host_buffer(n * dtype_size(t));
    fill_uniform(p, t, n, r, lo, hi);
    return p;
}

/* Uploads `host` as the call's next input; the call keeps it, and frees it. */
static void add_input(struct call *c, void *host, size_t bytes)
{
    cr_assert_lt(c->n_in, MAX_BUFFERS);
    void *dev;
    CUDA_CHECK(cudaMalloc(&dev, bytes));
    CUDA_CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
    c->host_in[c->n_in] = host;
    c->in[c->n_in++] = dev;
}

static size_t output_bytes(const struct call *c, int i)
{
    return c->out_count[i] * dtype_size(c->out_type[i]);
}

/* The call's next output, n elements of type t, all bits set (NaN in fp32 and fp16); returns
 * the array for its reference. */
static double *add_output(struct call *c, enum dtype t, size_t n)
{
    cr_assert_lt(c->n_out, MAX_BUFFERS);
    const int i = c->n_out++;
    c->out_type[i] = t;
    c->out_count[i] = n;
    CUDA_CHECK(cudaMalloc(&c->out[i], output_bytes(c, i)));
    CUDA_CHECK(cudaMemset(c->out[i], 0xff, output_bytes(c, i)));
    c->ref[i] = host_buffer(n * sizeof(double));
    return c->ref[i];
}

static void poison_outputs(const struct call *c, cudaStream_t s)
{
    for (int i = 0; i < c->n_out; i++)
        CUDA_CHECK(cudaMemsetAsync(c->out[i], 0xff, output_bytes(c, i), s));
}

/* Every output against its reference, as pool_verify compares a rung's. */
static void expect_call_verified(const struct call *c, const char *how)
{
    for (int i = 0; i < c->n_out; i++) {
        void *host = host_buffer(output_bytes(c, i));
        CUDA_CHECK(cudaMemcpy(host, c->out[i], output_bytes(c, i), cudaMemcpyDeviceToHost));
        const struct verify_result v = verify(host, c->out_type[i], c->ref[i], c->out_count[i],
                                              tolerance_for(c->out_type[i], c->reduction_len));
        cr_expect(v.ok, "%s %s: output %d element %zu is %g, reference %g (%zu of %zu wrong)",
                  c->what, how, i, v.first_bad, v.bad_out, v.bad_ref, v.n_bad, v.n_total);
        free(host);
    }
}

static void expect_ran(const struct call *c, const char *noted)
{
    if (!c->rung)
        return;
    cr_expect(is_rung(noted, c->rung), "%s ran %s; the rule picks %s", c->what,
              noted ? noted : "no noted rung", c->rung);
}

static void call_free(struct call *c)
{
    for (int i = 0; i < c->n_in; i++) {
        free(c->host_in[i]);
        CUDA_CHECK(cudaFree((void *)c->in[i]));
    }
    for (int i = 0; i < c->n_out; i++) {
        free(c->ref[i]);
        CUDA_CHECK(cudaFree(c->out[i]));
    }
}

/* A workspace zeroed before its first use, as api.h asks; NULL where none is needed. */
static void *zeroed_workspace(size_t bytes)
{
    void *w = NULL;
    if (bytes) {
        CUDA_CHECK(cudaMalloc(&w, bytes));
        CUDA_CHECK(cudaMemset(w, 0, bytes));
    }
    return w;
}

/* calls[0..n) captured in order into one graph on one stream, sharing one workspace, then the
 * graph launched twice, the outputs poisoned between: the second launch finds the workspace
 * as the first left it, which api.h promises will do. Run first in a test's process, so that
 * every launcher's first call, with its one-time set-up, happens inside the capture; the
 * capture is in global mode, the strictest, as a framework's would be. */
static void expect_verified_in_one_graph(struct call *calls, int n)
{
    cr_assert_leq(n, MAX_CALLS);
    size_t bytes = 0;
    for (int i = 0; i < n; i++)
        bytes = calls[i].workspace_bytes > bytes ? calls[i].workspace_bytes : bytes;
    void *workspace = zeroed_workspace(bytes);
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    /* The uploads and memsets ran on the legacy stream, which a non-blocking one ignores. */
    CUDA_CHECK(cudaDeviceSynchronize());

    const char *ran[MAX_CALLS];
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    kl_take_rung_note();
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < n; i++) {
        calls[i].launch(&calls[i], workspace, s);
        ran[i] = kl_take_rung_note();
    }
    CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphLaunch(exec, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    const bool know_rungs = gpu_cc() == RULES_CC;
    for (int i = 0; i < n; i++) {
        if (know_rungs)
            expect_ran(&calls[i], ran[i]);
        expect_call_verified(&calls[i], "in a graph");
        poison_outputs(&calls[i], s);
    }
    CUDA_CHECK(cudaGraphLaunch(exec, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i++)
        expect_call_verified(&calls[i], "in the graph's second launch");

    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaStreamDestroy(s));
    CUDA_CHECK(cudaFree(workspace));
}

/* Holds a gate stream shut while both calls are queued behind it, so that they start together
 * rather than one after the other as the host issues them. */
static void CUDART_CB hold_the_gate(void *unused)
{
    (void)unused;
    usleep(20000);
}

/* a and b at the same time on two non-blocking streams, each with a workspace of its own, as
 * api.h asks of calls that may run at once. */
static void expect_verified_on_two_streams(struct call *a, struct call *b)
{
    struct call *calls[2] = {a, b};
    cudaStream_t gate, s[2];
    cudaEvent_t open;
    void *workspace[2];
    const char *ran[2];
    CUDA_CHECK(cudaStreamCreateWithFlags(&gate, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&open, cudaEventDisableTiming));
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
        workspace[i] = zeroed_workspace(calls[i]->workspace_bytes);
    }
    CUDA_CHECK(cudaDeviceSynchronize()); /* the legacy stream's uploads and memsets */

    CUDA_CHECK(cudaLaunchHostFunc(gate, hold_the_gate, NULL));
    CUDA_CHECK(cudaEventRecord(open, gate));
    kl_take_rung_note();
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaStreamWaitEvent(s[i], open, 0));
        calls[i]->launch(calls[i], workspace[i], s[i]);
        ran[i] = kl_take_rung_note();
    }
    for (int i = 0; i < 2; i++)
        CUDA_CHECK(cudaStreamSynchronize(s[i]));
    const bool know_rungs = gpu_cc() == RULES_CC;
    for (int i = 0; i < 2; i++) {
        if (know_rungs)
            expect_ran(calls[i], ran[i]);
        expect_call_verified(calls[i], "on its own stream");
        CUDA_CHECK(cudaStreamDestroy(s[i]));
        CUDA_CHECK(cudaFree(workspace[i]));
    }
    CUDA_CHECK(cudaEventDestroy(open));
    CUDA_CHECK(cudaStreamDestroy(gate));
}

/* ReLU, forward (pass 0) or backward (1), on n elements. */
static void relu_forward_fn(const struct call *c, void *workspace, cudaStream_t s)
{
    (void)workspace;
    relu_forward(c->in[0], c->out[0], c->d.relu, c->t, s);
}

static void relu_backward_fn(const struct call *c, void *workspace, cudaStream_t s)
{
    (void)workspace;
    relu_backward(c->in[0], c->in[1], c->out[0], c->d.relu, c->t, s);
}

static void relu_call(struct call *c, int pass, enum dtype t, size_t n, const char *rung,
                      struct rng *r)
{
    call_init(c, t, rung, "relu_%s %s %zu", pass ? "backward" : "forward", dtype_name(t), n);
    c->d.relu = (struct relu_dims){n};
    c->reduction_len = 1;
    void *x = random_host(t, n, r, -4, 4);
    add_input(c, x, n * dtype_size(t));
    if (pass == 0) {
        c->launch = relu_forward_fn;
        relu_forward_reference(x, t, n, add_output(c, t, n));
        return;
    }
    void *dy = random_host(t, n, r, -4, 4);
    add_input(c, dy, n * dtype_size(t));
    c->launch = relu_backward_fn;
    relu_backward_reference(x, dy, t, n, add_output(c, t, n));
}

/* No workspace: v1, v3 and v5, each in a graph and beside another on a second stream. */
Test(api_gpu, relu_called_directly, NEEDS_GPU)
{
    struct rng r = rng_seeded(11);
    struct call graph[3], streams[2];
    relu_call(&graph[0], 0, DT_FP32, 1000, "v1", &r);
    relu_call(&graph[1], 1, DT_FP16, 300001, "v3", &r);
    relu_call(&graph[2], 0, DT_FP16, 262147, "v5", &r);
    expect_verified_in_one_graph(graph, 3);
    relu_call(&streams[0], 1, DT_FP16, 262147, "v3", &r);
    relu_call(&streams[1], 0, DT_FP32, 4194307, "v5", &r);
    expect_verified_on_two_streams(&streams[0], &streams[1]);
    for (int i = 0; i < 3; i++)
        call_free(&graph[i]);
    for (int i = 0; i < 2; i++)
        call_free(&streams[i]);
}

static void bias_grad_fn(const struct call *c, void *workspace, cudaStream_t s)
{
    bias_grad(c->in[0], c->out[0], c->d.bias_grad, c->t, workspace, s);
}

static void bias_grad_call(struct call *c, enum dtype t, struct bias_grad_dims d,
                           const char *rung, struct rng *r)
{
    call_init(c, t, rung, "bias_grad %s %lldx%lldx%lldx%lld", dtype_name(t), (long long)d.n,
              (long long)d.c, (long long)d.h, (long long)d.w);
    const int64_t hw = d.h * d.w;
    const size_t n = (size_t)(d.n * d.c * hw);
    c->d.bias_grad = d;
    c->launch = bias_grad_fn;
    c->workspace_bytes = bias_grad_workspace_bytes(d, t);
    c->reduction_len = (size_t)(d.n * hw);
    void *dy = random_host(t, n, r, -1, 1);
    add_input(c, dy, n * dtype_size(t));
    bias_grad_reference(dy, t, (struct bias_grad_size){d.n, d.c, hw},
                        add_output(c, t, (size_t)d.c));
}

/* v2's sums, v3, and v4's and v6's partials take turns in one workspace in the graph; v6 and
 * v4 run at once on two streams, each with its own. */
Test(api_gpu, bias_grad_called_directly, NEEDS_GPU)
{
    struct rng r = rng_seeded(12);
    struct call graph[4], streams[2];
    bias_grad_call(&graph[0], DT_FP32, (struct bias_grad_dims){300, 77, 1, 1}, "v2", &r);
    bias_grad_call(&graph[1], DT_FP16, (struct bias_grad_dims){8, 2, 256, 256}, "v6", &r);
    bias_grad_call(&graph[2], DT_FP16, (struct bias_grad_dims){5, 64, 14, 14}, "v3", &r);
    bias_grad_call(&graph[3], DT_FP32, (struct bias_grad_dims){3, 5, 33, 17}, "v4", &r);
    expect_verified_in_one_graph(graph, 4);
    bias_grad_call(&streams[0], DT_FP16, (struct bias_grad_dims){9, 3, 241, 243}, "v6", &r);
    bias_grad_call(&streams[1], DT_FP32, (struct bias_grad_dims){7, 33, 40, 41}, "v4", &r);
    expect_verified_on_two_streams(&streams[0], &streams[1]);
    for (int i = 0; i < 4; i++)
        call_free(&graph[i]);
    for (int i = 0; i < 2; i++)
        call_free(&streams[i]);
}

static void softmax_forward_fn(const struct call *c, void *workspace, cudaStream_t s)
{
    softmax_forward(c->in[0], c->out[0], c->d.softmax, c->t, workspace, s);
}

static void softmax_backward_fn(const struct call *c, void *workspace, cudaStream_t s)
{
    softmax_backward(c->in[0], c->in[1], c->out[0], c->d.softmax, c->t, workspace, s);
}

static void softmax_call(struct call *c, int pass, enum dtype t, struct softmax_dims d,
                         const char *rung, struct rng *r)
{
    call_init(c, t, rung, "softmax_%s %s %lldx%lldx%lldx%lld", pass ? "backward" : "forward",
              dtype_name(t), (long long)d.n, (long long)d.c, (long long)d.h, (long long)d.w);
    const size_t n = (size_t)(d.n * d.c * d.h * d.w), bytes = n * dtype_size(t);
    c->d.softmax = d;
    c->workspace_bytes = softmax_workspace_bytes(d, t);
    c->reduction_len = (size_t)d.c;
    void *x = random_host(t, n, r, -5, 5);
    if (pass == 0) {
        c->launch = softmax_forward_fn;
        add_input(c, x, bytes);
        softmax_forward_reference(x, t, d, add_output(c, t, n));
        return;
    }
    /* The backward reads a forward's y: the softmax of random logits, rounded to t. */
    double *y = host_buffer(n * sizeof *y);
    softmax_forward_reference(x, t, d, y);
    for (size_t i = 0; i < n; i++)
        store_from_double(x, t, i, y[i]);
    free(y);
    void *dy = random_host(t, n, r, -1, 1);
    c->launch = softmax_backward_fn;
    add_input(c, x, bytes);
    add_input(c, dy, bytes);
    softmax_backward_reference(x, dy, t, d, add_output(c, t, n));
}

/* 64x600x7x7 takes the image rungs: v9, whose teams meet in the workspace, and v8. In the
 * graph two v9 calls share one workspace, each leaving it zeroed for the next, and v6's early
 * launch follows them; on two streams two v9 grids run at once, a workspace each. */
Test(api_gpu, softmax_called_directly, NEEDS_GPU)
{
    const struct softmax_dims images = {64, 600, 7, 7}, few_rows = {8, 10, 1, 1};
    struct rng r = rng_seeded(13);
    struct call graph[4], streams[2];
    softmax_call(&graph[0], 0, DT_FP32, images, "v9", &r);
    softmax_call(&graph[1], 1, DT_FP16, images, "v9", &r);
    softmax_call(&graph[2], 0, DT_FP16, images, "v8", &r);
    softmax_call(&graph[3], 1, DT_FP32, few_rows, "v6", &r);
    expect_verified_in_one_graph(graph, 4);
    softmax_call(&streams[0], 0, DT_FP32, images, "v9", &r);
    softmax_call(&streams[1], 1, DT_FP16, images, "v9", &r);
    expect_verified_on_two_streams(&streams[0], &streams[1]);
    for (int i = 0; i < 4; i++)
        call_free(&graph[i]);
    for (int i = 0; i < 2; i++)
        call_free(&streams[i]);
}

static void matmul_fn(const struct call *c, void *workspace, cudaStream_t s)
{
    (void)workspace;
    matmul(c->d.matmul.form, c->in[0], c->in[1], c->out[0], c->d.matmul.d, c->t, s);
}

static void matmul_call(struct call *c, enum matmul_form form, enum dtype t,
                        struct matmul_dims d, const char *rung, struct rng *r)
{
    static const char *const names[] = {"A B", "A^T B", "A B^T"};
    call_init(c, t, rung, "matmul %s %s %lldx%lldx%lld", names[form], dtype_name(t),
              (long long)d.m, (long long)d.n, (long long)d.k);
    const size_t a_count = (size_t)(d.m * d.k), b_count = (size_t)(d.k * d.n);
    c->d.matmul.d = d;
    c->d.matmul.form = form;
    c->launch = matmul_fn;
    c->reduction_len = (size_t)d.k;
    void *a = random_host(t, a_count, r, -1, 1), *b = random_host(t, b_count, r, -1, 1);
    add_input(c, a, a_count * dtype_size(t));
    add_input(c, b, b_count * dtype_size(t));
    matmul_reference_form(form, a, b, t, d, add_output(c, t, (size_t)(d.m * d.n)));
}

/* v10's tensor maps are encoded on the host for every call's pointers, and v11 launches
 * clusters: in a graph beside v7 (the fc1 forward A B^T and weight gradient A^T B of
 * chapter 10's batch 32 on v11), and two v10 products, then two v11 ones, at once on two
 * streams. */
Test(api_gpu, matmul_called_directly, NEEDS_GPU)
{
    struct rng r = rng_seeded(14);
    struct call graph[4], streams[4];
    matmul_call(&graph[0], MATMUL_AB, DT_FP16, (struct matmul_dims){264, 136, 72}, "v10", &r);
    matmul_call(&graph[1], MATMUL_ABT, DT_FP32, (struct matmul_dims){32, 128, 1568}, "v11", &r);
    matmul_call(&graph[2], MATMUL_AB, DT_FP32, (struct matmul_dims){1536, 1536, 64}, "v7", &r);
    matmul_call(&graph[3], MATMUL_ATB, DT_FP16, (struct matmul_dims){128, 1568, 32}, "v11", &r);
    expect_verified_in_one_graph(graph, 4);
    matmul_call(&streams[0], MATMUL_AB, DT_FP16, (struct matmul_dims){264, 136, 72}, "v10", &r);
    matmul_call(&streams[1], MATMUL_AB, DT_FP16, (struct matmul_dims){136, 264, 72}, "v10", &r);
    expect_verified_on_two_streams(&streams[0], &streams[1]);
    matmul_call(&streams[2], MATMUL_ABT, DT_FP32, (struct matmul_dims){33, 17, 1569}, "v11",
                &r);
    matmul_call(&streams[3], MATMUL_ATB, DT_FP32, (struct matmul_dims){10, 128, 1024}, "v11",
                &r);
    expect_verified_on_two_streams(&streams[2], &streams[3]);
    for (int i = 0; i < 4; i++)
        call_free(&graph[i]);
    for (int i = 0; i < 4; i++)
        call_free(&streams[i]);
}

/* Empty products, in every form and dtype: K = 0 makes C zeros (its sums have no terms), and
 * M = 0 or N = 0 writes nothing, here after the zeros (A and B are never read). */
Test(api_gpu, matmul_of_empty_sums_is_zero, NEEDS_GPU)
{
    enum { M = 3, N = 5 };
    for (int t = DT_FP32; t <= DT_FP16; t++)
        for (int f = MATMUL_AB; f <= MATMUL_ABT; f++) {
            const enum dtype dt = (enum dtype)t;
            const enum matmul_form form = (enum matmul_form)f;
            const size_t bytes = (size_t)M * N * dtype_size(dt);
            unsigned char *c, host[M * N * sizeof(float)];
            CUDA_CHECK(cudaMalloc((void **)&c, bytes));
            CUDA_CHECK(cudaMemset(c, 0xff, bytes));
            matmul(form, c, c, c, (struct matmul_dims){M, N, 0}, dt, 0);
            matmul(form, c, c, c, (struct matmul_dims){0, N, 7}, dt, 0);
            matmul(form, c, c, c, (struct matmul_dims){M, 0, 7}, dt, 0);
            CUDA_CHECK(cudaMemcpy(host, c, bytes, cudaMemcpyDeviceToHost));
            size_t zero = 0;
            while (zero < bytes && host[zero] == 0)
                zero++;
            cr_expect_eq(zero, bytes, "matmul form %d %s with K = 0: byte %zu of C is %u, not 0",
                         f, dtype_name(dt), zero, zero < bytes ? host[zero] : 0u);
            CUDA_CHECK(cudaFree(c));
        }
}

static void maxpool_forward_fn(const struct call *c, void *workspace, cudaStream_t s)
{
    (void)workspace;
    maxpool_forward(c->in[0], c->out[0], (uint8_t *)c->out[1], c->d.maxpool, c->t, s);
}

static void maxpool_backward_fn(const struct call *c, void *workspace, cudaStream_t s)
{
    (void)workspace;
    maxpool_backward(c->in[0], (const uint8_t *)c->in[1], c->out[0], c->d.maxpool, c->t, s);
}

/* Max pooling of N x C x H x W by k x k windows at stride s, padding p. */
static void maxpool_call(struct call *c, int pass, enum dtype t, const int64_t shape[4],
                         int64_t k, int64_t s, int64_t p, const char *rung, struct rng *r)
{
    call_init(c, t, rung, "maxpool_%s %s %lldx%lldx%lldx%lld-k%llds%lldp%lld",
              pass ? "backward" : "forward", dtype_name(t), (long long)shape[0],
              (long long)shape[1], (long long)shape[2], (long long)shape[3], (long long)k,
              (long long)s, (long long)p);
    struct maxpool_dims d;
    char why[256];
    cr_assert_eq(maxpool_dims_of(shape[0], shape[1], shape[2], shape[3], k, k, s, p, &d, why,
                                 sizeof why),
                 0, "%s: %s", c->what, why);
    c->d.maxpool = d;
    const size_t in = (size_t)(d.n * d.c * d.h * d.w), out = (size_t)(d.n * d.c * d.oh * d.ow);
    const size_t argmax_bytes = (size_t)maxpool_argmax_bytes(d), es = dtype_size(t);
    void *x = random_host(t, in, r, -1, 1);
    uint8_t *window = host_buffer(out), *packed = host_buffer(argmax_bytes);
    double *y = host_buffer(out * sizeof *y);
    if (pass == 0) {
        c->launch = maxpool_forward_fn;
        c->reduction_len = 1;
        add_input(c, x, in * es);
        maxpool_forward_reference(x, t, d, add_output(c, t, out), NULL, window);
        maxpool_pack_argmax(window, d, packed);
        double *argmax = add_output(c, DT_U8, argmax_bytes);
        for (size_t b = 0; b < argmax_bytes; b++)
            argmax[b] = packed[b];
        free(packed);
    } else {
        /* The backward reads a forward's argmax: the reference's, packed as the forward packs
         * it. Its reference scatters through plane indices, sharing only the forward's. */
        const int64_t cover = (d.kh + d.s - 1) / d.s;
        int32_t *plane = host_buffer(out * sizeof *plane);
        double *dy_values = host_buffer(out * sizeof *dy_values);
        c->launch = maxpool_backward_fn;
        c->reduction_len = (size_t)(cover * cover);
        maxpool_forward_reference(x, t, d, y, plane, window);
        maxpool_pack_argmax(window, d, packed);
        void *dy = random_host(t, out, r, -1, 1);
        for (size_t o = 0; o < out; o++)
            dy_values[o] = load_as_double(dy, t, o);
        add_input(c, dy, out * es);
        add_input(c, packed, argmax_bytes);
        maxpool_backward_reference(dy_values, plane, d, add_output(c, t, in));
        free(plane);
        free(dy_values);
        free(x);
    }
    free(window);
    free(y);
}

/* v4's windows and v1's threads forward (OW 5: no vector path for v2); backward v3's gathers,
 * v1's fp32 atomics, and v1's fp16 overlapping windows, which sum in an fp32 buffer it
 * allocates on the stream: a graph captures that allocation, and the second launch makes it
 * again. */
Test(api_gpu, maxpool_called_directly, NEEDS_GPU)
{
    static const int64_t small[4] = {2, 3, 9, 8}, odd[4] = {1, 2, 9, 9}, large[4] = {4, 64, 64, 64};
    static const int64_t even[4] = {2, 3, 8, 10}, stem[4] = {2, 3, 17, 16};
    struct rng r = rng_seeded(15);
    struct call graph[4], streams[2];
    maxpool_call(&graph[0], 0, DT_FP32, small, 3, 1, 1, "v4", &r);
    maxpool_call(&graph[1], 1, DT_FP16, odd, 4, 1, 2, "v1", &r);
    maxpool_call(&graph[2], 1, DT_FP32, large, 2, 2, 0, "v1", &r);
    maxpool_call(&graph[3], 0, DT_FP16, even, 2, 2, 0, "v1", &r);
    expect_verified_in_one_graph(graph, 4);
    maxpool_call(&streams[0], 0, DT_FP16, stem, 3, 2, 1, "v4", &r);
    maxpool_call(&streams[1], 1, DT_FP16, even, 2, 2, 0, "v3", &r);
    expect_verified_on_two_streams(&streams[0], &streams[1]);
    for (int i = 0; i < 4; i++)
        call_free(&graph[i]);
    for (int i = 0; i < 2; i++)
        call_free(&streams[i]);
}

static void conv2d_forward_fn(const struct call *c, void *workspace, cudaStream_t s)
{
    conv2d_forward(c->in[0], c->in[1], c->n_in > 2 ? c->in[2] : NULL, c->out[0], c->d.conv.d,
                   c->d.conv.act, c->t, workspace, s);
}

/* The dims of call c's NxCxHxW-KkRsSpP shape (filter 1, stride 1, padding 0 where it does
 * not say). */
static struct conv2d_dims conv_dims_of_text(const struct call *c, const char *shape)
{
    struct shape sh;
    char why[256];
    cr_assert_eq(shape_parse(shape, &sh, why, sizeof why), 0, "%s: %s", c->what, why);
    const int64_t k = shape_param(&sh, 'k', 1);
    struct conv2d_dims d;
    cr_assert_eq(conv2d_dims_of(sh.dim[0], sh.dim[1], sh.dim[2], sh.dim[3], sh.lead, k, k,
                                shape_param(&sh, 's', 1), shape_param(&sh, 'p', 0), &d, why,
                                sizeof why),
                 0, "%s: %s", c->what, why);
    return d;
}

/* The convolution of an NxCxHxW-KkRsSpP shape, with or without a bias, then act. */
static void conv2d_call(struct call *c, enum dtype t, const char *shape,
                        enum conv2d_activation act, bool with_bias, const char *rung,
                        struct rng *r)
{
    call_init(c, t, rung, "conv2d_forward %s %s%s%s", dtype_name(t), shape,
              with_bias ? "" : ", no bias", act == CONV2D_RELU ? ", ReLU" : "");
    const struct conv2d_dims d = conv_dims_of_text(c, shape);
    c->d.conv.d = d;
    c->d.conv.act = act;
    c->launch = conv2d_forward_fn;
    c->workspace_bytes = conv2d_forward_workspace_bytes(d, t);
    c->reduction_len = (size_t)(d.c * d.r * d.s + 1);
    const size_t nx = (size_t)(d.n * d.c * d.h * d.w), nw = (size_t)(d.k * d.c * d.r * d.s);
    const size_t es = dtype_size(t);
    void *x = random_host(t, nx, r, -1, 1), *w = random_host(t, nw, r, -1, 1);
    void *b = with_bias ? random_host(t, (size_t)d.k, r, -1, 1) : NULL;
    add_input(c, x, nx * es);
    add_input(c, w, nw * es);
    if (b)
        add_input(c, b, (size_t)d.k * es);
    conv2d_forward_reference(x, w, b, t, d, act, 1,
                             add_output(c, t, (size_t)(d.n * d.k * d.p * d.q)));
}

/* With the ReLU and without a bias, at odd shapes and at chapter 10's layers (C = 1, and 16
 * channels at 14x14), both dtypes, in one graph sharing a workspace and two at once on two
 * streams. api.cu's rule is not measured yet, so which rung runs is not checked (rung NULL);
 * every output is. */
Test(api_gpu, conv2d_forward_called_directly, NEEDS_GPU)
{
    struct rng r = rng_seeded(16);
    struct call graph[4], streams[2];
    conv2d_call(&graph[0], DT_FP32, "2x19x15x23-33k3s1p1", CONV2D_RELU, true, "v6", &r);
    conv2d_call(&graph[1], DT_FP16, "3x5x17x13-7k5s2p2", CONV2D_RELU, false, "v5", &r);
    conv2d_call(&graph[2], DT_FP32, "32x1x28x28-16k3s1p1", CONV2D_LINEAR, false, "v7", &r);
    conv2d_call(&graph[3], DT_FP16, "32x16x14x14-32k3s1p1", CONV2D_RELU, true, "v5", &r);
    expect_verified_in_one_graph(graph, 4);
    conv2d_call(&streams[0], DT_FP16, "8x32x32x32-64k3s1p1", CONV2D_RELU, true, "v5", &r);
    conv2d_call(&streams[1], DT_FP32, "2x40x12x10-130k3s1p1", CONV2D_LINEAR, false, "v6", &r);
    expect_verified_on_two_streams(&streams[0], &streams[1]);
    for (int i = 0; i < 4; i++)
        call_free(&graph[i]);
    for (int i = 0; i < 2; i++)
        call_free(&streams[i]);
}

static void conv2d_backward_input_fn(const struct call *c, void *workspace, cudaStream_t s)
{
    conv2d_backward_input(c->in[0], c->in[1], c->out[0], c->d.dgrad, c->t, workspace, s);
}

/* The input gradient of an NxCxHxW-KkRsSpP convolution: random dy and w, dx checked. */
static void conv2d_backward_input_call(struct call *c, enum dtype t, const char *shape,
                                       const char *rung, struct rng *r)
{
    call_init(c, t, rung, "conv2d_backward_input %s %s", dtype_name(t), shape);
    const struct conv2d_dims d = conv_dims_of_text(c, shape);
    c->d.dgrad = d;
    c->launch = conv2d_backward_input_fn;
    c->workspace_bytes = conv2d_backward_input_workspace_bytes(d, t);
    /* An element of dx sums at most K ceil(R / stride)^2 products. */
    const int64_t taps = (d.r + d.stride - 1) / d.stride;
    c->reduction_len = (size_t)(d.k * taps * taps);
    const size_t ny = (size_t)(d.n * d.k * d.p * d.q), nw = (size_t)(d.k * d.c * d.r * d.s);
    const size_t es = dtype_size(t);
    void *dy = random_host(t, ny, r, -1, 1), *w = random_host(t, nw, r, -1, 1);
    add_input(c, dy, ny * es);
    add_input(c, w, nw * es);
    dgrad_reference(dy, w, t, d, 1, add_output(c, t, (size_t)(d.n * d.c * d.h * d.w)));
}

/* The rule's main branches, both dtypes, strides 1 to 3: in one graph sharing a workspace,
 * v5's flipped filter and chapter 07's workspace between v6's and v7's launches; then v5 and
 * v6 at once on two streams, a workspace each. */
Test(api_gpu, conv2d_backward_input_called_directly, NEEDS_GPU)
{
    struct rng r = rng_seeded(17);
    struct call graph[4], streams[2];
    conv2d_backward_input_call(&graph[0], DT_FP32, "8x32x32x32-64k3s1p1", "v5", &r);
    conv2d_backward_input_call(&graph[1], DT_FP16, "2x64x27x27-32k3s2p1", "v6", &r);
    conv2d_backward_input_call(&graph[2], DT_FP32, "3x5x17x13-7k5s2p2", "v7", &r);
    conv2d_backward_input_call(&graph[3], DT_FP16, "4x32x20x20-32k1s1p1", "v6", &r);
    expect_verified_in_one_graph(graph, 4);
    conv2d_backward_input_call(&streams[0], DT_FP16, "32x16x14x14-32k3s1p1", "v5", &r);
    conv2d_backward_input_call(&streams[1], DT_FP32, "4x24x15x15-32k3s3p1", "v6", &r);
    expect_verified_on_two_streams(&streams[0], &streams[1]);
    for (int i = 0; i < 4; i++)
        call_free(&graph[i]);
    for (int i = 0; i < 2; i++)
        call_free(&streams[i]);
}

static void conv2d_backward_weight_fn(const struct call *c, void *workspace, cudaStream_t s)
{
    conv2d_backward_weight(c->in[0], c->in[1], c->out[0], c->n_out > 1 ? c->out[1] : NULL,
                           c->d.wgrad, c->t, workspace, s);
}

/* The weight gradient of an NxCxHxW-KkRsSpP convolution, and its bias gradient where asked:
 * random x and dy, dw (and db) checked. */
static void conv2d_backward_weight_call(struct call *c, enum dtype t, const char *shape,
                                        bool with_bias, const char *rung, struct rng *r)
{
    call_init(c, t, rung, "conv2d_backward_weight %s %s%s", dtype_name(t), shape,
              with_bias ? ", with db" : "");
    const struct conv2d_dims d = conv_dims_of_text(c, shape);
    c->d.wgrad = d;
    c->launch = conv2d_backward_weight_fn;
    c->workspace_bytes = conv2d_backward_weight_workspace_bytes(d, t);
    /* Only the arrival counters, the workspace's first 16 KiB, return to zero; the slices' sums
     * after them are scratch (api.h). */
    c->zero_bytes = 16384;
    c->reduction_len = (size_t)(d.n * d.p * d.q); /* every element of dw and db */
    const size_t nx = (size_t)(d.n * d.c * d.h * d.w), ny = (size_t)(d.n * d.k * d.p * d.q);
    const size_t es = dtype_size(t);
    void *x = random_host(t, nx, r, -1, 1), *dy = random_host(t, ny, r, -1, 1);
    add_input(c, x, nx * es);
    add_input(c, dy, ny * es);
    double *dw = add_output(c, t, (size_t)(d.k * d.c * d.r * d.s));
    wgrad_reference(x, dy, t, d, 1, dw, with_bias ? add_output(c, t, (size_t)d.k) : NULL);
}

/* Each branch of the rule, both dtypes, with and without db: in one graph sharing a
 * workspace, where each split rung must leave its arrival counters at 0 for the next; then v5
 * and v3, whose slices meet in the workspace, at once on two streams, a workspace each. */
Test(api_gpu, conv2d_backward_weight_called_directly, NEEDS_GPU)
{
    struct rng r = rng_seeded(18);
    struct call graph[5], streams[2];
    conv2d_backward_weight_call(&graph[0], DT_FP32, "3x5x17x13-7k5s1p2", true, "v5", &r);
    conv2d_backward_weight_call(&graph[1], DT_FP16, "3x5x17x13-7k5s1p2", false, "v4", &r);
    conv2d_backward_weight_call(&graph[2], DT_FP32, "32x1x28x28-16k3s1p1", true, "v6", &r);
    conv2d_backward_weight_call(&graph[3], DT_FP16, "8x1x128x128-1k3s1p1", false, "2d_v3", &r);
    conv2d_backward_weight_call(&graph[4], DT_FP32, "8x32x40x40-64k3s1p1", true, "v7", &r);
    expect_verified_in_one_graph(graph, 5);
    conv2d_backward_weight_call(&streams[0], DT_FP16, "32x16x14x14-32k3s1p1", true, "v7", &r);
    conv2d_backward_weight_call(&streams[1], DT_FP32, "3x5x17x13-7k5s2p2", false, "v3", &r);
    expect_verified_on_two_streams(&streams[0], &streams[1]);
    for (int i = 0; i < 5; i++)
        call_free(&graph[i]);
    for (int i = 0; i < 2; i++)
        call_free(&streams[i]);
}

/* Whether every byte of the workspace is 0, as api.h promises a call leaves it. */
static bool workspace_is_zero(const void *workspace, size_t bytes)
{
    unsigned char *host = host_buffer(bytes ? bytes : 1);
    CUDA_CHECK(cudaMemcpy(host, workspace, bytes, cudaMemcpyDeviceToHost));
    size_t i = 0;
    while (i < bytes && host[i] == 0)
        i++;
    free(host);
    return i == bytes;
}

/* Call c twice on the same inputs, its outputs poisoned before each: the same bits both times,
 * the workspace zero after each (its first c->zero_bytes), and the outputs right. */
static void expect_the_same_bits_twice(struct call *c)
{
    void *workspace = zeroed_workspace(c->workspace_bytes);
    void *first[MAX_BUFFERS] = {NULL};
    for (int time = 0; time < 2; time++) {
        poison_outputs(c, 0);
        c->launch(c, workspace, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        const size_t zero = c->zero_bytes ? c->zero_bytes : c->workspace_bytes;
        cr_expect(!workspace || workspace_is_zero(workspace, zero),
                  "%s left the first %zu bytes of its workspace not all zeros (call %d)",
                  c->what, zero, time + 1);
        for (int i = 0; i < c->n_out; i++) {
            void *host = host_buffer(output_bytes(c, i));
            CUDA_CHECK(cudaMemcpy(host, c->out[i], output_bytes(c, i), cudaMemcpyDeviceToHost));
            if (time == 0) {
                first[i] = host;
                continue;
            }
            cr_expect(!memcmp(first[i], host, output_bytes(c, i)),
                      "%s: output %d differs between two calls on the same inputs", c->what, i);
            free(host);
        }
    }
    expect_call_verified(c, "called twice");
    for (int i = 0; i < c->n_out; i++)
        free(first[i]);
    CUDA_CHECK(cudaFree(workspace));
}

/* api.h: the sums' order is fixed, so the same inputs give the same bits on every call, with
 * and without db, in both dtypes: v7 at 8x32x40x40-64k3s1p1 (12,800 products a sum, over
 * many slices), the split implicit GEMM under a 5x5 filter, v6 at chapter 10's first layer,
 * and the 2D kernel. */
Test(api_gpu, conv2d_backward_weight_is_deterministic, NEEDS_GPU)
{
    static const char *const shapes[] = {"8x32x40x40-64k3s1p1", "8x32x40x40-64k5s1p2",
                                         "64x1x28x28-16k3s1p1", "8x1x128x128-1k3s1p1"};
    struct rng r = rng_seeded(19);
    for (size_t i = 0; i < COUNT(shapes); i++)
        for (int t = DT_FP32; t <= DT_FP16; t++)
            for (int with_bias = 0; with_bias <= 1; with_bias++) {
                struct call c;
                conv2d_backward_weight_call(&c, (enum dtype)t, shapes[i], with_bias, NULL, &r);
                expect_the_same_bits_twice(&c);
                call_free(&c);
            }
}
