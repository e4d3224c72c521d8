/* Which files a command runs: the LLM and its vision file (mmproj), from
 * -m (an LLM GGUF file, a folder holding one LLM file and its vision file,
 * or OWNER/NAME[:QUANT], a model fetched by pinhole pull) and --mmproj /
 * --no-mmproj. Without --mmproj, the vision file is
 * looked for beside the LLM: a *mmproj*.gguf in its folder (any vision
 * file of a -m folder) that pairs with it (ph_file_pair); one that pairs is
 * used, several are refused (the user names one), none means text only. */
#ifndef PH_CLI_MODEL_FIND_H
#define PH_CLI_MODEL_FIND_H

#include <stdbool.h>
#include <stdio.h>

#include "pinhole.h"

typedef struct model_args {
    const char *model;  /* -m: a file, a folder or a pulled model's reference */
    const char *mmproj; /* --mmproj, or NULL */
    bool no_mmproj;     /* --no-mmproj */
} model_args;

typedef struct model_files {
    char model[4096];    /* the LLM file */
    char mmproj[4096];   /* its vision file, "" for text only */
    const char *source;  /* where the vision file came from when not given ("found beside the
                            model", "found in the folder", "pulled with the model"); NULL when given */
    bool pulled;         /* -m named a model fetched by pinhole pull (cli/hub.h) */
    char text_only[512]; /* without one: why ("--no-mmproj", "no vision file beside it", ...) */
} model_files;

/* Resolves a's files; cmd names the command in messages ("pinhole serve").
 * want_vision: look for a vision file when --mmproj is not given. 0, or
 * -1 after printing why (an ambiguous choice lists the candidates). */
int model_find(const model_args *a, bool want_vision, const char *cmd, model_files *out);

/* The model's name, as /v1/models lists it and the start lines say it:
 * the LLM file's name without folder and .gguf, or for a pulled model
 * NAME[:QUANT] of its reference. */
void model_name(const model_args *a, const model_files *f, char *out, size_t cap);

/* The one line saying which files run and whether pictures are on:
 * "pinhole: model M, vision V (found beside the model; pictures on)".
 * note (may be NULL) goes in the brackets after the pictures. */
void model_files_say(const model_files *f, bool pictures_on, const char *note);

/* The line after it, saying how the engine runs: "pinhole: NAME (ARCH),
 * context N (why), pictures up to R tokens, T threads (physical cores),
 * ISA". n_threads: what -t gave (0: the default). */
void model_say_setup(const ph_engine *e, const char *name, int n_threads);

/* Help lines: opt padded to col, then the description wrapped at 100
 * columns (continuation lines indented to col). */
void help_line(FILE *out, int col, const char *opt, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The help lines of the options every model command shares, with the
 * defaults of this machine: -m, --mmproj, --no-mmproj, -t, and with
 * HELP_CTX -c, with HELP_BUDGET --image-min-tokens / --image-max-tokens;
 * HELP_ON_IMAGE: the vision file is looked for only with --image. */
enum { HELP_CTX = 1, HELP_BUDGET = 2, HELP_ON_IMAGE = 4 };
void model_help(FILE *out, int col, unsigned what);

#endif
