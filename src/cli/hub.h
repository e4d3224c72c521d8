/* Models from a Hugging Face-style hub: references (OWNER/NAME[:QUANT]),
 * the cache folder `pinhole pull` stores them in, which of a repository's
 * GGUF files make the pair (the LLM of a quantization and its mmproj),
 * and the pulled pair found again, without the network, for -m. */
#ifndef PH_CLI_HUB_H
#define PH_CLI_HUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A parsed reference: repo is "OWNER/NAME", quant NULL when not given.
 * Both malloc'd (hub_ref_free). */
typedef struct hub_ref {
    char *repo, *quant;
} hub_ref;

/* Parses s as OWNER/NAME[:QUANT]: OWNER and NAME of letters, digits, '-',
 * '_' and '.' (not starting with '.', no ".."; at most 96 chars each),
 * QUANT of letters, digits, '-', '_' and '.'. Returns 0, or -1 (with a
 * message on stderr when loud). */
int hub_ref_parse(const char *s, bool loud, hub_ref *out);
void hub_ref_free(hub_ref *r);

/* The folder of a repository's pulled files:
 * $XDG_CACHE_HOME/pinhole/models/OWNER/NAME (XDG_CACHE_HOME, when not set
 * or not absolute, is $HOME/.cache). malloc'd, or NULL with a message. */
char *hub_repo_dir(const char *repo);

/* A byte count for people: "265 KiB", "43.0 MiB", "1.52 GiB". */
void hub_size_text(char *out, size_t cap, double bytes);

/* One of a repository's files: its name and size (0 when unknown). */
typedef struct hub_name {
    const char *name;
    uint64_t size;
} hub_name;

/* Picks the pair among a repository's top-level files: *llm the GGUF file
 * that is not an mmproj and whose name holds quant (case-insensitive, as a
 * whole word: "F16" is not in "BF16"; or quant is the whole file name);
 * without quant, the Q4_K_M one, else the only one. *mm the mmproj*.gguf
 * file of mm_quant, without it the only one, else the F16 one; -1 when the
 * repository has none. A split file (-00001-of-00003.gguf) is refused.
 * files are those on the hub (dir NULL) or those pulled into dir.
 * Refusals list the choices on stderr, each with the option that picks
 * it. Returns 0 or -1. */
int hub_choose(const hub_ref *ref, const hub_name *files, size_t n, const char *mm_quant, const char *dir, int *llm,
               int *mm);

/* For -m: when ref is not an existing file or folder, does not end in
 * .gguf and reads as OWNER/NAME[:QUANT], sets *llm and *mmproj (NULL when
 * the repository has no mmproj) to the files `pinhole pull` stored for it
 * (malloc'd) and returns 0; not pulled, or no single pair: a message that
 * says what to run, and -1. Returns 1, with both NULL, when ref is not such
 * a reference (a path for the loader to open or refuse). */
int hub_find_local(const char *ref, char **llm, char **mmproj);

#endif
