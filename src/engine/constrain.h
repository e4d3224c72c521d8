/* What a turn's sampling may produce: the JSON of a response format, the
 * framing and arguments of tool calls (tool_choice auto, required or
 * named; once a call is complete only another call or the end of the
 * answer may follow), and the tokens a turn bans (<tool_call> under tool_choice none,
 * the end of the answer before a required call). Built on the JSON-schema
 * matcher of text/json_constraint.h; the engine tells it where the answer
 * is (reasoning, content, a call just opened) and asks it for each token. */
#ifndef PH_ENGINE_CONSTRAIN_H
#define PH_ENGINE_CONSTRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "pinhole.h"
#include "text/json_constraint.h"

typedef struct constraint {
    const ph_gen_params *g;
    const ph_model *m;
    const jc_vocab *v;
    int32_t n_vocab;
    jc_schema *call;     /* the calls' schema: {"name": one of the tools, "arguments": its schema} */
    jc_schema *format;   /* the response format's schema */
    jc_matcher *active;  /* the matcher in force, if any */
    bool active_is_call; /* it frames a tool call */
    bool in_content;     /* the answer has left its reasoning */
    bool format_done;    /* the response format's JSON was started (it is never started twice) */
    bool next_call;      /* active is the optional call after a complete one, nothing of it written yet */
    bool xml;            /* calls are written in the xml family's syntax (chat_format.h), not as JSON */
    int32_t n_calls;     /* calls completed */
    int32_t call_token;  /* the <tool_call> token, or -1 */
    int32_t eog[16];     /* the end-of-generation tokens */
    int32_t n_eog;
    uint64_t *allowed; /* a vocabulary bitmap */
    char *text;        /* a token's text */
    size_t text_cap;
    double mask_s;  /* time spent masking and sampling among the allowed (for the log) */
    double check_s; /* all the time the constraint took (checks, masks, feeding) */
    int32_t n_masked;
} constraint;

/* Builds the turn's constraint (a keyword of a tool's schema that the
 * matcher cannot follow loses its constraint, with a warning; xml_calls:
 * calls in the xml family's syntax). Errors: PH_ERR_INPUT (a response
 * schema outside the subset). */
int constraint_init(constraint *c, const ph_model *m, const jc_vocab *v, const ph_gen_params *g,
                    bool starts_in_reasoning, bool xml_calls, ph_err *err);
void constraint_free(constraint *c);

/* The answer has left its reasoning (or never had any). */
void constraint_content(constraint *c);
/* A tool call has just opened: body holds what the answer has after
 * <tool_call> so far. */
void constraint_call_open(constraint *c, const char *body, size_t len);
/* Picks the next token among what the constraint allows (smp's chain);
 * -1 if nothing is allowed. */
int32_t constraint_sample(constraint *c, ph_sampler *smp, const float *logits);
/* Follows a token of the answer (sampled or forced). Returns true when a
 * call has just been completed and parallel calls are off: the answer ends. */
bool constraint_accept(constraint *c, int32_t tok);
/* Whether the answer is right after a complete call, where it may end (a
 * token limit reached here ends the turn for the call, not for the limit). */
bool constraint_after_call(const constraint *c);

/* The token texts the matcher works on (what the detokenizer writes;
 * control tokens have none). */
size_t constraint_token_text(void *model, int32_t id, char *buf, size_t cap);

#endif
