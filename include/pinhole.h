/* pinhole: a local inference engine for vision-language models in GGUF
 * files. This is the library's public interface; the CLI and the server use
 * nothing else.
 *
 * Conventions: functions that can fail take a ph_err * (may be NULL) and
 * return NULL or -1 on failure, with one clear sentence in err->msg. */
#ifndef PINHOLE_H
#define PINHOLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PINHOLE_VERSION "0.1.0"

/* What kind of failure an error is: the server maps it to a status. */
typedef enum ph_err_code {
    PH_ERR_INTERNAL = 0, /* a fault of the machine or of pinhole (500) */
    PH_ERR_INPUT,        /* the request is wrong: bad picture, bad value (400) */
    PH_ERR_TOO_LONG,     /* the prompt does not fit in the context (400) */
    PH_ERR_NO_VISION,    /* a picture was sent but no vision file is loaded (400) */
} ph_err_code;

typedef struct ph_err {
    char msg[512];
    int code;        /* ph_err_code; set by the functions that document it */
    char param[128]; /* PH_ERR_INPUT: the request field at fault, as a path
                        ("messages[2].content[0].image_url.url"), or "" */
} ph_err;

/* ---- models ---------------------------------------------------------------- */
typedef struct ph_model ph_model;

typedef struct ph_model_info {
    const char *arch; /* "qwen3vl", "qwen3" */
    const char *name; /* general.name, or "" */
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;     /* hidden width */
    int32_t n_embd_inp; /* width of an input row (n_embd x (1 + deepstack)) */
    int32_t n_layer, n_head, n_head_kv, head_dim, n_ff;
    int32_t n_deepstack;
    bool mrope; /* positions are 4-component (M-RoPE) */
    uint64_t n_params;
    uint64_t file_bytes;
    uint64_t decode_bytes; /* weight bytes one decoded token reads: every matrix once, in the
                              layout the kernels read (repacked or as stored), and one embedding row */
} ph_model_info;

/* Loads an LLM GGUF (memory-mapped). n_threads <= 0: ph_cpu_threads(). */
ph_model *ph_model_load(const char *path, int n_threads, ph_err *err);
void ph_model_free(ph_model *m);
const ph_model_info *ph_model_get_info(const ph_model *m);

/* ---- text -------------------------------------------------------------------- */
typedef struct ph_tokens {
    int32_t *ids;
    size_t n, cap;
} ph_tokens;

int ph_tokens_push(ph_tokens *t, int32_t id);
void ph_tokens_free(ph_tokens *t);

/* Appends the tokens of text (no BOS/EOS). parse_special: special tokens
 * written in the text become their ids. */
int ph_tokenize(const ph_model *m, const char *text, size_t len, bool parse_special, ph_tokens *out, ph_err *err);
/* Whether the model wants a BOS token at the start of a prompt, and which. */
int32_t ph_model_bos(const ph_model *m); /* -1 if none or not wanted */
bool ph_token_is_eog(const ph_model *m, int32_t id);
/* Looks up a special token by its text, e.g. "<|im_end|>"; -1 if absent. */
int32_t ph_token_lookup(const ph_model *m, const char *text);

/* Streaming detokenizer: emits only whole UTF-8 characters. */
typedef struct ph_detok {
    char pending[8];
    int n_pending;
} ph_detok;

size_t ph_detok_token(ph_detok *d, const ph_model *m, int32_t id, char *out, size_t cap);
size_t ph_detok_finish(ph_detok *d, char *out, size_t cap);

/* ---- sessions: a context (KV cache) over a model ------------------------ */
typedef struct ph_session ph_session;

/* How a context size was chosen. */
typedef struct ph_ctx_choice {
    int32_t n_ctx;
    int32_t n_ctx_train;   /* the model's trained context */
    bool given;            /* asked for (n_ctx > 0), not chosen */
    bool capped;           /* chosen below the trained context: memory */
    int64_t mem_available; /* bytes available when chosen (-1: unknown) */
    uint64_t row_bytes;    /* bytes of KV cache one row of context takes */
    char why[160];         /* "trained 262144, capped by 12.1 GiB available memory", "as asked" */
} ph_ctx_choice;

