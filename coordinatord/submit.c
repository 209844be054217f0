/* A submission: where its spec may write and read (the nodes' roots), the
 * scheduling policy's rules and the user's quota, and the job's rows. Used
 * by SubmitJob (jobs.c) and by a sweep's submission (sweep.c). */
#include <stdio.h>
#include <string.h>

#include "db/db_core.h"
#include "flow.h"
#include "notify_policy.h"

#include "prunex/check.h"
#include "prunex/jobspec.h"

#define COORD_BAD(...)                \
  do {                                \
    snprintf(err, cap, __VA_ARGS__);  \
    return 0;                         \
  } while (0)


/* 1 when path is dir or below it, on a component boundary. */
static int coord_path_under(const char *path, const char *dir, size_t n) {
  while (n > 1 && dir[n - 1] == '/') n--;
  if (strncmp(path, dir, n) != 0) return 0;
  return path[n] == '\0' || path[n] == '/' || (n == 1 && dir[0] == '/');
}

/* 1 when path is under one of roots (newline-separated). */
static int coord_path_under_any(const char *path, const char *roots) {
  for (const char *p = roots; *p;) {
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n > 0 && coord_path_under(path, p, n)) return 1;
    p = e ? e + 1 : p + n;
  }
  return 0;
}

/* 1 when out (the spec's field) is short enough and has no ".." component,
 * else 0 with the reason in err. */
static int coord_path_shape_ok(const char *field, const char *out, char *err, size_t cap) {
  if (strlen(out) > 1024) COORD_BAD("%s: longer than 1024 bytes", field);
  for (const char *p = out; *p;) {
    const char *e = strchr(p, '/');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == 2 && p[0] == '.' && p[1] == '.')
      COORD_BAD("%s = '%.200s': '..' is not allowed in it", field, out);
    if (!e) break;
    p = e + 1;
  }
  return 1;
}

/* The job's output_dir must be where the agents let jobs write:
 * relative (under the job's directory in the agent's work directory) or
 * absolute under a root that every node not LOST reported (its work
 * directory, its --output-root directories), never with a ".." component.
 * With data set, the same for a path the workers read (dataset.path,
 * model.onnx: field names it) and the nodes' data roots (a node that
 * reported none, an older agent, is not asked).
 * Returns 1, or 0 with the reason in err (or -1 on a database error). */
static int coord_path_ok(coord_t *c, const char *out, const char *field, int data, char *err,
                         size_t cap) {
  if (!out[0]) return 1;
  if (!coord_path_shape_ok(field, out, err, cap)) return 0;
  if (out[0] != '/') return 1;
  coord_arena_t a;
  coord_arena_init(&a);
  char **names = NULL, **all = NULL;
  size_t nodes = 0;
  if (coord_db_nodes_roots(c, &a, NS_LOST, data, &names, &all, &nodes) != PX_OK) {
    coord_arena_free(&a);
    return -1;
  }
  int ok = 1;
  char refused[256] = "", allowed[512] = "";
  for (size_t i = 0; i < nodes && ok; i++) {
    if (coord_path_under_any(out, all[i])) continue;
    ok = 0;
    snprintf(refused, sizeof refused, "%s", names[i]);
    snprintf(allowed, sizeof allowed, "%s", all[i][0] ? all[i] : "(nothing)");
    for (char *q = allowed; *q; q++)
      if (*q == '\n') *q = ',';
  }
  coord_arena_free(&a);
  if (data) {
    if (!ok)
      COORD_BAD("%s = '%.200s': node %.100s does not let jobs read there (it allows %.160s; "
                "an agent allows its --work-dir and its --data-root directories, by default "
                "/usr/share/datasets)",
                field, out, refused, allowed);
    return 1; /* no node said: the agents check it when the job starts */
  }
  if (!nodes)
    COORD_BAD("spec.output_dir = '%.200s': no node is registered to say where jobs may write "
              "(give a relative output_dir, or start the agents first)", out);
  if (!ok)
    COORD_BAD("spec.output_dir = '%.200s': node %s does not let jobs write there (it allows %.160s; an "
              "agent allows its --work-dir and its --output-root directories)",
              out, refused, allowed);
  return 1;
}

