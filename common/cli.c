#include "cli.h"
#include "check.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE_ERROR(...)                                                                       \
    do {                                                                                       \
        snprintf(err, err_len, __VA_ARGS__);                                                   \
        return KL_EXIT_USAGE;                                                                  \
    } while (0)

/* Strict decimal integer in [lo, hi]: "", "12abc", "-1" against lo = 0, and overflow fail. */
static int parse_integer(const char *text, long long lo, long long hi, long long *v)
{
    if (!*text || isspace((unsigned char)*text))
        return -1;
    char *end;
    errno = 0;
    long long x = strtoll(text, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return -1;
    *v = x;
    return 0;
}

/* The rung that a --variant token names: "all" is handled by the caller; "3" and "v3" name
 * v3_*, "0" and "vendor" the vendor rung, and a full name itself. */
static int find_rung(const struct chapter *ch, const char *token)
{
    for (int i = 0; i < ch->n_rungs; i++)
        if (!strcmp(token, ch->rungs[i].name))
            return i;
    const char *num = token[0] == 'v' ? token + 1 : token;
    long long k;
    if (parse_integer(num, 0, 99, &k))
        return -1;
    if (k == 0 && token == num)
        return find_rung(ch, "vendor");
    char prefix[8];
    snprintf(prefix, sizeof prefix, "v%lld_", k);
    for (int i = 0; i < ch->n_rungs; i++)
        if (!strncmp(ch->rungs[i].name, prefix, strlen(prefix)))
            return i;
    return -1;
}

static void rung_names(const struct chapter *ch, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "all");
    for (int i = 0; i < ch->n_rungs && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, ", %s", ch->rungs[i].name);
}

static int parse_variants(const struct chapter *ch, const char *list, struct options *o,
                          char *err, size_t err_len)
{
    char copy[256], names[512];
    if (strlen(list) >= sizeof copy || !list[strspn(list, ",")]) /* "", or commas alone */
        USAGE_ERROR("--variant '%s': give a comma-separated list of rung numbers or names", list);
    strcpy(copy, list);
    memset(o->run_rung, 0, sizeof o->run_rung);
    for (char *save, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!strcmp(tok, "all")) {
            memset(o->run_rung, 1, sizeof o->run_rung);
            continue;
        }
        int i = find_rung(ch, tok);
        if (i < 0) {
            rung_names(ch, names, sizeof names);
            USAGE_ERROR("--variant '%s': %s has no rung '%s' (allowed: %s; or rung numbers, 0 for "
                        "the vendor)", list, ch->id, tok, names);
        }
        o->run_rung[i] = 1;
    }
    return 0;
}

static int parse_dtype(const char *v, struct options *o, char *err, size_t err_len)
{
    if (!strcmp(v, "fp32"))
        o->dtypes = 1u << DT_FP32;
    else if (!strcmp(v, "fp16"))
        o->dtypes = 1u << DT_FP16;
    else if (!strcmp(v, "all"))
        o->dtypes = DT_FLOATS;
    else
        USAGE_ERROR("--dtype '%s': allowed are fp32, fp16, all", v);
    return 0;
}

static int parse_passes(const struct chapter *ch, const char *v, struct options *o, char *err,
                        size_t err_len)
{
    if (!strcmp(v, "all")) {
        o->passes = (1u << ch->n_passes) - 1;
        return 0;
    }
    for (int i = 0; i < ch->n_passes; i++)
        if (!strcmp(v, ch->passes[i])) {
            o->passes = 1u << i;
            return 0;
        }
    char allowed[128] = "all";
    for (int i = 0; i < ch->n_passes; i++)
        strncat(allowed, ", ", sizeof allowed - strlen(allowed) - 1),
            strncat(allowed, ch->passes[i], sizeof allowed - strlen(allowed) - 1);
    USAGE_ERROR("--pass '%s': allowed are %s", v, allowed);
}

static int set_shape(const struct chapter *ch, const char *flag, const char *text,
                     struct options *o, char *err, size_t err_len)
{
    char why[192];
    if (shape_parse(text, &o->shape, why, sizeof why) ||
        (ch->check_shape && ch->check_shape(&o->shape, why, sizeof why)))
        USAGE_ERROR("%s '%s': %s (%s)", flag, text, why, ch->shape_help);
    return 0;
}