/* The context a session or an engine gets when none is asked for: the
 * model's trained context, capped so that its KV cache (full) takes at
 * most half of the memory available now (MemAvailable, or the room left
 * under the cgroup's memory limit; the weights already loaded are not in
 * it), rounded down to a multiple of 1024; at least 4096 (or the trained
 * context, if smaller), at most 4194304. */
void ph_model_default_ctx(const ph_model *m, ph_ctx_choice *out);

/* n_ctx <= 0: ph_model_default_ctx's. */
ph_session *ph_session_new(ph_model *m, int32_t n_ctx, ph_err *err);
void ph_session_free(ph_session *s);
int32_t ph_session_n_ctx(const ph_session *s);
/* Rows held in the KV cache, and the position the next token gets. */
int32_t ph_session_n_rows(const ph_session *s);
int32_t ph_session_next_pos(const ph_session *s);
/* Forgets everything. */
void ph_session_reset(ph_session *s);

/* Evaluates tokens after what the session holds (prefill in chunks).
 * Afterwards ph_session_logits() gives the logits after the last one. Each
 * row's numbers are independent of the rows evaluated with it: tokens
 * given at once, in several calls or one by one give the same logits bit
 * for bit (docs/numerics.md, Attention). More than one token are reported
 * as prefill progress; a single token as a decoded one, which is not. */
int ph_session_eval_tokens(ph_session *s, const int32_t *ids, size_t n, ph_err *err);
const float *ph_session_logits(const ph_session *s); /* n_vocab floats */

/* ---- progress of long work ------------------------------------------------------ */
typedef enum ph_progress_phase {
    PH_PROGRESS_ENCODE,  /* pictures through the vision encoder: done and total count its steps
                            (each layer, then the merger) */
    PH_PROGRESS_PREFILL, /* a prompt's rows evaluated (text and picture rows) */
} ph_progress_phase;

/* Called on the thread doing the work, between its steps (never inside
 * one): first with done 0, then after each step (a prefill chunk of at
 * most 512 rows, an encoder layer) with done rising to total. It must be
 * quick and must not call back into the session or engine. */
typedef void (*ph_progress_fn)(void *ud, ph_progress_phase phase, int64_t done, int64_t total);

/* Progress of the session's prompt evaluations (ph_session_eval_tokens of
 * more than one token: its rows; ph_session_eval_picture: the encoder's
 * steps, then the picture's rows). fn NULL: none (the default). */
void ph_session_set_progress(ph_session *s, ph_progress_fn fn, void *ud);

/* ---- pictures ------------------------------------------------------------------ */
/* A picture as received: its bytes (copied), fingerprinted, and its header
 * read and checked (PNG, JPEG, WebP or GIF's first frame, sniffed from the
 * bytes; at most 64 MiB, 16384 px a side, 64 Mpx), its pixels not decoded.
 * What takes it (ph_session_eval_picture, an engine turn) decodes the
 * pixels then and frees them once its rows are made or found; an engine
 * turn decodes it only to identify it (bytes seen before in the turn's
 * isolation domain are not decoded again) or to encode it. label names
 * it in errors. Errors: PH_ERR_INPUT. Any thread may make one. */
typedef struct ph_picture ph_picture;

ph_picture *ph_picture_new(const void *data, size_t len, const char *label, ph_err *err);
ph_picture *ph_picture_load(const char *path, ph_err *err);
void ph_picture_free(ph_picture *p);
/* Its size as displayed (EXIF orientation applied), from its header;
 * decoded, each pixel takes 3 bytes. */
void ph_picture_size(const ph_picture *p, int *w, int *h);

/* The vision tower of an mmproj GGUF, attached to its LLM. */
typedef struct ph_mmproj ph_mmproj;

ph_mmproj *ph_mmproj_open(ph_model *m, const char *mmproj_path, ph_err *err);
void ph_mmproj_close(ph_mmproj *v);
/* Token budget per picture in merged tokens (default 8 to 4096); a
 * session holds pictures of at most half its context whatever the budget. */
int ph_mmproj_set_budget(ph_mmproj *v, int min_tokens, int max_tokens, ph_err *err);

typedef struct ph_picture_chunk {
    int32_t n_tokens;       /* rows put into the context */
    int32_t grid_x, grid_y; /* merged grid */
    int32_t n_pos;          /* positions the picture advances */
    int32_t embd_width;     /* floats per row */
    double encode_s;        /* time spent in the vision tower */
} ph_picture_chunk;

