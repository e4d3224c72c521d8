/* The Qwen3-VL vision tower (projector qwen3vl_merger; docs/numerics.md, The Qwen3-VL vision tower): patch
 * embedding, learned positions, transformer blocks with 2D rope, deepstack
 * mergers and the final 2x2 merger.
 *
 * The patches of a picture go through each matrix together (the prefill path
 * of mat_mul), or in ranges of rows when the encode runs in slices. Patches
 * are kept in merge order throughout (docs/numerics.md, Merge order): four
 * consecutive rows are one 2x2 block, so the [N][C] activations are also the
 * [N/4][4C] rows the mergers take, without a copy. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kernels/rope.h"
#include "model/vision.h"
#include "model/weights.h"

/* Rows per FFN pass: bounds the [rows][n_ff] intermediate buffer. */
#define VIS_FFN_ROWS 1024

/* LayerNorm over norm_n wide pieces, then fc1 + GELU + fc2 on rows of 4C
 * (a deepstack merger: norm_n = 4C; the final merger: post_ln, norm_n = C). */
typedef struct vis_merger {
    int64_t norm_n;
    const float *norm_w, *norm_b, *fc1_b, *fc2_b;
    wmat fc1, fc2;
} vis_merger;

typedef struct vis_layer {
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    const float *qkv_b, *out_b, *up_b, *down_b;
    wmat qkv, out, up, down;
    int deepstack; /* index into vis_tower.deepstack, or -1 */
} vis_layer;

struct vis_tower {
    gguf_file *gguf;
    tpool *pool;
    vision_info info;
    int head_dim;
    int pos_side; /* the learned position table is pos_side x pos_side */
    float mean[3], std[3];
    wmat patch[2]; /* the two temporal kernels as [3*ps*ps -> C] */
    const float *patch_b;
    const float *pos_embd; /* [pos_side * pos_side][C] */
    vis_layer *layers;
    vis_merger *deepstack; /* by increasing layer */
    vis_merger merger;     /* post_ln, mm.0, mm.2 */
    weight_set w;          /* matrices in place, vectors as F32 */
};

/* ---- loading ------------------------------------------------------------ */

static int get_u32(const gguf_file *f, const char *key, uint32_t *out, bool required, ph_err *err) {
    if (gguf_get_u32(f, key, out) == 0) return 0;
    if (gguf_find_kv(f, key)) return err_set(err, "metadata key '%s' has the wrong type", key);
    if (!required) return 1;
    return err_set(err, "metadata key '%s' is missing", key);
}

/* A 3-element float array (image_mean / image_std). */
static int get_f32x3(const gguf_file *f, const char *key, float out[3], ph_err *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return err_set(err, "metadata key '%s' is missing", key);
    if (kv->type != GGUF_ARRAY || kv->v.arr.n < 3) return err_set(err, "'%s' is not an array of 3 floats", key);
    for (int i = 0; i < 3; i++)
        if (gguf_arr_f32(kv, (uint64_t)i, &out[i]) || !isfinite(out[i]))
            return err_set(err, "'%s' is not an array of 3 floats", key);
    return 0;
}

static int load_merger(vis_tower *v, vis_merger *m, const char *norm_w, const char *norm_b, int64_t norm_n,
                       const char *fc1, const char *fc1_b, const char *fc2, const char *fc2_b, ph_err *err) {
    const int64_t C4 = 4 * (int64_t)v->info.n_embd, P = v->info.proj_dim;
    m->norm_n = norm_n;
    weight_set *w = &v->w;
    return weights_vec(w, norm_w, norm_n, &m->norm_w, err) || weights_vec(w, norm_b, norm_n, &m->norm_b, err) ||
                   weights_mat(w, fc1, C4, C4, true, &m->fc1, err) || weights_vec(w, fc1_b, C4, &m->fc1_b, err) ||
                   weights_mat(w, fc2, C4, P, true, &m->fc2, err) || weights_vec(w, fc2_b, P, &m->fc2_b, err)
               ? -1
               : 0;
}

