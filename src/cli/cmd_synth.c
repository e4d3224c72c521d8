/* pinhole synth: write a synthetic Qwen3-VL or Qwen3.5 model pair. */
#include <stdio.h>
#include <string.h>

#include "base/timeutil.h"
#include "cli/args.h"
#include "pinhole.h"
#include "synth/synth.h"

static void synth_usage(FILE *out) {
    fprintf(out,
            "usage: pinhole synth --shape tiny|2b -o NAME [--arch A] [--type TYPE] [--vocab FROM.gguf] [options]\n"
            "  writes NAME.gguf (the LLM) and NAME-mmproj.gguf (its vision tower) with random\n"
            "  weights; llama.cpp loads them too. The tokenizer is FROM.gguf's, or without\n"
            "  --vocab a small built-in one (byte-level BPE, 1024 ids: the 256 bytes, common\n"
            "  English words, Qwen3-VL's special tokens and a ChatML chat template)\n"
            "  --arch A            qwen3vl (default) or qwen35 (gated delta net layers, full attention\n"
            "                      every 4th layer, a vision tower without deepstack, a Qwen3.5 chat template)\n"
            "  --shape S           tiny (256 wide, 4 layers; qwen35: 8 layers) or 2b (Qwen3-VL-2B-Instruct's\n"
            "                      sizes; qwen35: Qwen3.5-2B's)\n"
            "  --type T            LLM weights: f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m (default f16)\n"
            "  --vision-type T     mmproj weights: f32 f16 bf16 q8_0 (default f16)\n"
            "  --vocab FILE        copy the tokenizer.* metadata of this GGUF (default: built-in)\n"
            "  --chat-template F   the chat template is file F's text (default: qwen35's built-in one\n"
            "                      for qwen35, the tokenizer's for qwen3vl)\n"
            "  -o, --output NAME   output name (NAME.gguf, NAME-mmproj.gguf)\n"
            "  --seed S            random seed (default 1)\n"
            "  -t, --threads N     threads (default: all cores)\n");
}

int cmd_synth(int argc, char **argv) {
    synth_params p = {.type = "f16", .vision_type = "f16", .seed = 1};
    long threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            synth_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--arch")) {
            dst = &p.arch;
        } else if (!strcmp(a, "--shape")) {
            dst = &p.shape;
        } else if (!strcmp(a, "--type")) {
            dst = &p.type;
        } else if (!strcmp(a, "--vision-type")) {
            dst = &p.vision_type;
        } else if (!strcmp(a, "--vocab")) {
            dst = &p.vocab;
        } else if (!strcmp(a, "--chat-template")) {
            dst = &p.chat_template;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            dst = &p.out;
        } else if (!strcmp(a, "--seed")) {
            const char *v = arg_value(argc, argv, &i);
            if (!v || arg_u64(a, v, &p.seed)) return 2;
            continue;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            const char *v = arg_value(argc, argv, &i);
            if (!v || arg_int(a, v, 1, 1024, &threads)) return 2;
            continue;
        } else {
            fprintf(stderr, "pinhole synth: unknown option '%s' (see pinhole synth --help)\n", a);
            return 2;
        }
        if (!(*dst = arg_value(argc, argv, &i))) return 2;
    }
    p.n_threads = (int)threads;
    if (!p.shape || !p.out) {
        fprintf(stderr, "pinhole synth: --shape and -o are required (see pinhole synth --help)\n");
        return 2;
    }
    ph_err err;
    double t0 = time_now_s();
    if (synth_write(&p, &err)) {
        fprintf(stderr, "pinhole: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "pinhole: wrote %s.gguf and %s-mmproj.gguf in %.1f s\n", p.out, p.out, time_now_s() - t0);
    return 0;
}
