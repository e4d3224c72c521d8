/* Small files written so that a crash never leaves a torn one behind
 * (docs/state-cache.md, Crash safety: temporary file, fsync, rename, fsync of the folder),
 * read back whole under a size cap, and folders made with their parents. */
#ifndef PH_BASE_ATOMIC_FILE_H
#define PH_BASE_ATOMIC_FILE_H

#include <stddef.h>

#include "base/error.h"

/* Writes the concatenation of n_parts buffers (parts[i], lens[i] bytes; a
 * part may be NULL when its length is 0) to path: first into a unique
 * temporary file in the same folder (path + ".tmp.<pid>.<counter>", mode
 * 0600: every caller writes a cache other users must not read), which
 * is fsynced, closed and renamed over path; then the folder is fsynced (best
 * effort: some filesystems refuse). On failure the temporary file is
 * removed, path is untouched, e says why, and -1 is returned. Safe to call
 * from several threads at once (the counter is atomic); concurrent writers
 * of one path leave one complete version, the last renamed. */
int file_write_atomic(const char *path, const void *const *parts, const size_t *lens, size_t n_parts, ph_err *err);

/* Reads the whole of path into a malloc'd buffer (*data, *len bytes, plus a
 * NUL byte after them that *len does not count, so text can be parsed in
 * place). A file longer than max_bytes is refused. On failure returns -1
 * with e set and errno as the failing call left it (ENOENT: no such file;
 * EFBIG: over max_bytes), so callers can tell "missing" from "broken". */
int file_read_all(const char *path, size_t max_bytes, void **data, size_t *len, ph_err *err);

/* Creates the folder path and any missing parents, mode 0700 (caches of
 * pictures and conversations: the user's own). An existing folder is
 * success and keeps its mode; an existing non-folder is not. */
int mkdir_p(const char *path, ph_err *err);

/* fsyncs the folder that holds path (".", if path has no slash), so that a
 * rename into it is durable. Best effort: returns 0, or -1 if the folder
 * could not be opened or synced (callers usually ignore it). */
int fsync_parent_dir(const char *path);

#endif
