/* The flags every chapter takes (README.md), parsed strictly: any bad flag or value gives a
 * one-line message that names the flag, the value and what is allowed. */
#ifndef KL_CLI_H
#define KL_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "ladder.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KL_MAX_RUNGS 32

struct options {
    unsigned char run_rung[KL_MAX_RUNGS]; /* 1 where the rung was asked for */
    unsigned dtypes;                      /* mask of 1u << DT_FP32 / DT_FP16 */
    unsigned passes;                      /* mask of 1u << pass index */
    struct shape shape;
    const char *preset;                   /* the preset's name, or NULL when --shape gave it */
    int iters, warmup;
    uint64_t seed;
    const char *csv;
    int hot_l2, no_graph, no_verify, list, exercise, help;
};

/* Returns 0 and fills o, or KL_EXIT_USAGE with a one-line message in err. */
int cli_parse(const struct chapter *ch, int argc, char **argv, struct options *o, char *err,
              size_t err_len);

void cli_print_help(const struct chapter *ch);
void cli_print_list(const struct chapter *ch);

#ifdef __cplusplus
}
#endif
#endif