static int parse_preset(const struct chapter *ch, const char *v, struct options *o, char *err,
                        size_t err_len)
{
    char allowed[256] = "";
    for (int i = 0; i < ch->n_presets; i++) {
        if (!strcmp(v, ch->presets[i].name)) {
            o->preset = ch->presets[i].name;
            return set_shape(ch, "--preset", ch->presets[i].shape, o, err, err_len);
        }
        strncat(allowed, i ? ", " : "", sizeof allowed - strlen(allowed) - 1);
        strncat(allowed, ch->presets[i].name, sizeof allowed - strlen(allowed) - 1);
    }
    USAGE_ERROR("--preset '%s': allowed are %s", v, allowed);
}

/* Flags that take a value. */
static const char *const valued_flags[] = {"--variant", "--dtype", "--pass", "--shape",
                                           "--preset", "--iters", "--warmup", "--seed", "--csv",
                                           NULL};

static int takes_value(const char *flag)
{
    for (int i = 0; valued_flags[i]; i++)
        if (!strcmp(flag, valued_flags[i]))
            return 1;
    return 0;
}

static int apply_flag(const struct chapter *ch, const char *flag, const char *v,
                      struct options *o, int *shape_given, char *err, size_t err_len)
{
    long long x;
    if (!strcmp(flag, "--variant"))
        return parse_variants(ch, v, o, err, err_len);
    if (!strcmp(flag, "--dtype"))
        return parse_dtype(v, o, err, err_len);
    if (!strcmp(flag, "--pass"))
        return parse_passes(ch, v, o, err, err_len);
    if (!strcmp(flag, "--shape") || !strcmp(flag, "--preset")) {
        if (*shape_given)
            USAGE_ERROR("%s '%s': the problem is already named; give one --shape or --preset",
                        flag, v);
        *shape_given = 1;
        if (flag[2] == 'p')
            return parse_preset(ch, v, o, err, err_len);
        o->preset = NULL;
        return set_shape(ch, flag, v, o, err, err_len);
    }
    if (!strcmp(flag, "--iters")) {
        if (parse_integer(v, 1, 100000, &x))
            USAGE_ERROR("--iters '%s': allowed is a whole number of samples from 1 to 100000", v);
        o->iters = (int)x;
        return 0;
    }
    if (!strcmp(flag, "--warmup")) {
        if (parse_integer(v, 0, 100000, &x))
            USAGE_ERROR("--warmup '%s': allowed is a whole number from 0 to 100000", v);
        o->warmup = (int)x;
        return 0;
    }
    if (!strcmp(flag, "--seed")) {
        if (parse_integer(v, 0, INT64_MAX, &x))
            USAGE_ERROR("--seed '%s': allowed is a whole number from 0 to 2^63-1", v);
        o->seed = (uint64_t)x;
        return 0;
    }
    if (!strcmp(flag, "--csv")) {
        if (!*v)
            USAGE_ERROR("--csv '': a file name is needed");
        o->csv = v;
        return 0;
    }
    return -1;
}

static int *switch_for(struct options *o, const char *flag)
{
    if (!strcmp(flag, "--hot-l2")) return &o->hot_l2;
    if (!strcmp(flag, "--no-graph")) return &o->no_graph;
    if (!strcmp(flag, "--no-verify")) return &o->no_verify;
    if (!strcmp(flag, "--list")) return &o->list;
    if (!strcmp(flag, "--exercise")) return &o->exercise;
    if (!strcmp(flag, "--help") || !strcmp(flag, "-h")) return &o->help;
    return NULL;
}