static int load_hparams(vis_tower *v, ph_err *err) {
    const gguf_file *f = v->gguf;
    vision_info *in = &v->info;
    gguf_str s;
    if (gguf_get_str(f, "general.architecture", &s) == 0 && !gguf_str_eq(s, "clip"))
        return err_set(err, "architecture '%.*s' is not an mmproj ('clip')", (int)(s.len > 64 ? 64 : s.len), s.ptr);
    bool has_vision = false;
    if (gguf_get_bool(f, "clip.has_vision_encoder", &has_vision) || !has_vision)
        return err_set(err, "the file has no vision encoder (clip.has_vision_encoder is not true)");
    if (gguf_get_str(f, "clip.projector_type", &s) && gguf_get_str(f, "clip.vision.projector_type", &s))
        return err_set(err, "metadata key 'clip.projector_type' is missing");
    if (!gguf_str_eq(s, "qwen3vl_merger"))
        return err_set(err, "projector type '%.*s' is not supported (only qwen3vl_merger)",
                       (int)(s.len > 64 ? 64 : s.len), s.ptr);

    uint32_t C, n_head, n_ff, n_layer, ps, merge = 2, u = 0;
    if (get_u32(f, "clip.vision.embedding_length", &C, true, err) ||
        get_u32(f, "clip.vision.attention.head_count", &n_head, true, err) ||
        get_u32(f, "clip.vision.feed_forward_length", &n_ff, true, err) ||
        get_u32(f, "clip.vision.block_count", &n_layer, true, err) ||
        get_u32(f, "clip.vision.patch_size", &ps, true, err) ||
        get_u32(f, "clip.vision.spatial_merge_size", &merge, false, err) < 0)
        return -1;
    if (gguf_get_f32(f, "clip.vision.attention.layer_norm_epsilon", &in->eps) || !(in->eps >= 0.0f))
        return err_set(err, "metadata key 'clip.vision.attention.layer_norm_epsilon' is missing or not usable");
    if (get_f32x3(f, "clip.vision.image_mean", v->mean, err) || get_f32x3(f, "clip.vision.image_std", v->std, err))
        return -1;
    for (int c = 0; c < 3; c++)
        if (v->std[c] == 0.0f) return err_set(err, "clip.vision.image_std has a zero");

    if (C == 0 || C > 65536 || n_head == 0 || C % n_head || n_ff == 0 || n_ff > (1u << 18) || n_layer == 0 ||
        n_layer > 1024 || ps == 0 || ps > 64)
        return err_set(err,
                       "the vision tower's dimensions are not usable (width %u, %u heads, ff %u, %u layers, "
                       "patch %u)",
                       C, n_head, n_ff, n_layer, ps);
    const uint32_t d = C / n_head;
    /* The 2D rope rotates the whole head in quarters (docs/numerics.md, Vision rope). */
    if (d % 4 || d > 512) return err_set(err, "vision head size %u is not supported", d);
    if (get_u32(f, "clip.vision.attention.head_dim", &u, false, err) < 0) return -1;
    if (gguf_find_kv(f, "clip.vision.attention.head_dim") && u != d)
        return err_set(err, "vision head size %u differs from width / heads = %u", u, d);
    if (get_u32(f, "clip.vision.attention.head_count_kv", &u, false, err) < 0) return -1;
    if (gguf_find_kv(f, "clip.vision.attention.head_count_kv") && u != n_head)
        return err_set(err, "vision attention with %u KV heads for %u heads is not supported", u, n_head);
    if (merge != 2) return err_set(err, "spatial merge size %u is not supported (only 2)", merge);
    bool silu = false;
    if (gguf_get_bool(f, "clip.use_silu", &silu) == 0 && silu)
        return err_set(err, "a SiLU vision FFN is not supported (qwen3vl_merger uses GELU)");

    in->n_embd = (int)C;
    in->n_head = (int)n_head;
    in->n_ff = (int)n_ff;
    in->n_layer = (int)n_layer;
    in->patch_size = (int)ps;
    in->n_merge = (int)merge;
    v->head_dim = (int)d;
    return 0;
}

/* Whether layer l has a deepstack merger: iff its tensors are present
 * (docs/numerics.md, Vision metadata: the is_deepstack_layers key is not
 * read). */
static bool has_deepstack(const vis_tower *v, int l) {
    char name[96];
    snprintf(name, sizeof name, "v.deepstack.%d.norm.weight", l);
    return gguf_find_tensor(v->gguf, name) != NULL;
}

/* The width of the rows the tower produces, from the tensors' shapes. */
static int load_out_width(vis_tower *v, ph_err *err) {
    vision_info *in = &v->info;
    /* The output width P is what mm.2 produces (docs/numerics.md, Vision metadata); projection_dim
     * must agree when present. */
    const gguf_tensor *mm2 = gguf_find_tensor(v->gguf, "mm.2.weight");
    if (!mm2) return err_set(err, "tensor 'mm.2.weight' is missing");
    if (mm2->ne[1] <= 0 || mm2->ne[1] > 65536) return err_set(err, "tensor 'mm.2.weight' has an unusable shape");
    in->proj_dim = (int)mm2->ne[1];
    uint32_t u;
    if (get_u32(v->gguf, "clip.vision.projection_dim", &u, false, err) < 0) return -1;
    if (gguf_find_kv(v->gguf, "clip.vision.projection_dim") && (int64_t)u != in->proj_dim)
        return err_set(err, "clip.vision.projection_dim is %u but mm.2.weight produces %d", u, in->proj_dim);
    in->n_deepstack = 0;
    for (int l = 0; l < in->n_layer; l++) in->n_deepstack += has_deepstack(v, l);
    in->out_width = in->proj_dim * (1 + in->n_deepstack);
    return 0;
}

