/* What `pinhole run -p` and `pinhole chat` share: an answer streamed to
 * stdout with its reasoning shown (dimmed on a terminal) or hidden, and the
 * one-line summary of a turn. */
#ifndef PH_CLI_ANSWER_H
#define PH_CLI_ANSWER_H

#include <stdbool.h>
#include <stdio.h>

#include "pinhole.h"

/* --reasoning: auto shows a thinking model's reasoning dimmed when stdout
 * is a terminal and hides it otherwise; show prints it (dimmed on a
 * terminal, else between <think> and </think> lines); hide drops it. */
typedef enum reasoning_mode { REASONING_AUTO, REASONING_SHOW, REASONING_HIDE } reasoning_mode;

/* Each returns 0, or prints "pinhole: FLAG: ..." and returns -1.
 * --reasoning auto|show|hide; --thinking auto|on|off as ph_gen_params.thinking (-1, 1, 0). */
int arg_reasoning(const char *flag, const char *s, reasoning_mode *out);
int arg_thinking(const char *flag, const char *s, int *out);

/* An answer as it streams: shown on stdout, and kept. */
typedef struct answer {
    bool show_reasoning;       /* reasoning goes to stdout */
    bool tty;                  /* stdout is a terminal: reasoning dimmed */
    bool in_reasoning;         /* the last thing shown was reasoning */
    bool line_start;           /* stdout is at the start of a line */
    bool shown;                /* something went to stdout */
    FILE *content, *reasoning; /* what is kept */
    char *text, *reason;       /* ... there, after answer_end */
    size_t len, reason_len;
} answer;

int answer_begin(answer *a, reasoning_mode mode);
/* A ph_gen_cb: ud is the answer. */
int answer_event(void *ud, const ph_gen_event *ev);
/* Ends what stdout shows with a newline (a complete empty answer is an
 * empty line; a failed one shows nothing); the kept text and reasoning are
 * then in text and reason (NUL-terminated). */
int answer_end(answer *a, bool complete);
void answer_free(answer *a);

/* One line on out: tokens generated, decode rate, time to first token,
 * prompt rows reused and prefilled, pictures encoded, from the cache and
 * kept in the reused rows. */
void turn_summary(FILE *out, const ph_turn_report *r);

#endif
