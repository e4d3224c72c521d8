#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

static ph_log_level g_level = PH_LOG_INFO;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

void ph_log_set_level(ph_log_level level) { g_level = level; }

void ph_log(ph_log_level level, const char *fmt, ...) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    if (level < g_level) return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&g_lock);
    fprintf(stderr, "pinhole: %s: ", names[level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    pthread_mutex_unlock(&g_lock);
    va_end(ap);
}
