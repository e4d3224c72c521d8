/* The public face of the disk tier's folder (pinhole cache). */
#include <stdint.h>

#include "pinhole.h"
#include "state/disk_tier.h"

typedef struct list_ctx {
    int (*cb)(void *ud, const ph_kv_file *f);
    void *ud;
} list_ctx;

static int on_entry(void *ud, const disk_entry *d) {
    const list_ctx *c = ud;
    ph_kv_file f = {.name = d->name,
                    .model_id = d->model_id,
                    .format = d->format,
                    .n_rows = d->n_rows,
                    .n_pictures = d->n_pictures,
                    .bytes = d->bytes,
                    .last_use_ms = d->last_use,
                    .created_s = d->created};
    return c->cb(c->ud, &f);
}

int ph_kv_disk_list(const char *dir, int (*cb)(void *ud, const ph_kv_file *f), void *ud, ph_err *err) {
    disk_tier *t = disk_tier_open(dir, UINT64_MAX, err);
    if (!t) return -1;
    list_ctx c = {cb, ud};
    int rc = disk_tier_list(t, on_entry, &c, err);
    disk_tier_close(t);
    return rc;
}

int ph_kv_disk_verify(const char *dir, void (*bad)(void *ud, const char *name, const char *why), void *ud,
                      uint64_t *n_ok, uint64_t *n_bad, ph_err *err) {
    disk_tier *t = disk_tier_open(dir, UINT64_MAX, err);
    if (!t) return -1;
    int rc = disk_tier_verify(t, bad, ud, n_ok, n_bad, err);
    disk_tier_close(t);
    return rc;
}

int ph_kv_disk_prune(const char *dir, uint64_t max_bytes, uint64_t *n_removed, uint64_t *bytes_removed, ph_err *err) {
    disk_tier *t = disk_tier_open(dir, UINT64_MAX, err);
    if (!t) return -1;
    int rc = disk_tier_prune(t, max_bytes, n_removed, bytes_removed, err);
    disk_tier_close(t);
    return rc;
}
