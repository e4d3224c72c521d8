/* Building prompt streams (ph_prompt of pinhole.h): runs of tokens and
 * pictures in order. */
#ifndef PH_TEXT_PROMPT_H
#define PH_TEXT_PROMPT_H

#include "pinhole.h"

/* Appends a zeroed item; NULL when out of memory. */
ph_prompt_item *prompt_new_item(ph_prompt *p);

#endif
