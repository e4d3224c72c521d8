#include "cli/progress.h"

#include <stdio.h>
#include <unistd.h>

#include "base/timeutil.h"

/* A prefill this short takes a moment: no line. */
#define MIN_PREFILL_ROWS 256
/* Redrawn at most this often (and at the start). */
#define REDRAW_S         0.1

void cli_progress_init(cli_progress *p) { *p = (cli_progress){.tty = isatty(STDERR_FILENO) == 1}; }

static void erase(cli_progress *p) {
    if (p->drawn) fputs("\r\033[K", stderr);
    fflush(stderr);
    p->drawn = false;
}

void cli_progress_cb(void *ud, ph_progress_phase phase, int64_t done, int64_t total) {
    cli_progress *p = ud;
    if (!p->tty) return;
    const double now = time_now_s();
    if (done == 0 || phase != p->phase || total != p->total) { /* a new piece of work */
        erase(p);
        p->phase = phase;
        p->total = total;
        p->t0 = now;
        p->last_draw = 0;
    }
    if (phase == PH_PROGRESS_PREFILL && total < MIN_PREFILL_ROWS) return;
    if (done >= total) {
        erase(p);
        return;
    }
    if (done && now - p->last_draw < REDRAW_S) return;
    const char *what = phase == PH_PROGRESS_ENCODE ? "encoding pictures" : "prefilling the prompt";
    const char *unit = phase == PH_PROGRESS_ENCODE ? "steps" : "rows";
    fprintf(stderr, "\r\033[Kpinhole: %s: %lld/%lld %s (%.0f%%)", what, (long long)done, (long long)total, unit,
            100.0 * (double)done / (double)total);
    const double rate = done && now > p->t0 ? (double)done / (now - p->t0) : 0;
    if (rate > 0) fprintf(stderr, ", %.1f %s/s, %.0f s left", rate, unit, (double)(total - done) / rate);
    fflush(stderr);
    p->drawn = true;
    p->last_draw = now;
}