/* Encodes a picture and evaluates its rows after what the session holds.
 * The caller writes <|vision_start|> before and <|vision_end|> after.
 * If rows is not NULL it receives the rows (malloc'd; the caller frees). */
int ph_session_eval_picture(ph_session *s, ph_mmproj *v, ph_picture *pic, ph_picture_chunk *chunk, float **rows,
                            ph_err *err);

/* ---- prompts ------------------------------------------------------------------- */
/* A prompt as a stream of items: runs of text tokens, and pictures. */
typedef struct ph_prompt_item {
    bool is_picture;
    ph_tokens tokens; /* text items */
    int32_t picture;  /* picture items: index into the caller's pictures */
} ph_prompt_item;

typedef struct ph_prompt {
    ph_prompt_item *items;
    size_t n, cap;
    int32_t n_pictures;
} ph_prompt;

/* Splits a raw prompt at each occurrence of marker (e.g. "<__image__>"):
 * the i-th marker becomes picture i, wrapped in <|vision_start|> and
 * <|vision_end|>; text is tokenized with special tokens parsed; a BOS is
 * prepended when the model wants one. marker may be NULL (text only). */
int ph_prompt_from_raw(const ph_model *m, const char *raw, const char *marker, ph_prompt *out, ph_err *err);
void ph_prompt_free(ph_prompt *p);

/* ---- sampling -------------------------------------------------------------- */
typedef struct ph_logit_bias {
    int32_t id;
    float bias; /* added to the token's logit; -INFINITY bans it */
} ph_logit_bias;

typedef struct ph_sampler_params {
    float temperature; /* <= 0: greedy */
    int32_t top_k;     /* <= 0: off */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
    uint64_t seed;
    /* penalties over the tokens accepted so far (the answer), applied to
     * the logits before everything else, in this order: */
    /* repetition: 1 (or <= 0): off; > 1 divides a positive logit (multiplies a negative one) of a seen token */
    float repetition_penalty;
    float frequency_penalty; /* 0: off; subtracted once per occurrence */
    float presence_penalty;  /* 0: off; subtracted once if seen */
    int32_t penalty_last_n;  /* window of accepted tokens (default 64; <= 0: all) */
    const ph_logit_bias
        *logit_bias; /* added after the penalties (copied by ph_sampler_new; ids out of range ignored) */
    size_t n_logit_bias;
} ph_sampler_params;

ph_sampler_params ph_sampler_defaults(void); /* greedy, no penalties, no bias */

typedef struct ph_sampler ph_sampler;
ph_sampler *ph_sampler_new(const ph_sampler_params *p);
void ph_sampler_free(ph_sampler *s);
/* A token whose biased logit is -inf is never picked (unless the biases ban
 * every token: they are ignored then). */
int32_t ph_sampler_sample(ph_sampler *s, const float *logits, int32_t n_vocab);
/* Samples among the tokens whose bit is set in allowed (bit i of word
 * i / 64; (n_vocab + 63) / 64 words), with the same chain; -1 if none is
 * allowed (or every allowed one is banned). */
int32_t ph_sampler_sample_allowed(ph_sampler *s, const float *logits, int32_t n_vocab, const uint64_t *allowed);
/* Records a token of the answer (for the penalties). */
void ph_sampler_accept(ph_sampler *s, int32_t id);

/* log-sum-exp of logits, and the k largest (id, logit) sorted descending. */
double ph_logits_lse(const float *logits, int32_t n);
void ph_logits_top(const float *logits, int32_t n, int32_t k, int32_t *ids, float *vals);

/* ---- files ------------------------------------------------------------------- */
/* Prints a GGUF file's header, metadata and tensors (any GGUF: LLM or
 * mmproj). verbose: every tensor and whole arrays; otherwise tensors are
 * summarised by type and arrays by their first elements. */
int ph_print_file_info(const char *path, FILE *out, bool verbose, ph_err *err);

typedef enum ph_file_kind {
    PH_FILE_OTHER,  /* not a file pinhole runs (err says why) */
    PH_FILE_LLM,    /* an LLM of an architecture pinhole runs */
    PH_FILE_MMPROJ, /* a vision file (mmproj) of a tower pinhole runs */
} ph_file_kind;

/* What a GGUF file is, from its metadata and tensor list alone (no weight
 * is read). */
