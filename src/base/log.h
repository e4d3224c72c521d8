/* Log lines on stderr, one a line, whole (a lock keeps threads' lines
 * apart). Three formats: plain ("pinhole: msg", the command line's), text
 * (the same after an ISO-8601 UTC timestamp with milliseconds, the
 * server's) and json (one object a line: ts, level, the request's fields,
 * msg). A line about a request names it: its id, the client's address, the
 * method and path, and once answered its status and duration. */
#ifndef PH_BASE_LOG_H
#define PH_BASE_LOG_H

#include <stdint.h>

#include "base/error.h"

typedef enum { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR } log_level;
typedef enum { LOG_PLAIN = 0, LOG_TEXT, LOG_JSON } log_format;

void log_set_level(log_level level);
void log_set_format(log_format format);
/* "text" or "json": 0; anything else -1. */
int log_parse_format(const char *name, log_format *out);

/* A number of a request's line, as a json field (text lines say it in msg). */
typedef struct log_field {
    const char *key;
    int64_t value;
} log_field;

#define LOG_MAX_FIELDS 10

/* What a line is about. Strings may be NULL (left out); status 0: not
 * answered yet (ms, the time since the request arrived, left out too).
 * event: "start" or "end" (NULL: a line in between). error_type and
 * error: why the request was refused or did not finish (the error's type
 * and message as the client got them, or "cancelled" and why): json
 * fields, and in a text line the start of what follows the request's
 * names ("TYPE: MESSAGE; msg"). */
typedef struct log_ctx {
    const char *id, *client, *method, *path, *event;
    const char *error_type, *error;
    int status;
    double ms;
    log_field fields[LOG_MAX_FIELDS];
    int n_fields;
} log_ctx;

/* ctx may be NULL: a line about no request. */
void log_line(log_level level, const log_ctx *ctx, const char *fmt, ...) PH_PRINTF(3, 4);

#define PH_DEBUG(...) log_line(LOG_DEBUG, NULL, __VA_ARGS__)
#define PH_INFO(...)  log_line(LOG_INFO, NULL, __VA_ARGS__)
#define PH_WARN(...)  log_line(LOG_WARN, NULL, __VA_ARGS__)
#define PH_ERROR(...) log_line(LOG_ERROR, NULL, __VA_ARGS__)

#endif
