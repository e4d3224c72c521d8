/* Error reporting: a fixed buffer that the failing function fills with one
 * clear sentence. Functions that can fail return 0 on success, -1 on error. */
#ifndef PH_BASE_ERROR_H
#define PH_BASE_ERROR_H

#include <stddef.h>

#include "pinhole.h" /* defines ph_err */

#if defined(__GNUC__)
#define PH_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define PH_PRINTF(a, b)
#endif

/* Sets the message (if e is not NULL) and returns -1, so callers can write
 * `return err_set(e, "...")`; the param is cleared. */
int err_set(ph_err *err, const char *fmt, ...) PH_PRINTF(2, 3);

/* Same, with an error code (ph_err_code); err_set sets PH_ERR_INTERNAL. */
int err_setc(ph_err *err, int code, const char *fmt, ...) PH_PRINTF(3, 4);

/* PH_ERR_INPUT with the request field at fault (param: its path, as
 * "messages[2].content", cut to fit; NULL or "": none). */
int err_setp(ph_err *err, const char *param, const char *fmt, ...) PH_PRINTF(3, 4);

/* Names the field at fault of an error already set, unless it names one
 * (or is not PH_ERR_INPUT). Returns -1. */
int err_at(ph_err *err, const char *param);

/* Prepends "prefix: " to an existing message (code and param kept). Returns -1. */
int err_prefix(ph_err *err, const char *fmt, ...) PH_PRINTF(2, 3);

#endif