ph_file_kind ph_file_probe(const char *path, ph_err *err);
/* Whether the vision file mmproj_path feeds the LLM llm_path: the LLM takes
 * pictures and the tower makes rows of the width the LLM takes, the checks
 * of ph_mmproj_open and ph_engine_new, from the metadata alone. 0, or -1
 * with the reason. */
int ph_file_pair(const char *llm_path, const char *mmproj_path, ph_err *err);

/* ---- engine: conversations in, streamed answers out, state reused ------- */
/* The engine owns a model, its vision tower, one live sequence and the
 * caches around it. A request is a conversation (messages of text and
 * pictures); the engine renders it in the model's chat format, plans what
 * it can reuse (the longest common prefix of the live KV or of a RAM
 * checkpoint of a displaced conversation, cached picture embeddings; all
 * made in the request's isolation domain, ph_gen_params.domain),
 * encodes and prefills the rest, then samples and streams the answer.
 * Up to n_parallel threads may call ph_engine_chat at once (each request
 * takes a slot of its own; their rows are evaluated together), one at a
 * time ph_engine_tick;
 * ph_engine_picture_rows may be called from any thread. */
typedef struct ph_engine ph_engine;

typedef struct ph_engine_params {
    const char *model_path;
    const char *mmproj_path; /* NULL: text only */
    int32_t n_ctx;           /* <= 0: ph_model_default_ctx's */
    int n_threads;           /* <= 0: ph_cpu_threads() */
    int picture_min_tokens;  /* picture budget in merged tokens; 0: 8 */
    int picture_max_tokens;  /* 0: 4096; at most half the context in any case */
    bool reuse;              /* reuse the live state's common prefix (default on) */
    size_t
        ram_cache_bytes; /* RAM tier: KV of displaced conversations kept beyond one context (default 2 GiB; 0: off) */
    size_t kv_pool_bytes; /* the KV pool: every sequence's blocks (0: one context's plus ram_cache_bytes) */
    size_t
        conversation_cache_bytes; /* the primary conversation parked for auxiliary requests (default 2 GiB; 0: off) */
    int picture_cache_entries;    /* embedding cache: most entries (default 32; 0: off) */
    size_t picture_cache_bytes;   /* and most bytes (default 128 MiB) */
    const char *picture_cache_dir;     /* also keep entries here (NULL: memory only) */
    uint64_t picture_cache_disk_bytes; /* and at most this many bytes of files there (default 4 GiB) */
    double vision_idle_s;              /* > 0: load the encoder on demand, release it after this long idle */
    const char *kv_disk_dir; /* disk tier: checkpoints written here, found again after a restart (NULL: off) */
    uint64_t kv_disk_bytes;  /* at most this many bytes of checkpoint files (default 16 GiB) */
    /* also checkpoint (recurrent layers: snapshot) every N rows of a long prompt (default 4096; 0: never) */
    int32_t checkpoint_every;
    /* the shared tier (docs/cluster.md): redis://HOST[:PORT][/DB] (NULL: off), the password (NULL: none, or the
     * URL's), how long a read waits for each reply (default 200 ms), and the most bytes of values queued to be
     * written (default 256 MiB) */
    const char *shared_tier;
    const char *shared_tier_password;
    int shared_tier_timeout_ms;
    uint64_t shared_tier_queue_bytes;
    const char *id_cache_dir; /* where file ids are remembered; NULL: $XDG_CACHE_HOME/pinhole */
    /* requests served at once (each in a slot of its own, their rows evaluated together: default 4; 1: one at a
     * time, as before) and the most rows one batch step takes (default 512) */
    int n_parallel;
    int32_t batch_tokens;
    void (*progress)(void *ud, const char *what, double fraction); /* loading progress, may be NULL: at each
                                     step, and at each percent while a file is hashed */
    void *progress_ud;
} ph_engine_params;

void ph_engine_params_default(ph_engine_params *p);
ph_engine *ph_engine_new(const ph_engine_params *p, ph_err *err);
void ph_engine_free(ph_engine *e);
const ph_model_info *ph_engine_model_info(const ph_engine *e);
bool ph_engine_has_vision(const ph_engine *e);
int32_t ph_engine_n_ctx(const ph_engine *e);
/* How the context size was chosen. */
const ph_ctx_choice *ph_engine_ctx(const ph_engine *e);
/* The most rows one picture takes: the budget's maximum, capped at half the
 * context (0 without vision). */
