/* pxagent's conversation with the coordinator: registration and the
 * assignment stream (control thread), heartbeats (heartbeat thread) and
 * worker exit reports (reporter thread). Every call is blocking and bounded
 * by a deadline, so none of them runs on the loop thread, and none waits
 * behind another: a slow exit report never delays a heartbeat.
 *
 * When the coordinator goes away (or restarts on the same database) the
 * stream ends; the control thread registers again by name, with capped
 * exponential backoff and jitter, on a fresh channel each try so that
 * gRPC's own reconnect backoff (which grows to minutes) never holds us. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "metrics.h"
#include "prunex/check.h"

/* ---- waiting -------------------------------------------------------------- */

/* Waits on cv for up to ms (mu held). */
static void pxa_wait(pxa_agent_t *ag, int64_t ms) { pxa_cond_wait_ms(&ag->cv, &ag->mu, ms); }

/* The next pause of a capped exponential backoff, with +-20% jitter so that
 * the agents of a cluster do not all come back in the same millisecond. */
static int64_t pxa_backoff_next(int64_t *cur, unsigned *seed) {
  int64_t b = *cur;
  *cur = b * 2 > PXA_BACKOFF_MAX_MS ? PXA_BACKOFF_MAX_MS : b * 2;
  int64_t j = b / 5;
  return b - j + (j > 0 ? (int64_t)(rand_r(seed) % (unsigned)(2 * j + 1)) : 0);
}

/* ---- queues ---------------------------------------------------------------- */

void pxa_post(pxa_agent_t *ag, pxa_cmd_t *c) {
  c->next = NULL;
  pthread_mutex_lock(&ag->mu);
  if (!ag->loop_open) {
    pthread_mutex_unlock(&ag->mu);
    px_rpc_message_free(c->assignment);
    px_free(c);
    return;
  }
  *ag->cmds_tail = c;
  ag->cmds_tail = &c->next;
  uv_async_send(&ag->wake);
  pthread_mutex_unlock(&ag->mu);
}

void pxa_report_exit(pxa_agent_t *ag, pxa_exit_t *e) {
  e->next = NULL;
  e->queued_ms = pxa_now_ms();
  pthread_mutex_lock(&ag->mu);
  *ag->exits_tail = e;
  ag->exits_tail = &e->next;
  pthread_cond_broadcast(&ag->cv);
  pthread_mutex_unlock(&ag->mu);
}

static void pxa_exit_free(pxa_exit_t *e) {
  if (!e) return;
  px_free(e->reason);
  px_free(e);
}

static pxa_cmd_t *pxa_cmd_new(pxa_cmd_kind_t kind, const char *job_id, const char *reason) {
  pxa_cmd_t *c = px_calloc(1, sizeof *c, "agent.cmd");
  if (!c) return NULL;
  c->kind = kind;
  snprintf(c->job_id, sizeof c->job_id, "%s", job_id ? job_id : "");
  snprintf(c->reason, sizeof c->reason, "%s", reason ? reason : "");
  return c;
}

/* ---- control thread: register, then follow the assignment stream ---------- */