static int load_weights(vis_tower *v, ph_err *err) {
    vision_info *in = &v->info;
    const int64_t C = in->n_embd, F = in->n_ff, ps = in->patch_size;
    char name[96];

    /* Patch kernels [ps, ps, 3, C]. llama.cpp's conv2d is an im2col into an
     * F16 buffer (BF16 for a BF16 kernel) multiplied by the kernel converted
     * to that type (docs/numerics.md, Patch embedding): an F32 kernel is rounded to F16 here, and
     * mat_mul rounds the pixels the same way. */
    const int64_t K = 3 * ps * ps, pne[4] = {ps, ps, 3, C};
    for (int k = 0; k < 2; k++) {
        const char *pn = k ? "v.patch_embd.weight.1" : "v.patch_embd.weight";
        const gguf_tensor *t = weights_find(&v->w, pn, pne, err);
        if (!t) return -1;
        if (t->type == PH_TYPE_F16 || t->type == PH_TYPE_BF16) {
            v->patch[k] = (wmat){t->type, K, C, t->data, type_row_bytes(t->type, K), NULL};
        } else if (t->type == PH_TYPE_F32) {
            f16_bits *h = weights_alloc(&v->w, (size_t)(K * C) * sizeof(f16_bits), err);
            if (!h) return -1;
            const unsigned char *src = t->data; /* may be unaligned (general.alignment 1) */
            for (int64_t i = 0; i < K * C; i++) {
                float w;
                memcpy(&w, src + i * (int64_t)sizeof w, sizeof w);
                h[i] = f32_to_fp16(w);
            }
            v->patch[k] = (wmat){PH_TYPE_F16, K, C, h, type_row_bytes(PH_TYPE_F16, K), NULL};
        } else {
            return err_set(err, "tensor '%s' has type %s; patch kernels must be f32, f16 or bf16", pn,
                           type_get(t->type)->name);
        }
    }
    if (weights_vec(&v->w, "v.patch_embd.bias", C, &v->patch_b, err)) return -1;

    const gguf_tensor *pos = gguf_find_tensor(v->gguf, "v.position_embd.weight");
    if (!pos) return err_set(err, "tensor 'v.position_embd.weight' is missing");
    const int64_t n_pos = pos->ne[1];
    int side = (int)sqrt((double)n_pos);
    while ((int64_t)side * side > n_pos) side--;
    while ((int64_t)(side + 1) * (side + 1) <= n_pos) side++;
    if (n_pos <= 0 || (int64_t)side * side != n_pos || n_pos > (1 << 20))
        return err_set(err, "tensor 'v.position_embd.weight' has %lld positions, not a square grid",
                       (long long)n_pos);
    const int64_t posne[4] = {C, n_pos, 1, 1};
    if (!weights_find(&v->w, "v.position_embd.weight", posne, err) ||
        !(v->pos_embd = weights_f32(&v->w, pos, C * n_pos, err)))
        return -1;
    v->pos_side = side;

    if (gguf_find_tensor(v->gguf, "v.pre_ln.weight") || gguf_find_tensor(v->gguf, "v.class_embd"))
        return err_set(err, "a pre-layernorm or class embedding is not expected in a qwen3vl_merger tower");

    v->layers = calloc((size_t)in->n_layer, sizeof *v->layers);
    v->deepstack = calloc((size_t)in->n_layer, sizeof *v->deepstack);
    if (!v->layers || !v->deepstack) return err_set(err, "out of memory");
    int n_deepstack = 0;
#define NAME(...) (snprintf(name, sizeof name, __VA_ARGS__), name)
    for (int l = 0; l < in->n_layer; l++) {
        vis_layer *L = &v->layers[l];
        if (weights_vec(&v->w, NAME("v.blk.%d.ln1.weight", l), C, &L->ln1_w, err) ||
            weights_vec(&v->w, NAME("v.blk.%d.ln1.bias", l), C, &L->ln1_b, err) ||
            weights_mat(&v->w, NAME("v.blk.%d.attn_qkv.weight", l), C, 3 * C, true, &L->qkv, err) ||
            weights_vec(&v->w, NAME("v.blk.%d.attn_qkv.bias", l), 3 * C, &L->qkv_b, err) ||
            weights_mat(&v->w, NAME("v.blk.%d.attn_out.weight", l), C, C, true, &L->out, err) ||
            weights_vec(&v->w, NAME("v.blk.%d.attn_out.bias", l), C, &L->out_b, err) ||
            weights_vec(&v->w, NAME("v.blk.%d.ln2.weight", l), C, &L->ln2_w, err) ||
            weights_vec(&v->w, NAME("v.blk.%d.ln2.bias", l), C, &L->ln2_b, err) ||
            weights_mat(&v->w, NAME("v.blk.%d.ffn_up.weight", l), C, F, true, &L->up, err) ||
            weights_vec(&v->w, NAME("v.blk.%d.ffn_up.bias", l), F, &L->up_b, err) ||
            weights_mat(&v->w, NAME("v.blk.%d.ffn_down.weight", l), F, C, true, &L->down, err) ||
            weights_vec(&v->w, NAME("v.blk.%d.ffn_down.bias", l), C, &L->down_b, err))
            return -1;
        L->deepstack = -1;
        if (has_deepstack(v, l)) {
            char nb[96], f1[96], f1b[96], f2[96], f2b[96];
            snprintf(name, sizeof name, "v.deepstack.%d.norm.weight", l);
            snprintf(nb, sizeof nb, "v.deepstack.%d.norm.bias", l);
            snprintf(f1, sizeof f1, "v.deepstack.%d.fc1.weight", l);
            snprintf(f1b, sizeof f1b, "v.deepstack.%d.fc1.bias", l);
            snprintf(f2, sizeof f2, "v.deepstack.%d.fc2.weight", l);
            snprintf(f2b, sizeof f2b, "v.deepstack.%d.fc2.bias", l);
            if (load_merger(v, &v->deepstack[n_deepstack], name, nb, 4 * C, f1, f1b, f2, f2b, err)) return -1;
            L->deepstack = n_deepstack++;
        }
    }
#undef NAME
    if (load_merger(v, &v->merger, "v.post_ln.weight", "v.post_ln.bias", C, "mm.0.weight", "mm.0.bias", "mm.2.weight",
                    "mm.2.bias", err))
        return -1;

    /* every matrix is read only through its wmat from here on */
    if (weights_pack(&v->w, v->pool, &v->patch[0], true, err) ||
        weights_pack(&v->w, v->pool, &v->patch[1], true, err) ||
        weights_pack(&v->w, v->pool, &v->merger.fc1, true, err) ||
        weights_pack(&v->w, v->pool, &v->merger.fc2, true, err))
        return -1;
    for (int l = 0; l < in->n_layer; l++) {
        vis_layer *L = &v->layers[l];
        if (weights_pack(&v->w, v->pool, &L->qkv, true, err) || weights_pack(&v->w, v->pool, &L->out, true, err) ||
            weights_pack(&v->w, v->pool, &L->up, true, err) || weights_pack(&v->w, v->pool, &L->down, true, err))
            return -1;
    }
    for (int k = 0; k < in->n_deepstack; k++)
        if (weights_pack(&v->w, v->pool, &v->deepstack[k].fc1, true, err) ||
            weights_pack(&v->w, v->pool, &v->deepstack[k].fc2, true, err))
            return -1;
    return 0;
}