int32_t ph_engine_picture_max_tokens(const ph_engine *e);
/* Progress of each turn of ph_engine_chat (unless its ph_gen_params
 * names its own): PH_PROGRESS_ENCODE over the pictures it encodes (their
 * steps summed; called on the engine's batcher thread while the turn's
 * waits for the encode), then PH_PROGRESS_PREFILL over the rows it
 * evaluates (ph_turn_report.n_prefilled; on the thread that runs the
 * turn). fn NULL: none (the default). */
void ph_engine_set_progress(ph_engine *e, ph_progress_fn fn, void *ud);

/* The prompt rows a picture takes with the engine's encoder and token
 * budget (0 without an encoder). */
int32_t ph_engine_picture_rows(const ph_engine *e, const ph_picture *pic);

typedef enum ph_role { PH_ROLE_SYSTEM, PH_ROLE_USER, PH_ROLE_ASSISTANT, PH_ROLE_TOOL } ph_role;

typedef struct ph_chat_part {
    const char *text; /* a text part (len bytes, UTF-8), or */
    size_t len;
    ph_picture *picture; /* a picture (text NULL) */
} ph_chat_part;

/* A tool call in an assistant turn of the history. */
typedef struct ph_tool_call {
    const char *id; /* the client's id (may be NULL; the templates match results by order) */
    const char *name;
    const char *arguments; /* JSON text of the arguments object, as the client sent it */
    size_t arguments_len;
} ph_tool_call;

/* A message. A tool message (PH_ROLE_TOOL) is one tool result: its parts
 * (text and pictures) are rendered inside <tool_response> in place;
 * results are matched to calls by their order. */
typedef struct ph_chat_msg {
    ph_role role;
    const ph_chat_part *parts;
    size_t n_parts;
    const char *reasoning; /* assistant: its reasoning, where the template renders it back (may be NULL) */
    size_t reasoning_len;
    const ph_tool_call *tool_calls; /* assistant: the calls it made */
    size_t n_tool_calls;
} ph_chat_msg;

/* A function the model may call: the schema is JSON text (NULL: {}). */
typedef struct ph_tool {
    const char *name;
    const char *description; /* NULL: "" */
    const char *parameters;  /* a JSON schema of the arguments object */
} ph_tool;

typedef enum ph_tool_choice {
    PH_TOOL_AUTO,     /* the model decides */
    PH_TOOL_NONE,     /* tools are shown but no call is made (calls are not parsed; <tool_call> banned) */
    PH_TOOL_REQUIRED, /* at least one call */
    PH_TOOL_NAMED,    /* at least one call, to tool_name */
} ph_tool_choice;

typedef enum ph_response_format {
    PH_FORMAT_TEXT,
    PH_FORMAT_JSON_OBJECT, /* any JSON object */
    PH_FORMAT_JSON_SCHEMA, /* a JSON value valid against response_schema */
} ph_response_format;

/* Checks that a JSON schema is within what the constraint supports
 * (objects with properties/required/additionalProperties, arrays with
 * items/prefixItems/minItems/maxItems, enum, const, string (minLength,
 * maxLength), number and integer (minimum, maximum, exclusiveMinimum,
 * exclusiveMaximum), boolean, null, anyOf/oneOf, allOf of one schema, type
 * lists, local $ref; annotations such as title and description are
 * ignored) and that some value satisfies it. Errors: PH_ERR_INPUT naming
 * the first keyword outside it and where it is. */
int ph_schema_check(const char *schema, size_t len, ph_err *err);

