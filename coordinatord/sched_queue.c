/* The pending jobs in memory: what the scheduler's snapshot
 * needs of each PENDING job (owner, shape, priority, submission time, time
 * limit, preferred nodes, stored reason), kept in step with the database so
 * that a scheduling pass does not read 10,000 rows back from SQLite each
 * time. The database stays the truth: every change of a job's state goes
 * through coord_job_set_state, whose hook (coord_sched_state_changed) adds
 * a job entering PENDING (its row read once, inside the transaction) and
 * drops one leaving it, and coord_sched_set_reason updates the reason. A
 * transaction that rolls back (SQLite's rollback hook, explicit or
 * implicit) may have changed the queue for nothing: the queue is then
 * marked stale and read again from the database at the next pass, as it is
 * after a start. Entries are sorted by the jobs' row ids (submission
 * order); job ids are "job-" and the row id. Loop thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "db/sched.h"
#include "prunex/check.h"

struct coord_queue {
  coord_queue_entry_t *e;
  size_t n, cap;
  int stale;
};

static void coord_queue_entry_free(coord_queue_entry_t *e) {
  px_free(e->prefer);
  px_free(e->reason);
  px_free(e->depends);
  e->prefer = e->reason = e->depends = NULL;
}

static void coord_queue_clear(coord_queue_t *q) {
  for (size_t i = 0; i < q->n; i++) coord_queue_entry_free(&q->e[i]);
  q->n = 0;
}

static void coord_queue_on_rollback(void *arg) { ((coord_queue_t *)arg)->stale = 1; }

px_status_t coord_queue_create(coord_t *c) {
  coord_queue_t *q = px_calloc(1, sizeof *q, "coordd.queue");
  if (!q) return PX_ERR_NOMEM;
  q->stale = 1;
  c->queue = q;
  coord_db_sched_on_rollback(c, coord_queue_on_rollback, q);
  return PX_OK;
}

void coord_queue_destroy(coord_t *c) {
  coord_queue_t *q = c->queue;
  if (!q) return;
  if (c->db) coord_db_sched_on_rollback(c, NULL, NULL);
  coord_queue_clear(q);
  px_free(q->e);
  px_free(q);
  c->queue = NULL;
}

/* The index of the first entry with rowid >= id. */
static size_t coord_queue_lower(const coord_queue_t *q, int64_t id) {
  size_t lo = 0, hi = q->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (q->e[mid].rowid < id) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static int64_t coord_queue_rowid(const char *job_id) {
  long long id = 0;
  char tail;
  if (sscanf(job_id, "job-%lld%c", &id, &tail) != 1 || id <= 0) return -1;
  return id;
}

static px_status_t coord_queue_reserve(coord_queue_t *q, size_t n) {
  if (n <= q->cap) return PX_OK;
  size_t cap = q->cap ? q->cap * 2 : 256;
  while (cap < n) cap *= 2;
  coord_queue_entry_t *e = px_realloc(q->e, cap * sizeof *e, "coordd.queue");
  if (!e) return PX_ERR_NOMEM;
  q->e = e;
  q->cap = cap;
  return PX_OK;
}

/* coord_db_sched_pending's visitor: the entry goes to the end of q. */
static px_status_t coord_queue_append(void *ctx, coord_queue_entry_t *e) {
  coord_queue_t *q = ctx;
  px_status_t rc = coord_queue_reserve(q, q->n + 1);
  if (rc != PX_OK) {
    coord_queue_entry_free(e);
    return rc;
  }
  q->e[q->n++] = *e;
  return PX_OK;
}

px_status_t coord_queue_sync(coord_t *c, const coord_queue_entry_t **out, size_t *n) {
  if (!c->queue) PX_CHECK(coord_queue_create(c)); /* at the first pass */
  coord_queue_t *q = c->queue;
  if (q->stale) {
    coord_queue_clear(q);
    px_status_t rc = coord_db_sched_pending(c, coord_queue_append, q);
    if (rc != PX_OK) {
      coord_queue_clear(q);
      return rc;
    }
    q->stale = 0;
  }
  *out = q->e;
  *n = q->n;
  return PX_OK;
}

/* Drops the job's entry, if any. */
static void coord_queue_drop(coord_queue_t *q, int64_t id) {
  size_t i = coord_queue_lower(q, id);
  if (i >= q->n || q->e[i].rowid != id) return;
  coord_queue_entry_free(&q->e[i]);
  memmove(&q->e[i], &q->e[i + 1], (q->n - i - 1) * sizeof *q->e);
  q->n--;
}

/* Adds (or refreshes) the job's entry from its row, in the transaction. */
static px_status_t coord_queue_load(coord_t *c, coord_queue_t *q, const char *job_id) {
  PX_CHECK(coord_queue_reserve(q, q->n + 1));
  coord_queue_entry_t e;
  int found = 0;
  PX_CHECK(coord_db_sched_queue_entry(c, job_id, &e, &found));
  if (!found) return PX_OK;
  coord_queue_drop(q, e.rowid);
  size_t i = coord_queue_lower(q, e.rowid);
  memmove(&q->e[i + 1], &q->e[i], (q->n - i) * sizeof *q->e);
  q->e[i] = e;
  q->n++;
  return PX_OK;
}

px_status_t coord_queue_job_changed(coord_t *c, const char *job_id, int to) {
  coord_queue_t *q = c->queue;
  if (!q || q->stale) return PX_OK; /* read whole at the next pass */
  int64_t id = coord_queue_rowid(job_id);
  if (id < 0) {
    q->stale = 1;
    return PX_OK;
  }
  if (to != JS_PENDING) {
    coord_queue_drop(q, id);
    return PX_OK;
  }
  px_status_t rc = coord_queue_load(c, q, job_id);
  if (rc != PX_OK) q->stale = 1; /* the transaction fails too: read whole next time */
  return rc;
}

static char *coord_queue_dup(const char *s) {
  size_t n = strlen(s);
  char *d = px_malloc(n + 1, "coordd.queue_text");
  if (d) memcpy(d, s, n + 1);
  return d;
}

void coord_queue_set_reason(coord_t *c, const char *job_id, const char *reason) {
  coord_queue_t *q = c->queue;
  if (!q || q->stale) return;
  int64_t id = coord_queue_rowid(job_id);
  size_t i = id < 0 ? q->n : coord_queue_lower(q, id);
  if (i >= q->n || q->e[i].rowid != id) return;
  char *r = coord_queue_dup(reason);
  if (!r) {
    q->stale = 1;
    return;
  }
  px_free(q->e[i].reason);
  q->e[i].reason = r;
}
