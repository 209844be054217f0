/* pxctl watch: follows a job to its end (pxctl_watch), waiting for a
 * coordinator that goes away; with --tensorboard DIR, writes the job's
 * figures into an event file as they come (pxctl_tensorboard.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pxctl.h"

/* pxctl watch waits this long for a coordinator that went away. */
#define PXCTL_WATCH_RECONNECT_MS (15 * 60 * 1000)

/* After a failed call of watch: 1 when it is worth another try (the
 * coordinator is unreachable or restarting, and has been for less than
 * PXCTL_WATCH_RECONNECT_MS since *lost_at), after a pause that doubles up
 * to 5 s and a new channel in *ch; 0 to give up (*ch still valid, or NULL
 * when a new one could not be made). */
static int pxctl_watch_retry(pxctl_opts_t *o, px_rpc_channel_t **ch, int64_t *lost_at,
                             int64_t *pause) {
  int retryable = px_rpc_last_retryable();
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  if (!*lost_at) *lost_at = now;
  if (!retryable || now - *lost_at > PXCTL_WATCH_RECONNECT_MS) return 0;
  fprintf(stderr, "pxctl: watch %s: the coordinator at %s is unreachable (%s); reconnecting\n",
          o->pos[0], o->coordinator, px_last_error());
  px_rpc_channel_destroy(*ch);
  struct timespec d = {*pause / 1000, (long)(*pause % 1000) * 1000000L};
  nanosleep(&d, NULL);
  *pause = *pause * 2 > 5000 ? 5000 : *pause * 2;
  *ch = pxctl_connect(o);
  return *ch != NULL;
}

int pxctl_cmd_watch(pxctl_opts_t *o) {
  px_rpc_channel_t *ch = pxctl_connect(o);
  if (!ch) return PXCTL_EXIT_FAIL;
  /* A coordinator that goes away (a restart, an outage), or is not there
   * yet, is waited for: the call is made again, with a backoff, for
   * PXCTL_WATCH_RECONNECT_MS. GetJob first: a clear "no job" beats a stream
   * that ends NOT_FOUND. */
  int64_t lost_at = 0, pause = 200;
  Prunex__V1__Job *job = NULL;
  while (px_rpc_get_job(ch, o->pos[0], PXCTL_DEADLINE_MS, &job) != PX_OK) {
    if (pxctl_watch_retry(o, &ch, &lost_at, &pause)) continue;
    if (!ch) return PXCTL_EXIT_FAIL;
    int rc = pxctl_rpc_fail(ch, o->pos[0]);
    px_rpc_channel_destroy(ch);
    return rc;
  }
  pxctl_tb_t *tb = NULL;
  int tb_rc = o->tensorboard ? pxctl_tb_open(o->tensorboard, job->job_id, &tb) : 0;
  px_rpc_message_free(job);
  if (tb_rc) {
    px_rpc_channel_destroy(ch);
    return tb_rc;
  }
  if (tb) pxctl_tb_follow(tb, &ch, NULL);
  void *holder = NULL;
  const Prunex__V1__Job *fin = NULL;
  int rc = PXCTL_EXIT_OK;
  px_status_t st;
  while ((st = pxctl_watch(ch, o->pos[0], o->json ? NULL : stdout, tb ? pxctl_tb_poll : NULL, tb,
                           &holder, &fin)) != PX_OK) {
    px_rpc_message_free(holder);
    holder = NULL;
    if (!pxctl_watch_retry(o, &ch, &lost_at, &pause)) break;
  }
  if (!ch) {
    pxctl_tb_close(tb);
    return PXCTL_EXIT_FAIL;
  }
  if (st != PX_OK) rc = pxctl_rpc_fail(ch, o->pos[0]);
  /* the iterations not written yet: all of them when the job is over */
  if (tb) tb_rc = pxctl_tb_sync(tb, ch, st == PX_OK);
  if (tb && !tb_rc) tb_rc = pxctl_tb_close(tb);
  else pxctl_tb_close(tb);
  if (st == PX_OK && o->json) {
    pxctl_json_print_job(fin);
    rc = fin->state == PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED ? 0 : PXCTL_EXIT_FAIL;
  } else if (st == PX_OK) {
    printf("%s %s%s%s\n", fin->job_id, px_rpc_job_state_name(fin->state),
           fin->reason[0] ? ": " : "", fin->reason);
    rc = fin->state == PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED ? 0 : PXCTL_EXIT_FAIL;
  }
  px_rpc_message_free(holder);
  px_rpc_channel_destroy(ch);
  return rc ? rc : tb_rc;
}