static px_status_t pxa_register(pxa_agent_t *ag, px_rpc_channel_t *ch) {
  Prunex__V1__RegisterNodeRequest req = PRUNEX__V1__REGISTER_NODE_REQUEST__INIT;
  req.name = ag->name;
  req.hostname = ag->hostname;
  req.n_devices = ag->ndevices;
  req.devices = ag->device_ptrs;
  req.agent_version = (char *)px_version();
  req.pid = (int32_t)getpid();
  /* Where jobs may write: the coordinator refuses at submission
   * an output_dir that no node allows. */
  char *roots[PXA_MAX_ROOTS + 1];
  roots[0] = ag->work_dir;
  for (int i = 0; i < ag->cfg.noutput_roots; i++) roots[1 + i] = (char *)ag->cfg.output_roots[i];
  req.n_output_roots = (size_t)(1 + ag->cfg.noutput_roots);
  req.output_roots = roots;
  /* where jobs may read data sets: refused at submission too */
  char *droots[PXA_MAX_ROOTS + 1];
  droots[0] = ag->work_dir;
  if (ag->cfg.ndata_roots == 0) droots[1] = (char *)PXA_DEFAULT_DATA_ROOT;
  for (int i = 0; i < ag->cfg.ndata_roots; i++) droots[1 + i] = (char *)ag->cfg.data_roots[i];
  req.n_data_roots = (size_t)(1 + (ag->cfg.ndata_roots ? ag->cfg.ndata_roots : 1));
  req.data_roots = droots;
  Prunex__V1__RegisterNodeResponse *resp = NULL;
  PX_CHECK(px_rpc_register_node(ch, &req, 5000, &resp));
  int interval = resp->heartbeat_interval_ms > 0 ? resp->heartbeat_interval_ms : 1000;
  if (ag->cfg.heartbeat_ms > 0 && ag->cfg.heartbeat_ms < interval) interval = ag->cfg.heartbeat_ms;
  pthread_mutex_lock(&ag->mu);
  int again = ag->registrations++ > 0;
  int changed = ag->node_id[0] && strcmp(ag->node_id, resp->node_id) != 0;
  snprintf(ag->node_id, sizeof ag->node_id, "%s", resp->node_id);
  ag->hb_interval_ms = interval;
  ag->registered = 1;
  ag->reregister = 0;
  pthread_cond_broadcast(&ag->cv);
  pthread_mutex_unlock(&ag->mu);
  px_log(again ? PX_LOG_WARN : PX_LOG_INFO,
         "%s node '%s' with the coordinator at %s as %s%s (heartbeat every %d ms, timeout %d ms)",
         again ? "re-registered" : "registered", ag->name, ag->cfg.coordinator, resp->node_id,
         changed ? " (a new id)" : "", interval, resp->heartbeat_timeout_ms);
  /* Registered: the node can take work, which is what "ready" means for a
   * node agent (a service manager waits for this, not for the process). */
  px_service_notify("%sSTATUS=%s node '%s' as %s with the coordinator at %s",
                    again ? "" : "READY=1\n", again ? "re-registered" : "registered", ag->name,
                    resp->node_id, ag->cfg.coordinator);
  px_rpc_message_free(resp);
  return PX_OK;
}

/* 1 when the control thread should leave the stream (mu not held). */
static int pxa_control_should_leave(pxa_agent_t *ag) {
  pthread_mutex_lock(&ag->mu);
  int leave = ag->stop || ag->quiesce || ag->reregister;
  pthread_mutex_unlock(&ag->mu);
  return leave;
}

static void pxa_handle_assignment(pxa_agent_t *ag, Prunex__V1__Assignment *as) {
  int cancel = as->action == PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_CANCEL;
  int start = as->action == PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_START;
  px_log(PX_LOG_INFO, "job %s: %s assignment for attempt %d (%zu rank%s, node %d of %d)",
         as->job_id, cancel ? "CANCEL" : start ? "START" : "unknown", as->attempt, as->n_ranks,
         as->n_ranks == 1 ? "" : "s", as->node_index, as->num_nodes);
  if (!start && !cancel) {
    px_rpc_message_free(as);
    return;
  }
  pxa_cmd_t *c = pxa_cmd_new(cancel ? PXA_CMD_CANCEL : PXA_CMD_START, as->job_id,
                             cancel ? "the coordinator cancelled the job" : "");
  if (!c) {
    px_log(PX_LOG_ERROR, "job %s: out of memory for the assignment", as->job_id);
    px_rpc_message_free(as);
    return;
  }
  c->attempt = as->attempt; /* CANCEL: the attempt to stop (0: all) */
  if (start) c->assignment = as;
  else px_rpc_message_free(as);
  pxa_post(ag, c);
}

/* Reads the stream until it ends or we must leave. */
static void pxa_follow_stream(pxa_agent_t *ag, px_rpc_stream_t *s) {
  for (;;) {
    if (pxa_control_should_leave(ag)) return;
    Prunex__V1__Assignment *as = NULL;
    px_status_t st = px_rpc_read_assignment(s, 1000, &as);
    if (st == PX_ERR_TIMEOUT) continue;
    if (st != PX_OK) {
      if (!pxa_control_should_leave(ag))
        px_log(PX_LOG_WARN, "assignment stream ended: %s; reconnecting", px_last_error());
      return;
    }
    if (!as) {
      px_log(PX_LOG_WARN, "the coordinator closed the assignment stream; reconnecting");
      return;
    }
    pxa_handle_assignment(ag, as);
  }
}

