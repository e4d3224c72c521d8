#include "cli/args.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int arg_int(const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "pinhole: %s: '%s' is not a whole number from %ld to %ld\n", flag, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int arg_float(const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "pinhole: %s: '%s' is not a number from %g to %g\n", flag, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int arg_u64(const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-') {
        fprintf(stderr, "pinhole: %s: '%s' is not a non-negative whole number\n", flag, s);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

const char *arg_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "pinhole: %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int arg_next(const char *cmd, int argc, char **argv, const char *shortopts, const struct option *longopts,
             arg_state *state, const char **flag, const char **value) {
    static char name[80];
    if (!state->started) {
        optind = 0; /* a fresh scan (glibc) */
        state->started = 1;
    }
    char opts[128];
    snprintf(opts, sizeof opts, ":%s", shortopts); /* ':' first: a missing value returns ':' */
    opterr = 0;
    int idx = -1;
    const int c = getopt_long(argc, argv, opts, longopts, &idx);
    *value = optarg;
    if (idx >= 0) snprintf(name, sizeof name, "--%s", longopts[idx].name);
    else if (c > 0 && c != '?' && c != ':') snprintf(name, sizeof name, "-%c", c);
    else {
        const char *a = argv[optind - 1]; /* the token at fault: --name[=...], or -x */
        if (!strncmp(a, "--", 2) || !optopt || optopt >= 256)
            snprintf(name, sizeof name, "%.*s", (int)strcspn(a, "="), a);
        else snprintf(name, sizeof name, "-%c", optopt);
    }
    *flag = name;
    if (c == '?') {
        fprintf(stderr, "pinhole %s: unknown option '%s' (see pinhole %s --help)\n", cmd, name, cmd);
        return -2;
    }
    if (c == ':') {
        fprintf(stderr, "pinhole %s: %s needs a value\n", cmd, name);
        return -2;
    }
    return c;
}

int arg_rest(void) { return optind; }

/* Stores v into o's destination (its kind's conversion and range). */
static int arg_store(const arg_opt *o, const char *flag, const char *v) {
    long l;
    switch (o->kind) {
    case ARG_SET: *(bool *)o->dst = true; return 0;
    case ARG_STR: *(const char **)o->dst = v; return 0;
    case ARG_U64: return arg_u64(flag, v, o->dst);
    case ARG_F64: return arg_float(flag, v, o->lo, o->hi, o->dst);
    case ARG_INT:
    case ARG_I32:
    case ARG_MIB:
    case ARG_MIB_U64:
        if (arg_int(flag, v, (long)o->lo, (long)o->hi, &l)) return -1;
        if (o->kind == ARG_INT) *(int *)o->dst = (int)l;
        else if (o->kind == ARG_I32) *(int32_t *)o->dst = (int32_t)l;
        else if (o->kind == ARG_MIB) *(size_t *)o->dst = (size_t)l << 20;
        else *(uint64_t *)o->dst = (uint64_t)l << 20;
        return 0;
    case ARG_CALL:
    case ARG_CALL_FLAG: break;
    }
    return -1;
}

int arg_parse(const char *cmd, int argc, char **argv, const arg_opt *opts, size_t n,
              int (*call)(void *ud, const arg_opt *o, const char *flag, const char *v), void *ud) {
    enum { HELP = 0x10000 };
    struct option *lo = calloc(n + 2, sizeof *lo);
    char shorts[2 * 64 + 2] = "h";
    size_t ns = 1;
    if (!lo) {
        fprintf(stderr, "pinhole %s: out of memory\n", cmd);
        return -1;
    }
    for (size_t k = 0; k < n; k++) {
        const int arg = opts[k].kind == ARG_SET || opts[k].kind == ARG_CALL_FLAG ? no_argument : required_argument;
        lo[k] = (struct option){opts[k].name, arg, NULL, 0x100 + (int)k};
        if (opts[k].short_name && ns + 2 < sizeof shorts) {
            shorts[ns++] = opts[k].short_name;
            if (arg == required_argument) shorts[ns++] = ':';
        }
    }
    shorts[ns] = '\0';
    lo[n] = (struct option){"help", no_argument, NULL, HELP};
    arg_state st = {0};
    const char *flag, *v;
    int rc = 0;
    for (int c; rc == 0 && (c = arg_next(cmd, argc, argv, shorts, lo, &st, &flag, &v)) != -1;) {
        const arg_opt *o = NULL;
        if (c == -2) rc = -1;
        else if (c == 'h' || c == HELP) rc = 1;
        else if (c >= 0x100) o = &opts[c - 0x100];
        else
            for (size_t k = 0; k < n && !o; k++)
                if (opts[k].short_name == c) o = &opts[k];
        if (o) rc = o->kind >= ARG_CALL ? call(ud, o, flag, v) : arg_store(o, flag, v);
    }
    if (rc == 0 && arg_rest() < argc) {
        fprintf(stderr, "pinhole %s: unexpected argument '%s' (see pinhole %s --help)\n", cmd, argv[arg_rest()], cmd);
        rc = -1;
    }
    free(lo);
    return rc;
}

size_t arg_engine_opts(arg_opt out[ARG_ENGINE_N], ph_engine_params *ep) {
    const arg_opt t[ARG_ENGINE_N] = {
        {"ctx-size", 'c', ARG_I32, &ep->n_ctx, 16, 1 << 22},
        {"threads", 't', ARG_INT, &ep->n_threads, 1, 1024},
        {"image-min-tokens", 0, ARG_INT, &ep->picture_min_tokens, 1, 65536},
        {"image-max-tokens", 0, ARG_INT, &ep->picture_max_tokens, 1, 65536},
    };
    memcpy(out, t, sizeof t);
    return ARG_ENGINE_N;
}

int arg_engine(const char *flag, const char *v, ph_engine_params *ep) {
    arg_opt t[ARG_ENGINE_N];
    arg_engine_opts(t, ep);
    for (size_t k = 0; k < ARG_ENGINE_N; k++) {
        const bool is_short = flag[0] == '-' && flag[1] == t[k].short_name && !flag[2];
        if (is_short || (!strncmp(flag, "--", 2) && !strcmp(flag + 2, t[k].name)))
            return arg_store(&t[k], flag, v) ? -1 : 1;
    }
    return 0;
}

bool arg_sampler_flag(const char *flag) {
    static const char *const flags[] = {"--temp", "--top-k", "--top-p", "--min-p", "--seed"};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
        if (!strcmp(flag, flags[i])) return true;
    return false;
}

int arg_sampler(const char *flag, const char *v, ph_sampler_params *sp) {
    double d;
    long l;
    if (!strcmp(flag, "--seed")) return arg_u64(flag, v, &sp->seed);
    if (!strcmp(flag, "--top-k")) {
        if (arg_int(flag, v, 0, 1 << 30, &l)) return -1;
        sp->top_k = (int32_t)l;
        return 0;
    }
    if (arg_float(flag, v, 0, !strcmp(flag, "--temp") ? 100 : 1, &d)) return -1;
    if (!strcmp(flag, "--temp")) sp->temperature = (float)d;
    else if (!strcmp(flag, "--top-p")) sp->top_p = (float)d;
    else sp->min_p = (float)d;
    return 0;
}

int arg_sampler_opt(const char *flag, const char *v, ph_sampler_params *sp) {
    if (!arg_sampler_flag(flag)) return 0;
    return arg_sampler(flag, v, sp) ? -1 : 1;
}
