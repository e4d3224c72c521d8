/* The chat format the engine picks for a model, for the C tests. */
#ifndef PH_TESTS_CHAT_FORMAT_OF_H
#define PH_TESTS_CHAT_FORMAT_OF_H

#include "model/llm.h"
#include "text/chat_format.h"

static inline chat_fmt format_of(const ph_model *m) {
    size_t n;
    const char *t = llm_chat_template(m, &n);
    return chat_format_detect(t, n, m->arch_name);
}

#endif
