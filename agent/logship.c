/* pxagent's rank log uploads: the log of every rank this node runs
 * (WORK_DIR/jobs/JOB/rank-R.log) is sent to the coordinator in chunks
 * (AppendRankLog), so that `pxctl logs` reads it from any host through the
 * coordinator. A pass every PXA_LOG_SHIP_MS sends what each log gained, up
 * to PXA_LOG_PASS_CHUNKS chunks of PXA_LOG_CHUNK bytes per log (a rank
 * that writes faster than that is caught up over the next passes); when a
 * rank exits, a pass runs at once and sends the rest with eof, after which
 * the log leaves the list.
 *
 * The coordinator answers with the offset it holds the log to, and the
 * next chunk starts there, so a lost answer, a coordinator restart or a
 * restored database make the agent resend, never skip. A refusal that
 * retrying cannot cure (job unknown, rank not on this node) drops the log.
 * Runs on its own thread: blocking reads and RPCs never touch the loop. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"

void pxa_logship_add(pxa_agent_t *ag, const char *job_id, int rank, const char *path) {
  pthread_mutex_lock(&ag->mu);
  for (size_t i = 0; i < ag->nlogs; i++) {
    pxa_logfile_t *l = &ag->logs[i];
    if (l->rank == rank && !strcmp(l->job_id, job_id)) {
      /* a later attempt of the rank appends to the same log: one upload */
      l->exited = 0;
      snprintf(l->path, sizeof l->path, "%s", path);
      pthread_mutex_unlock(&ag->mu);
      return;
    }
  }
  if (ag->nlogs == ag->caplogs) {
    size_t cap = ag->caplogs ? 2 * ag->caplogs : 8;
    pxa_logfile_t *l = px_realloc(ag->logs, cap * sizeof *l, "agent.logs");
    if (!l) {
      pthread_mutex_unlock(&ag->mu);
      px_log(PX_LOG_WARN, "job %s: out of memory: rank %d's log stays on this node", job_id, rank);
      return;
    }
    ag->logs = l;
    ag->caplogs = cap;
  }
  pxa_logfile_t *l = &ag->logs[ag->nlogs++];
  memset(l, 0, sizeof *l);
  snprintf(l->job_id, sizeof l->job_id, "%s", job_id);
  l->rank = rank;
  snprintf(l->path, sizeof l->path, "%s", path);
  pthread_mutex_unlock(&ag->mu);
}

void pxa_logship_exited(pxa_agent_t *ag, const char *job_id, int rank) {
  pthread_mutex_lock(&ag->mu);
  for (size_t i = 0; i < ag->nlogs; i++)
    if (ag->logs[i].rank == rank && !strcmp(ag->logs[i].job_id, job_id)) ag->logs[i].exited = 1;
  pthread_cond_broadcast(&ag->cv);
  pthread_mutex_unlock(&ag->mu);
}

/* Index of the entry (mu held), or -1 when it was removed meanwhile. */
static long pxa_logship_find(pxa_agent_t *ag, const char *job_id, int rank) {
  for (size_t i = 0; i < ag->nlogs; i++)
    if (ag->logs[i].rank == rank && !strcmp(ag->logs[i].job_id, job_id)) return (long)i;
  return -1;
}

static void pxa_logship_remove(pxa_agent_t *ag, size_t i) {
  ag->logs[i] = ag->logs[--ag->nlogs];
}

typedef enum { SHIP_MORE, SHIP_IDLE, SHIP_DONE, SHIP_DROP, SHIP_RETRY } pxa_ship_t;

/* Sends one chunk of the log from l->offset (a copy, mu not held): what to
 * do next. Updates l->offset from the answer. */
