/* pinhole serve: the HTTP server (src/server) over an engine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "cli/args.h"
#include "pinhole.h"
#include "server/server.h"

/* The default token limit of an answer when the request gives none: a
 * bound on a model that loops or never emits its end token, which would
 * otherwise generate until the context is full (minutes on a long
 * context, with the single worker busy), and far more than a normal
 * answer, reasoning included, needs. */
#define PH_SERVE_MAX_TOKENS 4096

static void serve_usage(FILE *out) {
    fprintf(out,
            "usage: pinhole serve -m LLM.gguf [--mmproj MMPROJ.gguf] [options]\n"
            "  -m, --model FILE          the LLM GGUF file\n"
            "  --mmproj FILE             the vision GGUF file (pictures are refused without it)\n"
            "  --host ADDR               IPv4 address to listen on (default 127.0.0.1)\n"
            "  --port N                  port (default 8080; 0: any free port)\n"
            "  -c, --ctx-size N          context size (default: the model's, at most 4096)\n"
            "  -t, --threads N           threads (default: all cores)\n"
            "  --max-images N            most pictures per request (default 16)\n"
            "  --max-body-mb N           largest request body in MiB (default 64)\n"
            "  --api-key KEY             require this key (Authorization: Bearer KEY or x-api-key: KEY)\n"
            "  --alias NAME              the model's name in /v1/models (default: the file name); may be\n"
            "                            given more than once: the first is listed, all are accepted\n"
            "                            as a request's \"model\"\n"
            "  --any-model               accept any \"model\" in requests (default: only the served\n"
            "                            name and its aliases; any other gets 404)\n"
            "  --allow-forced-output     a test switch: the body field \"forced_output\": \"TEXT\" makes TEXT\n"
            "                            the model's output (its tokens go through the normal decode,\n"
            "                            parse and stream path); refused with 400 without this flag\n"
            "  --temp F                  default temperature, 0..2; 0 is greedy (default 1)\n"
            "  --top-p F                 default top-p, above 0 and at most 1 (default 1: off)\n"
            "  --top-k N                 default top-k (default 0: off)\n"
            "  --max-tokens N            default token limit of an answer (default 4096; 0: until the\n"
            "                            context is full)\n"
            "                            These four apply to requests that leave the field out; a field\n"
            "                            in the request always wins.\n"
            "  --image-min-tokens N      least merged tokens per picture (default 8)\n"
            "  --image-max-tokens N      most merged tokens per picture (default 4096)\n"
            "  --image-cache-entries N   picture embeddings kept in memory (default 32; 0: none)\n"
            "  --image-cache-mib N       and at most this many MiB of them (default 128)\n"
            "  --image-cache-dir DIR     also keep picture embeddings here, across restarts\n"
            "  --image-cache-disk-mib N  and at most N MiB of files there (default 4096)\n"
            "  --vision-idle-s N         load the vision encoder only when needed and release it\n"
            "                            after N idle seconds (default: keep it loaded)\n"
            "  --cache-ram-mib N         keep displaced conversations' KV in RAM, at most N MiB\n"
            "                            (default 2048; 0: off)\n"
            "  --conversation-cache-mib N  park the primary conversation for auxiliary requests\n"
            "                            (\"auxiliary\": true or X-Pinhole-Auxiliary: 1), at most N MiB\n"
            "                            (default 2048; 0: off)\n"
            "  --kv-disk-dir DIR         save conversations' KV as checkpoint files here (at the end of\n"
            "                            each prompt and turn, and at shutdown) and resume from them,\n"
            "                            also after a restart (default: off)\n"
            "  --kv-disk-space-mb N      at most N MiB of checkpoint files (default 16384)\n"
            "  --checkpoint-every N      also checkpoint every N rows of a long prompt (default 4096; 0: never)\n"
            "  --no-reuse                evaluate every prompt from scratch (no live-state reuse)\n"
            "  --no-cache                no reuse and no embedding cache (a cold run, for comparisons)\n"
            "  -v, --verbose             log more\n"
            "Endpoints: POST /v1/chat/completions, /v1/responses, /v1/messages,\n"
            "/v1/messages/count_tokens; GET /v1/models,\n"
            "/health, /metrics. Pictures only as data: URIs (PNG, JPEG, WebP, GIF).\n");
}