typedef struct ph_gen_params {
    ph_sampler_params sampler;
    int32_t max_tokens;      /* <= 0: until the context is full */
    const char *const *stop; /* stop strings (not included in the answer) */
    size_t n_stop;
    bool logprobs;        /* events carry their token's logprob (default true; false: 0, and no
                             pass over the vocabulary for it) */
    int32_t top_logprobs; /* alternatives per token in events (0..20; implies logprobs) */
    bool auxiliary;       /* a side call (an agent's title, summary, tool check...): the primary
                                   conversation's state is parked first and never displaced by it */
    /* the isolation domain (all zero: the default one): state (the live KV,
     * RAM tier, the parked conversation, checkpoint files) and
     * picture embeddings are reused only by requests of the same domain, so
     * that one client cannot learn another's prompt or pictures from what is
     * reused; a server makes it a digest of what a client alone knows */
    uint8_t domain[32];
    /* tools: shown in the prompt as the model's template does; calls in the
     * answer are parsed out (events PH_DELTA_TOOL_*) and their arguments
     * constrained to the tool's schema */
    const ph_tool *tools;
    size_t n_tools;
    ph_tool_choice tool_choice;
    const char *tool_name;    /* PH_TOOL_NAMED */
    bool parallel_tool_calls; /* default true; false: the answer ends after its first call */
    /* structured output: the content is constrained to JSON */
    ph_response_format format;
    const char *response_schema; /* PH_FORMAT_JSON_SCHEMA: JSON text */
    int thinking;                /* -1: the template's default; 0: off; 1: on (where the template can switch) */
    /* at most this many reasoning tokens: then the end of the reasoning
     * ("\n</think>\n\n") is forced and the answer follows; -1: no bound */
    int32_t thinking_budget;
    /* a test switch: these tokens (text, special tokens parsed) are the
     * model's output instead of sampled ones, through the normal parse and
     * stream path; then the answer ends */
    const char *forced_output;
    size_t forced_len;
    /* this request's progress (as ph_engine_set_progress's; NULL: the engine's) */
    ph_progress_fn progress;
    void *progress_ud;
} ph_gen_params;

void ph_gen_params_default(ph_gen_params *g);

typedef enum ph_delta_kind {
    PH_DELTA_CONTENT,
    PH_DELTA_REASONING,
    PH_DELTA_TOOL_CALL, /* a call begins: text is its name, call_index its index */
    PH_DELTA_TOOL_ARGS, /* a piece of call call_index's arguments (JSON text as it grows) */
} ph_delta_kind;

/* One generated token and the text it released (may be empty: text is held
 * back while it could still be a stop string, an unfinished character or
 * the start of a tool call). The argument pieces of a call, concatenated,
 * are its arguments. */
typedef struct ph_gen_event {
    ph_delta_kind kind;
    const char *text;
    size_t len;
    int32_t call_index; /* PH_DELTA_TOOL_*: 0, 1, ... in the answer */
    int32_t token;
    float logprob; /* log-probability of token */
    int32_t n_top; /* top_logprobs alternatives */
    const int32_t *top_ids;
    const float *top_logprobs;
} ph_gen_event;

/* Return non-zero to stop generating (e.g. the client went away). */
typedef int (*ph_gen_cb)(void *ud, const ph_gen_event *ev);

typedef enum ph_finish { PH_FINISH_STOP, PH_FINISH_LENGTH, PH_FINISH_CANCELLED } ph_finish;

/* What a turn cost and reused. */
typedef struct ph_turn_report {
    int32_t n_prompt;    /* prompt rows (tokens and picture rows) */
    int32_t n_reused;    /* of which kept from the live state or the RAM tier */
    int32_t n_from_ram;  /* of which restored from the RAM tier or the parked conversation */
    int32_t n_from_disk; /* of which restored from a checkpoint file (disk tier) */
    bool from_parked;    /* restored the conversation parked before auxiliary requests */
    bool parked;         /* this auxiliary turn parked the primary conversation */
    int32_t n_prefilled; /* of which evaluated now */
    int32_t n_generated;
    int32_t n_reasoning;  /* of which reasoning (the forced end of the reasoning not counted) */
    int32_t n_tool_calls; /* calls in the answer */
    int32_t n_pictures;
    int32_t pics_from_kv;    /* pictures kept in the reused prefix */
    int32_t pics_from_cache; /* taken from the embedding cache */
    int32_t pics_encoded;    /* encoded now */
    bool encoder_loaded;     /* the encoder had to be loaded for this turn */
    ph_finish finish;
    int32_t stop_index; /* which stop string ended the answer, or -1 */
    double encode_s, prefill_s, ttft_s, decode_s;
    double checkpoint_s; /* saving and restoring checkpoints (RAM tier, parked conversation, disk reads) */
} ph_turn_report;

