/* Job notifications (issue 31): an HTTP POST of the job's summary (the JSON
 * of GET /api/v1/jobs/JOB) to the spec's notify.url and the coordinator's
 * notify_url when the job enters one of the states asked for.
 *
 * The loop thread only queues (coord_notify_job: one query, the JSON built
 * from the database it already holds); one sender thread owns a libcurl
 * easy handle and does every POST, so a slow or dead receiver never holds
 * the loop. A failed POST (no connection, a timeout, a status that is not
 * 2xx) is retried with exponential backoff (COORD_NOTIFY_BACKOFF_MS,
 * doubling, at most COORD_NOTIFY_ATTEMPTS tries); each failure and the
 * final giving-up are logged. The queue is bounded (COORD_NOTIFY_QUEUE_MAX):
 * past it a notification is dropped with an error in the log. Notifications
 * still queued at shutdown are dropped (logged): they are not in the
 * database. */
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coord.h"
#include "http.h"
#include "prunex/check.h"
#include "prunex/jobspec.h"

#define COORD_NOTIFY_ATTEMPTS 5
#define COORD_NOTIFY_BACKOFF_MS 1000
#define COORD_NOTIFY_BACKOFF_MAX_MS 60000
#define COORD_NOTIFY_TIMEOUT_MS 10000
#define COORD_NOTIFY_QUEUE_MAX 10000

typedef struct coord_notify_item {
  struct coord_notify_item *next;
  char *url;
  char *body;
  char job_id[64];
  char state[16];
  int attempt;         /* tries made */
  int64_t due_ms;      /* monotonic */
} coord_notify_item_t;

struct coord_notifier {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  coord_notify_item_t *items; /* unordered; the earliest due is searched */
  size_t n;
  int stop;
  atomic_llong sent, failed;  /* POSTs that succeeded / notifications given up */
};

static int64_t coord_mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void coord_notify_item_free(coord_notify_item_t *it) {
  if (!it) return;
  px_free(it->url);
  px_free(it->body);
  px_free(it);
}

static size_t coord_notify_discard(char *p, size_t size, size_t n, void *ctx) {
  (void)p;
  (void)ctx;
  return size * n; /* the receiver's answer is not needed */
}

/* One POST: 0 when the receiver answered 2xx, else -1 with why in err. */
static int coord_notify_post(CURL *curl, const coord_notify_item_t *it, char *err, size_t cap) {
  struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
  char ebuf[CURL_ERROR_SIZE] = "";
  curl_easy_reset(curl);
  curl_easy_setopt(curl, CURLOPT_URL, it->url);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, it->body);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)strlen(it->body));
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "pxcoordd");
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)COORD_NOTIFY_TIMEOUT_MS);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, (long)COORD_NOTIFY_TIMEOUT_MS / 2);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, ebuf);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, coord_notify_discard);
  CURLcode rc = curl_easy_perform(curl);
  long status = 0;
  if (rc == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(h);
  if (rc != CURLE_OK) {
    snprintf(err, cap, "%s", ebuf[0] ? ebuf : curl_easy_strerror(rc));
    return -1;
  }
  if (status < 200 || status > 299) {
    snprintf(err, cap, "the receiver answered HTTP %ld", status);
    return -1;
  }
  return 0;
}

static void *coord_notify_main(void *arg) {
  coord_notifier_t *n = arg;
  CURL *curl = curl_easy_init();
  pthread_mutex_lock(&n->mu);
  while (!n->stop) {
    coord_notify_item_t **best = NULL;
    for (coord_notify_item_t **p = &n->items; *p; p = &(*p)->next)
      if (!best || (*p)->due_ms < (*best)->due_ms) best = p;
    if (!best) {
      pthread_cond_wait(&n->cv, &n->mu);
      continue;
    }
    int64_t now = coord_mono_ms();
    if ((*best)->due_ms > now) {
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      int64_t wait = (*best)->due_ms - now;
      until.tv_sec += wait / 1000;
      until.tv_nsec += (long)(wait % 1000) * 1000000L;
      if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&n->cv, &n->mu, &until);
      continue;
    }
    coord_notify_item_t *it = *best;
    *best = it->next;
    n->n--;
    pthread_mutex_unlock(&n->mu);
    char err[CURL_ERROR_SIZE + 64] = "no libcurl handle";
    int ok = curl && coord_notify_post(curl, it, err, sizeof err) == 0;
    it->attempt++;
    if (ok) {
      atomic_fetch_add(&n->sent, 1);
      px_log(PX_LOG_INFO, "notify: job %s %s: posted to %s", it->job_id, it->state, it->url);
      coord_notify_item_free(it);
      pthread_mutex_lock(&n->mu);
      continue;
    }
    if (it->attempt >= COORD_NOTIFY_ATTEMPTS) {
      atomic_fetch_add(&n->failed, 1);
      px_log(PX_LOG_ERROR, "notify: job %s %s: %s failed %d times (last: %s); giving up",
             it->job_id, it->state, it->url, it->attempt, err);
      coord_notify_item_free(it);
      pthread_mutex_lock(&n->mu);
      continue;
    }
    int64_t backoff = (int64_t)COORD_NOTIFY_BACKOFF_MS << (it->attempt - 1);
    if (backoff > COORD_NOTIFY_BACKOFF_MAX_MS) backoff = COORD_NOTIFY_BACKOFF_MAX_MS;
    px_log(PX_LOG_WARN, "notify: job %s %s: %s failed (%s); retrying in %lld ms (try %d of %d)",
           it->job_id, it->state, it->url, err, (long long)backoff, it->attempt + 1,
           COORD_NOTIFY_ATTEMPTS);
    it->due_ms = coord_mono_ms() + backoff;
    pthread_mutex_lock(&n->mu);
    it->next = n->items;
    n->items = it;
    n->n++;
  }
  pthread_mutex_unlock(&n->mu);
  if (curl) curl_easy_cleanup(curl);
  return NULL;
}

