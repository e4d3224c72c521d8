/* Small helpers for the command-line front ends: strict number parsing and
 * flag matching. */
#ifndef PH_CLI_ARGS_H
#define PH_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "pinhole.h"

/* Each returns 0, or prints "pinhole: FLAG: ..." and returns -1. */
int arg_int(const char *flag, const char *s, long lo, long hi, long *out);
int arg_float(const char *flag, const char *s, double lo, double hi, double *out);
int arg_u64(const char *flag, const char *s, uint64_t *out);
/* The value after a flag: argv[*i + 1], advancing *i; NULL (with a message)
 * when missing. */
const char *arg_value(int argc, char **argv, int *i);
/* The engine's flags that chat and serve share (-c, -t, --image-min-tokens,
 * --image-max-tokens) into ep: 1 when flag is one of them, 0 when not, -1
 * (with a message) when its value is bad. */
int arg_engine(const char *flag, const char *v, ph_engine_params *ep);
/* The sampling flags of run and chat (--temp, --top-k, --top-p, --min-p,
 * --seed): whether flag is one, and its value into sp (0, or -1 with a
 * message when bad). */
bool arg_sampler_flag(const char *flag);
int arg_sampler(const char *flag, const char *v, ph_sampler_params *sp);

int cmd_info(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_pull(int argc, char **argv);

#endif
