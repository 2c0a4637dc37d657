#include "rung_note.h"

#include <stddef.h>

static _Thread_local const char *noted;

void kl_note_rung(const char *rung)
{
    noted = rung;
}

const char *kl_take_rung_note(void)
{
    const char *rung = noted;
    noted = NULL;
    return rung;
}