static void *pxa_control_main(void *arg) {
  pxa_agent_t *ag = arg;
  px_rpc_channel_t *ch = NULL;
  unsigned seed = (unsigned)getpid() ^ (unsigned)pxa_now_ms();
  int64_t backoff = PXA_BACKOFF_MIN_MS;
  int failures = 0;
  for (;;) {
    pthread_mutex_lock(&ag->mu);
    int leave = ag->stop || ag->quiesce;
    pthread_mutex_unlock(&ag->mu);
    if (leave) break;

    px_status_t st = ch ? PX_OK : px_rpc_channel_create(ag->cfg.coordinator, &ch);
    if (st == PX_OK) st = pxa_register(ag, ch);
    if (st == PX_OK) {
      failures = 0;
      backoff = PXA_BACKOFF_MIN_MS;
      char node_id[PXA_ID_MAX];
      pthread_mutex_lock(&ag->mu);
      snprintf(node_id, sizeof node_id, "%s", ag->node_id);
      pthread_mutex_unlock(&ag->mu);
      px_rpc_stream_t *s = NULL;
      st = px_rpc_watch_assignments(ch, node_id, &s);
      if (st == PX_OK) {
        pthread_mutex_lock(&ag->mu);
        ag->stream = s;
        pthread_mutex_unlock(&ag->mu);
        pxa_follow_stream(ag, s);
        pthread_mutex_lock(&ag->mu);
        ag->stream = NULL;
        pthread_mutex_unlock(&ag->mu);
        px_rpc_stream_destroy(s);
      } else {
        px_log(PX_LOG_WARN, "cannot watch assignments: %s", px_last_error());
      }
    } else if (failures++ == 0) {
      px_log(PX_LOG_WARN, "cannot register with the coordinator at %s: %s; retrying",
             ag->cfg.coordinator, px_last_error());
      px_service_notify("STATUS=cannot register with the coordinator at %s (retrying): %s",
                        ag->cfg.coordinator, px_last_error());
    } else {
      px_log(PX_LOG_DEBUG, "register: %s", px_last_error());
    }
    /* Whatever ended the session, start the next one on a fresh channel. */
    px_rpc_channel_destroy(ch);
    ch = NULL;
    pthread_mutex_lock(&ag->mu);
    if (!ag->stop && !ag->quiesce && !ag->reregister) pxa_wait(ag, pxa_backoff_next(&backoff, &seed));
    pthread_mutex_unlock(&ag->mu);
  }
  px_rpc_channel_destroy(ch);
  return NULL;
}

/* ---- heartbeat thread ------------------------------------------------------- */