/* dataset.cache_dir, where the workers write an image folder's cache:
 * relative (under the job's directory), or absolute under, at every
 * node not LOST, one of the roots it lets jobs write to (its work
 * directory, --output-root) or read from (--data-root: the default cache
 * goes beside the data); the agents check it again, links included.
 * Returns 1, or 0 with the reason in err (or -1 on a database error). */
static int coord_cache_dir_ok(coord_t *c, const char *p, char *err, size_t cap) {
  const char *field = "spec.dataset.cache_dir";
  if (!p[0]) return 1;
  if (!coord_path_shape_ok(field, p, err, cap)) return 0;
  if (p[0] != '/') return 1;
  coord_arena_t a;
  coord_arena_init(&a);
  char **names = NULL, **outs = NULL, **dnames = NULL, **data = NULL;
  size_t nodes = 0, dnodes = 0;
  if (coord_db_nodes_roots(c, &a, NS_LOST, 0, &names, &outs, &nodes) != PX_OK ||
      coord_db_nodes_roots(c, &a, NS_LOST, 1, &dnames, &data, &dnodes) != PX_OK) {
    coord_arena_free(&a);
    return -1;
  }
  char refused[256] = "";
  for (size_t i = 0; i < nodes && !refused[0]; i++) {
    int here = coord_path_under_any(p, outs[i]);
    for (size_t k = 0; k < dnodes && !here; k++)
      here = !strcmp(dnames[k], names[i]) && coord_path_under_any(p, data[k]);
    if (!here) snprintf(refused, sizeof refused, "%s", names[i]);
  }
  coord_arena_free(&a);
  if (refused[0])
    COORD_BAD("%s = '%.200s': node %.100s does not let jobs write a cache there (an agent "
              "allows its --work-dir, its --output-root and its --data-root directories; a "
              "relative cache_dir is under the job's directory)",
              field, p, refused);
  return 1;
}

/* ---- SubmitJob ---------------------------------------------------------------------- */

px_status_t coord_job_submit(coord_t *c, const Prunex__V1__JobSpec *spec, const char *spec_yaml,
                             int priority, int64_t time_limit_ms, char *job_id, size_t cap) {
  int64_t now = coord_now_ms();
  const char *owner = c->who.role == COORD_ROLE_ANON ? "" : c->who.name;
  PX_CHECK(coord_db_job_insert(c, spec, spec_yaml, owner, JS_PENDING, now, job_id, cap));
  unsigned notify_mask = 0;
  const char *notify_url = spec->notify && spec->notify->url ? spec->notify->url : "";
  if (notify_url[0] && px_jobspec_notify_states(spec->notify->states, &notify_mask) != 0)
    notify_mask = 0; /* px_jobspec_check_submitted refused such a spec already */
  PX_CHECK(coord_db_sched_job_new(c, job_id, owner, spec->name, spec->cluster->nodes,
                               spec->cluster->workers_per_node, priority, time_limit_ms,
                               notify_url, notify_mask, now));
  char reason[160];
  snprintf(reason, sizeof reason, "submitted: %d node%s x %d worker%s",
           spec->cluster->nodes, spec->cluster->nodes == 1 ? "" : "s",
           spec->cluster->workers_per_node, spec->cluster->workers_per_node == 1 ? "" : "s");
  return coord_job_set_state(c, job_id, JS_UNSPECIFIED, JS_PENDING, reason);
}

/* The scheduling policy's rules for a submission: only admins
 * raise a job's priority above the default, a time limit within the
 * cluster's maximum. 1 with the job's priority and time limit (ms, 0:
 * none), or 0 with the call answered (PERMISSION_DENIED, INVALID_ARGUMENT). */