/* The tower of path: its metadata and shapes read, and its weights too
 * when asked. */
static vis_tower *vision_open(const char *path, tpool *pool, bool weights, ph_err *err) {
    kernels_init();
    vis_tower *v = calloc(1, sizeof *v);
    if (!v) {
        err_set(err, "out of memory");
        return NULL;
    }
    v->pool = pool;
    v->gguf = gguf_open(path, err);
    if (!v->gguf) {
        free(v);
        return NULL;
    }
    v->w.f = v->gguf;
    if (load_hparams(v, err) || load_out_width(v, err) || (weights && load_weights(v, err))) {
        err_prefix(err, "%s", path);
        vision_free(v);
        return NULL;
    }
    return v;
}

vis_tower *vision_load(const char *path, tpool *pool, ph_err *err) { return vision_open(path, pool, true, err); }

vis_tower *vision_probe(const char *path, ph_err *err) { return vision_open(path, NULL, false, err); }

int vision_check_width(const vision_info *vi, const char *path, int32_t llm_width, ph_err *err) {
    if (vi->out_width == llm_width) return 0;
    return err_set(err, "%s produces rows of %d floats but the LLM takes %d: they are not a pair", path,
                   vi->out_width, llm_width);
}

void vision_free(vis_tower *v) {
    if (!v) return;
    weights_free(&v->w);
    free(v->layers);
    free(v->deepstack);
    gguf_close(v->gguf);
    free(v);
}

const vision_info *vision_get_info(const vis_tower *v) { return &v->info; }

void vision_prep_params(const vis_tower *v, prep_params *p) {
    p->patch_size = v->info.patch_size;
    p->n_merge = v->info.n_merge;
    p->min_tokens = 8;
    p->max_tokens = 4096;
    memcpy(p->mean, v->mean, sizeof p->mean);
    memcpy(p->std, v->std, sizeof p->std);
}

/* ---- row passes, split over the pool --------------------------------------- */

typedef struct rows_job rows_job;
struct rows_job {
    void (*fn)(const rows_job *j, int64_t r0, int64_t r1);
    int64_t first, n_rows; /* rows [first, first + n_rows) */
    const vis_tower *v;
    float *y;
    const float *x, *w, *b;
    int64_t width;
    /* embed: the picture; qkv: the rope table and the f16 K/V rows */
    const prep_image *img;
    const float *rope_cs;
    f16_bits *k16, *v16;
    /* merger output: column offset and row stride of the output rows */
    int64_t col, stride;
};

static void rows_worker(void *ctx, int ith, int nth) {
    const rows_job *j = ctx;
    long lo, hi;
    tpool_split_range((long)j->n_rows, ith, nth, &lo, &hi);
    if (lo < hi) j->fn(j, j->first + lo, j->first + hi);
}

static void run_rows(tpool *pool, const rows_job *j) { tpool_run(pool, rows_worker, (void *)j); }

/* Patch (x, y) of merge-ordered token k (docs/numerics.md, Merge order): 2x2 blocks
 * row-major, inside a block (0,0) (0,1) (1,0) (1,1) as (dy, dx). */
static void merge_xy(int64_t k, int pw, int *x, int *y) {
    const int64_t blk = k >> 2, bw = pw / 2;
    *x = (int)(blk % bw) * 2 + (int)(k & 1);
    *y = (int)(blk / bw) * 2 + (int)((k >> 1) & 1);
}

/* y = the im2col rows of the picture in merge order: per patch, channel-major
 * then row then column, as the kernels' [ps, ps, 3] rows. */
static void im2col_rows(const rows_job *j, int64_t r0, int64_t r1) {
    const int ps = j->v->info.patch_size, W = j->img->w, H = j->img->h, pw = W / ps;
    for (int64_t k = r0; k < r1; k++) {
        int px, py;
        merge_xy(k, pw, &px, &py);
        float *dst = j->y + k * 3 * ps * ps;
        for (int c = 0; c < 3; c++)
            for (int ky = 0; ky < ps; ky++) {
                const float *src = j->img->pixels + ((int64_t)c * H + (int64_t)py * ps + ky) * W + (int64_t)px * ps;
                memcpy(dst + ((int64_t)c * ps + ky) * ps, src, (size_t)ps * sizeof(float));
            }
    }
}