static void on_progress(void *ud, const char *what, double f) {
    (void)ud;
    fprintf(stderr, "pinhole: [%3.0f%%] %s\n", f * 100.0, what);
}

/* aliases: room for argc names (the --alias values). */
static int serve_main(int argc, char **argv, const char **aliases) {
    ph_engine_params ep;
    ph_engine_params_default(&ep);
    srv_config cfg = {.host = "127.0.0.1", .port = 8080, .max_images = 16, .max_body = (size_t)64 << 20,
                      .temperature = 1.0, .top_p = 1.0, .top_k = 0, .max_tokens = PH_SERVE_MAX_TOKENS};
    long l;
    double d;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--any-model")) { cfg.any_model = true; continue; }
        if (!strcmp(a, "--allow-forced-output")) { cfg.allow_forced_output = true; continue; }
        if (!strcmp(a, "--no-reuse")) { ep.reuse = false; continue; }
        if (!strcmp(a, "--no-cache")) { ep.reuse = false; ep.image_cache_entries = 0; continue; }
        if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) { ph_log_set_level(PH_LOG_DEBUG); continue; }
        if (!(v = arg_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) ep.model_path = v;
        else if (!strcmp(a, "--mmproj")) ep.mmproj_path = v;
        else if (!strcmp(a, "--host")) cfg.host = v;
        else if (!strcmp(a, "--port")) { if (arg_int(a, v, 0, 65535, &l)) return 2; cfg.port = (int)l; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (arg_int(a, v, 16, 1 << 22, &l)) return 2; ep.n_ctx = (int32_t)l; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (arg_int(a, v, 1, 1024, &l)) return 2; ep.n_threads = (int)l; }
        else if (!strcmp(a, "--max-images")) { if (arg_int(a, v, 0, 4096, &l)) return 2; cfg.max_images = (int)l; }
        else if (!strcmp(a, "--max-body-mb")) { if (arg_int(a, v, 1, 1 << 20, &l)) return 2; cfg.max_body = (size_t)l << 20; }
        else if (!strcmp(a, "--api-key")) cfg.api_key = v;
        else if (!strcmp(a, "--alias")) {
            if (!*v) { fprintf(stderr, "pinhole serve: --alias needs a name\n"); return 2; }
            aliases[cfg.n_aliases++] = v;
        }
        else if (!strcmp(a, "--temp")) { if (arg_float(a, v, 0, 2, &d)) return 2; cfg.temperature = d; }
        else if (!strcmp(a, "--top-p")) {
            if (arg_float(a, v, 0, 1, &d)) return 2;
            if (!(d > 0)) { fprintf(stderr, "pinhole: %s: '%s' must be above 0 (at most 1)\n", a, v); return 2; }
            cfg.top_p = d;
        }
        else if (!strcmp(a, "--top-k")) { if (arg_int(a, v, 0, INT32_MAX, &l)) return 2; cfg.top_k = (int)l; }
        else if (!strcmp(a, "--max-tokens")) { if (arg_int(a, v, 0, INT32_MAX, &l)) return 2; cfg.max_tokens = (int)l; }
        else if (!strcmp(a, "--image-min-tokens")) { if (arg_int(a, v, 1, 65536, &l)) return 2; ep.image_min_tokens = (int)l; }
        else if (!strcmp(a, "--image-max-tokens")) { if (arg_int(a, v, 1, 65536, &l)) return 2; ep.image_max_tokens = (int)l; }
        else if (!strcmp(a, "--image-cache-entries")) { if (arg_int(a, v, 0, 1 << 20, &l)) return 2; ep.image_cache_entries = (int)l; }
        else if (!strcmp(a, "--image-cache-mib")) { if (arg_int(a, v, 0, 1 << 24, &l)) return 2; ep.image_cache_bytes = (size_t)l << 20; }
        else if (!strcmp(a, "--image-cache-dir")) ep.image_cache_dir = v;
        else if (!strcmp(a, "--image-cache-disk-mib")) { if (arg_int(a, v, 1, 1 << 30, &l)) return 2; ep.image_cache_disk_bytes = (uint64_t)l << 20; }
        else if (!strcmp(a, "--conversation-cache-mib")) { if (arg_int(a, v, 0, 1 << 30, &l)) return 2; ep.conversation_cache_bytes = (size_t)l << 20; }
        else if (!strcmp(a, "--cache-ram-mib")) { if (arg_int(a, v, 0, 1 << 30, &l)) return 2; ep.ram_cache_bytes = (size_t)l << 20; }
        else if (!strcmp(a, "--kv-disk-dir")) ep.kv_disk_dir = v;
        else if (!strcmp(a, "--kv-disk-space-mb")) { if (arg_int(a, v, 1, 1L << 30, &l)) return 2; ep.kv_disk_bytes = (uint64_t)l << 20; }
        else if (!strcmp(a, "--checkpoint-every")) { if (arg_int(a, v, 0, 1 << 22, &l)) return 2; ep.checkpoint_every = (int32_t)l; }
        else if (!strcmp(a, "--vision-idle-s")) { if (arg_float(a, v, 0.001, 1e9, &d)) return 2; ep.vision_idle_s = d; }
        else {
            fprintf(stderr, "pinhole serve: unknown option '%s' (see pinhole serve --help)\n", a);
            return 2;
        }
    }
    if (!ep.model_path) {
        fprintf(stderr, "pinhole serve: -m MODEL is required (see pinhole serve --help)\n");
        return 2;
    }
    if (ep.kv_disk_dir && !ep.reuse) {
        fprintf(stderr, "pinhole serve: --kv-disk-dir saves state for reuse; it cannot go with --no-reuse or --no-cache\n");
        return 2;
    }
    /* the model's name: the file name without folder and .gguf */
    char name[256];
    cfg.aliases = aliases;
    if (cfg.n_aliases) cfg.model_name = aliases[0];
    else {
        const char *base = strrchr(ep.model_path, '/');
        base = base ? base + 1 : ep.model_path;
        snprintf(name, sizeof name, "%s", base);
        size_t n = strlen(name);
        if (n > 5 && !strcmp(name + n - 5, ".gguf")) name[n - 5] = '\0';
        cfg.model_name = name;
    }
    ep.progress = on_progress;
    ph_err err = {0};
    ph_engine *e = ph_engine_new(&ep, &err);
    if (!e) {
        fprintf(stderr, "pinhole: %s\n", err.msg);
        return 1;
    }
    const ph_model_info *mi = ph_engine_model_info(e);
    fprintf(stderr, "pinhole: %s (%s), context %d, %s, %s\n", cfg.model_name, mi->arch, ph_engine_n_ctx(e),
            ph_engine_has_vision(e) ? (ep.vision_idle_s > 0 ? "pictures on (encoder loaded on demand)" : "pictures on")
                                    : "text only",
            ph_cpu_isa());
    int rc = server_run(e, &cfg);
    ph_engine_free(e);
    return rc;
}

int cmd_serve(int argc, char **argv) {
    const char **aliases = calloc(argc > 0 ? (size_t)argc : 1, sizeof *aliases);
    if (!aliases) {
        fprintf(stderr, "pinhole: out of memory\n");
        return 1;
    }
    int rc = serve_main(argc, argv, aliases);
    free(aliases);
    return rc;
}
