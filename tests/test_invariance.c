/* Batch invariance of the forward pass (docs/numerics.md, Attention): the
 * logits after a prompt are the same bit for bit whether the prompt is
 * evaluated at once, in chunks of 1 (token by token, as decoded tokens), 7
 * or 64, or in uneven chunks, and whatever the thread count; then a few
 * decoded tokens after it the same again. On the oracle's tiny-f16 and
 * small-q4k (Qwen3-VL) models and the tiny qwen35 one, on each ISA level
 * this CPU has (the weights packed for each level as loading does). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "pinhole.h"
#include "test.h"

static const char *const models[] = {
    PH_ORACLE_DIR "/models/tiny-f16.gguf",
    PH_ORACLE_DIR "/models/small-q4k.gguf",
    PH_ORACLE_DIR "/qwen35/models/tiny.gguf",
};

enum { N_PROMPT = 90, N_DECODE = 3 };

/* chunk sizes: 0 is all at once; -1 is uneven chunks 5, 1, 63, 1, 20 */
static const int chunkings[] = {0, 1, 7, 64, -1};
#define N_CHUNKINGS (int)(sizeof chunkings / sizeof *chunkings)

/* The logits after the prompt in the given chunks, then after each of
 * N_DECODE decoded tokens (the prompt's first ones again), into out
 * ((1 + N_DECODE) x n_vocab). */
static int run(ph_model *m, const int32_t *ids, int chunk, float *out, int32_t n_vocab) {
    static const int uneven[] = {5, 1, 63, 1, 20};
    ph_session *s = ph_session_new(m, 256, NULL);
    if (!s) return -1;
    int rc = 0;
    for (int done = 0, u = 0; done < N_PROMPT && rc == 0; u++) {
        int n = chunk > 0 ? chunk : chunk == 0 ? N_PROMPT : uneven[u];
        if (n > N_PROMPT - done) n = N_PROMPT - done;
        rc = ph_session_eval_tokens(s, ids + done, (size_t)n, NULL);
        done += n;
    }
    if (rc == 0) memcpy(out, ph_session_logits(s), sizeof(float) * (size_t)n_vocab);
    for (int k = 0; k < N_DECODE && rc == 0; k++) {
        rc = ph_session_eval_tokens(s, ids + k, 1, NULL);
        if (rc == 0) memcpy(out + (size_t)(k + 1) * n_vocab, ph_session_logits(s), sizeof(float) * (size_t)n_vocab);
    }
    ph_session_free(s);
    return rc;
}

int main(void) {
    kernels_init();
    const isa_level isas[] = {PH_ISA_SCALAR, PH_ISA_AVX2, PH_ISA_AVX512};
    for (size_t mi = 0; mi < sizeof models / sizeof *models; mi++)
        for (size_t li = 0; li < sizeof isas / sizeof *isas; li++) {
            if (kernels_force(isas[li]) != 0) continue;
            float *want = NULL, *got = NULL;
            int32_t n_vocab = 0;
            int32_t ids[N_PROMPT];
            /* the scalar level on one thread count only: it is slow */
            for (int threads = 1; threads <= (isas[li] == PH_ISA_SCALAR ? 1 : 2); threads++) {
                ph_model *m = ph_model_load(models[mi], threads, NULL);
                CHECKF(m != NULL, "%s does not load", models[mi]);
                if (!m) break;
                if (!want) {
                    n_vocab = ph_model_get_info(m)->n_vocab;
                    want = malloc(sizeof(float) * (size_t)(1 + N_DECODE) * n_vocab);
                    got = malloc(sizeof(float) * (size_t)(1 + N_DECODE) * n_vocab);
                    for (int i = 0; i < N_PROMPT; i++) ids[i] = (int32_t)((i * 7919 + 13) % n_vocab);
                }
                for (int c = 0; c < N_CHUNKINGS; c++) {
                    const bool first = threads == 1 && c == 0;
                    const int rc = run(m, ids, chunkings[c], first ? want : got, n_vocab);
                    CHECKF(rc == 0, "%s: evaluation failed", models[mi]);
                    if (first || rc) continue;
                    int bad = 0;
                    for (int k = 0; k <= N_DECODE; k++)
                        bad += memcmp(want + (size_t)k * n_vocab, got + (size_t)k * n_vocab,
                                      sizeof(float) * (size_t)n_vocab) != 0;
                    CHECKF(bad == 0, "%s, %s, %d threads, chunks of %d: %d of %d logit rows differ from one call's",
                           models[mi], isa_name(isas[li]), threads, chunkings[c], bad, 1 + N_DECODE);
                }
                ph_model_free(m);
            }
            printf("%s %s: %s\n", models[mi], isa_name(isas[li]), want ? "checked" : "not loaded");
            free(want);
            free(got);
        }
    TEST_END();
}