/* y = ((y + x) + patch bias) + position embedding (docs/numerics.md, Position embedding); x is
 * the second kernel's output. The learned n x n table is resampled to the
 * patch grid, bilinear with aligned corners as ggml_interpolate does; on an
 * n x n grid this reproduces the table exactly. */
static void embed_rows(const rows_job *j, int64_t r0, int64_t r1) {
    const vis_tower *v = j->v;
    const int64_t C = v->info.n_embd;
    const int ps = v->info.patch_size, pw = j->img->w / ps, ph = j->img->h / ps, n = v->pos_side;
    const float sfx = pw > 1 && n > 1 ? (float)(pw - 1) / (float)(n - 1) : (float)pw / (float)n;
    const float sfy = ph > 1 && n > 1 ? (float)(ph - 1) / (float)(n - 1) : (float)ph / (float)n;
    for (int64_t k = r0; k < r1; k++) {
        int px, py;
        merge_xy(k, pw, &px, &py);
        const float sx = (float)px / sfx, sy = (float)py / sfy;
        int x0 = (int)floorf(sx), y0 = (int)floorf(sy), x1 = x0 + 1, y1 = y0 + 1;
        x0 = x0 < 0 ? 0 : x0 > n - 1 ? n - 1 : x0;
        x1 = x1 < 0 ? 0 : x1 > n - 1 ? n - 1 : x1;
        y0 = y0 < 0 ? 0 : y0 > n - 1 ? n - 1 : y0;
        y1 = y1 < 0 ? 0 : y1 > n - 1 ? n - 1 : y1;
        float dx = sx - (float)x0, dy = sy - (float)y0;
        dx = dx < 0.0f ? 0.0f : dx > 1.0f ? 1.0f : dx;
        dy = dy < 0.0f ? 0.0f : dy > 1.0f ? 1.0f : dy;
        const float *a = v->pos_embd + ((int64_t)y0 * n + x0) * C, *b = v->pos_embd + ((int64_t)y0 * n + x1) * C;
        const float *c = v->pos_embd + ((int64_t)y1 * n + x0) * C, *d = v->pos_embd + ((int64_t)y1 * n + x1) * C;
        float *y = j->y + k * C;
        const float *x = j->x + k * C;
        for (int64_t i = 0; i < C; i++) {
            float pos = a[i] * (1 - dx) * (1 - dy) + b[i] * dx * (1 - dy) + c[i] * (1 - dx) * dy + d[i] * dx * dy;
            y[i] = ((y[i] + x[i]) + v->patch_b[i]) + pos;
        }
    }
}

/* y = LayerNorm(x) * w + b over rows of `width`. */
static void norm_rows(const rows_job *j, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++)
        layer_norm(j->y + r * j->width, j->x + r * j->width, j->w, j->b, j->width, j->v->info.eps);
}

/* y = GELU(y + b). */
static void bias_gelu_rows(const rows_job *j, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
        float *y = j->y + r * j->width;
        for (int64_t i = 0; i < j->width; i++) y[i] += j->b[i];
        act_gelu(y, j->width);
    }
}

/* y += x + b (a residual add of a projection with its bias). */
static void residual_rows(const rows_job *j, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
        float *y = j->y + r * j->width;
        const float *x = j->x + r * j->width;
        for (int64_t i = 0; i < j->width; i++) y[i] += x[i] + j->b[i];
    }
}

/* Rows of QKV [Q | K | V] (3C wide): add the bias, rotate Q and K by the 2D
 * rope (docs/numerics.md, Vision rope), store K and V as f16 for the attention (docs/numerics.md,
 * Vision blocks). */
static void qkv_rows(const rows_job *j, int64_t r0, int64_t r1) {
    const int64_t C = j->v->info.n_embd, d = j->v->head_dim;
    for (int64_t r = r0; r < r1; r++) {
        float *q = j->y + r * 3 * C, *k = q + C, *vv = k + C;
        for (int64_t i = 0; i < 3 * C; i++) q[i] += j->b[i];
        const float *cs = j->rope_cs + r * d;
        for (int64_t h = 0; h < C; h += d) {
            rope_apply(q + h, (int)d, cs);
            rope_apply(k + h, (int)d, cs);
        }
        quantize_act_row(PH_TYPE_F16, k, j->k16 + r * C, C);
        quantize_act_row(PH_TYPE_F16, vv, j->v16 + r * C, C);
    }
}

/* Output rows: y[r * stride + col ...] = x[r] + b, width wide. */
static void out_rows(const rows_job *j, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
        float *y = j->y + r * j->stride + j->col;
        const float *x = j->x + r * j->width;
        for (int64_t i = 0; i < j->width; i++) y[i] = x[i] + j->b[i];
    }
}

/* ---- encoding, in slices ------------------------------------------------------ */

/* The passes of an encode, in order; the rows of one pass are independent
 * of one another, so a pass can be run over any ranges of its rows. */