static void *pxa_heartbeat_main(void *arg) {
  pxa_agent_t *ag = arg;
  px_rpc_channel_t *ch = NULL;
  int failures = 0;
  pthread_mutex_lock(&ag->mu);
  while (!ag->stop) {
    if (!ag->registered) {
      pxa_wait(ag, 500);
      continue;
    }
    char node_id[PXA_ID_MAX];
    snprintf(node_id, sizeof node_id, "%s", ag->node_id);
    int interval = ag->hb_interval_ms;
    size_t nrun = ag->nrunning_ids;
    char **run = nrun ? px_calloc(nrun, sizeof *run, "agent.heartbeat.jobs") : NULL;
    int *run_att = nrun ? px_calloc(nrun, sizeof *run_att, "agent.heartbeat.attempts") : NULL;
    size_t nr = 0;
    for (size_t i = 0; run && run_att && i < nrun; i++) {
      size_t len = strlen(ag->running_ids[i]) + 1;
      if ((run[nr] = px_malloc(len, "agent.heartbeat.job"))) {
        memcpy(run[nr], ag->running_ids[i], len);
        run_att[nr++] = ag->running_attempts ? ag->running_attempts[i] : 0;
      }
    }
    pthread_mutex_unlock(&ag->mu);

    Prunex__V1__HeartbeatRequest req = PRUNEX__V1__HEARTBEAT_REQUEST__INIT;
    req.node_id = node_id;
    req.n_devices = ag->ndevices;
    req.devices = ag->device_ptrs;
    req.n_running_job_ids = nr;
    req.running_job_ids = run;
    Prunex__V1__HeartbeatResponse *resp = NULL;
    int deadline = interval < 1000 ? 1000 : interval > 5000 ? 5000 : interval;
    px_status_t st = ch ? PX_OK : px_rpc_channel_create(ag->cfg.coordinator, &ch);
    if (st == PX_OK) st = px_rpc_heartbeat(ch, &req, deadline, &resp);
    if (st != PX_OK) {
      px_log(PX_LOG_DEBUG, "heartbeat: %s", px_last_error());
      px_rpc_channel_destroy(ch);
      ch = NULL;
    }

    pthread_mutex_lock(&ag->mu);
    if (st == PX_OK) {
      failures = 0;
      if (!resp->known && ag->registered && !strcmp(node_id, ag->node_id)) {
        px_log(PX_LOG_WARN, "the coordinator does not know node %s: registering again", node_id);
        ag->registered = 0;
        ag->reregister = 1;
        if (ag->stream) px_rpc_stream_cancel(ag->stream);
        pthread_cond_broadcast(&ag->cv);
      }
      for (size_t i = 0; i < resp->n_cancel_job_ids; i++) {
        pxa_cmd_t *c = pxa_cmd_new(PXA_CMD_CANCEL, resp->cancel_job_ids[i],
                                   "the coordinator no longer runs the job here");
        if (!c) continue;
        /* Only the attempt this heartbeat said was running: a newer one
         * started since (a restart) is not what the coordinator refused. */
        for (size_t k = 0; k < nr; k++)
          if (!strcmp(run[k], c->job_id)) c->attempt = run_att[k];
        pthread_mutex_unlock(&ag->mu);
        px_log(PX_LOG_INFO, "job %s: the coordinator asks to stop it", c->job_id);
        pxa_post(ag, c);
        pthread_mutex_lock(&ag->mu);
      }
      px_rpc_message_free(resp);
    } else if (++failures == 3 && ag->stream) {
      /* The stream may not notice a coordinator that stopped answering:
       * start a new session, which also registers again. */
      px_log(PX_LOG_WARN, "3 heartbeats failed (%s): reconnecting", px_last_error());
      px_rpc_stream_cancel(ag->stream);
    }
    for (size_t i = 0; i < nr; i++) px_free(run[i]);
    px_free(run);
    px_free(run_att);
    if (!ag->stop) pxa_wait(ag, interval);
  }
  pthread_mutex_unlock(&ag->mu);
  px_rpc_channel_destroy(ch);
  return NULL;
}

/* ---- reporter thread ----------------------------------------------------------- */

/* The model a rank that exited cleanly saved, from the node's metrics file
 * (the worker records it there at its end); "" when none or unreadable. */
static void pxa_exit_model_path(const pxa_agent_t *ag, const pxa_exit_t *e, char *buf,
                                size_t cap) {
  buf[0] = '\0';
  pxa_metrics_t *m = NULL;
  if (pxa_metrics_open(ag->metrics_db, &m) != PX_OK ||
      pxa_metrics_model_path(m, e->job_id, e->rank, buf, cap) != PX_OK)
    px_log(PX_LOG_WARN, "job %s: rank %d's model path is unknown: %s", e->job_id, e->rank,
           px_last_error());
  pxa_metrics_close(m);
}

static void *pxa_reporter_main(void *arg) {
  pxa_agent_t *ag = arg;
  px_rpc_channel_t *ch = NULL;
  unsigned seed = (unsigned)getpid() * 7919u;
  int64_t backoff = PXA_BACKOFF_MIN_MS;
  pthread_mutex_lock(&ag->mu);
  for (;;) {
    while (!ag->exits && !ag->stop) pxa_wait(ag, 1000);
    if (!ag->exits) break;
    if (ag->stop && pxa_now_ms() >= ag->flush_until_ms) {
      px_log(PX_LOG_WARN, "shutting down with unsent exit reports (job %s rank %d first)",
             ag->exits->job_id, ag->exits->rank);
      break;
    }
    pxa_exit_t *e = ag->exits;
    char node_id[PXA_ID_MAX];
    snprintf(node_id, sizeof node_id, "%s", ag->node_id);
    pthread_mutex_unlock(&ag->mu);

    Prunex__V1__RankExit req = PRUNEX__V1__RANK_EXIT__INIT;
    req.job_id = e->job_id;
    req.node_id = node_id;
    req.attempt = e->attempt;
    req.rank = e->rank;
    req.exit_code = e->exit_code;
    req.signal = e->signal;
    req.reason = e->reason ? e->reason : "";
    char model[4200] = "";
    if (e->exit_code == 0 && e->signal == 0) pxa_exit_model_path(ag, e, model, sizeof model);
    req.model_path = model;
    px_status_t st = ch ? PX_OK : px_rpc_channel_create(ag->cfg.coordinator, &ch);
    if (st == PX_OK) st = px_rpc_report_rank_exit(ch, &req, 3000);
    int drop = 0;
    if (st == PX_OK) {
      px_log(PX_LOG_INFO, "job %s: reported the exit of rank %d", e->job_id, e->rank);
      drop = 1;
    } else if (!px_rpc_last_retryable()) {
      px_log(PX_LOG_WARN, "job %s: the coordinator refused the exit report of rank %d: %s",
             e->job_id, e->rank, px_last_error());
      drop = 1;
    } else if (pxa_now_ms() - e->queued_ms > PXA_REPORT_GIVE_UP_MS) {
      px_log(PX_LOG_ERROR, "job %s: giving up on the exit report of rank %d: %s", e->job_id,
             e->rank, px_last_error());
      drop = 1;
    } else {
      px_log(PX_LOG_DEBUG, "job %s: exit report of rank %d: %s", e->job_id, e->rank,
             px_last_error());
      px_rpc_channel_destroy(ch);
      ch = NULL;
    }
    pthread_mutex_lock(&ag->mu);
    if (drop) {
      ag->exits = e->next;
      if (!ag->exits) ag->exits_tail = &ag->exits;
      pxa_exit_free(e);
      backoff = PXA_BACKOFF_MIN_MS;
    } else {
      pxa_wait(ag, pxa_backoff_next(&backoff, &seed));
    }
  }
  pthread_mutex_unlock(&ag->mu);
  px_rpc_channel_destroy(ch);
  return NULL;
}