int coord_priority_allowed(coord_t *c, px_rpc_srv_call_t *call, const char *field,
                           int priority) {
  if (priority <= COORD_PRIORITY_DEFAULT || c->who.role == COORD_ROLE_ADMIN ||
      c->who.role == COORD_ROLE_ANON)
    return 1;
  px_rpc_srv_finish(call, PX_RPC_PERMISSION_DENIED,
                    "%s = %d: only an admin may raise a job's priority above %d (%s may set 1 to "
                    "%d)",
                    field, priority, COORD_PRIORITY_DEFAULT, c->who.name, COORD_PRIORITY_DEFAULT);
  return 0;
}

int coord_submit_policy(coord_t *c, px_rpc_srv_call_t *call, const Prunex__V1__JobSpec *spec,
                        int *priority, int64_t *time_limit_ms) {
  const coord_sched_policy_t *p = &c->cfg.sched;
  *priority = spec->priority > 0 ? spec->priority : COORD_PRIORITY_DEFAULT;
  if (!coord_priority_allowed(c, call, "spec.priority", *priority)) return 0;
  if (p->time_limit_max_s > 0 && spec->time_limit_s > p->time_limit_max_s) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                      "spec.time_limit_s = %d: above this cluster's maximum of %lld s"
                      " (time_limit_max_s)",
                      spec->time_limit_s, (long long)p->time_limit_max_s);
    return 0;
  }
  *time_limit_ms = coord_sched_time_limit_ms(p, spec->time_limit_s);
  return 1;
}

/* The user's quota of unfinished jobs, for nnew more: 1, or 0 with the
 * call answered (RESOURCE_EXHAUSTED or INTERNAL). */
int coord_submit_quota(coord_t *c, px_rpc_srv_call_t *call, int64_t nnew) {
  const char *owner = c->who.role == COORD_ROLE_ANON ? "" : c->who.name;
  int quota = coord_sched_max_queued_jobs(&c->cfg.sched, owner);
  if (quota <= 0) return 1;
  int64_t n = 0;
  if (coord_db_sched_unfinished_jobs(c, owner, &n) != PX_OK) {
    coord_fail_internal(c, call);
    return 0;
  }
  if (n + nnew <= quota) return 1;
  px_log(PX_LOG_INFO, "SubmitJob refused: %s has %lld unfinished jobs (quota %d), %lld more",
         owner[0] ? owner : "anonymous", (long long)n, quota, (long long)nnew);
  if (nnew > 1)
    px_rpc_srv_finish(call, PX_RPC_RESOURCE_EXHAUSTED,
                      "user quota: the sweep's %lld jobs and the %lld unfinished job%s of %s"
                      " exceed the %d allowed (max_queued_jobs); submit a smaller sweep",
                      (long long)nnew, (long long)n, n == 1 ? "" : "s",
                      owner[0] ? owner : "the anonymous user", quota);
  else
    px_rpc_srv_finish(call, PX_RPC_RESOURCE_EXHAUSTED,
                      "user quota: %s has %lld unfinished job%s (pending or running) and may"
                      " have at most %d (max_queued_jobs); wait for one to end or cancel one",
                      owner[0] ? owner : "the anonymous user", (long long)n, n == 1 ? "" : "s",
                      quota);
  return 0;
}


int coord_submit_paths_ok(coord_t *c, const Prunex__V1__JobSpec *spec, char *err, size_t cap) {
  int ok = coord_path_ok(c, spec->output_dir, "spec.output_dir", 0, err, cap);
  if (ok > 0 && spec->dataset)
    ok = coord_path_ok(c, spec->dataset->path, "spec.dataset.path", 1, err, cap);
  if (ok > 0 && spec->model && spec->model->onnx) /* read by the workers as the data are */
    ok = coord_path_ok(c, spec->model->onnx, "spec.model.onnx", 1, err, cap);
  if (ok > 0 && spec->dataset && spec->dataset->cache_dir)
    ok = coord_cache_dir_ok(c, spec->dataset->cache_dir, err, cap);
  return ok;
}

