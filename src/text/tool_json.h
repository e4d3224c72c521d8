/* JSON as the chat templates print it: Jinja's `tojson` in HF transformers
 * is Python's json.dumps(x, ensure_ascii=False) — separators ", " and ": ",
 * keys in their order, non-ASCII kept as UTF-8, floats in Python's shortest
 * round-trip form (0.1, 1.0, 1e-07, 1e+16). jansson parses (it keeps key
 * order, a repeated key keeps its first place and takes its last value, as
 * a Python dict does); this file prints. Also the text buffer the chat
 * format code writes into. */
#ifndef PH_TEXT_TOOL_JSON_H
#define PH_TEXT_TOOL_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/strbuf.h"
#include "pinhole.h"

/* Parses JSON text (any value; NUL allowed in strings); NULL if invalid. */
json_t *tool_json_parse(const char *text, size_t len);

/* Appends v as json.dumps(v, ensure_ascii=False). */
void tojson_value(strbuf *out, const json_t *v);
/* Appends s as a JSON string literal ("..." with escapes), or only its
 * escaped characters. */
void tojson_string(strbuf *out, const char *s, size_t n);
void tojson_escape(strbuf *out, const char *s, size_t n);
/* Appends a float in Python repr form. */
void tojson_float(strbuf *out, double v);
/* Appends Python str(v), as Jinja's `|string` prints a value: strings raw,
 * True/False/None, numbers as above, arrays and objects as tojson. */
void pystr_value(strbuf *out, const json_t *v);

/* Whether a parameter's schema says "string" (its type "string", or a list
 * of "string" and "null"): the xml tool family writes such a value as raw
 * text, any other as JSON (the answer parser and the call constraint read
 * it by this one rule). */
bool tool_param_is_string(const json_t *schema);

/* Re-serialises JSON text with tojson; -1 (nothing appended) if the text is
 * not JSON or holds an integer beyond 64 bits. */
int tojson_text(strbuf *out, const char *text, size_t len);

/* Appends a tool as the templates list it:
 * {"type": "function", "function": {"name": ..., "description": ..., "parameters": ...}}
 * description defaults to "" and parameters to {}. Errors: PH_ERR_INPUT
 * (no name, parameters not JSON). */
int tool_json_render(strbuf *out, const ph_tool *t, ph_err *err);

#endif
