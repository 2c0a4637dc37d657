/* Fuzz target: a --shape text, through common/shape.c's shape_parse, then every chapter's
 * check_shape and, where a chapter takes the shape, its describe for every pass and dtype
 * (problem_init: the tensors' sizes). The input is the text (bytes after a NUL are ignored,
 * as they would be in argv).
 *
 * Beyond no crash and no sanitizer report, it checks what the callers rely on: a refusal
 * comes with a reason; an accepted shape has 1 to KL_MAX_DIMS dimensions of at least 1 and at
 * most 2^48 elements, and its canonical spelling, s.text, parses back to the same shape (the
 * CSV's shape column is read back by --shape). */
#include <stdint.h>
#include <string.h>

#include "fuzz.h"

#define MAX_ELEMENTS (INT64_C(1) << 48)

static void expect_reason(const char *why, size_t len, const char *who, const char *text)
{
    FUZZ_CHECK(memchr(why, '\0', len) != NULL, "%s left its reason unterminated", who);
    FUZZ_CHECK(why[0] != '\0', "%s refused '%s' without a reason", who, text);
}

static int same_shape(const struct shape *a, const struct shape *b)
{
    if (a->ndims != b->ndims || a->has_lead != b->has_lead || a->nparams != b->nparams ||
        (a->has_lead && a->lead != b->lead) || strcmp(a->text, b->text))
        return 0;
    for (int i = 0; i < a->ndims; i++)
        if (a->dim[i] != b->dim[i])
            return 0;
    for (int i = 0; i < a->nparams; i++)
        if (a->param_name[i] != b->param_name[i] || a->param[i] != b->param[i])
            return 0;
    return 1;
}

static void check_accepted(const char *text, const struct shape *s)
{
    FUZZ_CHECK(s->ndims >= 1 && s->ndims <= KL_MAX_DIMS, "'%s': %d dimensions", text, s->ndims);
    for (int i = 0; i < s->ndims; i++)
        FUZZ_CHECK(s->dim[i] >= 1, "'%s': dimension %d is %lld", text, i + 1,
                   (long long)s->dim[i]);
    const int64_t n = shape_elements(s);
    FUZZ_CHECK(n >= 1 && n <= MAX_ELEMENTS, "'%s': %lld elements", text, (long long)n);
    FUZZ_CHECK(s->nparams >= 0 && s->nparams <= KL_MAX_PARAMS, "'%s': %d window parameters",
               text, s->nparams);
    for (int i = 0; i < s->nparams; i++)
        FUZZ_CHECK(s->param_name[i] >= 'a' && s->param_name[i] <= 'z' && s->param[i] >= 0,
                   "'%s': window parameter %d is '%c' = %lld", text, i + 1, s->param_name[i],
                   (long long)s->param[i]);
    FUZZ_CHECK(memchr(s->text, '\0', sizeof s->text) != NULL, "'%s': s.text unterminated", text);

    struct shape again;
    char why[192];
    FUZZ_CHECK(shape_parse(s->text, &again, why, sizeof why) == 0,
               "'%s' is spelt '%s', which is refused: %s", text, s->text, why);
    FUZZ_CHECK(same_shape(s, &again), "'%s' is spelt '%s', which reads back as '%s'", text,
               s->text, again.text);
}

static void check_chapter(const struct chapter *ch, const struct shape *s)
{
    char why[256];
    memset(why, 0, sizeof why);
    if (ch->check_shape && ch->check_shape(s, why, sizeof why)) {
        expect_reason(why, sizeof why, ch->id, s->text);
        return;
    }
    for (int pass = 0; pass < ch->n_passes; pass++)
        for (int t = DT_FP32; t <= DT_FP16; t++) {
            struct problem p;
            why[0] = '\0';
            if (problem_init(&p, ch, pass, (enum dtype)t, s, why, sizeof why))
                expect_reason(why, sizeof why, ch->id, s->text);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1); /* a buffer of the input's size, so ASan sees any overread */
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';

    struct shape s;
    char why[192];
    memset(why, 0, sizeof why);
    if (shape_parse(text, &s, why, sizeof why)) {
        expect_reason(why, sizeof why, "shape_parse", text);
    } else {
        check_accepted(text, &s);
        for (int c = 0; c < FUZZ_N_CHAPTERS; c++)
            check_chapter(fuzz_chapters[c], &s);
    }
    free(text);
    return 0;
}
