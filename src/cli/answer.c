#include "cli/answer.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int arg_reasoning(const char *flag, const char *s, reasoning_mode *out) {
    static const char *const names[] = {"auto", "show", "hide"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, names[i])) {
            *out = (reasoning_mode)i;
            return 0;
        }
    fprintf(stderr, "pinhole: %s: '%s' is not auto, show or hide\n", flag, s);
    return -1;
}

int arg_thinking(const char *flag, const char *s, int *out) {
    if (!strcmp(s, "auto")) *out = -1;
    else if (!strcmp(s, "on")) *out = 1;
    else if (!strcmp(s, "off")) *out = 0;
    else {
        fprintf(stderr, "pinhole: %s: '%s' is not auto, on or off\n", flag, s);
        return -1;
    }
    return 0;
}

int answer_begin(answer *a, reasoning_mode mode) {
    memset(a, 0, sizeof *a);
    a->tty = isatty(STDOUT_FILENO);
    a->show_reasoning = mode == REASONING_SHOW || (mode == REASONING_AUTO && a->tty);
    a->line_start = true;
    a->content = open_memstream(&a->text, &a->len);
    a->reasoning = open_memstream(&a->reason, &a->reason_len);
    return a->content && a->reasoning ? 0 : -1;
}

static void show(answer *a, const char *s, size_t n) {
    if (!n) return;
    fwrite(s, 1, n, stdout);
    a->line_start = s[n - 1] == '\n';
    a->shown = true;
}

/* Leaves the reasoning on stdout: the dim ends, or the </think> line. */
static void close_reasoning(answer *a) {
    if (!a->in_reasoning) return;
    a->in_reasoning = false;
    if (a->tty) fputs("\033[0m", stdout);
    if (!a->line_start) show(a, "\n", 1);
    if (!a->tty) show(a, "</think>\n", 9);
}

int answer_event(void *ud, const ph_gen_event *ev) {
    answer *a = ud;
    if (!ev->len) return 0;
    if (ev->kind == PH_DELTA_REASONING) {
        fwrite(ev->text, 1, ev->len, a->reasoning);
        if (!a->show_reasoning) return 0;
        if (!a->in_reasoning) {
            if (!a->line_start) show(a, "\n", 1);
            if (a->tty) fputs("\033[2m", stdout);
            else show(a, "<think>\n", 8);
            a->in_reasoning = true;
        }
    } else {
        close_reasoning(a);
        fwrite(ev->text, 1, ev->len, a->content);
    }
    show(a, ev->text, ev->len);
    fflush(stdout);
    return 0;
}

int answer_end(answer *a, bool complete) {
    close_reasoning(a);
    if (!a->line_start || (complete && !a->shown)) show(a, "\n", 1); /* an empty answer is an empty line */
    fflush(stdout);
    int rc = 0;
    if (a->content && fclose(a->content)) rc = -1;
    if (a->reasoning && fclose(a->reasoning)) rc = -1;
    a->content = a->reasoning = NULL;
    return rc;
}

void answer_free(answer *a) {
    if (a->content) fclose(a->content);
    if (a->reasoning) fclose(a->reasoning);
    free(a->text);
    free(a->reason);
    memset(a, 0, sizeof *a);
}

void turn_summary(FILE *out, const ph_turn_report *r) {
    fprintf(out, "[%d tokens, %.1f tok/s, first token after %.2f s%s; prompt %d rows: %d reused", r->n_generated,
            r->decode_s > 0 ? r->n_generated / r->decode_s : 0.0, r->ttft_s,
            r->finish == PH_FINISH_LENGTH ? ", cut at the token limit" : "", r->n_prompt, r->n_reused);
    if (r->n_from_ram) fprintf(out, " (%d from RAM)", r->n_from_ram);
    fprintf(out, ", %d prefilled", r->n_prefilled);
    if (r->n_pictures)
        fprintf(out, "; pictures: %d encoded, %d from cache, %d reused", r->pics_encoded, r->pics_from_cache,
                r->pics_from_kv);
    fputs("]\n", out);
}
