/* Byte-level BPE tokenizer (docs/numerics.md, Tokenizer): vocabulary loading, the special-token
 * pre-pass (Special tokens), the qwen2/qwen35 pre-tokenizer (Pre-tokenizer), the byte map (Byte map)
 * and the merges (BPE merges). The streaming detokenizer is in detok.c. */
#include "text/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "text/unicode.h"

/* Per-token flags derived at load time. A token whose text marks it as a
 * control token (end of turn, fill-in-the-middle) counts as CONTROL for the
 * special-token pass even if the file says otherwise, as in llama.cpp. */
enum { F_CONTROL = 1, F_USER = 2, F_UNKNOWN = 4, F_EOG = 8 };

/* A slot of the string table: the string's id (-1: free slot) and the high
 * half of its hash, compared before the text. */
typedef struct str_entry {
    uint32_t tag;
    int32_t id;
} str_entry;

/* A merge (a, b) -> result with its rank; a == MERGE_EMPTY marks a free slot. */
#define MERGE_EMPTY UINT32_MAX
typedef struct merge_slot {
    uint32_t a, b;
    int32_t rank, result;
} merge_slot;

/* Byte trie over the special tokens' texts. best_any / best_user: the
 * lowest rank (position in the longest-first order) of a token whose text
 * ends at this node, among all candidates / among those matched without
 * parse_special; -1 if none. */
typedef struct trie_node {
    int32_t child, sibling;
    int32_t best_any, best_user;
    uint8_t byte;
} trie_node;

struct bpe_vocab {
    int32_t n_vocab; /* real tokens: ids 0 .. n_vocab-1 */
    int32_t n_strs;  /* plus strings that only appear in merges (ids above n_vocab) */
    char *text;      /* all strings back to back; string i is text[off[i] .. off[i+1]) */
    size_t text_len, text_cap;
    uint32_t *off;
    size_t off_cap;
    uint8_t *type;  /* tokenizer.ggml.token_type, per real token */
    uint8_t *flags; /* F_*, per real token */
    size_t max_len; /* longest real token text */

    str_entry *str_slots; /* open addressing: string -> id */
    uint32_t str_mask, str_used;
    merge_slot *merges;
    uint32_t merge_mask, merge_shift; /* capacity - 1, 64 - log2(capacity) */

    int32_t byte_sym[256];    /* string id of each byte's mapped character (-1: none) */
    int32_t byte_tok[256];    /* id of the one-byte token with that value (-1: none) */
    uint8_t map_utf8[256][2]; /* each byte's mapped character, UTF-8 */
    uint8_t map_len[256];
    int16_t unmap[0x144]; /* mapped code point -> byte, -1 if none */

    int32_t *special_id; /* the special-token candidates, longest first */
    uint32_t *special_len;
    trie_node *trie;
    int32_t n_trie;
    bool special_first[256]; /* bytes that start some candidate */

    int32_t bos, eos;
    bool add_bos;
    unsigned word_class; /* classes of a letter run: letters (qwen2), letters and marks (qwen35) */
};

/* ---- strings ------------------------------------------------------------ */

static uint64_t load64(const uint8_t *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

static uint64_t load32(const uint8_t *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    return w;
}

/* A 64-bit hash of a byte string (multiply-xorshift; the tail is read with
 * overlapping loads, so short strings cost a few instructions). */
static uint64_t hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
    size_t i = 0;
    for (; i + 8 < n; i += 8) {
        h = (h ^ load64(s + i)) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    uint64_t w;
    if (n >= 8) w = load64(s + n - 8);
    else if (n >= 4) w = load32(s) | load32(s + n - 4) << 32;
    else w = n ? (uint64_t)s[0] | (uint64_t)s[n / 2] << 8 | (uint64_t)s[n - 1] << 16 : 0;
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    return h ^ h >> 33;
}

static const char *str_ptr(const bpe_vocab *v, int32_t id) { return v->text + v->off[id]; }
static size_t str_len(const bpe_vocab *v, int32_t id) { return v->off[id + 1] - v->off[id]; }

/* The slot holding s (whose hash is h), or the free slot where it would go. */
static uint32_t str_slot(const bpe_vocab *v, const char *s, size_t n, uint64_t h) {
    const uint32_t tag = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h & v->str_mask;; i = (i + 1) & v->str_mask) {
        const str_entry *en = &v->str_slots[i];
        if (en->id < 0) return i;
        if (en->tag == tag && str_len(v, en->id) == n && memcmp(str_ptr(v, en->id), s, n) == 0) return i;
    }
}

static int32_t str_find(const bpe_vocab *v, const char *s, size_t n) {
    return v->str_slots[str_slot(v, s, n, hash_bytes(s, n))].id;
}

static int str_table_alloc(bpe_vocab *v, size_t n_expected) {
    uint32_t cap = 1024;
    while (cap < n_expected + n_expected / 2) cap *= 2;
    v->str_slots = malloc(cap * sizeof *v->str_slots);
    if (!v->str_slots) return -1;
    for (uint32_t i = 0; i < cap; i++) v->str_slots[i].id = -1;
    v->str_mask = cap - 1;
    v->str_used = 0;
    return 0;
}

