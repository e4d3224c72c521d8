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

int arg_engine(const char *flag, const char *v, ph_engine_params *ep) {
    long l;
    if (!strcmp(flag, "-c") || !strcmp(flag, "--ctx-size")) {
        if (arg_int(flag, v, 16, 1 << 22, &l)) return -1;
        ep->n_ctx = (int32_t)l;
    } else if (!strcmp(flag, "-t") || !strcmp(flag, "--threads")) {
        if (arg_int(flag, v, 1, 1024, &l)) return -1;
        ep->n_threads = (int)l;
    } else if (!strcmp(flag, "--image-min-tokens")) {
        if (arg_int(flag, v, 1, 65536, &l)) return -1;
        ep->picture_min_tokens = (int)l;
    } else if (!strcmp(flag, "--image-max-tokens")) {
        if (arg_int(flag, v, 1, 65536, &l)) return -1;
        ep->picture_max_tokens = (int)l;
    } else {
        return 0;
    }
    return 1;
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
