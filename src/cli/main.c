/* pinhole: command-line entry point. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "pinhole.h"

static void usage(FILE *out) {
    fprintf(out, "pinhole " PINHOLE_VERSION ": local inference for vision-language models (GGUF)\n"
                 "\n"
                 "usage: pinhole COMMAND [options]\n"
                 "\n"
                 "commands:\n"
                 "  info FILE.gguf [--verbose]   print a GGUF file's metadata and tensors\n"
                 "  run -m LLM.gguf -p TEXT      answer one question in the model's chat format (pictures:\n"
                 "                               --image FILE, the vision file found beside the model)\n"
                 "  run -m LLM.gguf --raw TEXT   generate a continuation of a raw prompt (pictures:\n"
                 "                               --image FILE, <__image__> in TEXT)\n"
                 "  chat -m LLM.gguf             chat interactively (/image PATH attaches a picture)\n"
                 "  serve -m LLM.gguf            serve the OpenAI and Anthropic APIs over HTTP\n"
                 "  pull OWNER/NAME[:QUANT]      download a model and its vision file from a Hugging Face-style\n"
                 "                               hub; then -m OWNER/NAME[:QUANT] in serve, run and chat uses them\n"
                 "  demo                         a scripted server session on a synthetic model (no download)\n"
                 "  synth --shape tiny|2b ...    write a synthetic Qwen3-VL or Qwen3.5 model (LLM + mmproj)\n"
                 "  bench -m LLM.gguf            measure prefill and decode speed\n"
                 "  cache ls|stats|verify|prune DIR\n"
                 "                               look after a --kv-disk-dir checkpoint folder\n"
                 "\n"
                 "'pinhole COMMAND --help' lists a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "synth")) return cmd_synth(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "chat")) return cmd_chat(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "demo")) return cmd_demo(argc - 1, argv + 1);
    if (!strcmp(cmd, "cache")) return cmd_cache(argc - 1, argv + 1);
    if (!strcmp(cmd, "pull")) return cmd_pull(argc - 1, argv + 1);
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("pinhole %s (%s)\n", PINHOLE_VERSION, ph_cpu_isa());
        return 0;
    }
    fprintf(stderr, "pinhole: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
