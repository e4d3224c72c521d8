/* Byte-level BPE tokenizer read from a GGUF vocabulary (tokenizer.ggml.model
 * "gpt2", pre-tokenizer "qwen2" or "qwen35"; docs/numerics.md, Tokenizer), and a streaming
 * detokenizer that never emits half a UTF-8 character. */
#ifndef PH_TEXT_TOKENIZER_H
#define PH_TEXT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "gguf/gguf.h"

typedef struct bpe_vocab bpe_vocab;

/* ph_tokens (a growable id array), ph_tokens_push and ph_tokens_free are
 * declared in pinhole.h and implemented in tokenizer.c. */
#include "pinhole.h"

/* Token attributes (from tokenizer.ggml.token_type). */
enum {
    PH_TOK_NORMAL = 1,
    PH_TOK_UNKNOWN = 2,
    PH_TOK_CONTROL = 3,
    PH_TOK_USER_DEFINED = 4,
    PH_TOK_UNUSED = 5,
    PH_TOK_BYTE = 6
};

/* Reads the vocabulary, merges and special ids. Refuses files whose
 * tokenizer model or pre-tokenizer it does not implement, with a message.
 * A loaded vocabulary is read-only: any number of threads may use it. */
bpe_vocab *vocab_load(const gguf_file *f, ph_err *err);
void vocab_free(bpe_vocab *v);

int32_t vocab_size(const bpe_vocab *v);
/* Exact lookup of a token's text; -1 if absent. */
int32_t vocab_find(const bpe_vocab *v, const char *text, size_t len);
int vocab_token_type(const bpe_vocab *v, int32_t id);
int32_t vocab_bos(const bpe_vocab *v); /* -1 if none */
int32_t vocab_eos(const bpe_vocab *v); /* -1 if none */
bool vocab_add_bos(const bpe_vocab *v);
/* Length of the longest token text: token_bytes never returns more. */
size_t vocab_max_token_len(const bpe_vocab *v);
/* End of generation: eos, eot, <|im_end|>, <|endoftext|> and the like. */
bool vocab_is_eog(const bpe_vocab *v, int32_t id);

/* Appends the tokens of text[0..len) to out. parse_special: control tokens
 * written in the text become their ids (user-defined ones always do).
 * No BOS/EOS is added. Returns 0 or -1 (out of memory, e set). */
int vocab_tokenize(const bpe_vocab *v, const char *text, size_t len, bool parse_special, ph_tokens *out, ph_err *err);

/* A byte range [start, end) of a text. */
typedef struct vocab_span {
    size_t start, end;
} vocab_span;

/* vocab_tokenize with parse_special, except in the plain spans (n_plain,
 * sorted and disjoint): a control token whose text has a byte there is
 * plain text, as without parse_special (user-defined ones still match).
 * The chat format's own markers are control tokens; message text is
 * plain, so a message cannot write <|im_end|> or <|image_pad|> as a token.
 * Between the control tokens found, text is tokenized in one run across
 * span edges, so text without control tokens gets the tokens of
 * vocab_tokenize(..., true, ...). */
int vocab_tokenize_spans(const bpe_vocab *v, const char *text, size_t len, const vocab_span *plain, size_t n_plain,
                         ph_tokens *out, ph_err *err);

/* The bytes a token stands for (byte map undone; special tokens as their
 * text). Writes up to cap bytes, returns the full length, or -1 for an id
 * out of range. */
int token_bytes(const bpe_vocab *v, int32_t id, char *buf, size_t cap);

/* Streaming detokenizer (ph_detok is declared in pinhole.h): feed ids,
 * get only whole UTF-8 characters. */
/* Appends the complete characters now available to out (up to cap bytes,
 * NUL-terminated) and returns their length. Invalid sequences come out as
 * U+FFFD once it is certain they cannot complete. A cap of
 * 3 * (vocab_max_token_len(v) + 3) + 1 always suffices; with less, the
 * characters that do not fit are dropped. A ph_detok starts zeroed. */
size_t detok_push(ph_detok *d, const bpe_vocab *v, int32_t id, char *out, size_t cap);
/* Flushes what is left at the end of a stream (incomplete bytes -> U+FFFD). */
size_t detok_flush(ph_detok *d, char *out, size_t cap);

#endif
