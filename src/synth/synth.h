/* pinhole synth: synthetic model pairs for tests and benchmarks, a room of
 * its own outside the public API (the CLI's `pinhole synth` and
 * `pinhole demo`, and the tests, use it). */
#ifndef PH_SYNTH_SYNTH_H
#define PH_SYNTH_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "pinhole.h"

/* Writes a Qwen3-VL or Qwen3.5 LLM GGUF and its mmproj GGUF with random
 * weights. Both load in llama.cpp too. */
typedef struct synth_params {
    const char *arch;          /* "qwen3vl" (NULL) or "qwen35" */
    const char *shape;         /* "tiny" or "2b" (Qwen3-VL-2B-Instruct's or Qwen3.5-2B's dimensions), or
                                * one of the test oracle's (docs/testing.md): qwen3vl oracle-tiny,
                                * oracle-mid, oracle-small; qwen35 oracle-tiny, oracle-mid, oracle-q4k */
    const char *type;          /* LLM weights: f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m */
    const char *vision_type;   /* mmproj weights: f32 f16 bf16 q8_0 (default f16) */
    const char *output_type;   /* the output matrix's type (the token embedding's when tied); NULL: the
                                * mix's (q4_k_m: q6_k, llama-quantize's default) */
    const char *vocab;         /* a GGUF whose tokenizer is copied; NULL: a small built-in one */
    const char *vocab_pre;     /* tokenizer.ggml.pre of a copied tokenizer; NULL: as copied */
    const char *chat_template; /* a file whose text is the chat template; NULL: qwen35's built-in
                                * one for qwen35, the tokenizer's for qwen3vl */
    const char *name;          /* general.name (NAME-mmproj for the mmproj); NULL: pinhole-synth-... */
    const char *out;           /* writes OUT.gguf and OUT-mmproj.gguf */
    uint64_t seed;
    int n_threads;
    bool mtp; /* qwen35: one multi-token prediction block after the trunk (llama.cpp loads and skips it) */
} synth_params;

int synth_write(const synth_params *p, ph_err *err);

#endif