enum {
    VJ_EMBED, /* im2col, both patch kernels, bias and positions: N rows */
    VJ_QKV,   /* ln1, QKV, bias, rope, K and V to f16: N rows */
    VJ_ATTN,  /* attention of N query rows over all N (needs all of VJ_QKV) */
    VJ_MLP,   /* output projection and residual, ln2, FFN and residual: N rows */
    VJ_DEEP,  /* the layer's deepstack merger: N/4 merged rows */
    VJ_MERGE, /* the final merger: N/4 merged rows */
    VJ_DONE
};

typedef struct vis_bufs {
    float *x;    /* [N][C] the residual stream */
    float *h;    /* [N][C] normed rows, projections */
    float *a;    /* [N][C] attention output, merger hidden rows */
    float *big;  /* [N][max(3C, 3 ps^2)]: QKV rows; im2col rows */
    float *ffn;  /* [min(N, VIS_FFN_ROWS)][n_ff] */
    float *proj; /* [N/4][P] */
    float *rope_cs;
    f16_bits *k16, *v16; /* [N][C] each, v16 right after k16 (one allocation) */
} vis_bufs;

struct vision_job {
    vis_tower *v;
    const prep_image *img;
    float *rows;
    bool own_rows;
    int64_t N, M; /* patches, merged rows */
    vis_bufs b;
    int layer, phase;
    int64_t next; /* the first row of the pass not yet done */
};

static void *alloc_floats(int64_t n, size_t elem, bool *failed) {
    void *p = NULL;
    if (n > 0 && posix_memalign(&p, 64, (size_t)n * elem) != 0) p = NULL;
    if (!p) *failed = true;
    return p;
}

void vision_job_free(vision_job *j) {
    if (!j) return;
    free(j->b.x);
    free(j->b.h);
    free(j->b.a);
    free(j->b.big);
    free(j->b.ffn);
    free(j->b.proj);
    free(j->b.rope_cs);
    free(j->b.k16);
    if (j->own_rows) free(j->rows);
    free(j);
}

vision_job *vision_job_new(vis_tower *v, const prep_image *img, float *rows, ph_err *err) {
    const vision_info *in = &v->info;
    const int ps = in->patch_size, f = ps * in->n_merge;
    if (!img->pixels || img->w <= 0 || img->h <= 0 || img->w % f || img->h % f) {
        err_set(err, "the picture is %dx%d; the vision tower needs a non-empty multiple of %d", img->w, img->h, f);
        return NULL;
    }
    if (img->grid_x != img->w / f || img->grid_y != img->h / f) {
        err_set(err, "the picture's grid %dx%d does not match its size %dx%d", img->grid_x, img->grid_y, img->w,
                img->h);
        return NULL;
    }
    const int pw = img->w / ps, ph = img->h / ps;
    const int64_t N = (int64_t)pw * ph, C = in->n_embd, K = 3 * (int64_t)ps * ps;
    if (N > (1 << 22)) {
        err_set(err, "the picture is too large (%lld patches)", (long long)N);
        return NULL;
    }
    vision_job *j = calloc(1, sizeof *j);
    if (!j) {
        err_set(err, "out of memory");
        return NULL;
    }
    j->v = v;
    j->img = img;
    j->N = N;
    j->M = N / 4;
    j->rows = rows;
    j->phase = VJ_EMBED;

    bool failed = false;
    vis_bufs *b = &j->b;
    const int64_t ffn_rows = N < VIS_FFN_ROWS ? N : VIS_FFN_ROWS;
    b->x = alloc_floats(N * C, sizeof(float), &failed);
    b->h = alloc_floats(N * C, sizeof(float), &failed);
    b->a = alloc_floats(N * C, sizeof(float), &failed);
    b->big = alloc_floats(N * (3 * C > K ? 3 * C : K), sizeof(float), &failed);
    b->ffn = alloc_floats(ffn_rows * in->n_ff, sizeof(float), &failed);
    b->proj = alloc_floats(j->M * in->proj_dim, sizeof(float), &failed);
    b->rope_cs = alloc_floats(N * v->head_dim, sizeof(float), &failed);
    b->k16 = alloc_floats(2 * N * C, sizeof(f16_bits), &failed); /* K's cells, then V's: one block for attention */
    b->v16 = b->k16 ? b->k16 + N * C : NULL;
    int32_t *pos = alloc_floats(4 * N, sizeof(int32_t), &failed);
    if (!rows) {
        j->rows = alloc_floats(j->M * in->out_width, sizeof(float), &failed);
        j->own_rows = true;
    }
    if (failed) {
        free(pos);
        vision_job_free(j);
        err_set(err, "out of memory encoding a picture of %lld patches", (long long)N);
        return NULL;
    }

    /* 2D rope table: sections [row | col | row | col] (docs/numerics.md, Vision rope) */
    for (int64_t k = 0; k < N; k++) {
        int px, py;
        merge_xy(k, pw, &px, &py);
        pos[k] = pos[2 * N + k] = py;
        pos[N + k] = pos[3 * N + k] = px;
    }
    const rope_params rope = {.mode = PH_ROPE_VISION,
                              .n_dims = v->head_dim,
                              .freq_base = 10000.0f,
                              .sections = {v->head_dim / 4, v->head_dim / 4, v->head_dim / 4, v->head_dim / 4}};
    rope_table(&rope, pos, N, b->rope_cs);
    free(pos);
    return j;
}

