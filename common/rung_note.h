/* Which rung's kernels a launcher ran. A rung may hand a shape to an earlier rung's kernels
 * (softmax v9 to v3 at short rows, say), and the library's entry points run whichever rung
 * their rule picks, so a table row must say whose kernel it timed. Each rung's launcher names
 * itself on entry; a launcher that hands over calls the other rung's launcher, which names
 * itself after it, so the last name noted is the rung whose kernels ran. Host-side
 * bookkeeping for the tables, one per host thread: it never changes what a kernel computes. */
#ifndef KL_RUNG_NOTE_H
#define KL_RUNG_NOTE_H

#ifdef __cplusplus
extern "C" {
#endif

/* `rung` is a string literal: the rung's name as the chapter's table spells it, or its number
 * alone ("v3"), which the harness reads as that rung. */
void kl_note_rung(const char *rung);

/* The last rung noted since the previous call, or NULL; clears the note. */
const char *kl_take_rung_note(void);

#ifdef __cplusplus
}
#endif
#endif