px_status_t coord_notifier_start(coord_notifier_t **out) {
  *out = NULL;
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
    return px_set_error(PX_ERR_BACKEND, "notify: libcurl did not initialise");
  coord_notifier_t *n = px_malloc(sizeof *n, "coordd.notifier");
  if (!n) return PX_ERR_NOMEM;
  memset(n, 0, sizeof *n);
  pthread_mutex_init(&n->mu, NULL);
  pthread_cond_init(&n->cv, NULL);
  if (pthread_create(&n->thread, NULL, coord_notify_main, n) != 0) {
    pthread_mutex_destroy(&n->mu);
    pthread_cond_destroy(&n->cv);
    px_free(n);
    return px_set_error(PX_ERR_INTERNAL, "notify: cannot start the sender thread");
  }
  *out = n;
  return PX_OK;
}

void coord_notifier_stop(coord_notifier_t *n) {
  if (!n) return;
  pthread_mutex_lock(&n->mu);
  n->stop = 1;
  pthread_cond_signal(&n->cv);
  pthread_mutex_unlock(&n->mu);
  pthread_join(n->thread, NULL);
  if (n->n)
    px_log(PX_LOG_WARN, "notify: %zu notification%s still queued at shutdown, not sent", n->n,
           n->n == 1 ? "" : "s");
  while (n->items) {
    coord_notify_item_t *it = n->items;
    n->items = it->next;
    coord_notify_item_free(it);
  }
  pthread_mutex_destroy(&n->mu);
  pthread_cond_destroy(&n->cv);
  px_free(n);
  curl_global_cleanup();
}

/* Queues one POST (copies url and body); logs and drops it when the queue
 * is full or memory runs out. */
static void coord_notify_queue(coord_notifier_t *n, const char *url, const char *body,
                               const char *job_id, const char *state) {
  coord_notify_item_t *it = px_malloc(sizeof *it, "coordd.notify");
  if (it) {
    memset(it, 0, sizeof *it);
    it->url = px_malloc(strlen(url) + 1, "coordd.notify");
    it->body = px_malloc(strlen(body) + 1, "coordd.notify");
  }
  if (!it || !it->url || !it->body) {
    coord_notify_item_free(it);
    px_log(PX_LOG_ERROR, "notify: job %s %s: out of memory, not sent to %s", job_id, state, url);
    return;
  }
  memcpy(it->url, url, strlen(url) + 1);
  memcpy(it->body, body, strlen(body) + 1);
  snprintf(it->job_id, sizeof it->job_id, "%s", job_id);
  snprintf(it->state, sizeof it->state, "%s", state);
  it->due_ms = coord_mono_ms();
  pthread_mutex_lock(&n->mu);
  int full = n->n >= COORD_NOTIFY_QUEUE_MAX;
  if (!full) {
    it->next = n->items;
    n->items = it;
    n->n++;
    pthread_cond_signal(&n->cv);
  }
  pthread_mutex_unlock(&n->mu);
  if (full) {
    px_log(PX_LOG_ERROR, "notify: job %s %s: %d notifications are queued already; not sent to %s",
           job_id, state, COORD_NOTIFY_QUEUE_MAX, url);
    coord_notify_item_free(it);
  }
}

void coord_notify_job(coord_t *c, const char *job_id) {
  if (!c->notifier) return;
  coord_sched_notify_t nt;
  if (coord_db_sched_notify_due(c, job_id, &nt) != PX_OK) {
    px_log(PX_LOG_ERROR, "notify: job %s: %s", job_id, px_last_error());
    return;
  }
  if (!nt.due) return;
  unsigned global = 0;
  int to_job = nt.url[0] && (nt.mask & (1u << nt.state));
  int to_all = c->cfg.notify_url[0] &&
               px_jobspec_notify_states(c->cfg.notify_states, &global) == 0 &&
               (global & (1u << nt.state));
  if (coord_db_sched_notify_done(c, job_id, nt.state) != PX_OK) {
    px_log(PX_LOG_ERROR, "notify: job %s: %s", job_id, px_last_error());
    return;
  }
  if (!to_job && !to_all) return;
  coord_hbuf_t body = COORD_HBUF_INIT;
  int status = coord_http_job(c->db, job_id, &body);
  const char *state = px_rpc_job_state_name((Prunex__V1__JobState)nt.state);
  if (status != 200 || body.oom || !body.p) {
    px_log(PX_LOG_ERROR, "notify: job %s %s: cannot build the summary (HTTP %d)", job_id, state,
           status);
  } else {
    if (to_job) coord_notify_queue(c->notifier, nt.url, body.p, job_id, state);
    if (to_all && (!to_job || strcmp(nt.url, c->cfg.notify_url) != 0))
      coord_notify_queue(c->notifier, c->cfg.notify_url, body.p, job_id, state);
  }
  px_buf_free(&body);
}
