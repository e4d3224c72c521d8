/* pinhole info FILE.gguf */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "pinhole.h"

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    bool verbose = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--verbose") || !strcmp(argv[i], "-v")) {
            verbose = true;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: pinhole info FILE.gguf [--verbose]\n"
                   "  prints the header, metadata and tensors of a GGUF file (LLM or mmproj);\n"
                   "  --verbose lists every tensor and whole arrays\n");
            return 0;
        } else if (argv[i][0] == '-' || path) {
            fprintf(stderr, "pinhole info: unexpected argument '%s'\n", argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        fprintf(stderr, "usage: pinhole info FILE.gguf [--verbose]\n");
        return 2;
    }
    ph_err err;
    if (ph_print_file_info(path, stdout, verbose, &err)) {
        fprintf(stderr, "pinhole: %s\n", err.msg);
        return 1;
    }
    return 0;
}