static pxa_ship_t pxa_logship_chunk(pxa_agent_t *ag, px_rpc_channel_t **ch, pxa_logfile_t *l,
                                    const char *node_id, uint8_t *buf) {
  int fd = open(l->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return l->exited ? SHIP_DROP : SHIP_IDLE;
  ssize_t n = pread(fd, buf, PXA_LOG_CHUNK, (off_t)l->offset);
  off_t end = lseek(fd, 0, SEEK_END);
  close(fd);
  if (n < 0) return SHIP_DROP;
  int at_end = (off_t)(l->offset + n) >= end;
  if (n == 0 && !l->exited) return SHIP_IDLE;
  Prunex__V1__RankLogChunk req = PRUNEX__V1__RANK_LOG_CHUNK__INIT;
  req.job_id = l->job_id;
  req.node_id = (char *)node_id;
  req.rank = l->rank;
  req.offset = l->offset;
  req.data.data = buf;
  req.data.len = (size_t)n;
  req.eof = l->exited && at_end;
  Prunex__V1__RankLogChunkResponse *resp = NULL;
  px_status_t st = *ch ? PX_OK : px_rpc_channel_create(ag->cfg.coordinator, ch);
  if (st == PX_OK) st = px_rpc_append_rank_log(*ch, &req, 5000, &resp);
  if (st != PX_OK) {
    if (!px_rpc_last_retryable()) {
      px_log(PX_LOG_WARN, "job %s: the coordinator refused rank %d's log: %s", l->job_id,
             l->rank, px_last_error());
      return SHIP_DROP;
    }
    px_log(PX_LOG_DEBUG, "job %s: rank %d's log: %s", l->job_id, l->rank, px_last_error());
    px_rpc_channel_destroy(*ch);
    *ch = NULL;
    return SHIP_RETRY;
  }
  int64_t sent_to = l->offset + n;
  l->offset = resp->next_offset;
  px_rpc_message_free(resp);
  if (l->offset != sent_to) return SHIP_MORE; /* the coordinator wants it from elsewhere */
  if (req.eof) return SHIP_DONE;
  return at_end ? SHIP_IDLE : SHIP_MORE;
}

/* One pass over the list: returns 1 when some log is still unfinished. */
static int pxa_logship_pass(pxa_agent_t *ag, px_rpc_channel_t **ch, uint8_t *buf) {
  pthread_mutex_lock(&ag->mu);
  size_t n = ag->nlogs;
  pthread_mutex_unlock(&ag->mu);
  for (size_t k = 0; k < n; k++) {
    pxa_logfile_t l;
    char node_id[PXA_ID_MAX];
    pthread_mutex_lock(&ag->mu);
    if (k >= ag->nlogs || !ag->registered) {
      pthread_mutex_unlock(&ag->mu);
      break;
    }
    l = ag->logs[k];
    snprintf(node_id, sizeof node_id, "%s", ag->node_id);
    pthread_mutex_unlock(&ag->mu);
    pxa_ship_t what = SHIP_MORE;
    for (int c = 0; c < PXA_LOG_PASS_CHUNKS && what == SHIP_MORE; c++)
      what = pxa_logship_chunk(ag, ch, &l, node_id, buf);
    pthread_mutex_lock(&ag->mu);
    long i = pxa_logship_find(ag, l.job_id, l.rank);
    if (i >= 0) {
      ag->logs[i].offset = l.offset;
      /* (unless a later attempt of the rank took the entry meanwhile) */
      if ((what == SHIP_DONE || what == SHIP_DROP) && ag->logs[i].exited) {
        pxa_logship_remove(ag, (size_t)i);
        n--;
        k--; /* the last entry moved here */
      }
    }
    pthread_mutex_unlock(&ag->mu);
    if (what == SHIP_RETRY) break; /* the coordinator is away: try again next pass */
  }
  pthread_mutex_lock(&ag->mu);
  int left = ag->nlogs > 0;
  pthread_mutex_unlock(&ag->mu);
  return left;
}

/* 1 when some listed rank has exited (mu held): a pass is due now. */
static int pxa_logship_due(const pxa_agent_t *ag) {
  for (size_t i = 0; i < ag->nlogs; i++)
    if (ag->logs[i].exited) return 1;
  return 0;
}

void *pxa_logship_main(void *arg) {
  pxa_agent_t *ag = arg;
  px_rpc_channel_t *ch = NULL;
  uint8_t *buf = px_malloc(PXA_LOG_CHUNK, "agent.logship");
  if (!buf) {
    px_log(PX_LOG_ERROR, "out of memory: rank logs are not uploaded");
    return NULL;
  }
  int64_t next = pxa_now_ms() + PXA_LOG_SHIP_MS;
  pthread_mutex_lock(&ag->mu);
  for (;;) {
    if (ag->stop) {
      /* Shutting down: finish the logs of ranks that ended, for as long
       * as exit reports are still tried. */
      int exited = pxa_logship_due(ag);
      if (!exited || pxa_now_ms() >= ag->flush_until_ms) break;
    } else if (!pxa_logship_due(ag) && pxa_now_ms() < next) {
      pxa_cond_wait_ms(&ag->cv, &ag->mu, next - pxa_now_ms());
      continue;
    }
    pthread_mutex_unlock(&ag->mu);
    pxa_logship_pass(ag, &ch, buf);
    next = pxa_now_ms() + PXA_LOG_SHIP_MS;
    pthread_mutex_lock(&ag->mu);
    /* An exited rank whose upload failed must not spin: wait a little. */
    if (pxa_logship_due(ag)) {
      pthread_mutex_unlock(&ag->mu);
      struct timespec ts = {0, 200 * 1000000L};
      nanosleep(&ts, NULL);
      pthread_mutex_lock(&ag->mu);
    }
  }
  pthread_mutex_unlock(&ag->mu);
  px_free(buf);
  px_rpc_channel_destroy(ch);
  return NULL;
}
