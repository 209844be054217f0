/* pxctl hold, release and update: the queue controls Slurm users
 * know from scontrol, through the coordinator's HoldJob, ReleaseJob and
 * UpdateJob (owner or admin; the coordinator applies the policy's rules and
 * says which field it refused). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pxctl.h"

typedef px_status_t (*pxctl_queue_call_fn)(px_rpc_channel_t *ch, const void *req,
                                           Prunex__V1__Job **out);

static px_status_t pxctl_hold_call(px_rpc_channel_t *ch, const void *req, Prunex__V1__Job **out) {
  return px_rpc_hold_job(ch, req, PXCTL_DEADLINE_MS, out);
}
static px_status_t pxctl_release_call(px_rpc_channel_t *ch, const void *req,
                                      Prunex__V1__Job **out) {
  return px_rpc_release_job(ch, req, PXCTL_DEADLINE_MS, out);
}
static px_status_t pxctl_update_call(px_rpc_channel_t *ch, const void *req,
                                     Prunex__V1__Job **out) {
  return px_rpc_update_job(ch, req, PXCTL_DEADLINE_MS, out);
}

/* Makes the call, prints the job (--json) or `done` and its reason; a
 * refusal is said as "cannot VERB job 'JOB': why". */
static int pxctl_queue_run(pxctl_opts_t *o, const char *verb, pxctl_queue_call_fn fn,
                           const void *req) {
  px_rpc_channel_t *ch = pxctl_connect(o);
  if (!ch) return PXCTL_EXIT_FAIL;
  Prunex__V1__Job *job = NULL;
  int rc = PXCTL_EXIT_OK;
  if (fn(ch, req, &job) != PX_OK) {
    px_rpc_code_t code = px_rpc_last_code();
    if (code == PX_RPC_FAILED_PRECONDITION || code == PX_RPC_PERMISSION_DENIED ||
        code == PX_RPC_INVALID_ARGUMENT)
      rc = pxctl_fail("cannot %s job '%s': %s", verb, o->pos[0], px_last_error());
    else rc = pxctl_rpc_fail(ch, o->pos[0]);
  } else if (o->json) {
    pxctl_json_print_job(job);
  } else if (!strcmp(verb, "update")) {
    char limit[32] = "none";
    if (job->time_limit_ms > 0) pxctl_fmt_duration(limit, sizeof limit, job->time_limit_ms / 1e3);
    printf("%s %s: priority %d, time limit %s\n", job->job_id,
           px_rpc_job_state_name(job->state), job->priority, limit);
  } else {
    printf("%s %s: %s\n", job->job_id, px_rpc_job_state_name(job->state), job->reason);
  }
  px_rpc_message_free(job);
  px_rpc_channel_destroy(ch);
  return rc;
}

int pxctl_cmd_hold(pxctl_opts_t *o) {
  Prunex__V1__HoldJobRequest req = PRUNEX__V1__HOLD_JOB_REQUEST__INIT;
  req.job_id = (char *)o->pos[0];
  return pxctl_queue_run(o, "hold", pxctl_hold_call, &req);
}

int pxctl_cmd_release(pxctl_opts_t *o) {
  Prunex__V1__ReleaseJobRequest req = PRUNEX__V1__RELEASE_JOB_REQUEST__INIT;
  req.job_id = (char *)o->pos[0];
  return pxctl_queue_run(o, "release", pxctl_release_call, &req);
}

/* "90", "90s", "15m", "2h", "1d" into seconds; -1 when malformed. */
static long long pxctl_parse_seconds(const char *v) {
  char *end = NULL;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (errno || end == v || n <= 0 || !isdigit((unsigned char)v[0])) return -1;
  long long unit = 1;
  if (*end) {
    if (end[1]) return -1;
    unit = *end == 's' ? 1 : *end == 'm' ? 60 : *end == 'h' ? 3600 : *end == 'd' ? 86400 : 0;
  }
  if (!unit || n > 0x7fffffffLL / unit) return -1;
  return n * unit;
}

int pxctl_cmd_update(pxctl_opts_t *o) {
  Prunex__V1__UpdateJobRequest req = PRUNEX__V1__UPDATE_JOB_REQUEST__INIT;
  req.job_id = (char *)o->pos[0];
  for (int i = 1; i < o->npos; i++) {
    const char *a = o->pos[i], *eq = strchr(a, '=');
    size_t n = eq ? (size_t)(eq - a) : 0;
    if (eq && n == 8 && !strncmp(a, "priority", 8)) {
      char *end = NULL;
      long p = strtol(eq + 1, &end, 10);
      if (end == eq + 1 || *end || p < 1 || p > 1000)
        return pxctl_usage_error(o, "'%s': priority is 1 to 1000", a);
      req.priority = (int32_t)p;
    } else if (eq && n == 10 && !strncmp(a, "time_limit", 10)) {
      long long s = pxctl_parse_seconds(eq + 1);
      if (s < 0)
        return pxctl_usage_error(o, "'%s': time_limit is seconds, or 90m, 2h, 1d", a);
      req.time_limit_s = (int32_t)s;
    } else {
      return pxctl_usage_error(o, "'%s': expected priority=N or time_limit=S", a);
    }
  }
  return pxctl_queue_run(o, "update", pxctl_update_call, &req);
}
