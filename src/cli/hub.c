#include "cli/hub.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/grow.h"

#define HUB_NAME_MAX 96

/* One part of a repository id: OWNER or NAME. */
static bool repo_part_ok(const char *s, size_t n) {
    if (n == 0 || n > HUB_NAME_MAX || s[0] == '.') return false;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '-' && c != '_' && c != '.') return false;
        if (c == '.' && i + 1 < n && s[i + 1] == '.') return false;
    }
    return true;
}

int hub_ref_parse(const char *s, bool loud, hub_ref *out) {
    memset(out, 0, sizeof *out);
    const char *slash = strchr(s, '/'), *colon = strchr(s, ':');
    const char *end = colon ? colon : s + strlen(s);
    bool ok = slash && slash < end && repo_part_ok(s, (size_t)(slash - s)) &&
              repo_part_ok(slash + 1, (size_t)(end - slash - 1));
    if (ok && colon) {
        const char *q = colon + 1;
        ok = *q && strlen(q) <= 128;
        for (; ok && *q; q++) ok = isalnum((unsigned char)*q) || *q == '-' || *q == '_' || *q == '.';
    }
    if (!ok) {
        if (loud)
            fprintf(stderr,
                    "pinhole: '%s' is not a model reference: give OWNER/NAME or OWNER/NAME:QUANT "
                    "(letters, digits, '-', '_' and '.'; e.g. Qwen/Qwen3-VL-2B-Instruct-GGUF:Q4_K_M)\n",
                    s);
        return -1;
    }
    out->repo = strndup(s, (size_t)(end - s));
    out->quant = colon ? strdup(colon + 1) : NULL;
    if (!out->repo || (colon && !out->quant)) {
        hub_ref_free(out);
        fprintf(stderr, "pinhole: out of memory\n");
        return -1;
    }
    return 0;
}

void hub_ref_free(hub_ref *r) {
    free(r->repo);
    free(r->quant);
    memset(r, 0, sizeof *r);
}

char *hub_repo_dir(const char *repo) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    const char *base = xdg && xdg[0] == '/' ? xdg : home && *home ? home : NULL;
    if (!base) {
        fprintf(stderr, "pinhole: neither XDG_CACHE_HOME nor HOME is set: no folder for pulled models\n");
        return NULL;
    }
    const char *mid = base == xdg ? "" : "/.cache";
    size_t n = strlen(base) + strlen(mid) + strlen("/pinhole/models/") + strlen(repo) + 1;
    char *dir = malloc(n);
    if (!dir) fprintf(stderr, "pinhole: out of memory\n");
    else snprintf(dir, n, "%s%s/pinhole/models/%s", base, mid, repo);
    return dir;
}

/* ---- which files make the pair ---------------------------------------- */

static bool ends_with_ci(const char *s, const char *tail) {
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && !strcasecmp(s + n - t, tail);
}

static bool is_gguf(const char *name) {
    return ends_with_ci(name, ".gguf") && strlen(name) > 5 && !strchr(name, '/');
}

static bool is_mmproj(const char *name) {
    for (const char *p = name; *p; p++)
        if (!strncasecmp(p, "mmproj", 6)) return true;
    return false;
}

/* The part count of a split file's name (…-00001-of-00003.gguf), 0 when
 * the name is not one; *first says whether it is the first part. */
static int split_parts(const char *name, bool *first) {
    size_t n = strlen(name);
    const char *tail = "-00000-of-00000.gguf";
    size_t t = strlen(tail);
    if (n <= t) return 0;
    const char *s = name + n - t;
    for (size_t i = 0; i < t; i++) {
        if (tail[i] == '0' ? !isdigit((unsigned char)s[i]) : tolower((unsigned char)s[i]) != tail[i]) return 0;
    }
    *first = !strncmp(s + 1, "00001", 5);
    return atoi(s + 10);
}

static bool word_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* Whether quant is in the file name (its .gguf cut off) as a whole word:
 * after its start or '-', '.', '_' or ' ', and before its end or a
 * character that is not a letter, digit or '_' ("Q4_K" is not in
 * "Q4_K_M", "F16" not in "BF16"); or quant is the whole file name. */
static bool quant_in_name(const char *name, const char *quant) {
    if (!strcasecmp(name, quant)) return true;
    size_t n = strlen(name) - 5, q = strlen(quant);
    for (size_t i = 0; i + q <= n; i++) {
        if (strncasecmp(name + i, quant, q)) continue;
        bool before = i == 0 || strchr("-._ ", name[i - 1]);
        bool after = i + q == n || !word_char(name[i + q]);
        if (before && after) return true;
    }
    return false;
}

