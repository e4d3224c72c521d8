#include "text/tool_json.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/grow.h"

json_t *tool_json_parse(const char *text, size_t len) {
    return json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
}

/* json.dumps escapes '"', '\\', \b \f \n \r \t by name and every other
 * byte below 0x20 as \u00xx (lowercase hex); everything else passes. */
void tojson_escape(strbuf *out, const char *s, size_t n) {
    size_t from = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (!esc) continue;
        strbuf_put(out, s + from, i - from);
        strbuf_puts(out, esc);
        from = i + 1;
    }
    strbuf_put(out, s + from, n - from);
}

void tojson_string(strbuf *out, const char *s, size_t n) {
    strbuf_putc(out, '"');
    tojson_escape(out, s, n);
    strbuf_putc(out, '"');
}

/* Python's float repr: the shortest digits that read back as v; plain
 * notation when the decimal point falls within -4 < decpt <= 16 (with ".0"
 * for whole numbers), otherwise d[.ddd]e[+-]XX. */
void tojson_float(strbuf *out, double v) {
    if (isnan(v) || isinf(v) || v == 0) {
        strbuf_puts(out, isnan(v)     ? "NaN"
                         : isinf(v)   ? (v < 0 ? "-Infinity" : "Infinity")
                         : signbit(v) ? "-0.0"
                                      : "0.0");
        return;
    }
    char buf[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, v);
        if (strtod(buf, NULL) == v) break;
    }
    /* buf is [-]d[.ddd]e[+-]XX */
    const char *p = buf;
    bool neg = *p == '-';
    if (neg) p++;
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int exp10 = atoi(p + 1);
    int decpt = exp10 + 1;
    if (neg) strbuf_putc(out, '-');
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            strbuf_puts(out, "0.");
            for (int i = 0; i < -decpt; i++) strbuf_putc(out, '0');
            strbuf_put(out, digits, (size_t)nd);
        } else if (decpt >= nd) {
            strbuf_put(out, digits, (size_t)nd);
            for (int i = nd; i < decpt; i++) strbuf_putc(out, '0');
            strbuf_puts(out, ".0");
        } else {
            strbuf_put(out, digits, (size_t)decpt);
            strbuf_putc(out, '.');
            strbuf_put(out, digits + decpt, (size_t)(nd - decpt));
        }
    } else {
        strbuf_putc(out, digits[0]);
        if (nd > 1) {
            strbuf_putc(out, '.');
            strbuf_put(out, digits + 1, (size_t)(nd - 1));
        }
        char e[16];
        snprintf(e, sizeof e, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        strbuf_puts(out, e);
    }
}

void tojson_value(strbuf *out, const json_t *v) {
    char num[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        strbuf_putc(out, '{');
        const char *k;
        size_t klen;
        json_t *x;
        bool first = true;
        json_object_keylen_foreach((json_t *)v, k, klen, x) {
            if (!first) strbuf_puts(out, ", ");
            first = false;
            tojson_string(out, k, klen);
            strbuf_puts(out, ": ");
            tojson_value(out, x);
        }
        strbuf_putc(out, '}');
        break;
    }
    case JSON_ARRAY:
        strbuf_putc(out, '[');
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) strbuf_puts(out, ", ");
            tojson_value(out, json_array_get(v, i));
        }
        strbuf_putc(out, ']');
        break;
    case JSON_STRING: tojson_string(out, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        strbuf_puts(out, num);
        break;
    case JSON_REAL: tojson_float(out, json_real_value(v)); break;
    case JSON_TRUE: strbuf_puts(out, "true"); break;
    case JSON_FALSE: strbuf_puts(out, "false"); break;
    case JSON_NULL: strbuf_puts(out, "null"); break;
    }
}

void pystr_value(strbuf *out, const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_STRING: strbuf_put(out, json_string_value(v), json_string_length(v)); break;
    case JSON_TRUE: strbuf_puts(out, "True"); break;
    case JSON_FALSE: strbuf_puts(out, "False"); break;
    case JSON_NULL: strbuf_puts(out, "None"); break;
    default: tojson_value(out, v);
    }
}

bool tool_param_is_string(const json_t *schema) {
    const json_t *type = json_object_get(schema, "type");
    if (json_is_string(type)) return !strcmp(json_string_value(type), "string");
    if (!json_is_array(type)) return false;
    bool str = false;
    for (size_t i = 0; i < json_array_size(type); i++) {
        const char *t = json_string_value(json_array_get(type, i));
        if (t && !strcmp(t, "string")) str = true;
        else if (!t || strcmp(t, "null")) return false;
    }
    return str;
}

int tojson_text(strbuf *out, const char *text, size_t len) {
    json_t *v = tool_json_parse(text, len);
    if (!v) return -1;
    tojson_value(out, v);
    json_decref(v);
    return 0;
}

int tool_json_render(strbuf *out, const ph_tool *t, ph_err *err) {
    if (!t->name || !*t->name) return err_setc(err, PH_ERR_INPUT, "a tool has no name");
    json_t *params = NULL;
    if (t->parameters && !(params = tool_json_parse(t->parameters, strlen(t->parameters))))
        return err_setc(err, PH_ERR_INPUT, "the parameters of tool '%s' are not valid JSON", t->name);
    strbuf_puts(out, "{\"type\": \"function\", \"function\": {\"name\": ");
    tojson_string(out, t->name, strlen(t->name));
    strbuf_puts(out, ", \"description\": ");
    const char *d = t->description ? t->description : "";
    tojson_string(out, d, strlen(d));
    strbuf_puts(out, ", \"parameters\": ");
    if (params) {
        tojson_value(out, params);
        json_decref(params);
    } else {
        strbuf_puts(out, "{}");
    }
    strbuf_puts(out, "}}");
    return 0;
}
