/* The public text functions of pinhole.h, over the model's vocabulary. */
#include <string.h>

#include "base/cpus.h"
#include "kernels/kernels.h"
#include "engine/session.h"

int ph_tokenize(const ph_model *m, const char *text, size_t len, bool parse_special, ph_tokens *out, ph_err *err) {
    return vocab_tokenize(m->vocab, text, len, parse_special, out, err);
}

int32_t ph_model_bos(const ph_model *m) { return vocab_add_bos(m->vocab) ? vocab_bos(m->vocab) : -1; }

bool ph_token_is_eog(const ph_model *m, int32_t id) { return vocab_is_eog(m->vocab, id); }

int32_t ph_token_lookup(const ph_model *m, const char *text) { return vocab_find(m->vocab, text, strlen(text)); }

size_t ph_detok_token(ph_detok *d, const ph_model *m, int32_t id, char *out, size_t cap) {
    return detok_push(d, m->vocab, id, out, cap);
}

size_t ph_detok_finish(ph_detok *d, char *out, size_t cap) { return detok_flush(d, out, cap); }

const char *ph_cpu_isa(void) {
    return kernels_name();
}

int ph_cpu_threads(void) { return cpus_threads(); }
