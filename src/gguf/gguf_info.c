/* ph_print_file_info: a readable dump of any GGUF file. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "gguf/gguf.h"
#include "kernels/types.h"

static void print_str(FILE *out, gguf_str s, size_t max) {
    fputc('"', out);
    size_t n = s.len < max ? (size_t)s.len : max;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c == '\n') fputs("\\n", out);
        else if (c < 0x20 || c == 0x7f) fprintf(out, "\\x%02x", c);
        else fputc(c, out);
    }
    fputc('"', out);
    if (n < s.len) fprintf(out, "... (%" PRIu64 " bytes)", s.len);
}

static void print_scalar(FILE *out, gguf_vtype t, const gguf_kv *kv, uint64_t i) {
    int64_t iv;
    float fv;
    switch (t) {
    case GGUF_FLOAT32:
    case GGUF_FLOAT64:
        if (kv->type == GGUF_ARRAY) {
            if (gguf_arr_f32(kv, i, &fv) == 0) fprintf(out, "%g", (double)fv);
        } else {
            fprintf(out, "%g", kv->v.f);
        }
        break;
    case GGUF_BOOL:
        if (kv->type == GGUF_ARRAY) fputs(kv->v.arr.data[i] ? "true" : "false", out);
        else fputs(kv->v.u ? "true" : "false", out);
        break;
    case GGUF_STRING: print_str(out, kv->type == GGUF_ARRAY ? kv->v.arr.strs[i] : kv->v.s, 200); break;
    case GGUF_INT8:
    case GGUF_INT16:
    case GGUF_INT32:
    case GGUF_INT64:
        if (kv->type == GGUF_ARRAY) {
            if (gguf_arr_i64(kv, i, &iv) == 0) fprintf(out, "%" PRId64, iv);
        } else {
            fprintf(out, "%" PRId64, kv->v.i);
        }
        break;
    default: /* unsigned */
        if (kv->type == GGUF_ARRAY) {
            if (gguf_arr_i64(kv, i, &iv) == 0) fprintf(out, "%" PRId64, iv);
            else fputs("(large)", out);
        } else {
            fprintf(out, "%" PRIu64, kv->v.u);
        }
        break;
    }
}

/* A number in steps of step with two decimals and the unit that keeps it
 * under one step once rounded (1023.999 KiB is 1.00 MiB); below the first
 * step, the number itself. */
static void print_scaled(FILE *out, uint64_t n, double step, const char *one, const char *const units[4]) {
    if ((double)n < step) {
        fprintf(out, "%" PRIu64 "%s", n, one);
        return;
    }
    double v = (double)n / step;
    int u = 0;
    while (u < 3 && v >= step - 0.005) v /= step, u++;
    fprintf(out, "%.2f %s", v, units[u]);
}

static void print_size(FILE *out, uint64_t bytes) {
    static const char *const units[4] = {"KiB", "MiB", "GiB", "TiB"};
    print_scaled(out, bytes, 1024, " B", units);
}

int ph_print_file_info(const char *path, FILE *out, bool verbose, ph_err *err) {
    gguf_file *f = gguf_open(path, err);
    if (!f) return -1;
    fprintf(out, "file: %s (", path);
    print_size(out, f->size);
    fprintf(out,
            ")\nGGUF version %u, alignment %u, %" PRIu64 " metadata keys, %" PRIu64
            " tensors, data at offset %" PRIu64 "\n\nmetadata:\n",
            f->version, f->alignment, f->n_kv, f->n_tensors, f->data_offset);
    for (uint64_t k = 0; k < f->n_kv; k++) {
        const gguf_kv *kv = &f->kv[k];
        fprintf(out, "  %.*s = ", (int)kv->key.len, kv->key.ptr);
        if (kv->type == GGUF_ARRAY) {
            uint64_t n = kv->v.arr.n, show = verbose ? n : (n < 8 ? n : 8);
            fprintf(out, "[%s x %" PRIu64 "] ", gguf_vtype_name(kv->v.arr.type), n);
            for (uint64_t i = 0; i < show; i++) {
                if (i) fputs(", ", out);
                print_scalar(out, kv->v.arr.type, kv, i);
            }
            if (show < n) fputs(", ...", out);
        } else {
            print_scalar(out, kv->type, kv, 0);
        }
        fputc('\n', out);
    }
    uint64_t count[PH_TYPE_COUNT] = {0}, bytes[PH_TYPE_COUNT] = {0}, n_params = 0;
    fprintf(out, "\ntensors:\n");
    for (uint64_t t = 0; t < f->n_tensors; t++) {
        const gguf_tensor *ts = &f->tensors[t];
        uint64_t ne = (uint64_t)(ts->ne[0] * ts->ne[1] * ts->ne[2] * ts->ne[3]);
        n_params += ne;
        if (ts->type >= 0 && ts->type < PH_TYPE_COUNT) {
            count[ts->type]++;
            bytes[ts->type] += ts->nbytes;
        }
        if (verbose || f->n_tensors <= 40) {
            fprintf(out, "  %-40s %-6s [", ts->name, type_get(ts->type)->name);
            for (uint32_t d = 0; d < ts->n_dims; d++) fprintf(out, d ? ", %" PRId64 : "%" PRId64, ts->ne[d]);
            fputs("] ", out);
            print_size(out, ts->nbytes);
            fputc('\n', out);
        }
    }
    if (!verbose && f->n_tensors > 40) fprintf(out, "  (%" PRIu64 " tensors; --verbose lists them)\n", f->n_tensors);
    fprintf(out, "\nby type:\n");
    for (int t = 0; t < PH_TYPE_COUNT; t++) {
        if (!count[t]) continue;
        fprintf(out, "  %-6s %5" PRIu64 " tensors, ", type_get(t)->name, count[t]);
        print_size(out, bytes[t]);
        fputc('\n', out);
    }
    static const char *const counts[4] = {"K", "M", "B", "T"}; /* thousand, million, billion, trillion */
    fprintf(out, "parameters: %" PRIu64, n_params);
    if (n_params >= 1000) {
        fputs(" (", out);
        print_scaled(out, n_params, 1000, "", counts);
        fputc(')', out);
    }
    fputc('\n', out);
    gguf_close(f);
    return 0;
}
