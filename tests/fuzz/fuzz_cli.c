/* Fuzz target: a whole command line through common/cli.c's cli_parse, against a chapter's
 * table. The input is the argv, one argument a line (split on newline or NUL, at most
 * MAX_ARGS; a newline at the end adds no empty argument). The first is the program's name and
 * picks the chapter: the chapter of that id (05-matmul), else the sum of its bytes modulo the
 * number of chapters, so that a mutated name still reaches every table.
 *
 * Beyond no crash and no sanitizer report, it checks what ladder_main relies on: the status is
 * 0 or 2; a refusal comes with a one-line message; an accepted line names a shape the chapter
 * takes, at least one rung, dtype and pass, and counts within the documented ranges. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "cli.h"
#include "fuzz.h"

#define MAX_ARGS 64

static const struct chapter *chapter_named(const char *name)
{
    unsigned sum = 0;
    for (int c = 0; c < FUZZ_N_CHAPTERS; c++)
        if (!strcmp(name, fuzz_chapters[c]->id))
            return fuzz_chapters[c];
    for (const char *p = name; *p; p++)
        sum += (unsigned char)*p;
    return fuzz_chapters[sum % FUZZ_N_CHAPTERS];
}

static void check_accepted(const struct chapter *ch, const struct options *o)
{
    int rungs = 0;
    for (int i = 0; i < ch->n_rungs; i++)
        rungs += o->run_rung[i];
    FUZZ_CHECK(rungs > 0, "%s: no rung selected", ch->id);
    FUZZ_CHECK(o->dtypes && !(o->dtypes & ~DT_FLOATS), "%s: dtypes 0x%x", ch->id, o->dtypes);
    const unsigned all_passes = (1u << ch->n_passes) - 1;
    FUZZ_CHECK(o->passes && !(o->passes & ~all_passes), "%s: passes 0x%x", ch->id, o->passes);
    FUZZ_CHECK(o->iters >= 1 && o->iters <= 100000, "%s: --iters %d", ch->id, o->iters);
    FUZZ_CHECK(o->warmup >= 0 && o->warmup <= 100000, "%s: --warmup %d", ch->id, o->warmup);
    FUZZ_CHECK(o->seed <= (uint64_t)INT64_MAX, "%s: --seed %llu", ch->id,
               (unsigned long long)o->seed);
    FUZZ_CHECK(!o->csv || *o->csv, "%s: --csv ''", ch->id);
    if (o->preset) {
        int known = 0;
        for (int i = 0; i < ch->n_presets; i++)
            known |= o->preset == ch->presets[i].name;
        FUZZ_CHECK(known, "%s: preset '%s' is not the chapter's", ch->id, o->preset);
    }

    /* The shape, as the table and the CSV will spell it, is one the chapter takes. */
    struct shape again;
    char why[256] = "";
    FUZZ_CHECK(shape_parse(o->shape.text, &again, why, sizeof why) == 0 &&
                   (!ch->check_shape || ch->check_shape(&again, why, sizeof why) == 0),
               "%s: the accepted shape '%s' is refused when read back: %s", ch->id,
               o->shape.text, why);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Each argument in a buffer of its own size, so ASan sees a read past any of them. */
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    size_t start = 0;
    for (size_t i = 0; i <= size && argc < MAX_ARGS; i++) {
        if (i < size && data[i] != '\n' && data[i] != '\0')
            continue;
        size_t len = i - start;
        if (i == size && len == 0 && argc > 0)
            break; /* a last newline ends the last argument; it does not add an empty one */
        if (!(argv[argc] = malloc(len + 1)))
            break;
        memcpy(argv[argc], data + start, len);
        argv[argc++][len] = '\0';
        start = i + 1;
    }
    argv[argc] = NULL;

    if (argc > 0) {
        const struct chapter *ch = chapter_named(argv[0]);
        FUZZ_CHECK(ch->n_rungs <= KL_MAX_RUNGS, "%s: %d rungs", ch->id, ch->n_rungs);
        struct options o;
        char err[768]; /* ladder_main's */
        memset(err, 0, sizeof err);
        int rc = cli_parse(ch, argc, argv, &o, err, sizeof err);
        FUZZ_CHECK(rc == 0 || rc == KL_EXIT_USAGE, "%s: status %d", ch->id, rc);
        if (rc) {
            FUZZ_CHECK(memchr(err, '\0', sizeof err) && err[0], "%s: refused, no message",
                       ch->id);
            FUZZ_CHECK(!strchr(err, '\n'), "%s: a message of more than one line: %s", ch->id,
                       err);
        } else {
            check_accepted(ch, &o);
        }
    }
    for (int i = 0; i < argc; i++)
        free(argv[i]);
    return 0;
}