int coord_submit_notify_ok(coord_t *c, px_rpc_srv_call_t *call, const Prunex__V1__JobSpec *spec) {
  const char *url = spec->notify && spec->notify->url ? spec->notify->url : "";
  if (!url[0]) return 1;
  coord_notify_policy_t *p = px_malloc(sizeof *p, "coordd.notify");
  coord_notify_dest_t *d = px_malloc(sizeof *d, "coordd.notify");
  char why[1600] = "out of memory";
  int ok = p && d ? 1 : -2;
  if (p && d) {
    coord_notify_policy_get(c, p);
    ok = coord_notify_check(p, url, COORD_NOTIFY_SUBMIT_RESOLVE_MS, d, why, sizeof why);
  }
  px_free(p);
  px_free(d);
  if (ok == -2) {
    coord_fail_internal(c, call);
    return 0;
  }
  if (ok < 0) px_log(PX_LOG_INFO, "SubmitJob: %s; checked again when sent", why);
  if (ok != 0) return 1;
  px_log(PX_LOG_INFO, "SubmitJob refused: %s", why);
  px_rpc_srv_finish(call, PX_RPC_PERMISSION_DENIED, "%s", why);
  return 0;
}

/* ---- dependencies ------------------------------------------------------------------- */

#define COORD_AFTER_MAX 64

int coord_submit_after(coord_t *c, px_rpc_srv_call_t *call, coord_arena_t *a,
                       const Prunex__V1__SubmitJobRequest *r, char **out) {
  *out = "";
  if (r->n_after == 0) return 1;
  if (r->n_after > COORD_AFTER_MAX) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "after: %zu dependencies, at most %d",
                      r->n_after, COORD_AFTER_MAX);
    return 0;
  }
  size_t cap = r->n_after * 80 + 1, used = 0;
  char *lines = coord_alloc(a, cap);
  if (!lines) {
    coord_fail_internal(c, call);
    return 0;
  }
  for (size_t i = 0; i < r->n_after; i++) {
    const Prunex__V1__JobDependency *d = r->after[i];
    int kind = (int)d->kind;
    if (strlen(d->job_id) > 63 || !d->job_id[0] ||
        !strncmp(d->job_id, COORD_SWEEP_PREFIX, strlen(COORD_SWEEP_PREFIX))) {
      px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "after[%zu]: '%.64s' is not a job id", i,
                        d->job_id);
      return 0;
    }
    if (kind < 0 || kind > PRUNEX__V1__DEPENDENCY_KIND__DEPENDENCY_KIND_ANY) {
      px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                        "after[%zu]: kind = %d: not a DependencyKind (ok or any)", i, kind);
      return 0;
    }
    int found = 0, state = 0;
    if (coord_db_sched_dep_state(c, d->job_id, &found, &state) != PX_OK) {
      coord_fail_internal(c, call);
      return 0;
    }
    if (!found) {
      px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "after[%zu]: job %s not found", i,
                        d->job_id);
      return 0;
    }
    used += (size_t)snprintf(lines + used, cap - used, "%s%s:%s", i ? "\n" : "", d->job_id,
                             kind == PRUNEX__V1__DEPENDENCY_KIND__DEPENDENCY_KIND_ANY ? "any"
                                                                                      : "ok");
  }
  *out = lines;
  return 1;
}

px_status_t coord_job_set_depends(coord_t *c, const char *job_id, const char *depends) {
  if (!depends[0]) return PX_OK;
  PX_CHECK(coord_db_sched_set_depends(c, job_id, depends));
  /* the queue took the job's row when it entered PENDING: read it again */
  return coord_queue_job_changed(c, job_id, JS_PENDING);
}