/* Runs one turn. With a disk tier (kv_disk_dir), the sequence is saved as
 * a checkpoint file at the end of its prompt, every checkpoint_every rows
 * of a long prompt, at the end of the turn, and when the engine is freed;
 * a writer thread writes them while the turn goes on. A model with
 * recurrent layers (qwen35) resumes a state (live, RAM tier, parked,
 * checkpoint file) only at its end or where a snapshot of its recurrent state was taken:
 * after each picture, every checkpoint_every rows of a long prompt, and
 * after the answer's header that ends the prompt, before a thinking
 * template's <think> opener (the last 4 kept). An auxiliary turn (g->auxiliary) first parks the primary
 * conversation (the live state, when a primary request made it and the
 * auxiliary one would drop any of its rows) in a slot of its own; later
 * auxiliary turns never displace it; the next primary turn restores it when
 * that is its best match, and drops it otherwise.
 * Errors: PH_ERR_INPUT, PH_ERR_TOO_LONG, PH_ERR_NO_VISION,
 * or PH_ERR_INTERNAL (then the live state is reset). */
int ph_engine_chat(ph_engine *e, const ph_chat_msg *msgs, size_t n_msgs, const ph_gen_params *g, ph_gen_cb cb,
                   void *ud, ph_turn_report *r, ph_err *err);

/* Renders a conversation (with g's tools and thinking switch) as
 * ph_engine_chat would and counts its prompt rows, tokens and picture rows,
 * without running the model or encoding a picture. */
int ph_engine_count(ph_engine *e, const ph_chat_msg *msgs, size_t n_msgs, const ph_gen_params *g, int32_t *n_rows,
                    ph_err *err);

/* Renders a conversation (with g's tools and thinking switch) as
 * ph_engine_chat would, as the text of a raw prompt: no BOS, each picture
 * written as marker, so that ph_prompt_from_raw with the same marker gives
 * the prompt stream ph_engine_chat evaluates. *text is malloc'd and
 * NUL-terminated. Errors: PH_ERR_INPUT. */
int ph_engine_render(const ph_engine *e, const ph_chat_msg *msgs, size_t n_msgs, const ph_gen_params *g,
                     const char *marker, char **text, size_t *len, ph_err *err);

/* Housekeeping between requests: releases an idle encoder. Returns the
 * seconds until it wants to be called again (or a negative number: never). */
double ph_engine_tick(ph_engine *e);

/* The raw bytes of a token (not necessarily whole UTF-8). */
size_t ph_engine_token_bytes(const ph_engine *e, int32_t id, char *out, size_t cap);

