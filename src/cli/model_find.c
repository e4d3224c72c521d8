#include "cli/model_find.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/log.h"
#include "cli/hub.h"
#include "pinhole.h"

/* Files of one folder. */
typedef struct file_list {
    char **v;
    size_t n;
} file_list;

static void list_free(file_list *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int list_add(file_list *l, const char *path) {
    char **v = realloc(l->v, (l->n + 1) * sizeof *v);
    if (!v) return -1;
    l->v = v;
    if (!(v[l->n] = strdup(path))) return -1;
    l->n++;
    return 0;
}

static void join(char *out, size_t cap, const char *dir, const char *name) {
    const size_t n = strlen(dir);
    snprintf(out, cap, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name);
}

static bool ends_gguf(const char *name) {
    const size_t n = strlen(name);
    return n > 5 && !strcasecmp(name + n - 5, ".gguf");
}

static int is_gguf(const struct dirent *d) { return ends_gguf(d->d_name); }

static int is_mmproj_name(const struct dirent *d) { return ends_gguf(d->d_name) && strcasestr(d->d_name, "mmproj"); }

/* The regular files (links followed) of dir that filter keeps, by name. */
static int list_dir(const char *dir, int (*filter)(const struct dirent *), file_list *out, const char *cmd) {
    struct dirent **names;
    const int n = scandir(dir, &names, filter, alphasort);
    if (n < 0) {
        fprintf(stderr, "%s: %s: %s\n", cmd, dir, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        join(path, sizeof path, dir, names[i]->d_name);
        if (rc == 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode) && list_add(out, path)) {
            fprintf(stderr, "%s: out of memory\n", cmd);
            rc = -1;
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

static void print_list(const file_list *l) {
    for (size_t i = 0; i < l->n; i++) fprintf(stderr, "  %s\n", l->v[i]);
}

/* -m names neither a file nor a folder: a model fetched by pinhole pull
 * (OWNER/NAME[:QUANT], cli/hub.h), whose pair the pull chose; its vision
 * file is used unless --mmproj or --no-mmproj says otherwise. 0, or -1
 * after saying why. */
static int find_pulled(const model_args *a, int stat_errno, const char *cmd, model_files *out) {
    char *llm, *mm;
    const int rc = hub_find_local(a->model, &llm, &mm);
    if (rc == 1) fprintf(stderr, "%s: -m %s: %s\n", cmd, a->model, strerror(stat_errno));
    if (rc) return -1;
    snprintf(out->model, sizeof out->model, "%s", llm);
    out->pulled = true;
    if (!a->mmproj && !a->no_mmproj && mm) {
        snprintf(out->mmproj, sizeof out->mmproj, "%s", mm);
        out->source = "pulled with the model";
    } else if (!a->mmproj && !a->no_mmproj) {
        snprintf(out->text_only, sizeof out->text_only, "the pulled repository has no vision file");
    }
    free(llm);
    free(mm);
    return 0;
}

/* The LLM file of folder dir, and its vision files in mmproj: one LLM file
 * (refused with the list when there are several or none). */
static int pick_llm(const char *dir, const char *cmd, model_files *out, file_list *mmproj) {
    file_list all = {0}, llm = {0}, other = {0};
    int rc = list_dir(dir, is_gguf, &all, cmd);
    for (size_t i = 0; rc == 0 && i < all.n; i++) {
        ph_err err = {0};
        const ph_file_kind k = ph_file_probe(all.v[i], &err);
        char line[4700];
        snprintf(line, sizeof line, "%s (%s)", all.v[i], err.msg);
        file_list *to = &other;
        if (k == PH_FILE_LLM) to = &llm;
        else if (k == PH_FILE_MMPROJ) to = mmproj;
        if (list_add(to, k == PH_FILE_OTHER ? line : all.v[i])) {
            fprintf(stderr, "%s: out of memory\n", cmd);
            rc = -1;
        }
    }
    if (rc == 0 && llm.n != 1) {
        if (llm.n == 0) {
            fprintf(stderr, "%s: %s holds no LLM GGUF file that pinhole runs%s\n", cmd, dir,
                    all.n ? "; its GGUF files:" : " (no .gguf file at all)");
            print_list(mmproj);
            print_list(&other);
        } else {
            fprintf(stderr, "%s: %s holds %zu LLM files:\n", cmd, dir, llm.n);
            print_list(&llm);
            fprintf(stderr, "pass the one to run with -m FILE\n");
        }
        rc = -1;
    }
    if (rc == 0) snprintf(out->model, sizeof out->model, "%s", llm.v[0]);
    list_free(&all);
    list_free(&llm);
    list_free(&other);
    return rc;
}

/* The one of cands that pairs with out->model, or text only (saying why
 * each is not used); several refused with their list. */
static int pick_vision(const file_list *cands, const char *where, const char *found, const char *cmd,
                       model_files *out) {
    file_list pairs = {0};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < cands->n; i++) {
        ph_err err = {0};
        if (ph_file_pair(out->model, cands->v[i], &err) == 0) {
            if (list_add(&pairs, cands->v[i])) {
                fprintf(stderr, "%s: out of memory\n", cmd);
                rc = -1;
            }
        } else {
            const bool named = !strncmp(err.msg, cands->v[i], strlen(cands->v[i]));
            PH_INFO("%s%s%s (not used)", named ? "" : cands->v[i], named ? "" : ": ", err.msg);
        }
    }
    if (rc == 0 && pairs.n > 1) {
        fprintf(stderr, "%s: %zu vision files pair with %s:\n", cmd, pairs.n, out->model);
        print_list(&pairs);
        fprintf(stderr, "pass the one to use with --mmproj FILE (or --no-mmproj for text only)\n");
        rc = -1;
    } else if (rc == 0 && pairs.n == 1) {
        snprintf(out->mmproj, sizeof out->mmproj, "%s", pairs.v[0]);
        out->source = found;
    } else if (rc == 0 && cands->n) {
        snprintf(out->text_only, sizeof out->text_only, "none of the vision files %.400s pairs with it", where);
    } else if (rc == 0) {
        snprintf(out->text_only, sizeof out->text_only, "no vision file %.400s", where);
    }
    list_free(&pairs);
    return rc;
}

int model_find(const model_args *a, bool want_vision, const char *cmd, model_files *out) {
    memset(out, 0, sizeof *out);
    if (a->mmproj && a->no_mmproj) {
        fprintf(stderr, "%s: give --mmproj FILE or --no-mmproj, not both\n", cmd);
        return -1;
    }
    const char *path = a->model;
    struct stat st;
    if (stat(path, &st)) {
        if (find_pulled(a, errno, cmd, out)) return -1;
        path = out->model;
    }
    const bool folder = !out->pulled && S_ISDIR(st.st_mode);
    file_list cands = {0};
    int rc = 0;
    if (folder) {
        rc = pick_llm(path, cmd, out, &cands);
    } else if (!out->pulled) {
        snprintf(out->model, sizeof out->model, "%s", path);
    }
    if (rc == 0 && a->mmproj) {
        snprintf(out->mmproj, sizeof out->mmproj, "%s", a->mmproj);
    } else if (rc == 0 && a->no_mmproj) {
        snprintf(out->text_only, sizeof out->text_only, "--no-mmproj");
    } else if (rc == 0 && out->pulled) { /* the pull chose the pair */
    } else if (rc == 0 && !want_vision) {
        snprintf(out->text_only, sizeof out->text_only, "no picture asked for");
    } else if (rc == 0 && folder) { /* the folder's vision files, read by pick_llm */
        char where[4200];
        snprintf(where, sizeof where, "in %s", path);
        rc = pick_vision(&cands, where, "found in the folder", cmd, out);
    } else if (rc == 0) { /* the *mmproj*.gguf files of the LLM's folder */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", out->model);
        char *slash = strrchr(dir, '/');
        if (!slash) snprintf(dir, sizeof dir, ".");
        else if (slash == dir) dir[1] = '\0';
        else *slash = '\0';
        rc = list_dir(dir, is_mmproj_name, &cands, cmd);
        if (rc == 0) rc = pick_vision(&cands, "beside it (*mmproj*.gguf)", "found beside the model", cmd, out);
    }
    list_free(&cands);
    return rc;
}

void model_name(const model_args *a, const model_files *f, char *out, size_t cap) {
    const char *path = f->pulled ? a->model : f->model, *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(out, cap, "%s", base);
    const size_t n = strlen(out);
    if (n > 5 && !strcmp(out + n - 5, ".gguf")) out[n - 5] = '\0';
}

void model_files_say(const model_files *f, bool pictures_on, const char *note) {
    if (f->mmproj[0])
        PH_INFO("model %s, vision %s (%s%s%s%s%s)", f->model, f->mmproj, f->source ? f->source : "",
                f->source ? "; " : "", pictures_on ? "pictures on" : "pictures off", note ? ", " : "",
                note ? note : "");
    else PH_INFO("model %s, no vision file (text only: %s)", f->model, f->text_only[0] ? f->text_only : "none given");
}

void model_say_setup(const ph_engine *e, const char *name, int n_threads) {
    const ph_model_info *mi = ph_engine_model_info(e);
    const ph_ctx_choice *c = ph_engine_ctx(e);
    char pictures[64] = "";
    if (ph_engine_has_vision(e))
        snprintf(pictures, sizeof pictures, ", pictures up to %d tokens", (int)ph_engine_picture_max_tokens(e));
    const int threads = n_threads > 0 ? n_threads : ph_cpu_threads();
    PH_INFO("%s (%s), context %d (%s)%s, %d thread%s (%s), %s", name, mi->arch, (int)c->n_ctx, c->why, pictures,
            threads, threads == 1 ? "" : "s", n_threads > 0 ? "-t" : "physical cores", ph_cpu_isa());
}

void help_line(FILE *out, int col, const char *opt, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    int at = fprintf(out, "  %-*s", col - 2, opt);
    if (at > col) { /* a long option: its text on the next line */
        fprintf(out, "\n%*s", col, "");
        at = col;
    }
    const char *p = text;
    while (*p) {
        const size_t word = strcspn(p, " ");
        if (at > col && at + 1 + (int)word > 100) {
            fprintf(out, "\n%*s", col, "");
            at = col;
        } else if (at > col) {
            fputc(' ', out);
            at++;
        }
        fwrite(p, 1, word, out);
        at += (int)word;
        p += word;
        while (*p == ' ') p++;
    }
    fputc('\n', out);
}

void model_help(FILE *out, int col, unsigned what) {
    help_line(out, col, "-m, --model FILE|DIR",
              "the LLM GGUF file, a folder holding one LLM file and its vision file, or OWNER/NAME[:QUANT]: a "
              "model fetched by pinhole pull (and its mmproj)");
    help_line(out, col, "--mmproj FILE",
              "the vision GGUF file (default: the *mmproj*.gguf beside the LLM, or the vision file in the -m "
              "folder, that pairs with it%s; several that pair are refused; none: text only)",
              what & HELP_ON_IMAGE ? ", looked for only with --image" : "");
    help_line(out, col, "--no-mmproj", "text only: no vision file is looked for");
    help_line(out, col, "-t, --threads N",
              "threads (default: the physical cores this process may use, capped by "
              "its cgroup's CPU quota; here %d)",
              ph_cpu_threads());
    if (what & HELP_CTX) {
        const int64_t avail = ph_mem_available();
        char here[64] = "unknown here: then 4096";
        if (avail >= 0)
            snprintf(here, sizeof here, "here %.1f GiB before loading", (double)avail / (double)(1 << 30));
        help_line(out, col, "-c, --ctx-size N",
                  "context size (default: the model's trained context, capped so that its KV cache takes at most "
                  "half the memory available after loading (%s), at least 4096)",
                  here);
    }
    if (what & HELP_BUDGET) {
        help_line(out, col, "--image-min-tokens N", "least merged tokens per picture (default 8)");
        help_line(out, col, "--image-max-tokens N",
                  "most merged tokens per picture (default 4096); never more than half the context");
    }
}