/* The passes over rows [r0, r1): every row's result is what the whole
 * pass would give it (docs/numerics.md, Vision encode in slices). */

static void embed_range(const vision_job *j, int64_t r0, int64_t r1) {
    const vis_tower *v = j->v;
    const vis_bufs *b = &j->b;
    const int64_t n = r1 - r0, C = v->info.n_embd, K = 3 * (int64_t)v->info.patch_size * v->info.patch_size;
    rows_job rj = {.fn = im2col_rows, .first = r0, .n_rows = n, .v = v, .y = b->big, .img = j->img};
    run_rows(v->pool, &rj);
    /* both temporal kernels see the same frame */
    mat_mul(v->pool, &v->patch[0], b->big + r0 * K, n, b->x + r0 * C);
    mat_mul(v->pool, &v->patch[1], b->big + r0 * K, n, b->h + r0 * C);
    rj = (rows_job){.fn = embed_rows, .first = r0, .n_rows = n, .v = v, .y = b->x, .x = b->h, .img = j->img};
    run_rows(v->pool, &rj);
}

static void qkv_range(const vision_job *j, const vis_layer *L, int64_t r0, int64_t r1) {
    const vis_tower *v = j->v;
    const vis_bufs *b = &j->b;
    const int64_t n = r1 - r0, C = v->info.n_embd;
    rows_job rj = {.fn = norm_rows,
                   .first = r0,
                   .n_rows = n,
                   .v = v,
                   .y = b->h,
                   .x = b->x,
                   .w = L->ln1_w,
                   .b = L->ln1_b,
                   .width = C};
    run_rows(v->pool, &rj);
    mat_mul(v->pool, &L->qkv, b->h + r0 * C, n, b->big + r0 * 3 * C);
    rj = (rows_job){.fn = qkv_rows,
                    .first = r0,
                    .n_rows = n,
                    .v = v,
                    .y = b->big,
                    .b = L->qkv_b,
                    .rope_cs = b->rope_cs,
                    .k16 = b->k16,
                    .v16 = b->v16};
    run_rows(v->pool, &rj);
}

static void attn_range(const vision_job *j, int64_t r0, int64_t r1) {
    const vis_tower *v = j->v;
    const vis_bufs *b = &j->b;
    const int64_t C = v->info.n_embd, d = v->head_dim, N = j->N;
    attn_args aa = {
        .q = b->big + r0 * 3 * C,
        .q_stride = 3 * C,
        .kv_stride = C,
        .n_q = r1 - r0,
        .n_kv = N,
        .causal = false,
        .n_head = v->info.n_head,
        .n_head_kv = v->info.n_head,
        .head_dim = (int)d,
        .scale = 1.0f / sqrtf((float)d),
        .out = b->a + r0 * C,
        .out_stride = C, /* a row's result does not depend on the rows beside it (kernels/attention.h) */
    };
    const uint8_t *table[1];
    attn_kv_contiguous(&aa, table, b->k16, 0, (size_t)N * C * sizeof(f16_bits));
    attn_compute(v->pool, &aa);
}

static void mlp_range(const vision_job *j, const vis_layer *L, int64_t r0, int64_t r1) {
    const vis_tower *v = j->v;
    const vis_bufs *b = &j->b;
    const int64_t n = r1 - r0, C = v->info.n_embd, F = v->info.n_ff;
    tpool *pool = v->pool;
    mat_mul(pool, &L->out, b->a + r0 * C, n, b->h + r0 * C);
    rows_job rj = {
        .fn = residual_rows, .first = r0, .n_rows = n, .v = v, .y = b->x, .x = b->h, .b = L->out_b, .width = C};
    run_rows(pool, &rj);
    rj = (rows_job){.fn = norm_rows,
                    .first = r0,
                    .n_rows = n,
                    .v = v,
                    .y = b->h,
                    .x = b->x,
                    .w = L->ln2_w,
                    .b = L->ln2_b,
                    .width = C};
    run_rows(pool, &rj);
    for (int64_t c0 = r0; c0 < r1; c0 += VIS_FFN_ROWS) {
        const int64_t m = r1 - c0 < VIS_FFN_ROWS ? r1 - c0 : VIS_FFN_ROWS;
        mat_mul(pool, &L->up, b->h + c0 * C, m, b->ffn);
        rj = (rows_job){.fn = bias_gelu_rows, .n_rows = m, .v = v, .y = b->ffn, .b = L->up_b, .width = F};
        run_rows(pool, &rj);
        mat_mul(pool, &L->down, b->ffn, m, b->a + c0 * C);
    }
    rj = (rows_job){
        .fn = residual_rows, .first = r0, .n_rows = n, .v = v, .y = b->x, .x = b->a, .b = L->down_b, .width = C};
    run_rows(pool, &rj);
}

/* A merger over merged rows [m0, m1) of the [N][C] stream x: its P outputs
 * plus bias into column block `col` of the output rows (docs/numerics.md,
 * Mergers). */
