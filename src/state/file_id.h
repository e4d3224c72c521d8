/* Identity of big files (docs/state-cache.md, Identity and File-id memo:
 * model_id and encoder_id are the SHA-256 of the file's bytes, computed once
 * and remembered per device, inode, size and times), so a restart does not re-read gigabytes.
 *
 * The memo is one small text file, memo_dir/file-ids, one line per file:
 *   <device> <inode> <size> <mtime s> <mtime ns> <ctime s> <ctime ns> <64 hex>
 * (decimal numbers, newest first, at most PH_FILE_ID_MEMO_MAX lines). The
 * ctime is there because mtime can be set back (touch -d, cp -p, tools that
 * copy a server's Last-Modified) while ctime cannot: a file rewritten in
 * place, or a new file that reuses a freed inode, with the same size and an
 * mtime put back still gets a new ctime, so it is hashed again. The price is
 * a re-hash after chmod or chown.
 *
 * The memo is only a cache: a missing, unreadable or garbled memo, or one
 * that cannot be written, costs a re-hash, never an error. Several
 * processes may share it; when two rewrite it at once one version wins and
 * the other's entry is simply hashed again next time. */
#ifndef PH_STATE_FILE_ID_H
#define PH_STATE_FILE_ID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define PH_FILE_ID_MEMO_MAX 64

/* Sets id to the SHA-256 of the bytes of the regular file path. With a
 * memo_dir (NULL: no memo), a file whose device, inode, size and mtime
 * match a remembered line is not read (*from_memo = true, if from_memo is
 * not NULL); otherwise the file is hashed and remembered (the folder is
 * created if needed). A file changed (ctime) less than 2 seconds before it
 * was hashed, or while it was hashed, is not remembered: timestamps are
 * coarse (a kernel tick; 2 s on FAT), so one more change of the same size
 * could keep them. Returns 0, or -1 with e set when the file itself cannot
 * be read. */
typedef struct file_id_progress {
    void (*fn)(void *ud, uint64_t done, uint64_t total); /* bytes hashed of the file's, after each read */
    void *ud;
} file_id_progress;

/* prog may be NULL (no reports; none either when the memo knows the file). */
int file_id_of(const char *path, const char *memo_dir, uint8_t id[32], bool *from_memo, const file_id_progress *prog,
               ph_err *err);

/* The default cache folder: $XDG_CACHE_HOME/pinhole (when it is an
 * absolute path), else $HOME/.cache/pinhole, else NULL. Writes into buf
 * (cap bytes) and returns it, or NULL when neither is set or it does not
 * fit. The folder is not created. */
const char *default_cache_dir(char *buf, size_t cap);

#endif
