/* The server's shared state (server.c) as seen by the adapters. */
#ifndef PH_SERVER_SERVER_INTERNAL_H
#define PH_SERVER_SERVER_INTERNAL_H

#include "server/api.h"
#include "server/server.h"

/* Fingerprints a picture and reads its header (any thread). */
ph_image_in *srv_read_image(srv *s, const void *data, size_t len, const char *label, ph_err *err);

ph_engine *srv_engine(srv *s);
/* Resumes the job's connection if it is suspended, waiting for the job
 * (j->mu held). */
void job_wake_locked(job *j);
/* --allow-forced-output: the body field "forced_output" is accepted. */
bool srv_allow_forced(const srv *s);

#endif