static void merger_range(const vision_job *j, const vis_merger *m, int64_t col, int64_t m0, int64_t m1) {
    const vis_tower *v = j->v;
    const vis_bufs *b = &j->b;
    const int64_t n = m1 - m0, C4 = 4 * (int64_t)v->info.n_embd, P = v->info.proj_dim, u = C4 / m->norm_n;
    rows_job rj = {.fn = norm_rows,
                   .first = m0 * u,
                   .n_rows = n * u,
                   .v = v,
                   .y = b->h,
                   .x = b->x,
                   .w = m->norm_w,
                   .b = m->norm_b,
                   .width = m->norm_n};
    run_rows(v->pool, &rj);
    mat_mul(v->pool, &m->fc1, b->h + m0 * C4, n, b->a + m0 * C4);
    rj = (rows_job){.fn = bias_gelu_rows, .first = m0, .n_rows = n, .v = v, .y = b->a, .b = m->fc1_b, .width = C4};
    run_rows(v->pool, &rj);
    mat_mul(v->pool, &m->fc2, b->a + m0 * C4, n, b->proj + m0 * P);
    rj = (rows_job){.fn = out_rows,
                    .first = m0,
                    .n_rows = n,
                    .v = v,
                    .y = j->rows,
                    .x = b->proj,
                    .b = m->fc2_b,
                    .width = P,
                    .col = col * P,
                    .stride = v->info.out_width};
    run_rows(v->pool, &rj);
}

/* Rows of the current pass, its slice unit and its estimated flops per row
 * (multiply-adds counted as two; the row-wise work beside the products is
 * left out). */
static int64_t pass_rows(const vision_job *j) { return j->phase >= VJ_DEEP ? j->M : j->N; }

static int64_t pass_unit(const vision_job *j) {
    return j->phase >= VJ_DEEP ? VISION_SLICE_ROWS / 4 : VISION_SLICE_ROWS;
}

static int64_t pass_row_flops(const vision_job *j) {
    const vision_info *in = &j->v->info;
    const int64_t C = in->n_embd, F = in->n_ff, P = in->proj_dim, ps = in->patch_size;
    switch (j->phase) {
    case VJ_EMBED: return 2 * 2 * 3 * ps * ps * C;
    case VJ_QKV: return 2 * C * 3 * C;
    case VJ_ATTN: return 2 * 2 * j->N * C;
    case VJ_MLP: return 2 * C * C + 2 * 2 * C * F;
    default: return 2 * 4 * C * 4 * C + 2 * 4 * C * P;
    }
}

static void run_range(const vision_job *j, int64_t r0, int64_t r1) {
    const vis_tower *v = j->v;
    const vis_layer *L = j->phase >= VJ_QKV && j->phase <= VJ_DEEP ? &v->layers[j->layer] : NULL;
    switch (j->phase) {
    case VJ_EMBED: embed_range(j, r0, r1); break;
    case VJ_QKV: qkv_range(j, L, r0, r1); break;
    case VJ_ATTN: attn_range(j, r0, r1); break;
    case VJ_MLP: mlp_range(j, L, r0, r1); break;
    case VJ_DEEP: merger_range(j, &v->deepstack[L->deepstack], 1 + L->deepstack, r0, r1); break;
    case VJ_MERGE: merger_range(j, &v->merger, 0, r0, r1); break;
    default: break;
    }
}

/* Moves on to the next pass; true at the end of a layer or of the encode. */
static bool next_pass(vision_job *j) {
    j->next = 0;
    switch (j->phase) {
    case VJ_EMBED: j->phase = VJ_QKV; return false;
    case VJ_QKV: j->phase = VJ_ATTN; return false;
    case VJ_ATTN: j->phase = VJ_MLP; return false;
    case VJ_MLP:
        if (j->v->layers[j->layer].deepstack >= 0) {
            j->phase = VJ_DEEP;
            return false;
        }
        break;
    case VJ_DEEP: break;
    default: j->phase = VJ_DONE; return true;
    }
    j->layer++;
    j->phase = j->layer < j->v->info.n_layer ? VJ_QKV : VJ_MERGE;
    return true;
}

int vision_job_step(vision_job *j, int64_t budget) {
    int64_t spent = 0;
    bool any = false;
    while (j->phase != VJ_DONE) {
        const int64_t total = pass_rows(j), unit = pass_unit(j), cost = pass_row_flops(j);
        int64_t n = budget > spent ? (budget - spent) / cost / unit * unit : 0;
        if (n < unit) {
            if (any) break;
            n = unit;
        }
        if (n > total - j->next) n = total - j->next;
        run_range(j, j->next, j->next + n);
        any = true;
        spent += n * cost;
        j->next += n;
        if (j->next == total && next_pass(j)) break;
    }
    return j->phase == VJ_DONE;
}

float *vision_job_result(const vision_job *j) { return j->phase == VJ_DONE ? j->rows : NULL; }

void vision_job_progress(const vision_job *j, int *done, int *total) {
    *total = j->v->info.n_layer + 1;
    *done = j->phase == VJ_DONE ? *total : j->layer;
}

int vision_encode(vis_tower *v, const prep_image *img, float *rows, const vision_progress *prog, ph_err *err) {
    vision_job *j = vision_job_new(v, img, rows, err);
    if (!j) return -1;
    int done, n, total;
    do {
        done = vision_job_step(j, INT64_MAX); /* a layer at a time, each pass over all rows at once */
        vision_job_progress(j, &n, &total);
        if (prog && prog->fn) prog->fn(prog->ud, n, total);
    } while (!done);
    vision_job_free(j);
    return 0;
}