/* The quantization a choice is named by: what follows the last '-' or '.'
 * of the name without .gguf and its split suffix, when that picks this
 * file alone among the candidates; else the whole file name. */
static void choice_label(const hub_name *files, const int *cand, size_t n_cand, int k, char *out, size_t cap) {
    const char *name = files[k].name;
    bool first;
    size_t len = strlen(name) - 5;
    if (split_parts(name, &first)) len -= strlen("-00000-of-00000");
    size_t start = len;
    while (start > 0 && name[start - 1] != '-' && name[start - 1] != '.') start--;
    snprintf(out, cap, "%.*s", (int)(len - start), name + start);
    size_t hits = 0;
    for (size_t i = 0; i < n_cand; i++)
        if (quant_in_name(files[cand[i]].name, out)) hits++;
    if (start == 0 || start == len || hits != 1) snprintf(out, cap, "%s", name);
}

void hub_size_text(char *out, size_t cap, double b) {
    if (b >= (double)(1ull << 30)) snprintf(out, cap, "%.2f GiB", b / (double)(1ull << 30));
    else if (b >= (double)(1ull << 20)) snprintf(out, cap, "%.1f MiB", b / (double)(1ull << 20));
    else snprintf(out, cap, "%.0f KiB", b / 1024.0);
}

/* Lists the candidates as the options that pick them: for the hub (dir
 * NULL) `pinhole pull REPO:QUANT` or `--mmproj-quant QUANT` (vision: the
 * candidates are mmproj files), for the pulled files of dir
 * `-m REPO:QUANT` or `--mmproj DIR/FILE`. */
static void list_choices(const hub_ref *ref, const hub_name *files, const int *cand, size_t n_cand, bool vision,
                         const char *dir) {
    for (size_t i = 0; i < n_cand; i++) {
        char label[512];
        choice_label(files, cand, n_cand, cand[i], label, sizeof label);
        if (vision && dir) fprintf(stderr, "  --mmproj %s/%s", dir, files[cand[i]].name);
        else if (vision) fprintf(stderr, "  pinhole pull %s --mmproj-quant %s", ref->repo, label);
        else fprintf(stderr, "  %s %s:%s", dir ? "-m" : "pinhole pull", ref->repo, label);
        fprintf(stderr, "    (%s", files[cand[i]].name);
        bool first;
        int parts = split_parts(files[cand[i]].name, &first);
        if (parts) fprintf(stderr, ", 1 of %d parts", parts);
        if (files[cand[i]].size) {
            char size[32];
            hub_size_text(size, sizeof size, (double)files[cand[i]].size);
            fprintf(stderr, ", %s", size);
        }
        fputs(")\n", stderr);
    }
}

/* Picks one of cand (of the model or the vision files) by quant, else by
 * preferred, else the only one. Returns the index into files, -1 after a
 * refusal on stderr, or -2 when there is no candidate (not printed). */
static int choose_one(const hub_ref *ref, const hub_name *files, const int *cand, size_t n_cand, bool vision,
                      const char *quant, const char *preferred, const char *dir) {
    const char *what = vision ? "vision (mmproj) file" : "model", *where = dir ? "in the cache" : "on the hub";
    if (n_cand == 0) return -2;
    int hit = -1, n_hit = 0;
    const char *want = quant ? quant : preferred;
    for (size_t i = 0; want && i < n_cand; i++)
        if (quant_in_name(files[cand[i]].name, want)) {
            hit = cand[i];
            n_hit++;
        }
    if (n_hit == 0 && !quant && n_cand == 1) {
        hit = cand[0];
        n_hit = 1;
    }
    if (n_hit == 1) {
        bool first;
        int parts = split_parts(files[hit].name, &first);
        if (!parts) return hit;
        fprintf(stderr,
                "pinhole: %s %s comes split in %d files (%s, ...): pinhole loads a model from one file; "
                "merge the parts with llama.cpp's gguf-split --merge and give the file to -m\n",
                ref->repo, what, parts, files[hit].name);
        return -1;
    }
    if (n_hit > 1)
        fprintf(stderr, "pinhole: more than one %s of %s %s is %s; choose one:\n", what, ref->repo, where, want);
    else if (quant && dir && !vision)
        fprintf(stderr, "pinhole: no %s of %s %s is %s (fetch it with: pinhole pull %s:%s); the pulled ones:\n", what,
                ref->repo, where, quant, ref->repo, quant);
    else if (quant) fprintf(stderr, "pinhole: no %s of %s %s is %s; choose one of:\n", what, ref->repo, where, quant);
    else
        fprintf(stderr, "pinhole: %s has %zu %ss %s%s%s; choose one:\n", ref->repo, n_cand, what, where,
                preferred ? " and none is " : "", preferred ? preferred : "");
    list_choices(ref, files, cand, n_cand, vision, dir);
    return -1;
}