int cli_parse(const struct chapter *ch, int argc, char **argv, struct options *o, char *err,
              size_t err_len)
{
    memset(o, 0, sizeof *o);
    memset(o->run_rung, 1, sizeof o->run_rung);
    o->dtypes = DT_FLOATS;
    o->passes = (1u << ch->n_passes) - 1;
    o->iters = 20;
    o->warmup = 3;
    o->seed = 1;
    int shape_given = 0;

    for (int i = 1; i < argc; i++) {
        char flag[32];
        const char *arg = argv[i], *eq = strchr(arg, '='), *value = NULL;
        size_t flag_len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (flag_len >= sizeof flag)
            flag_len = sizeof flag - 1;
        memcpy(flag, arg, flag_len);
        flag[flag_len] = '\0';

        int *sw = switch_for(o, flag);
        if (sw && !eq) {
            *sw = 1;
            continue;
        }
        if (sw)
            USAGE_ERROR("%s takes no value (got '%s')", flag, eq + 1);
        if (!takes_value(flag))
            USAGE_ERROR("unknown flag '%s' (see --help)", arg);
        if (eq)
            value = eq + 1;
        else if (i + 1 < argc)
            value = argv[++i];
        else
            USAGE_ERROR("%s needs a value (see --help)", flag);
        int rc = apply_flag(ch, flag, value, o, &shape_given, err, err_len);
        if (rc)
            return rc;
    }
    if (!shape_given) {
        int rc = parse_preset(ch, ch->presets[0].name, o, err, err_len);
        if (rc)
            return rc;
    }
    return 0;
}

/* Prints text from column `indent` on, wrapped at spaces so that no line passes 100 columns. */
static void print_wrapped(const char *text, int indent)
{
    enum { WIDTH = 100 };
    int column = indent;
    while (*text) {
        while (*text == ' ')
            text++;
        int word = (int)strcspn(text, " ");
        if (column > indent && column + 1 + word > WIDTH) {
            printf("\n%*s", indent, "");
            column = indent;
        }
        if (column > indent) {
            putchar(' ');
            column++;
        }
        printf("%.*s", word, text);
        column += word;
        text += word;
    }
    putchar('\n');
}

void cli_print_list(const struct chapter *ch)
{
    enum { INDENT = 23 };
    char text[512];
    printf("%s: %s\n", ch->id, ch->title);
    for (int i = 0; i < ch->n_rungs; i++) {
        const struct rung *r = &ch->rungs[i];
        if (r->min_cc)
            snprintf(text, sizeof text, "%s [needs cc %d.%d]", r->idea, r->min_cc / 10,
                     r->min_cc % 10);
        else
            snprintf(text, sizeof text, "%s", r->idea);
        printf("  %-20s ", r->name);
        print_wrapped(text, INDENT);
    }
    printf("presets (--preset NAME; the first is the default):\n");
    for (int i = 0; i < ch->n_presets; i++) {
        snprintf(text, sizeof text, "%s: %s", ch->presets[i].shape, ch->presets[i].about);
        printf("  %-20s ", ch->presets[i].name);
        print_wrapped(text, INDENT);
    }
}

void cli_print_help(const struct chapter *ch)
{
    printf("usage: %s [flags]   (%s)\n\n", ch->id, ch->title);
    printf("  --variant LIST|all   rungs to run: numbers (3), names (v3_...), 0 or vendor; "
           "comma-separated\n"
           "  --dtype fp32|fp16|all\n"
           "  --pass P|all         passes:");
    for (int i = 0; i < ch->n_passes; i++)
        printf(" %s", ch->passes[i]);
    printf("\n  --shape SPEC         %s\n", ch->shape_help);
    printf("  --preset NAME        a named shape:");
    for (int i = 0; i < ch->n_presets; i++)
        printf(" %s (%s)%s", ch->presets[i].name, ch->presets[i].shape,
               i ? "" : " [default]");
    printf("\n"
           "  --iters N            timing samples (default 20)\n"
           "  --warmup N           warm-up replays before the samples (default 3)\n"
           "  --seed N             seed of the random inputs (default 1)\n"
           "  --csv FILE           append the result rows to FILE (the header if it is new)\n"
           "  --hot-l2             one input set, cache warm (default: a pool larger than 2x L2)\n"
           "  --no-graph           time single launches between events (launch overhead "
           "included)\n"
           "  --no-verify          skip the comparison with the CPU reference\n"
           "  --list               list the rungs and presets\n"
           "  --exercise           check the classroom kernel in exercise.cu\n"
           "  --help\n\n"
           "Exit status: 0 all verified, 1 a verification failed, 2 bad usage, 3 CUDA error or "
           "out of memory.\n");
}
