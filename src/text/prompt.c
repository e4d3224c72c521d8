/* Prompt streams: appending items. */
#include "text/prompt.h"

#include <stdlib.h>
#include <string.h>

#include "base/grow.h"

ph_prompt_item *prompt_new_item(ph_prompt *p) {
    ph_prompt_item *items = grow_array(p->items, &p->cap, p->n, sizeof *items, 8);
    if (!items) return NULL;
    p->items = items;
    ph_prompt_item *it = &p->items[p->n++];
    memset(it, 0, sizeof *it);
    return it;
}

/* (here, in the room that builds prompts: the chat formats free theirs without reaching into engine/) */
void ph_prompt_free(ph_prompt *p) {
    for (size_t i = 0; i < p->n; i++) ph_tokens_free(&p->items[i].tokens);
    free(p->items);
    memset(p, 0, sizeof *p);
}
