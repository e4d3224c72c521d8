/* Building a job's conversation from request fields, shared by the API
 * adapters: messages and their parts, pictures from data: URIs and base64
 * sources, stop strings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/error.h"
#include "base/grow.h"
#include "server/api.h"

/* ---- the conversation ------------------------------------------------------ */

/* Makes *arr (of *cap elements of el bytes) hold at least need elements. */
static int grow(void **arr, size_t *cap, size_t need, size_t el) {
    if (need <= *cap) return 0;
    void *p = grow_array(*arr, cap, need - 1, el, 8);
    if (!p) return -1;
    *arr = p;
    return 0;
}

int job_begin_msg(job *j, ph_role role, ph_err *err) {
    size_t cap = j->cap_msgs, cap2 = j->cap_msgs;
    if (grow((void **)&j->msgs, &j->cap_msgs, j->n_msgs + 1, sizeof *j->msgs) ||
        grow((void **)&j->msg_first, &cap, j->n_msgs + 1, sizeof *j->msg_first) ||
        grow((void **)&j->msg_calls, &cap2, j->n_msgs + 1, sizeof *j->msg_calls))
        return err_set(err, "out of memory");
    j->msgs[j->n_msgs] = (ph_chat_msg){.role = role};
    j->msg_first[j->n_msgs] = j->n_parts;
    j->msg_calls[j->n_msgs] = j->n_calls;
    j->n_msgs++;
    return 0;
}

static ph_chat_part *new_part(job *j, ph_err *err) {
    if (!j->n_msgs) {
        err_set(err, "internal: a part outside a message");
        return NULL;
    }
    if (grow((void **)&j->parts, &j->cap_parts, j->n_parts + 1, sizeof *j->parts)) {
        err_set(err, "out of memory");
        return NULL;
    }
    ph_chat_part *p = &j->parts[j->n_parts++];
    memset(p, 0, sizeof *p);
    return p;
}

int job_add_text(job *j, const char *text, size_t len, ph_err *err) {
    ph_chat_part *p = new_part(j, err);
    if (!p) return -1;
    p->text = text;
    p->len = len;
    return 0;
}

int job_add_text_field(job *j, json_t *part, const char *key, const char *path, ph_err *err) {
    json_t *t = json_object_get(part, key);
    char at[160];
    if (!json_is_string(t))
        return err_setp(err, api_path(at, sizeof at, "%s.%s", path, key), "%s.%s must be a string", path, key);
    return job_add_text(j, json_string_value(t), json_string_length(t), err);
}

int job_add_content(job *j, json_t *content, const char *path, const char *parts, job_part_fn add_part, ph_err *err) {
    if (json_is_string(content)) return job_add_text(j, json_string_value(content), json_string_length(content), err);
    if (!json_is_array(content)) return err_setp(err, path, "%s must be a string or an array of %s", path, parts);
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part) {
        char at[128];
        snprintf(at, sizeof at, "%s[%zu]", path, i);
        const char *type = json_string_value(json_object_get(part, "type"));
        if (!json_is_object(part) || !type) return err_setp(err, at, "%s must be an object with a 'type'", at);
        if (add_part(j, part, type, at, err)) return -1;
    }
    return 0;
}

static int add_image_bytes(job *j, void *bytes, size_t len, const char *where, ph_err *err) {
    if ((int)j->n_images >= j->max_images) {
        free(bytes);
        return err_setp(err, where, "too many pictures: at most %d per request (--max-images)", j->max_images);
    }
    if (grow((void **)&j->images, &j->cap_images, j->n_images + 1, sizeof *j->images)) {
        free(bytes);
        return err_set(err, "out of memory");
    }
    char label[32];
    snprintf(label, sizeof label, "picture %zu", j->n_images + 1);
    ph_picture *im = ph_picture_new(bytes, len, label, err);
    free(bytes);
    if (!im) return err_at(err, where);
    j->images[j->n_images++] = im;
    if (!j->count_only && ph_engine_has_vision(j->e)) { /* else nothing is decoded */
        int w, h;
        ph_picture_size(im, &w, &h);
        j->pixels += (uint64_t)w * (uint64_t)h;
        j->picture_rows += ph_engine_picture_rows(j->e, im);
    }
    ph_chat_part *p = new_part(j, err);
    if (!p) return -1;
    p->picture = im;
    return 0;
}

static int b64_val(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
}

/* Decodes base64 (standard or URL alphabet, padding optional, whitespace
 * ignored); where names the field in errors. */
static int b64_decode(const char *s, size_t n, void **out, size_t *out_len, const char *where, ph_err *err) {
    unsigned char *o = malloc(n / 4 * 3 + 3);
    if (!o) return err_set(err, "out of memory");
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    size_t i = 0;
    for (; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
        if (c == '=') break;
        int v = b64_val(c);
        if (v < 0) {
            free(o);
            return err_setp(err, where, "%s: the picture's base64 data has an invalid character at %zu", where, i);
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[k++] = (unsigned char)(acc >> bits);
        }
    }
    for (; i < n; i++)
        if (s[i] != '=' && s[i] != ' ' && s[i] != '\n' && s[i] != '\r') {
            free(o);
            return err_setp(err, where, "%s: the picture's base64 data continues after its padding", where);
        }
    *out = o;
    *out_len = k;
    return 0;
}