/* Keeps the string table at most 3/4 full. */
static int str_table_reserve(bpe_vocab *v) {
    if (4 * ((uint64_t)v->str_used + 1) <= 3 * ((uint64_t)v->str_mask + 1)) return 0;
    str_entry *old = v->str_slots;
    const uint32_t old_cap = v->str_mask + 1;
    if (str_table_alloc(v, old_cap)) {
        v->str_slots = old;
        return -1;
    }
    for (uint32_t i = 0; i < old_cap; i++) {
        if (old[i].id < 0) continue;
        const char *s = str_ptr(v, old[i].id);
        const size_t n = str_len(v, old[i].id);
        v->str_slots[str_slot(v, s, n, hash_bytes(s, n))] = old[i];
        v->str_used++;
    }
    free(old);
    return 0;
}

/* Appends s as string id n_strs (not indexed). */
static int str_append(bpe_vocab *v, const char *s, size_t n) {
    if (v->text_len + n > UINT32_MAX) return -1;
    if (v->text_len + n > v->text_cap) {
        size_t cap = v->text_cap ? v->text_cap : 4096;
        while (cap < v->text_len + n) cap *= 2;
        char *t = realloc(v->text, cap);
        if (!t) return -1;
        v->text = t, v->text_cap = cap;
    }
    if ((size_t)v->n_strs + 2 > v->off_cap) {
        size_t cap = v->off_cap ? v->off_cap * 2 : 1024;
        uint32_t *o = realloc(v->off, cap * sizeof *o);
        if (!o) return -1;
        v->off = o, v->off_cap = cap;
    }
    memcpy(v->text + v->text_len, s, n);
    v->off[v->n_strs] = (uint32_t)v->text_len;
    v->text_len += n;
    v->off[++v->n_strs] = (uint32_t)v->text_len;
    return 0;
}

/* Id of s, adding it as a merge-only string if it is new; -1 out of memory. */
static int32_t str_intern(bpe_vocab *v, const char *s, size_t n) {
    if (str_table_reserve(v)) return -1;
    const uint64_t h = hash_bytes(s, n);
    str_entry *en = &v->str_slots[str_slot(v, s, n, h)];
    if (en->id >= 0) return en->id;
    if (str_append(v, s, n)) return -1;
    v->str_used++;
    *en = (str_entry){(uint32_t)(h >> 32), v->n_strs - 1};
    return en->id;
}

/* ---- merges ------------------------------------------------------------- */

