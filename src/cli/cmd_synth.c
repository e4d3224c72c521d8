/* pinhole synth: write a synthetic Qwen3-VL or Qwen3.5 model pair. */
#include <getopt.h>
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
            "                      sizes; qwen35: Qwen3.5-2B's); the test oracle's (docs/testing.md):\n"
            "                      oracle-tiny, oracle-mid, oracle-small (qwen3vl), oracle-q4k (qwen35)\n"
            "  --type T            LLM weights: f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m (default f16)\n"
            "  --output-type T     the output matrix's type (the token embedding's when tied; q4_k_m: q6_k)\n"
            "  --vision-type T     mmproj weights: f32 f16 bf16 q8_0 (default f16)\n"
            "  --mtp               qwen35: one multi-token prediction block after the trunk\n"
            "  --vocab FILE        copy the tokenizer.* metadata of this GGUF (default: built-in); a Qwen2\n"
            "                      vocabulary gets Qwen3-VL's added tokens in its placeholder ids\n"
            "  --vocab-pre NAME    the copied tokenizer's pre-tokenizer (tokenizer.ggml.pre), e.g. qwen35\n"
            "  --chat-template F   the chat template is file F's text (default: qwen35's built-in one\n"
            "                      for qwen35, the tokenizer's for qwen3vl)\n"
            "  --name NAME         general.name (NAME-mmproj in the mmproj; default pinhole-synth-...)\n"
            "  -o, --output NAME   output name (NAME.gguf, NAME-mmproj.gguf)\n"
            "  --seed S            random seed (default 1); the same seed writes the same bytes anywhere\n"
            "  -t, --threads N     threads (default: all cores)\n");
}

int cmd_synth(int argc, char **argv) {
    synth_params p = {.type = "f16", .vision_type = "f16", .seed = 1};
    long threads = 0;
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"arch", required_argument, NULL, 'a'},
                                         {"shape", required_argument, NULL, 's'},
                                         {"type", required_argument, NULL, 'y'},
                                         {"output-type", required_argument, NULL, 'O'},
                                         {"vision-type", required_argument, NULL, 'v'},
                                         {"mtp", no_argument, NULL, 'M'},
                                         {"vocab", required_argument, NULL, 'V'},
                                         {"vocab-pre", required_argument, NULL, 'P'},
                                         {"chat-template", required_argument, NULL, 'T'},
                                         {"name", required_argument, NULL, 'n'},
                                         {"output", required_argument, NULL, 'o'},
                                         {"seed", required_argument, NULL, 'S'},
                                         {"threads", required_argument, NULL, 't'},
                                         {NULL, 0, NULL, 0}};
    arg_state st = {0};
    const char *a, *v;
    for (int o; (o = arg_next("synth", argc, argv, "ho:t:", opts, &st, &a, &v)) != -1;) {
        switch (o) {
        case -2: return 2;
        case 'h': synth_usage(stdout); return 0;
        case 'a': p.arch = v; break;
        case 's': p.shape = v; break;
        case 'y': p.type = v; break;
        case 'O': p.output_type = v; break;
        case 'v': p.vision_type = v; break;
        case 'M': p.mtp = true; break;
        case 'V': p.vocab = v; break;
        case 'P': p.vocab_pre = v; break;
        case 'T': p.chat_template = v; break;
        case 'n': p.name = v; break;
        case 'o': p.out = v; break;
        case 'S':
            if (arg_u64(a, v, &p.seed)) return 2;
            break;
        case 't':
            if (arg_int(a, v, 1, 1024, &threads)) return 2;
            break;
        }
    }
    if (arg_rest() < argc) {
        fprintf(stderr, "pinhole synth: unexpected argument '%s' (see pinhole synth --help)\n", argv[arg_rest()]);
        return 2;
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
