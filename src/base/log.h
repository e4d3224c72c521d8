#ifndef PH_BASE_LOG_H
#define PH_BASE_LOG_H

#include "base/error.h"

typedef enum { PH_LOG_DEBUG = 0, PH_LOG_INFO, PH_LOG_WARN, PH_LOG_ERROR } ph_log_level;

void ph_log_set_level(ph_log_level level);
void ph_log(ph_log_level level, const char *fmt, ...) PH_PRINTF(2, 3);

#define PH_DEBUG(...) ph_log(PH_LOG_DEBUG, __VA_ARGS__)
#define PH_INFO(...) ph_log(PH_LOG_INFO, __VA_ARGS__)
#define PH_WARN(...) ph_log(PH_LOG_WARN, __VA_ARGS__)
#define PH_ERROR(...) ph_log(PH_LOG_ERROR, __VA_ARGS__)

#endif
