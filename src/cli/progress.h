/* The progress line of `pinhole run` and `pinhole chat`: while a picture
 * is encoded and a long prompt prefilled, one line on stderr redrawn in
 * place (done / total, rate, time left), erased when the work is done.
 * Only when stderr is a terminal: otherwise nothing is written. */
#ifndef PH_CLI_PROGRESS_H
#define PH_CLI_PROGRESS_H

#include <stdbool.h>

#include "pinhole.h"

typedef struct cli_progress {
    bool tty; /* stderr is a terminal */
    ph_progress_phase phase;
    int64_t total;
    double t0, last_draw;
    bool drawn; /* a line is on the screen */
} cli_progress;

void cli_progress_init(cli_progress *p);
/* A ph_progress_fn (ud: the cli_progress). */
void cli_progress_cb(void *ud, ph_progress_phase phase, int64_t done, int64_t total);

#endif