/* The picture types the decoders read (src/image). */
static const char *const IMAGE_TYPES = "image/png, image/jpeg, image/webp, image/gif";

/* Whether the media type t[0..n) is one of IMAGE_TYPES: its type/subtype
 * compared without regard to case, spaces around it and parameters after a
 * ';' allowed ("image/PNG; charset=x"). */
static bool image_media_type(const char *t, size_t n) {
    static const char *const ok[] = {"image/png", "image/jpeg", "image/webp", "image/gif"};
    const char *semi = memchr(t, ';', n);
    if (semi) n = (size_t)(semi - t);
    while (n && (*t == ' ' || *t == '\t')) t++, n--;
    while (n && (t[n - 1] == ' ' || t[n - 1] == '\t')) n--;
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (strlen(ok[i]) == n && !strncasecmp(t, ok[i], n)) return true;
    return false;
}

int job_add_image_url(job *j, const char *url, size_t len, const char *where, ph_err *err) {
    if (len < 5 || strncasecmp(url, "data:", 5) != 0) {
        char shown[64];
        snprintf(shown, sizeof shown, "%.48s%s", url, strlen(url) > 48 ? "..." : "");
        return err_setp(err, where,
                        "%s: picture '%s' is not a data: URI; only data: URIs are accepted (this server does not "
                        "fetch URLs or read files)",
                        where, shown);
    }
    const char *comma = memchr(url, ',', len);
    if (!comma) return err_setp(err, where, "%s: the picture's data: URI has no ',' before its data", where);
    /* data:[<media type>][;<parameter>]*[;base64],<data> (RFC 2397) */
    const char *meta = url + 5;
    const size_t n_meta = (size_t)(comma - meta);
    const char *semi = memchr(meta, ';', n_meta);
    const size_t n_type = semi ? (size_t)(semi - meta) : n_meta;
    if (!image_media_type(meta, n_type))
        return err_setp(err, where,
                        "%s: the data: URI's media type '%.*s' is not a picture type this server decodes (%s)", where,
                        (int)(n_type > 64 ? 64 : n_type), meta, IMAGE_TYPES);
    const char *last = meta + n_meta;
    while (last > meta && last[-1] != ';') last--;
    if (!semi || (size_t)(comma - last) != 6 || strncasecmp(last, "base64", 6) != 0)
        return err_setp(err, where,
                        "%s: the data: URI is not base64; only base64 data: URIs are accepted "
                        "(data:image/png;base64,...)",
                        where);
    void *bytes;
    size_t n_bytes;
    if (b64_decode(comma + 1, len - (size_t)(comma + 1 - url), &bytes, &n_bytes, where, err)) return -1;
    return add_image_bytes(j, bytes, n_bytes, where, err);
}

int job_add_image_b64(job *j, const char *media_type, const char *b64, size_t len, const char *where, ph_err *err) {
    char at[160];
    if (!media_type || !image_media_type(media_type, strlen(media_type)))
        return err_setp(err, api_path(at, sizeof at, "%s.media_type", where),
                        "%s.media_type: '%.64s' is not a picture type this server decodes (%s)", where,
                        media_type ? media_type : "", IMAGE_TYPES);
    void *bytes;
    size_t n_bytes;
    api_path(at, sizeof at, "%s.data", where);
    if (b64_decode(b64, len, &bytes, &n_bytes, at, err)) return -1;
    return add_image_bytes(j, bytes, n_bytes, at, err);
}

int job_finish_msgs(job *j, const char *field, const char *items, ph_err *err) {
    if (j->n_msgs == 0) return err_setp(err, field, "'%s' is empty: a request needs at least one %s", field, items);
    for (size_t i = 0; i < j->n_msgs; i++) {
        size_t end = i + 1 < j->n_msgs ? j->msg_first[i + 1] : j->n_parts;
        j->msgs[i].parts = j->parts + j->msg_first[i];
        j->msgs[i].n_parts = end - j->msg_first[i];
        size_t cend = i + 1 < j->n_msgs ? j->msg_calls[i + 1] : j->n_calls;
        j->msgs[i].tool_calls = j->calls + j->msg_calls[i];
        j->msgs[i].n_tool_calls = cend - j->msg_calls[i];
    }
    return 0;
}

int job_set_stop(job *j, json_t *v, const char *field, ph_err *err) {
    if (!v || json_is_null(v)) return 0;
    size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : (size_t)-1;
    if (n == (size_t)-1) return err_setp(err, field, "'%s' must be a string or an array of strings", field);
    if (n > 16) return err_setp(err, field, "'%s' has %zu entries; at most 16", field, n);
    j->stop = calloc(n + 1, sizeof *j->stop);
    if (!j->stop) return err_set(err, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        char at[64];
        if (json_is_array(v)) api_path(at, sizeof at, "%s[%zu]", field, i);
        else api_path(at, sizeof at, "%s", field);
        if (!json_is_string(s) || json_string_length(s) == 0 || json_string_length(s) > 256)
            return err_setp(err, at, "'%s' entries must be non-empty strings of at most 256 bytes", field);
        if (strlen(json_string_value(s)) != json_string_length(s)) /* matched as C strings */
            return err_setp(err, at, "'%s' holds \\u0000, which a stop string may not", at);
        j->stop[i] = json_string_value(s);
    }
    j->gen.stop = j->stop;
    j->gen.n_stop = n;
    return 0;
}
