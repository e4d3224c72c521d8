/* Chat formats: a conversation renders to the same tokens as its ChatML
 * text written out, pictures land where they appear, and a thinking
 * model's answer splits into reasoning and content however it is cut. */
#include <stdlib.h>
#include <string.h>

#include "model/llm.h"
#include "chat_format_of.h"
#include "test.h"
#include "text/chat_format.h"
#include "text/output_parser.h"

#define LLM PH_ORACLE_DIR "/models/tiny-f16.gguf"

static bool same_tokens(const ph_model *m, const ph_prompt_item *it, const char *text) {
    ph_tokens t = {0};
    ph_tokenize(m, text, strlen(text), true, &t, NULL);
    bool ok = !it->is_picture && t.n == it->tokens.n && !memcmp(t.ids, it->tokens.ids, t.n * sizeof *t.ids);
    ph_tokens_free(&t);
    return ok;
}

static void test_render(const ph_model *m) {
    chat_fmt f = {.name = "chatml"};
    ph_picture *fake = (ph_picture *)(uintptr_t)0x1000; /* only its address is used */
    ph_chat_part sys[] = {{.text = "Be brief.", .len = 9}};
    ph_chat_part user[] = {{.text = "Look: ", .len = 6}, {.picture = fake}, {.text = "What is it?", .len = 11}};
    ph_chat_part asst[] = {{.text = "<think>\nhm</think>\n\nA cat.", .len = 26}};
    ph_chat_part user2[] = {{.text = "Sure?", .len = 5}};
    ph_chat_msg msgs[] = {{.role = PH_ROLE_SYSTEM, .parts = sys, .n_parts = 1},
                          {.role = PH_ROLE_USER, .parts = user, .n_parts = 3},
                          {.role = PH_ROLE_ASSISTANT, .parts = asst, .n_parts = 1},
                          {.role = PH_ROLE_USER, .parts = user2, .n_parts = 1}};
    ph_prompt p;
    ph_picture **pics;
    ph_err err = {0};
    CHECK(chat_format_render(&f, m->vocab, msgs, 4, NULL, 0, NULL, &p, &pics, &err) == 0);
    CHECKF(p.n == 3 && p.n_pictures == 1, "%zu items, %d pictures", p.n, p.n_pictures);
    if (p.n == 3) {
        CHECK(same_tokens(m, &p.items[0],
                          "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nLook: "
                          "<|vision_start|>"));
        CHECK(p.items[1].is_picture && p.items[1].picture == 0 && pics[0] == fake);
        /* the assistant turn goes back without its reasoning */
        CHECK(same_tokens(m, &p.items[2],
                          "<|vision_end|>What is it?<|im_end|>\n<|im_start|>assistant\nA cat."
                          "<|im_end|>\n<|im_start|>user\nSure?<|im_end|>\n<|im_start|>assistant\n"));
    }
    ph_prompt_free(&p);
    free(pics);
    /* the thinking variant opens the answer with <think> */
    chat_fmt think = {.name = "chatml-think", .think = true};
    CHECK(chat_format_render(&think, m->vocab, &msgs[3], 1, NULL, 0, NULL, &p, &pics, &err) == 0);
    CHECK(p.n == 1 &&
          same_tokens(m, &p.items[0], "<|im_start|>user\nSure?<|im_end|>\n<|im_start|>assistant\n<think>\n"));
    ph_prompt_free(&p);
    free(pics);
    /* refusals */
    CHECK(chat_format_render(&f, m->vocab, msgs, 0, NULL, 0, NULL, &p, &pics, &err) == -1 &&
          err.code == PH_ERR_INPUT);
    ph_chat_part bad[] = {{.picture = fake}};
    ph_chat_msg badm = {.role = PH_ROLE_ASSISTANT, .parts = bad, .n_parts = 1};
    CHECK(chat_format_render(&f, m->vocab, &badm, 1, NULL, 0, NULL, &p, &pics, &err) == -1 &&
          err.code == PH_ERR_INPUT);
    /* no system message unless one is given; no chat template -> plain ChatML */
    CHECK(!format_of(m).think);
}

typedef struct split_out {
    char text[2][256];
    size_t n[2];
} split_out;

static void on_piece(void *ud, out_kind kind, int32_t call, const char *t, size_t n) {
    split_out *o = ud;
    (void)call;
    memcpy(o->text[kind] + o->n[kind], t, n);
    o->n[kind] += n;
    o->text[kind][o->n[kind]] = '\0';
}

/* Feeds s in pieces of `step` bytes and checks the split. */
static void split_case(bool think, const char *s, const char *reasoning, const char *content) {
    for (size_t step = 1; step <= strlen(s); step++) {
        chat_fmt f = {.think = think};
        out_parser sp;
        out_parser_init(&sp, &(out_parser_cfg){.fmt = &f, .in_reasoning = think}, NULL);
        split_out o = {0};
        for (size_t i = 0; i < strlen(s); i += step) {
            size_t n = strlen(s) - i < step ? strlen(s) - i : step;
            out_parser_feed(&sp, s + i, n, on_piece, &o);
        }
        out_parser_finish(&sp, on_piece, &o);
        out_parser_free(&sp);
        CHECKF(!strcmp(o.text[PH_DELTA_REASONING], reasoning) && !strcmp(o.text[PH_DELTA_CONTENT], content),
               "'%s' in steps of %zu: reasoning '%s' content '%s'", s, step, o.text[0 + PH_DELTA_REASONING],
               o.text[PH_DELTA_CONTENT]);
    }
}

int main(void) {
    ph_model *m = ph_model_load(LLM, 1, NULL);
    CHECK(m != NULL);
    if (m) test_render(m);
    split_case(true, "weighing it</think>\n\nA cat.", "weighing it", "A cat.");
    split_case(false, "<think>hmm</think>Yes.", "hmm", "Yes.");
    split_case(false, "Plain <think> text", "", "Plain <think> text");
    split_case(false, "a < b and <th", "", "a < b and <th");
    split_case(true, "no end of thinking", "no end of thinking", "");
    ph_model_free(m);
    TEST_END();
}
