/* Prompt streams: appending items. */
#include "text/prompt.h"

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