int hub_choose(const hub_ref *ref, const hub_name *files, size_t n, const char *mm_quant, const char *dir, int *llm,
               int *mm) {
    const char *where = dir ? "in the cache" : "on the hub";
    int *cand = malloc((n ? n : 1) * sizeof *cand), *mm_cand = malloc((n ? n : 1) * sizeof *mm_cand);
    size_t n_cand = 0, n_mm = 0;
    int rc = -1;
    if (!cand || !mm_cand) {
        fprintf(stderr, "pinhole: out of memory\n");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        bool first = true;
        if (!is_gguf(files[i].name) || (split_parts(files[i].name, &first) && !first)) continue;
        if (is_mmproj(files[i].name)) mm_cand[n_mm++] = (int)i;
        else cand[n_cand++] = (int)i;
    }
    *llm = choose_one(ref, files, cand, n_cand, false, ref->quant, "Q4_K_M", dir);
    if (*llm == -2) fprintf(stderr, "pinhole: %s has no GGUF model %s\n", ref->repo, where);
    if (*llm < 0) goto done;
    *mm = choose_one(ref, files, mm_cand, n_mm, true, mm_quant, "F16", dir);
    if (*mm == -2 && mm_quant) {
        fprintf(stderr, "pinhole: %s has no vision (mmproj) file %s\n", ref->repo, where);
    } else if (*mm == -2) {
        *mm = -1; /* a model without pictures */
        rc = 0;
    } else {
        rc = *mm >= 0 ? 0 : -1;
    }
done:
    free(cand);
    free(mm_cand);
    return rc;
}

/* ---- the pulled pair, for -m ------------------------------------------- */

/* The .gguf files in dir (a pulled repository's folder): names and sizes
 * into *files (names malloc'd). Returns the count, or -1 (errno set). */
static long list_local(const char *dir, hub_name **files) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    size_t n = 0, cap = 0;
    hub_name *v = NULL;
    struct dirent *de;
    int err = 0;
    while (!err && (de = readdir(d))) {
        struct stat st;
        if (de->d_name[0] == '.' || !is_gguf(de->d_name) || fstatat(dirfd(d), de->d_name, &st, 0) ||
            !S_ISREG(st.st_mode))
            continue;
        hub_name *g = grow_array(v, &cap, n, sizeof *v, 8);
        char *name = g ? strdup(de->d_name) : NULL;
        if (g) v = g;
        if (!name) err = ENOMEM;
        else v[n++] = (hub_name){name, (uint64_t)st.st_size};
    }
    closedir(d);
    *files = v;
    if (err) {
        for (size_t i = 0; i < n; i++) free((char *)v[i].name);
        free(v);
        *files = NULL;
        errno = err;
        return -1;
    }
    return (long)n;
}

static char *join_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

int hub_find_local(const char *ref, char **llm, char **mmproj) {
    *llm = *mmproj = NULL;
    struct stat st;
    hub_ref r;
    if (!stat(ref, &st) || ends_with_ci(ref, ".gguf") || hub_ref_parse(ref, false, &r)) return 1;
    char *dir = hub_repo_dir(r.repo);
    hub_name *files = NULL;
    long n = dir ? list_local(dir, &files) : -1;
    int rc = -1, li = -1, mi = -1;
    if (dir && n < 0 && errno != ENOENT) fprintf(stderr, "pinhole: %s: %s\n", dir, strerror(errno));
    else if (dir && n <= 0)
        fprintf(stderr,
                "pinhole: -m %s: no such file, and no model of that name was pulled (%s holds none); "
                "fetch it with: pinhole pull %s\n",
                ref, dir, ref);
    else if (dir && !hub_choose(&r, files, (size_t)n, NULL, dir, &li, &mi)) {
        *llm = join_path(dir, files[li].name);
        *mmproj = mi >= 0 ? join_path(dir, files[mi].name) : NULL;
        if (*llm && (mi < 0 || *mmproj)) rc = 0;
        else {
            fprintf(stderr, "pinhole: out of memory\n");
            free(*llm);
            free(*mmproj);
            *llm = *mmproj = NULL;
        }
    }
    for (long i = 0; i < n; i++) free((char *)files[i].name);
    free(files);
    free(dir);
    hub_ref_free(&r);
    return rc;
}