typedef struct ph_engine_stats {
    uint64_t prompt_tokens_reused, prompt_tokens_prefilled, tokens_generated;
    uint64_t prompt_tokens_from_ram; /* of the reused ones, restored from the RAM tier */
    uint64_t picture_cache_hits, picture_cache_misses, picture_cache_evictions;
    uint64_t pictures_encoded, encoder_loads, encoder_unloads;
    uint64_t picture_cache_entries, picture_cache_bytes;
    uint64_t picture_cache_disk_bytes, picture_cache_disk_evictions; /* files in --image-cache-dir */
    uint64_t ram_cache_hits, ram_cache_saves, ram_cache_evictions;   /* RAM tier */
    uint64_t ram_cache_refused;                                      /* checkpoints not taken: memory short */
    uint64_t conversations_parked, conversations_restored, conversations_dropped; /* auxiliary requests */
    uint64_t ram_cache_entries, ram_cache_bytes; /* resume points; their memory and the cached blocks' */
    /* the KV pool (docs/state-cache.md, Blocks and the pool) */
    uint64_t kv_blocks_in_use, kv_blocks_cached, kv_blocks_pinned, kv_blocks_free;
    uint64_t kv_block_bytes, kv_pool_bytes;
    uint64_t kv_blocks_evicted, kv_bytes_copied;
    /* disk tier (--kv-disk-dir) */
    uint64_t disk_cache_hits, disk_cache_misses, disk_cache_saves, disk_cache_skipped, disk_cache_evictions;
    uint64_t disk_cache_rejected;                  /* files that failed a check (removed) */
    uint64_t disk_cache_tokens_restored;           /* prompt rows restored from files (part of reused) */
    uint64_t disk_cache_entries, disk_cache_bytes; /* files in the folder's index now */
    uint64_t disk_cache_queued;                    /* checkpoints waiting to be written */
    uint64_t disk_cache_bytes_written, disk_cache_bytes_read;
    double disk_cache_write_s, disk_cache_read_s;
    uint64_t disk_cache_shared_records; /* block records fetched from the shared tier into the folder */
    /* shared tier (--shared-tier): values asked for, found, refused (failed a check), errors (timeouts among
     * them), reads not tried (resting after an error), values queued, written, dropped, bytes, the queue now,
     * whether it is connected; pictures served from it */
    uint64_t shared_gets, shared_found, shared_refused, shared_errors, shared_timeouts, shared_skipped;
    uint64_t shared_queued, shared_written, shared_dropped, shared_bytes_read, shared_bytes_written;
    uint64_t shared_queue_bytes, shared_connected, picture_cache_shared_hits;
    bool encoder_loaded;
    /* batching (docs/server.md, Parallel requests): forward passes, those with rows of more than one sequence,
     * the most sequences one held, their prompt and decoded rows, their time, pieces of other work (picture
     * encodes) run between them, steps by rows (ph_batch_row_bounds: the first bound at or above; the last
     * count past them all), requests running in a slot now */
    uint64_t batch_steps, batch_multi_steps, batch_max_seqs;
    uint64_t batch_prefill_rows, batch_decode_rows;
    double batch_step_s;
    uint64_t batch_slices;
    uint64_t batch_rows_hist[9];
    uint64_t requests_running;
    /* work done once for requests running together: requests that waited for another's prefill of the prefix
     * they share (its blocks taken then), pictures that waited for another's encode of them */
    uint64_t prefix_waits, picture_waits;
    uint64_t prompt_tokens_forked; /* prompt rows taken from another running request's blocks (part of reused) */
    uint64_t requests_paused;      /* answers paused for blocks of the pool until an older one ended */
    uint64_t requests_dropped;     /* of them, those that gave their blocks back (evaluated again to resume) */
} ph_engine_stats;

/* The bounds of ph_engine_stats.batch_rows_hist's first 8 counts. */
extern const int32_t ph_batch_row_bounds[8];

void ph_engine_get_stats(const ph_engine *e, ph_engine_stats *st);
/* Refreshes only the disk_cache_* fields (but disk_cache_tokens_restored) and the shared_* ones;
 * unlike ph_engine_get_stats, may be called from any thread at any time. */
void ph_engine_get_disk_stats(const ph_engine *e, ph_engine_stats *st);

/* ---- the disk tier's folder (pinhole cache) --------------------------------- */
typedef struct ph_kv_file {
    const char *name;        /* the file in the folder */
    const uint8_t *model_id; /* 32 bytes: SHA-256 of the model file */
    const char *format;      /* the format tag: what its KV bytes depend on */
    int32_t n_rows, n_pictures;
    uint64_t bytes;
    int64_t last_use_ms, created_s; /* unix time */
} ph_kv_file;

/* Every checkpoint file in a --kv-disk-dir folder, most recently used
 * first (the folder is opened as a server would: temporary files of dead
 * writers are removed, unindexed files checked). cb returns non-zero to stop. */
int ph_kv_disk_list(const char *dir, int (*cb)(void *ud, const ph_kv_file *f), void *ud, ph_err *err);
/* Checks every file in full; bad ones are reported through bad (may be
 * NULL) and removed. */
int ph_kv_disk_verify(const char *dir, void (*bad)(void *ud, const char *name, const char *why), void *ud,
                      uint64_t *n_ok, uint64_t *n_bad, ph_err *err);
/* Removes the least recently used files until at most max_bytes remain. */
int ph_kv_disk_prune(const char *dir, uint64_t max_bytes, uint64_t *n_removed, uint64_t *bytes_removed, ph_err *err);

/* ---- misc ---------------------------------------------------------------------- */
/* The SIMD level in use ("avx2", ...). */
const char *ph_cpu_isa(void);
/* The default thread count: the physical cores among the CPUs this process
 * may run on (its affinity mask; hyper-threads of one core count once),
 * capped by its cgroup's CPU quota (ceil(quota / period)); at least 1. */
int ph_cpu_threads(void);
/* The bytes of memory this process can still take: MemAvailable, or the
 * room left under its cgroup's memory limit if less; -1 when unknown. */
int64_t ph_mem_available(void);

#ifdef __cplusplus
}
#endif
#endif