/* ---- start and stop ---------------------------------------------------------------- */

/* Starts fn(ag) in *thr and records it under bit of threads_started (so
 * that stop joins it). */
static px_status_t pxa_thread_start(pxa_agent_t *ag, pthread_t *thr, void *(*fn)(void *),
                                    int bit, const char *what) {
  if (pthread_create(thr, NULL, fn, ag) != 0)
    return px_set_error(PX_ERR_INTERNAL, "cannot start the %s thread", what);
  ag->threads_started |= bit;
  return PX_OK;
}

px_status_t pxa_session_start(pxa_agent_t *ag) {
  PX_CHECK(pxa_thread_start(ag, &ag->reporter_thr, pxa_reporter_main, 4, "reporter"));
  PX_CHECK(pxa_thread_start(ag, &ag->logship_thr, pxa_logship_main, 8, "log upload"));
  PX_CHECK(pxa_thread_start(ag, &ag->heartbeat_thr, pxa_heartbeat_main, 2, "heartbeat"));
  PX_CHECK(pxa_thread_start(ag, &ag->control_thr, pxa_control_main, 1, "control"));
  return PX_OK;
}

void pxa_session_stop(pxa_agent_t *ag) {
  pthread_mutex_lock(&ag->mu);
  ag->stop = 1;
  ag->quiesce = 1;
  ag->flush_until_ms = pxa_now_ms() + PXA_FLUSH_MS;
  if (ag->stream) px_rpc_stream_cancel(ag->stream);
  pthread_cond_broadcast(&ag->cv);
  pthread_mutex_unlock(&ag->mu);
  if (ag->threads_started & 1) pthread_join(ag->control_thr, NULL);
  if (ag->threads_started & 2) pthread_join(ag->heartbeat_thr, NULL);
  if (ag->threads_started & 4) pthread_join(ag->reporter_thr, NULL);
  if (ag->threads_started & 8) pthread_join(ag->logship_thr, NULL);
  ag->threads_started = 0;
}

void pxa_session_free(pxa_agent_t *ag) {
  while (ag->cmds) {
    pxa_cmd_t *c = ag->cmds;
    ag->cmds = c->next;
    px_rpc_message_free(c->assignment);
    px_free(c);
  }
  ag->cmds_tail = &ag->cmds;
  while (ag->exits) {
    pxa_exit_t *e = ag->exits;
    ag->exits = e->next;
    pxa_exit_free(e);
  }
  ag->exits_tail = &ag->exits;
  for (size_t i = 0; i < ag->nrunning_ids; i++) px_free(ag->running_ids[i]);
  px_free(ag->running_ids);
  ag->running_ids = NULL;
  px_free(ag->running_attempts);
  ag->running_attempts = NULL;
  px_free(ag->logs);
  ag->logs = NULL;
  ag->nlogs = ag->caplogs = 0;
  ag->nrunning_ids = 0;
}
