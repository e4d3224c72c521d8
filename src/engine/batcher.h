/* The batcher: one thread, the only user of the model's thread pool for
 * the LLM (and the vision encoder), that evaluates the rows of several
 * sequences together (docs/server.md, Parallel requests). Request threads
 * submit a segment of rows (batcher_eval) or a piece of other work
 * (batcher_run) and block until it is done.
 *
 * Each step builds one batch: one row of every decoding sequence first,
 * then rows of the prefilling ones, oldest first, up to batch_tokens rows
 * in all (a long segment is split across steps, its logits computed after
 * its last row), runs it through llm_forward_batch, copies each finished
 * segment's logits to its submitter's buffer and wakes it. Between two
 * steps one piece of other work runs, if any is waiting: running decodes
 * get a step between any two pieces. */
#ifndef PH_ENGINE_BATCHER_H
#define PH_ENGINE_BATCHER_H

#include <stdbool.h>
#include <stdint.h>

#include "model/llm.h"

typedef struct batcher batcher;

/* Steps are counted by rows: a step of n rows in the first bucket whose
 * bound (ph_batch_row_bounds) is at least n, else in the last. */
#define BATCHER_BUCKETS 8

typedef struct batcher_stats {
    uint64_t steps;                          /* forward passes */
    uint64_t multi_steps;                    /* of them, with rows of more than one sequence */
    uint64_t prefill_rows;                   /* rows of prompts (and pictures) */
    uint64_t decode_rows;                    /* rows of decoded tokens */
    uint64_t slices;                         /* pieces of other work run between steps */
    double step_s;                           /* time in forward passes */
    uint64_t rows_hist[BATCHER_BUCKETS + 1]; /* steps by rows, the last past every bound */
    int32_t max_seqs_step;                   /* the most sequences one step held */
} batcher_stats;

/* A batcher over model m for up to max_seqs sequences at once, steps of
 * at most batch_tokens rows; its thread started. NULL with err when it
 * cannot be made. A sequence's numbers do not depend on the rows beside
 * it (llm_forward_batch). */
batcher *batcher_new(const ph_model *m, int32_t batch_tokens, int max_seqs, ph_err *err);
/* Stops the thread (after the work queued) and frees the batcher. */
void batcher_free(batcher *b);

/* Evaluates n rows of one sequence at the end of kv (its blocks reserved
 * for them), as llm_seg says (tokens or embd, pos section-major [4][n] or
 * [1][n]); decode: a decoded token's row (goes first). With want_logits
 * the logits of the last row are copied to logits (n_vocab floats). Blocks
 * until done; 0, or -1 with err. Never two at once for one kv. */
int batcher_eval(batcher *b, llm_kv *kv, const int32_t *tokens, const float *embd, int64_t n, const int32_t *pos,
                 bool want_logits, bool decode, float *logits, ph_err *err);

/* Runs fn(ud) on the batcher's thread between two steps and waits for it;
 * returns what fn returned. */
int batcher_run(batcher *b, int (*fn)(void *ud), void *ud);

void batcher_get_stats(batcher *b, batcher_stats *st);

#endif
