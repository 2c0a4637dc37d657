#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ladder.h"

/* No tensor here comes near 2^48 elements; the bound keeps every product and byte count exact
 * in int64 and double. */
#define KL_MAX_ELEMENTS (INT64_C(1) << 48)

static int read_number(const char **p, int64_t *v)
{
    if (!isdigit((unsigned char)**p))
        return -1;
    int64_t x = 0;
    while (isdigit((unsigned char)**p)) {
        x = x * 10 + (**p - '0');
        if (x > KL_MAX_ELEMENTS)
            return -2;
        (*p)++;
    }
    *v = x;
    return 0;
}

/* Writes s->text, the canonical spelling of s, cut short where it does not fit, and returns
 * the spelling's whole length. */
static size_t write_text(struct shape *s)
{
    char buf[(KL_MAX_DIMS + 1 + KL_MAX_PARAMS) * 22]; /* any shape: 20 digits a number, at most */
    size_t len = 0;
    for (int i = 0; i < s->ndims; i++)
        len += (size_t)sprintf(buf + len, "%s%" PRId64, i ? "x" : "", s->dim[i]);
    if (s->has_lead)
        len += (size_t)sprintf(buf + len, "-%" PRId64, s->lead);
    for (int i = 0; i < s->nparams; i++)
        len += (size_t)sprintf(buf + len, "%s%c%" PRId64, i || s->has_lead ? "" : "-",
                               s->param_name[i], s->param[i]);
    size_t kept = len < sizeof s->text ? len : sizeof s->text - 1;
    memcpy(s->text, buf, kept);
    s->text[kept] = '\0';
    return len;
}

int shape_parse(const char *text, struct shape *s, char *why, size_t why_len)
{
    memset(s, 0, sizeof *s);
    const char *p = text;
    if (!*p) {
        snprintf(why, why_len, "the shape is empty");
        return -1;
    }
    for (;;) {
        int64_t d;
        int rc = read_number(&p, &d);
        if (rc == -2) {
            snprintf(why, why_len, "dimension %d is too large", s->ndims + 1);
            return -1;
        }
        if (rc) {
            if (*p)
                snprintf(why, why_len, "'%c' where dimension %d should start", *p, s->ndims + 1);
            else
                snprintf(why, why_len, "dimension %d is missing after 'x'", s->ndims + 1);
            return -1;
        }
        if (d == 0) {
            snprintf(why, why_len, "dimension %d is 0; every dimension must be at least 1",
                     s->ndims + 1);
            return -1;
        }
        if (s->ndims == KL_MAX_DIMS) {
            snprintf(why, why_len, "more than %d dimensions", KL_MAX_DIMS);
            return -1;
        }
        s->dim[s->ndims++] = d;
        if (shape_elements(s) > KL_MAX_ELEMENTS || shape_elements(s) < 0) {
            snprintf(why, why_len, "more than 2^48 elements");
            return -1;
        }
        if (*p != 'x')
            break;
        p++;
    }
    if (*p == '-') {
        p++;
        if (isdigit((unsigned char)*p)) {
            if (read_number(&p, &s->lead)) {
                snprintf(why, why_len, "the number after '-' is too large");
                return -1;
            }
            s->has_lead = 1;
        }
        while (*p) {
            if (!islower((unsigned char)*p)) {
                snprintf(why, why_len, "'%c' where a window parameter letter should be", *p);
                return -1;
            }
            if (s->nparams == KL_MAX_PARAMS) {
                snprintf(why, why_len, "more than %d window parameters", KL_MAX_PARAMS);
                return -1;
            }
            char name = *p++;
            int64_t v;
            if (read_number(&p, &v)) {
                snprintf(why, why_len, "window parameter '%c' needs a number", name);
                return -1;
            }
            s->param_name[s->nparams] = name;
            s->param[s->nparams++] = v;
        }
    } else if (*p) {
        snprintf(why, why_len, "'%c' after dimension %d; join dimensions with 'x'", *p, s->ndims);
        return -1;
    }
    /* The spelling is what the table and the CSV show, and --shape reads back: whole. */
    size_t len = write_text(s);
    if (len >= sizeof s->text) {
        snprintf(why, why_len, "spelt out, the shape is %zu characters long; at most %zu", len,
                 sizeof s->text - 1);
        return -1;
    }
    return 0;
}

void shape_format(struct shape *s)
{
    write_text(s);
}

int64_t shape_elements(const struct shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndims; i++) {
        if (n > KL_MAX_ELEMENTS / s->dim[i] + 1)
            return -1; /* overflow guard: callers treat a negative count as too large */
        n *= s->dim[i];
    }
    return n;
}

int64_t shape_param(const struct shape *s, char name, int64_t fallback)
{
    for (int i = 0; i < s->nparams; i++)
        if (s->param_name[i] == name)
            return s->param[i];
    return fallback;
}
