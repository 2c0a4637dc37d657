/* What the fuzz targets share (make fuzz; tests/fuzz/README.md): every chapter's table, and a
 * check that stops the run with a message, so that libFuzzer saves the input as a crash.
 *
 * The list of chapters is written by the Makefile from chapters/NN-name/main.cu, one line
 * KL_CHAPTER(name) a chapter, into $(BUILD)/fuzz/fuzz_chapters.h: a new chapter is fuzzed
 * without an edit here. */
#ifndef KL_FUZZ_H
#define KL_FUZZ_H

#include <stdio.h>
#include <stdlib.h>

#include "ladder.h"

#define KL_CHAPTER(name) extern const struct chapter name;
#include "fuzz_chapters.h"
#undef KL_CHAPTER

static const struct chapter *const fuzz_chapters[] = {
#define KL_CHAPTER(name) &name,
#include "fuzz_chapters.h"
#undef KL_CHAPTER
};
#define FUZZ_N_CHAPTERS ((int)(sizeof fuzz_chapters / sizeof fuzz_chapters[0]))

/* A broken promise: the message, then abort(), which libFuzzer reports as a crash. */
#define FUZZ_CHECK(cond, ...)                                                                  \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "fuzz: %s:%d: %s is false: ", __FILE__, __LINE__, #cond);          \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fputc('\n', stderr);                                                               \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

#endif
