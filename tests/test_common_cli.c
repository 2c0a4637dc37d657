/* The shared flag parser, run against chapter 01's table: defaults, good flags, and a one-line
 * rejection with status 2 for each bad one. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <string.h>

#include "check.h"
#include "cli.h"
#include "gpu.h"
#include "relu.h"

static int parse(struct options *o, char *err, size_t len, int argc, const char **argv)
{
    const char *args[16] = {"01-relu"};
    for (int i = 0; i < argc; i++)
        args[i + 1] = argv[i];
    return cli_parse(&relu_chapter, argc + 1, (char **)args, o, err, len);
}

#define PARSE(...)                                                                             \
    parse(&o, err, sizeof err, sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *),   \
          (const char *[]){__VA_ARGS__})

Test(cli, defaults_are_the_seed_preset)
{
    struct options o;
    char err[512];
    cr_assert_eq(parse(&o, err, sizeof err, 0, NULL), 0, "%s", err);
    cr_expect_str_eq(o.shape.text, "1024x1024");
    cr_expect_str_eq(o.preset, "seed");
    cr_expect_eq(o.dtypes, (1u << DT_FP32) | (1u << DT_FP16));
    cr_expect_eq(o.passes, 3u);
    cr_expect(o.iters >= 20 && o.warmup >= 3, "README.md: at least 20 samples, 3 warm-ups");
    for (int i = 0; i < relu_chapter.n_rungs; i++)
        cr_expect(o.run_rung[i]);
}

Test(cli, good_flags)
{
    struct options o;
    char err[512];
    cr_assert_eq(PARSE("--variant", "1,v3,vendor", "--dtype=fp16", "--shape", "7x13x1",
                       "--iters", "25", "--warmup", "0", "--seed", "99", "--hot-l2", "--no-graph",
                       "--pass", "bwd"), 0, "%s", err);
    int vendor = relu_chapter.n_rungs - 1;
    cr_expect(o.run_rung[0] && !o.run_rung[1] && o.run_rung[2] && !o.run_rung[3] &&
              o.run_rung[vendor]);
    cr_expect_eq(o.dtypes, 1u << DT_FP16);
    cr_expect_str_eq(o.shape.text, "7x13x1");
    cr_expect_eq(shape_elements(&o.shape), 91);
    cr_expect_eq(o.preset, NULL);
    cr_expect(o.iters == 25 && o.warmup == 0 && o.seed == 99 && o.hot_l2 && o.no_graph);
    cr_expect_eq(o.passes, 2u);
    cr_assert_eq(PARSE("--variant", "0", "--preset", "large"), 0, "%s", err);
    cr_expect(o.run_rung[vendor] && !o.run_rung[0]);
    cr_expect_str_eq(o.shape.text, "268435456");
}

/* Each bad input: status 2, and a message naming the flag and the value. */
static void expect_rejected(const char *flag, const char *value)
{
    struct options o;
    char err[512] = "";
    const char *argv[] = {flag, value};
    int rc = parse(&o, err, sizeof err, value ? 2 : 1, argv);
    cr_expect_eq(rc, KL_EXIT_USAGE, "%s %s was accepted", flag, value ? value : "");
    cr_expect(strstr(err, flag) != NULL, "message does not name %s: %s", flag, err);
    if (value && *value)
        cr_expect(strstr(err, value) != NULL, "message does not name '%s': %s", value, err);
    cr_expect(strchr(err, '\n') == NULL, "message must be one line: %s", err);
}

Test(cli, rejects_each_bad_flag)
{
    expect_rejected("--dtype", "fp64");
    expect_rejected("--iters", "-1");
    expect_rejected("--iters", "abc");
    expect_rejected("--iters", "");
    expect_rejected("--warmup", "3x");
    expect_rejected("--seed", "-5");
    expect_rejected("--shape", "0");
    expect_rejected("--shape", "12x");
    expect_rejected("--shape", "x12");
    expect_rejected("--shape", "4x0x4");
    expect_rejected("--shape", "99999999999999999999");
    expect_rejected("--shape", "1024-k2");
    expect_rejected("--variant", "9");
    expect_rejected("--variant", "v7");
    expect_rejected("--preset", "nope");
    expect_rejected("--pass", "sideways");
    expect_rejected("--bogus", NULL);
    expect_rejected("--iters", NULL);
}

