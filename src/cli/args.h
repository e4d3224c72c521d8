/* Small helpers for the command-line front ends: strict number parsing and
 * flag matching. */
#ifndef PH_CLI_ARGS_H
#define PH_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pinhole.h"

/* Each returns 0, or prints "pinhole: FLAG: ..." and returns -1. */
int arg_int(const char *flag, const char *s, long lo, long hi, long *out);
int arg_float(const char *flag, const char *s, double lo, double hi, double *out);
int arg_u64(const char *flag, const char *s, uint64_t *out);
/* The value after a flag: argv[*i + 1], advancing *i; NULL (with a message)
 * when missing. */
const char *arg_value(int argc, char **argv, int *i);

/* A command's options as a table (getopt_long's): the next one of argv
 * (from argv[1]; call with *state zeroed first). Returns the option's val,
 * -1 when no option is left (arg_rest: the first operand), or -2 after
 * printing "pinhole CMD: unknown option '--x' (see pinhole CMD --help)" or
 * "pinhole CMD: --x needs a value": an unknown option is named as unknown
 * whatever follows it. *flag: the option as its table names it ("--port",
 * "-m"), for messages and arg_int; *value: its argument or NULL. */
typedef struct arg_state {
    int started;
} arg_state;
struct option;
int arg_next(const char *cmd, int argc, char **argv, const char *shortopts, const struct option *longopts,
             arg_state *state, const char **flag, const char **value);
/* Where the operands start after arg_next returned -1 (getopt_long moves
 * them to the end of argv). */
int arg_rest(void);
/* A typed option table: each option's value goes straight to its
 * destination, checked against [lo, hi] (ARG_CALL: to the caller's
 * handler). */
typedef enum arg_kind {
    ARG_SET,       /* a flag: *(bool *)dst = true */
    ARG_STR,       /* const char ** */
    ARG_INT,       /* int *, a whole number in [lo, hi] */
    ARG_I32,       /* int32_t *, the same */
    ARG_U64,       /* uint64_t *, any non-negative whole number */
    ARG_F64,       /* double *, in [lo, hi] */
    ARG_MIB,       /* size_t *: MiB in [lo, hi], stored in bytes */
    ARG_MIB_U64,   /* uint64_t *: the same */
    ARG_CALL,      /* the handler's */
    ARG_CALL_FLAG, /* the handler's, no value */
} arg_kind;
typedef struct arg_opt {
    const char *name; /* the long name, without "--" */
    char short_name;  /* or 0 */
    arg_kind kind;
    void *dst;
    double lo, hi;
} arg_opt;
/* Parses argv[1..] by opts (n of them; -h and --help are built in: 1 is
 * returned at once). ARG_CALL and ARG_CALL_FLAG options go to call(ud, o,
 * flag, value),
 * which returns 0 or -1 after a message. Operands are refused. 0, 1 for
 * help, or -1 after a message (an unknown option, a missing or bad value). */
int arg_parse(const char *cmd, int argc, char **argv, const arg_opt *opts, size_t n,
              int (*call)(void *ud, const arg_opt *o, const char *flag, const char *v), void *ud);

/* The engine's flags that chat and serve share (-c, -t, --image-min-tokens,
 * --image-max-tokens): their table into ep (arg_engine_opts), or by name
 * (arg_engine): 1 when flag is one of them, 0 when not, -1 (with a message)
 * when its value is bad. */
enum { ARG_ENGINE_N = 4 };
size_t arg_engine_opts(arg_opt out[ARG_ENGINE_N], ph_engine_params *ep);
int arg_engine(const char *flag, const char *v, ph_engine_params *ep);
/* The sampling flags of run and chat (--temp, --top-k, --top-p, --min-p,
 * --seed): whether flag is one, and its value into sp (0, or -1 with a
 * message when bad). arg_sampler_opt: 1 when flag is one (its value
 * taken), 0 when not, -1 when its value is bad. */
bool arg_sampler_flag(const char *flag);
int arg_sampler(const char *flag, const char *v, ph_sampler_params *sp);
int arg_sampler_opt(const char *flag, const char *v, ph_sampler_params *sp);

/* The options of arg_engine and arg_sampler_opt, for a command's
 * arg_next table (their val is ARG_SHARED: the handlers take them by name;
 * -c and -t also as short options, "c:t:"). */
enum { ARG_SHARED = 0x100 };
#define ARG_ENGINE_OPTS                                                                                              \
    {"ctx-size", required_argument, NULL, 'c'}, {"threads", required_argument, NULL, 't'},                           \
        {"image-min-tokens", required_argument, NULL, ARG_SHARED}, {                                                 \
        "image-max-tokens", required_argument, NULL, ARG_SHARED                                                      \
    }
#define ARG_SAMPLER_OPTS                                                                                             \
    {"temp", required_argument, NULL, ARG_SHARED}, {"top-k", required_argument, NULL, ARG_SHARED},                   \
        {"top-p", required_argument, NULL, ARG_SHARED}, {"min-p", required_argument, NULL, ARG_SHARED}, {            \
        "seed", required_argument, NULL, ARG_SHARED                                                                  \
    }

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