static uint32_t merge_hash(const bpe_vocab *v, uint32_t a, uint32_t b) {
    return (uint32_t)((((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull) >> v->merge_shift);
}

static const merge_slot *merge_find(const bpe_vocab *v, uint32_t a, uint32_t b) {
    for (uint32_t i = merge_hash(v, a, b);; i = (i + 1) & v->merge_mask) {
        const merge_slot *m = &v->merges[i];
        if (m->a == MERGE_EMPTY) return NULL;
        if (m->a == a && m->b == b) return m;
    }
}

/* Adds (a, b) unless present: the first (lowest) rank of a pair wins. */
static void merge_add(bpe_vocab *v, uint32_t a, uint32_t b, int32_t rank, int32_t result) {
    for (uint32_t i = merge_hash(v, a, b);; i = (i + 1) & v->merge_mask) {
        merge_slot *m = &v->merges[i];
        if (m->a == a && m->b == b) return;
        if (m->a == MERGE_EMPTY) {
            *m = (merge_slot){a, b, rank, result};
            return;
        }
    }
}

/* "A B" split at the first space at index >= 1; rank = index in the list.
 * A, B and A+B get string ids (merge-only strings included), so BPE works on
 * ids. Returns 0 or -1 (out of memory). */
static int load_merges(bpe_vocab *v, const gguf_kv *kv) {
    const uint64_t n = kv->v.arr.n;
    unsigned bits = 10;
    while ((UINT64_C(1) << bits) < n + n / 2) bits++;
    v->merge_mask = (uint32_t)((UINT64_C(1) << bits) - 1);
    v->merge_shift = 64 - bits;
    v->merges = malloc(((size_t)v->merge_mask + 1) * sizeof *v->merges);
    if (!v->merges) return -1;
    memset(v->merges, 0xff, ((size_t)v->merge_mask + 1) * sizeof *v->merges);

    char *joined = NULL; /* A and B without the space */
    size_t joined_cap = 0;
    int rc = 0;
    for (uint64_t i = 0; i < n && rc == 0; i++) {
        const gguf_str s = kv->v.arr.strs[i];
        size_t sp = 1;
        while (sp < s.len && s.ptr[sp] != ' ') sp++;
        if (sp + 1 >= s.len) continue; /* no space, or nothing after it: can match no pair */
        if (s.len > joined_cap) {
            joined_cap = s.len * 2;
            free(joined);
            if (!(joined = malloc(joined_cap))) return -1;
        }
        memcpy(joined, s.ptr, sp);
        memcpy(joined + sp, s.ptr + sp + 1, s.len - sp - 1);
        const int32_t a = str_intern(v, s.ptr, sp);
        const int32_t b = a < 0 ? -1 : str_intern(v, s.ptr + sp + 1, s.len - sp - 1);
        const int32_t r = b < 0 ? -1 : str_intern(v, joined, s.len - 1);
        if (r < 0) rc = -1;
        else merge_add(v, (uint32_t)a, (uint32_t)b, (int32_t)i, r);
    }
    free(joined);
    return rc;
}

/* ---- byte map (docs/numerics.md, Byte map) ------------------------------ */

static void build_byte_map(bpe_vocab *v) {
    uint32_t next = 0x100;
    for (int i = 0; i < 0x144; i++) v->unmap[i] = -1;
    for (int b = 0; b < 256; b++) {
        const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        const uint32_t cp = printable ? (uint32_t)b : next++;
        uint8_t u[4];
        v->map_len[b] = (uint8_t)utf8_encode(cp, u);
        memcpy(v->map_utf8[b], u, v->map_len[b]);
        v->unmap[cp] = (int16_t)b;
    }
    for (int b = 0; b < 256; b++) {
        const char c = (char)b;
        const int32_t sym = str_find(v, (const char *)v->map_utf8[b], v->map_len[b]);
        const int32_t tok = str_find(v, &c, 1);
        v->byte_sym[b] = sym;
        v->byte_tok[b] = tok < v->n_vocab ? tok : -1;
    }
}

/* ---- special tokens (docs/numerics.md, Special tokens) and end of generation */

/* Tokens that llama.cpp recognizes by their text. They count as control
 * tokens whatever their type in the file. */
static const char *const EOG_TEXTS[] = {
    /* they also end generation */
    "<|eot_id|>",    "<|im_end|>", "<|end|>",         "<|return|>",
    "<|call|>",      "<|flush|>",  "<|calls|>",       "<end_of_turn>",
    "<|endoftext|>", "<|eom_id|>", "<EOT>",           "_<EOT>",
    "[EOT]",         "[EOS]",      "<|end_of_text|>", "<end_of_utterance>",
    "</s>",          "<eos>",      "<turn|>",         "<|tool_response>",
};

/* Fill-in-the-middle markers, by kind. A kind whose id the file gives under
 * its key (or the old key) is not looked up by text; pad, repo and file
 * separator markers end generation. */
typedef struct fim_kind {
    const char *key, *old_key;
    bool eog;
    const char *texts[6];
} fim_kind;

static const fim_kind FIM_KINDS[] = {
    {"tokenizer.ggml.fim_pre_token_id",
     "tokenizer.ggml.prefix_token_id",
     false,
     {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "<|code_prefix|>", "<|prefix|>"}},
    {"tokenizer.ggml.fim_suf_token_id",
     "tokenizer.ggml.suffix_token_id",
     false,
     {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "<|code_suffix|>", "<|suffix|>"}},
    {"tokenizer.ggml.fim_mid_token_id",
     "tokenizer.ggml.middle_token_id",
     false,
     {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "<|code_middle|>", "<|middle|>"}},
    {"tokenizer.ggml.fim_pad_token_id", NULL, true, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
    {"tokenizer.ggml.fim_rep_token_id",
     NULL,
     true,
     {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
    {"tokenizer.ggml.fim_sep_token_id", NULL, true, {"<|file_sep|>"}},
};

/* The id stored under key, -1 if absent or out of range. */
static int32_t key_id(const gguf_file *f, const char *key, int32_t n_vocab) {
    int64_t id;
    return gguf_get_i64(f, key, &id) == 0 && id >= 0 && id < n_vocab ? (int32_t)id : -1;
}

typedef struct special_cand {
    uint32_t len;
    int32_t id;
} special_cand;

static int cmp_special(const void *pa, const void *pb) {
    const special_cand *a = pa, *b = pb;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* Child of node with the given byte, -1 if none. */
static int32_t trie_child(const bpe_vocab *v, int32_t node, uint8_t byte) {
    for (int32_t c = v->trie[node].child; c >= 0; c = v->trie[c].sibling)
        if (v->trie[c].byte == byte) return c;
    return -1;
}

/* Candidates (CONTROL, USER_DEFINED, UNKNOWN; non-empty) sorted longest
 * first, ties by id, and a byte trie over their texts. */
static int build_specials(bpe_vocab *v) {
    special_cand *c = malloc((size_t)v->n_vocab * sizeof *c);
    if (!c) return -1;
    int32_t n = 0;
    size_t total = 0;
    for (int32_t id = 0; id < v->n_vocab; id++) {
        if ((v->flags[id] & (F_CONTROL | F_USER | F_UNKNOWN)) && str_len(v, id) > 0) {
            c[n++] = (special_cand){(uint32_t)str_len(v, id), id};
            total += str_len(v, id);
        }
    }
    qsort(c, (size_t)n, sizeof *c, cmp_special);
    v->special_id = malloc(((size_t)n + 1) * sizeof *v->special_id);
    v->special_len = malloc(((size_t)n + 1) * sizeof *v->special_len);
    v->trie = malloc((total + 1) * sizeof *v->trie);
    if (!v->special_id || !v->special_len || !v->trie) {
        free(c);
        return -1;
    }
    v->trie[0] = (trie_node){-1, -1, -1, -1, 0};
    v->n_trie = 1;
    for (int32_t r = 0; r < n; r++) {
        v->special_id[r] = c[r].id;
        v->special_len[r] = c[r].len;
        const uint8_t *s = (const uint8_t *)str_ptr(v, c[r].id);
        v->special_first[s[0]] = true;
        int32_t node = 0;
        for (uint32_t i = 0; i < c[r].len; i++) {
            int32_t next = trie_child(v, node, s[i]);
            if (next < 0) {
                next = v->n_trie++;
                v->trie[next] = (trie_node){-1, v->trie[node].child, -1, -1, s[i]};
                v->trie[node].child = next;
            }
            node = next;
        }
        if (v->trie[node].best_any < 0) v->trie[node].best_any = r;
        if (v->trie[node].best_user < 0 && !(v->flags[c[r].id] & (F_CONTROL | F_UNKNOWN)))
            v->trie[node].best_user = r;
    }
    free(c);
    return 0;
}

/* ---- loading ------------------------------------------------------------ */

static const gguf_kv *string_array(const gguf_file *f, const char *key) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    return kv && kv->type == GGUF_ARRAY && kv->v.arr.type == GGUF_STRING ? kv : NULL;
}

/* tokenizer.ggml.pre values and the letter-run classes of their splitter. */
static bool pre_word_class(gguf_str pre, unsigned *word_class) {
    static const char *const QWEN2[] = {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez"};
    for (size_t i = 0; i < sizeof QWEN2 / sizeof QWEN2[0]; i++) {
        if (gguf_str_eq(pre, QWEN2[i])) {
            *word_class = PH_CP_LETTER;
            return true;
        }
    }
    if (gguf_str_eq(pre, "qwen35")) {
        *word_class = PH_CP_LETTER | PH_CP_MARK;
        return true;
    }
    return false;
}

static int load_tokens(bpe_vocab *v, const gguf_kv *tokens, const gguf_kv *types, ph_err *err) {
    const int32_t n = v->n_vocab;
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) total += tokens->v.arr.strs[i].len;
    if (total > UINT32_MAX / 2) return err_set(err, "tokenizer: the token texts add up to more than 2 GiB");
    v->type = malloc((size_t)n);
    v->flags = calloc((size_t)n, 1);
    v->text_cap = total + 4096;
    v->text = malloc(v->text_cap);
    v->off_cap = (size_t)n + 1024;
    v->off = malloc(v->off_cap * sizeof *v->off);
    if (!v->type || !v->flags || !v->text || !v->off || str_table_alloc(v, (size_t)n))
        return err_set(err, "tokenizer: out of memory");
    v->off[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        const gguf_str s = tokens->v.arr.strs[i];
        int64_t t = PH_TOK_NORMAL;
        if (types && gguf_arr_i64(types, (uint64_t)i, &t)) return err_set(err, "tokenizer: bad token_type array");
        v->type[i] = t >= 0 && t <= 255 ? (uint8_t)t : 0;
        v->flags[i] = (uint8_t)(t == PH_TOK_CONTROL        ? F_CONTROL
                                : t == PH_TOK_USER_DEFINED ? F_USER
                                : t == PH_TOK_UNKNOWN      ? F_UNKNOWN
                                                           : 0);
        if (s.len > v->max_len) v->max_len = s.len;
        str_append(v, s.ptr, s.len); /* cannot fail: space reserved above */
        /* An empty token cannot be looked up; a repeated text maps to its last id. */
        if (s.len > 0) {
            const uint64_t h = hash_bytes(s.ptr, s.len);
            str_entry *en = &v->str_slots[str_slot(v, s.ptr, s.len, h)];
            if (en->id < 0) v->str_used++;
            *en = (str_entry){(uint32_t)(h >> 32), i};
        }
    }
    return 0;
}

/* Sets F_CONTROL | flag on the real token with this text, if any. */
static void mark_text(bpe_vocab *v, const char *text, uint8_t flag) {
    const int32_t id = str_find(v, text, strlen(text));
    if (id >= 0 && id < v->n_vocab) v->flags[id] |= F_CONTROL | flag;
}

/* End of generation: the eos / eot / eom ids, the EOG texts, and the
 * fill-in-the-middle stops. */
static void mark_control_and_eog(bpe_vocab *v, const gguf_file *f) {
    for (size_t i = 0; i < sizeof EOG_TEXTS / sizeof EOG_TEXTS[0]; i++) mark_text(v, EOG_TEXTS[i], F_EOG);
    for (size_t k = 0; k < sizeof FIM_KINDS / sizeof FIM_KINDS[0]; k++) {
        const fim_kind *fk = &FIM_KINDS[k];
        int32_t id = key_id(f, fk->key, v->n_vocab);
        if (id < 0 && fk->old_key) id = key_id(f, fk->old_key, v->n_vocab);
        if (id >= 0) {
            if (fk->eog) v->flags[id] |= F_EOG;
            continue;
        }
        for (size_t i = 0; i < sizeof fk->texts / sizeof fk->texts[0] && fk->texts[i]; i++)
            mark_text(v, fk->texts[i], fk->eog ? F_EOG : 0);
    }
    static const char *const EOG_KEYS[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                           "tokenizer.ggml.eom_token_id"};
    for (size_t i = 0; i < sizeof EOG_KEYS / sizeof EOG_KEYS[0]; i++) {
        const int32_t id = key_id(f, EOG_KEYS[i], v->n_vocab);
        if (id >= 0) v->flags[id] |= F_EOG;
    }
}

bpe_vocab *vocab_load(const gguf_file *f, ph_err *err) {
    gguf_str model = {0}, pre = {0};
    unsigned word_class = 0;
    if (gguf_get_str(f, "tokenizer.ggml.model", &model) || !gguf_str_eq(model, "gpt2")) {
        err_set(err, "tokenizer: tokenizer.ggml.model is '%.*s'; only 'gpt2' (byte-level BPE) is supported",
                (int)(model.len > 64 ? 64 : model.len), model.ptr ? model.ptr : "");
        return NULL;
    }
    if (gguf_get_str(f, "tokenizer.ggml.pre", &pre) || !pre_word_class(pre, &word_class)) {
        err_set(err, "tokenizer: pre-tokenizer '%.*s' is not supported (supported: qwen2 and its aliases, qwen35)",
                (int)(pre.len > 64 ? 64 : pre.len), pre.ptr ? pre.ptr : "");
        return NULL;
    }
    const gguf_kv *tokens = string_array(f, "tokenizer.ggml.tokens");
    const gguf_kv *merges = string_array(f, "tokenizer.ggml.merges");
    const gguf_kv *types = gguf_find_kv(f, "tokenizer.ggml.token_type");
    if (!tokens || tokens->v.arr.n == 0 || tokens->v.arr.n > INT32_MAX / 2) {
        err_set(err, "tokenizer: tokenizer.ggml.tokens is missing or not a usable string array");
        return NULL;
    }
    if (!merges || merges->v.arr.n > INT32_MAX / 2) {
        err_set(err, "tokenizer: tokenizer.ggml.merges is missing or not a usable string array");
        return NULL;
    }
    if (types && (types->type != GGUF_ARRAY || types->v.arr.n < tokens->v.arr.n)) {
        err_set(err, "tokenizer: tokenizer.ggml.token_type is not an array with an entry per token");
        return NULL;
    }

    bpe_vocab *v = calloc(1, sizeof *v);
    if (!v) {
        err_set(err, "tokenizer: out of memory");
        return NULL;
    }
    v->n_vocab = (int32_t)tokens->v.arr.n;
    v->word_class = word_class;
    if (load_tokens(v, tokens, types, err)) goto fail;
    if (load_merges(v, merges)) {
        err_set(err, "tokenizer: out of memory");
        goto fail;
    }
    build_byte_map(v);
    mark_control_and_eog(v, f);
    if (build_specials(v)) {
        err_set(err, "tokenizer: out of memory");
        goto fail;
    }
    v->bos = key_id(f, "tokenizer.ggml.bos_token_id", v->n_vocab);
    v->eos = key_id(f, "tokenizer.ggml.eos_token_id", v->n_vocab);
    if (gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &v->add_bos)) v->add_bos = false;
    return v;
fail:
    vocab_free(v);
    return NULL;
}

void vocab_free(bpe_vocab *v) {
    if (!v) return;
    free(v->text);
    free(v->off);
    free(v->type);
    free(v->flags);
    free(v->str_slots);
    free(v->merges);
    free(v->special_id);
    free(v->special_len);
    free(v->trie);
    free(v);
}

int32_t vocab_size(const bpe_vocab *v) { return v->n_vocab; }

int32_t vocab_find(const bpe_vocab *v, const char *text, size_t len) {
    const int32_t id = str_find(v, text, len);
    return id < v->n_vocab ? id : -1;
}

int vocab_token_type(const bpe_vocab *v, int32_t id) { return id >= 0 && id < v->n_vocab ? v->type[id] : -1; }

int32_t vocab_bos(const bpe_vocab *v) { return v->bos; }
int32_t vocab_eos(const bpe_vocab *v) { return v->eos; }
bool vocab_add_bos(const bpe_vocab *v) { return v->add_bos; }
size_t vocab_max_token_len(const bpe_vocab *v) { return v->max_len; }

bool vocab_is_eog(const bpe_vocab *v, int32_t id) { return id >= 0 && id < v->n_vocab && (v->flags[id] & F_EOG); }

/* ---- token lists -------------------------------------------------------- */

int ph_tokens_push(ph_tokens *t, int32_t id) {
    if (t->n == t->cap) {
        const size_t cap = t->cap ? t->cap * 2 : 64;
        int32_t *ids = realloc(t->ids, cap * sizeof *ids);
        if (!ids) return -1;
        t->ids = ids, t->cap = cap;
    }
    t->ids[t->n++] = id;
    return 0;
}

void ph_tokens_free(ph_tokens *t) {
    free(t->ids);
    t->ids = NULL;
    t->n = t->cap = 0;
}

/* ---- pre-tokenizer (docs/numerics.md, Pre-tokenizer) -------------------- */

/* End of the pre-token that starts at p (p < n): the qwen2 regex
 *   (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}
 *   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * as a scanner; for qwen35, word = letters and marks (\p{L} -> [\p{L}\p{M}],
 * and the punctuation class also excludes \p{M}). */
static size_t pretok_next(const uint32_t *c, size_t n, size_t p, unsigned word) {
    const uint32_t cp = c[p];
    const unsigned f = cp_flags(cp);

    /* 1. contractions, any case */
    if (cp == '\'' && p + 1 < n) {
        const uint32_t a = cp_lower_ascii(c[p + 1]);
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return p + 2;
        if (p + 2 < n) {
            const uint32_t b = cp_lower_ascii(c[p + 2]);
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return p + 3;
        }
    }
    /* 2. [^\r\n\p{L}\p{N}]?\p{L}+ : an optional lead, then a letter run */
    if (cp != '\r' && cp != '\n' && !(f & PH_CP_NUMBER)) {
        if ((f & word) || (p + 1 < n && (cp_flags(c[p + 1]) & word))) {
            size_t q = p + 1;
            while (q < n && (cp_flags(c[q]) & word)) q++;
            return q;
        }
    }
    /* 3. \p{N}: digits one at a time */
    if (f & PH_CP_NUMBER) return p + 1;
    /* 4.  ?[^\s\p{L}\p{N}]+[\r\n]* */
    const unsigned stop = PH_CP_SPACE | PH_CP_NUMBER | word;
    size_t q = p + (cp == ' ');
    if (q < n && !(cp_flags(c[q]) & stop)) {
        while (q < n && !(cp_flags(c[q]) & stop)) q++;
        while (q < n && (c[q] == '\r' || c[q] == '\n')) q++;
        return q;
    }
    /* 5-7. whitespace runs */
    size_t end = p, after_last_newline = 0;
    while (end < n && (cp_flags(c[end]) & PH_CP_SPACE)) {
        if (c[end] == '\r' || c[end] == '\n') after_last_newline = end + 1;
        end++;
    }
    if (after_last_newline) return after_last_newline; /* \s*[\r\n]+ */
    if (end - p > 1 && end < n) return end - 1;        /* \s+(?!\S) */
    if (end > p) return end;                           /* \s+ */
    return p + 1;                                      /* 8. anything else */
}

/* ---- BPE (docs/numerics.md, BPE merges) --------------------------------- */

typedef struct bpe_sym {
    int32_t id;          /* string id, -1 if the text is unknown */
    uint32_t start, len; /* bytes of the word; len 0 once merged into its left neighbour */
    int32_t prev, next;
} bpe_sym;

/* A candidate merge of syms[left] and syms[right]; stale once right's length
 * differs from right_len or left has been merged away. */
typedef struct bpe_pair {
    int32_t rank, left, right, result;
    uint32_t right_len;
} bpe_pair;

/* Scratch memory of one vocab_tokenize call. */
typedef struct tok_work {
    const bpe_vocab *v;
    ph_tokens *out;
    uint32_t *cps;
    size_t cps_cap;
    uint8_t *word;
    size_t word_cap;
    bpe_sym *syms;
    bpe_pair *heap;
    size_t sym_cap, heap_n;
} tok_work;

static bool pair_before(const bpe_pair *a, const bpe_pair *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

static void heap_push(tok_work *w, bpe_pair p) {
    size_t i = w->heap_n++;
    while (i > 0) {
        const size_t parent = (i - 1) / 2;
        if (!pair_before(&p, &w->heap[parent])) break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = p;
}

static bpe_pair heap_pop(tok_work *w) {
    const bpe_pair top = w->heap[0];
    const bpe_pair last = w->heap[--w->heap_n];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= w->heap_n) break;
        if (child + 1 < w->heap_n && pair_before(&w->heap[child + 1], &w->heap[child])) child++;
        if (!pair_before(&w->heap[child], &last)) break;
        w->heap[i] = w->heap[child];
        i = child;
    }
    if (w->heap_n) w->heap[i] = last;
    return top;
}

static void try_pair(tok_work *w, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t a = w->syms[left].id, b = w->syms[right].id;
    if (a < 0 || b < 0) return;
    const merge_slot *m = merge_find(w->v, (uint32_t)a, (uint32_t)b);
    if (m) heap_push(w, (bpe_pair){m->rank, left, right, m->result, w->syms[right].len});
}

/* Emits one final symbol: its token, or (text not in the vocabulary) the
 * tokens of the single bytes of its mapped text that exist. */
static int emit_symbol(tok_work *w, const uint8_t *s, size_t len, int32_t id) {
    const bpe_vocab *v = w->v;
    if (id >= 0 && id < v->n_vocab) return ph_tokens_push(w->out, id);
    for (size_t i = 0; i < len; i++) {
        for (int j = 0; j < v->map_len[s[i]]; j++) {
            const int32_t t = v->byte_tok[v->map_utf8[s[i]][j]];
            if (t >= 0 && ph_tokens_push(w->out, t)) return -1;
        }
    }
    return 0;
}

/* BPE over one pre-token's bytes: repeatedly merge the adjacent pair with
 * the lowest rank, leftmost first. */
static int bpe_word(tok_work *w, const uint8_t *s, size_t n) {
    const bpe_vocab *v = w->v;
    if (n == 1) return emit_symbol(w, s, 1, v->byte_sym[s[0]]);
    if (n > w->sym_cap) {
        free(w->syms);
        free(w->heap);
        w->sym_cap = 2 * w->sym_cap > n ? 2 * w->sym_cap : n;
        w->syms = malloc(w->sym_cap * sizeof *w->syms);
        /* At most 2n - 2 pairs are queued: n - 1 at first, then each merge
         * pops at least one and pushes at most two, and there are < n merges. */
        w->heap = malloc(2 * w->sym_cap * sizeof *w->heap);
        if (!w->syms || !w->heap) {
            w->sym_cap = 0;
            return -1;
        }
    }
    bpe_sym *sym = w->syms;
    for (size_t i = 0; i < n; i++)
        sym[i] = (bpe_sym){v->byte_sym[s[i]], (uint32_t)i, 1, (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1};
    w->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++) try_pair(w, (int32_t)i, (int32_t)i + 1);
    while (w->heap_n) {
        const bpe_pair p = heap_pop(w);
        bpe_sym *l = &sym[p.left], *r = &sym[p.right];
        if (l->len == 0 || r->len != p.right_len) continue; /* stale */
        l->id = p.result;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = p.left;
        try_pair(w, l->prev, p.left);
        try_pair(w, p.left, l->next);
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next)
        if (emit_symbol(w, s + sym[i].start, sym[i].len, sym[i].id)) return -1;
    return 0;
}

/* Text without special tokens: code points (invalid UTF-8 -> U+FFFD),
 * pre-tokens, then each pre-token's re-encoded bytes through BPE. */
static int tokenize_raw(tok_work *w, const uint8_t *s, size_t len) {
    if (len > w->cps_cap) {
        free(w->cps);
        w->cps_cap = len;
        if (!(w->cps = malloc(len * sizeof *w->cps))) {
            w->cps_cap = 0;
            return -1;
        }
    }
    size_t n = 0;
    for (size_t i = 0; i < len;) i += utf8_decode_lenient(s + i, len - i, &w->cps[n++]);
    for (size_t p = 0; p < n;) {
        const size_t q = pretok_next(w->cps, n, p, w->v->word_class);
        if (4 * (q - p) > w->word_cap) {
            free(w->word);
            w->word_cap = 8 * (q - p);
            if (!(w->word = malloc(w->word_cap))) {
                w->word_cap = 0;
                return -1;
            }
        }
        size_t k = 0;
        for (size_t i = p; i < q; i++) k += (size_t)utf8_encode(w->cps[i], w->word + k);
        if (bpe_word(w, w->word, k)) return -1;
        p = q;
    }
    return 0;
}

/* ---- special-token pass (docs/numerics.md, Special tokens) -------------- */

/* llama.cpp takes the candidates one by one, longest first, and splits every
 * remaining text fragment at each leftmost non-overlapping occurrence. The
 * same result, without a scan of the text per candidate: find every
 * occurrence of every candidate with one trie walk per position, then accept
 * them ordered by (candidate rank, position), each only if none of its bytes
 * is already taken. An occurrence lies inside one fragment exactly when none
 * of its bytes was taken by an earlier candidate or an earlier occurrence of
 * the same one. */
typedef struct special_hit {
    int32_t rank;
    size_t pos;
} special_hit;

static int cmp_hit_rank(const void *pa, const void *pb) {
    const special_hit *a = pa, *b = pb;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    return (a->pos > b->pos) - (a->pos < b->pos);
}

static int cmp_hit_pos(const void *pa, const void *pb) {
    const special_hit *a = pa, *b = pb;
    return (a->pos > b->pos) - (a->pos < b->pos);
}

/* Fills *hits with the accepted occurrences in text order. Control tokens
 * are candidates where parse_special and the occurrence has no byte in a
 * plain span (spans: n_spans sorted, disjoint [start, end) pairs). */
static int find_specials(const bpe_vocab *v, const uint8_t *s, size_t len, bool parse_special,
                         const vocab_span *spans, size_t n_spans, special_hit **hits, size_t *n_hits) {
    special_hit *h = NULL;
    size_t n = 0, cap = 0, sp = 0;
    *hits = NULL;
    *n_hits = 0;
    for (size_t p = 0; p < len; p++) {
        if (!v->special_first[s[p]]) continue;
        while (sp < n_spans && spans[sp].end <= p) sp++; /* the first span that ends after p */
        int32_t node = 0;
        for (size_t q = p; q < len && (node = trie_child(v, node, s[q])) >= 0; q++) {
            const bool control = parse_special && !(sp < n_spans && spans[sp].start <= q);
            const int32_t rank = control ? v->trie[node].best_any : v->trie[node].best_user;
            if (rank < 0) continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                special_hit *g = realloc(h, cap * sizeof *g);
                if (!g) {
                    free(h);
                    return -1;
                }
                h = g;
            }
            h[n++] = (special_hit){rank, p};
        }
    }
    if (n == 0) return 0;
    uint8_t *taken = calloc(len, 1);
    if (!taken) {
        free(h);
        return -1;
    }
    qsort(h, n, sizeof *h, cmp_hit_rank);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        const size_t p = h[i].pos, l = v->special_len[h[i].rank];
        if (memchr(taken + p, 1, l)) continue;
        memset(taken + p, 1, l);
        h[kept++] = h[i];
    }
    free(taken);
    qsort(h, kept, sizeof *h, cmp_hit_pos);
    *hits = h;
    *n_hits = kept;
    return 0;
}

static int tokenize(const bpe_vocab *v, const char *text, size_t len, bool parse_special, const vocab_span *spans,
                    size_t n_spans, ph_tokens *out, ph_err *err) {
    const uint8_t *s = (const uint8_t *)text;
    special_hit *hits;
    size_t n_hits;
    if (find_specials(v, s, len, parse_special, spans, n_spans, &hits, &n_hits))
        return err_set(err, "tokenizer: out of memory");
    tok_work w = {.v = v, .out = out};
    int rc = 0;
    size_t pos = 0;
    for (size_t i = 0; i <= n_hits && rc == 0; i++) {
        const size_t end = i < n_hits ? hits[i].pos : len;
        if (end > pos) rc = tokenize_raw(&w, s + pos, end - pos);
        if (i < n_hits && rc == 0) {
            rc = ph_tokens_push(out, v->special_id[hits[i].rank]);
            pos = end + v->special_len[hits[i].rank];
        }
    }
    free(hits);
    free(w.cps);
    free(w.word);
    free(w.syms);
    free(w.heap);
    return rc ? err_set(err, "tokenizer: out of memory") : 0;
}

int vocab_tokenize(const bpe_vocab *v, const char *text, size_t len, bool parse_special, ph_tokens *out,
                   ph_err *err) {
    return tokenize(v, text, len, parse_special, NULL, 0, out, err);
}

int vocab_tokenize_spans(const bpe_vocab *v, const char *text, size_t len, const vocab_span *plain, size_t n_plain,
                         ph_tokens *out, ph_err *err) {
    return tokenize(v, text, len, true, plain, n_plain, out, err);
}

/* ---- token text (docs/numerics.md, Byte map: detokenization) ------------ */

static int hex_digit(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
}

int token_bytes(const bpe_vocab *v, int32_t id, char *buf, size_t cap) {
    if (id < 0 || id >= v->n_vocab) return -1;
    const uint8_t *s = (const uint8_t *)str_ptr(v, id);
    const size_t n = str_len(v, id);
    size_t k = 0;
    switch (v->type[id]) {
    case PH_TOK_NORMAL:
        /* Undo the byte map; a character outside it is kept as it is. */
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            const size_t used = utf8_decode_lenient(s + i, n - i, &cp);
            if (cp < 0x144 && v->unmap[cp] >= 0) {
                if (k < cap) buf[k] = (char)v->unmap[cp];
                k++;
            } else {
                for (size_t j = 0; j < used; j++, k++)
                    if (k < cap) buf[k] = (char)s[i + j];
            }
            i += used;
        }
        return (int)k;
    case PH_TOK_BYTE: /* "<0xXX>" */
        if (n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && hex_digit((char)s[3]) >= 0 &&
            hex_digit((char)s[4]) >= 0) {
            if (cap > 0) buf[0] = (char)(hex_digit((char)s[3]) * 16 + hex_digit((char)s[4]));
            return 1;
        }
        return 0;
    case PH_TOK_CONTROL:
    case PH_TOK_USER_DEFINED:
    case PH_TOK_UNKNOWN:
        if (cap) memcpy(buf, s, n < cap ? n : cap); /* buf may be NULL with cap 0 (the length asked) */
        return (int)n;
    default: /* unused or undefined: nothing */ return 0;
    }
}