Test(cli, error_messages_say_what_is_allowed)
{
    struct options o;
    char err[512];
    cr_expect_eq(PARSE("--dtype", "fp64"), KL_EXIT_USAGE);
    cr_expect(strstr(err, "fp32") && strstr(err, "fp16"), "%s", err);
    cr_expect_eq(PARSE("--variant", "9"), KL_EXIT_USAGE);
    cr_expect(strstr(err, "v1_naive") && strstr(err, "vendor"), "%s", err);
    cr_expect_eq(PARSE("--preset", "nope"), KL_EXIT_USAGE);
    cr_expect(strstr(err, "seed") && strstr(err, "large"), "%s", err);
    cr_expect_eq(PARSE("--shape", "4x4", "--preset", "seed"), KL_EXIT_USAGE);
}

Test(cli, shapes_spell_back_the_same)
{
    struct shape s;
    char why[128];
    cr_assert_eq(shape_parse("8x64x128x128-k2s2p0", &s, why, sizeof why), 0, "%s", why);
    cr_expect_eq(s.ndims, 4);
    cr_expect_eq(shape_param(&s, 'k', -1), 2);
    cr_expect_eq(shape_param(&s, 'p', -1), 0);
    cr_expect_eq(shape_param(&s, 'd', 1), 1);
    cr_expect_str_eq(s.text, "8x64x128x128-k2s2p0");
    cr_assert_eq(shape_parse("2x4x64x64-8k3s1p1", &s, why, sizeof why), 0, "%s", why);
    cr_expect_str_eq(s.text, "2x4x64x64-8k3s1p1");
    cr_expect(s.has_lead);
    cr_expect_eq(s.lead, 8);
    cr_expect_eq(shape_param(&s, 'k', -1), 3);
    cr_assert_eq(shape_parse("2x4-7", &s, why, sizeof why), 0, "%s", why);
    cr_expect_str_eq(s.text, "2x4-7");
    cr_expect_neq(shape_parse("8x64-k", &s, why, sizeof why), 0);
    cr_expect_neq(shape_parse("8x64-99999999999999999999k3", &s, why, sizeof why), 0);
    cr_expect_neq(shape_parse("8x64-K2", &s, why, sizeof why), 0);
    cr_expect_neq(shape_parse("", &s, why, sizeof why), 0);
}

/* Found by make fuzz (tests/fuzz/corpus/fuzz_cli/regress-variant-commas): commas alone were
 * a list of no rungs, and the program ran none. */
Test(cli, commas_alone_name_no_rung)
{
    expect_rejected("--variant", ",");
    expect_rejected("--variant", ",,,");
    struct options o;
    char err[512];
    cr_assert_eq(PARSE("--variant", ",v1,"), 0, "%s", err);
    cr_expect(o.run_rung[0] && !o.run_rung[1]);
}

/* Found by make fuzz (tests/fuzz/corpus/fuzz_shape/regress-spelling-too-long): a shape whose
 * spelling did not fit in shape.text was cut short there, so the table and the CSV named
 * another shape (or none) than the one run. Now it is refused; one that fits reads back whole. */
Test(cli, a_shape_is_spelt_whole)
{
    struct shape s, again;
    char text[256] = "1", why[128];
    for (char c = 'a'; c < 'a' + KL_MAX_PARAMS; c++)
        sprintf(text + strlen(text), "%s%c281474976710656", c == 'a' ? "-" : "", c);
    cr_expect_gt(strlen(text), sizeof s.text - 1);
    cr_expect_neq(shape_parse(text, &s, why, sizeof why), 0, "%s was taken as %s", text, s.text);
    cr_expect(strstr(why, "characters"), "%s", why);

    text[sizeof s.text - 1] = '\0'; /* the longest spelling there is room for */
    cr_assert_eq(shape_parse(text, &s, why, sizeof why), 0, "%s", why);
    cr_expect_str_eq(s.text, text);
    cr_assert_eq(shape_parse(s.text, &again, why, sizeof why), 0, "%s", why);
    cr_expect_eq(again.nparams, s.nparams);
    cr_expect_eq(again.param[again.nparams - 1], s.param[s.nparams - 1]);
}

/* The whole program: bad flags exit 2 before anything else happens. */
Test(cli, program_exits_2_on_bad_usage, .init = redirect_output)
{
    const char *argv[] = {"01-relu", "--dtype", "fp64"};
    cr_expect_eq(ladder_main(&relu_chapter, 3, (char **)argv), KL_EXIT_USAGE);
}
