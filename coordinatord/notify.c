/* Job notifications: an HTTP POST of the job's summary (the JSON
 * of GET /api/v1/jobs/JOB) to the spec's notify.url and the coordinator's
 * notify_url when the job enters one of the states asked for.
 *
 * The loop thread only queues (coord_notify_job: one query, the JSON built
 * from the database it already holds); a pool of COORD_NOTIFY_THREADS
 * sender threads, each with its libcurl easy handle, does the POSTs, so a
 * slow or dead receiver never holds the loop. Each destination (host:port)
 * has at most COORD_NOTIFY_PER_DEST POSTs in flight and at most
 * COORD_NOTIFY_DEST_QUEUE_MAX waiting, and every POST has a connect and a
 * total timeout: a receiver that accepts and never answers
 * delays its own notifications, not other destinations'. A failed POST (no
 * connection, a timeout, a status that is not 2xx) is retried with
 * exponential backoff (COORD_NOTIFY_BACKOFF_MS, doubling, at most
 * COORD_NOTIFY_ATTEMPTS tries); each failure and the final giving-up are
 * logged. The queue is bounded (COORD_NOTIFY_QUEUE_MAX): past it a
 * notification is dropped with an error in the log. Notifications still
 * queued at shutdown are dropped (logged): they are not in the database.
 *
 * A spec's URL is checked against the notify policy again right before each
 * POST (notify_policy.h: resolved afresh, every address checked) and libcurl
 * is pinned to the addresses checked (CURLOPT_RESOLVE, and an open-socket
 * callback that refuses any other); a refusal then is logged and the
 * notification dropped. No redirects are followed and no proxy is used. The
 * operator's own notify_url is trusted. URLs are logged with their userinfo
 * and query hidden. */
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coord.h"
#include "http.h"
#include "notify_policy.h"
#include "prunex/check.h"
#include "prunex/jobspec.h"

#define COORD_NOTIFY_ATTEMPTS 5
#define COORD_NOTIFY_BACKOFF_MS 1000
#define COORD_NOTIFY_BACKOFF_MAX_MS 60000
#define COORD_NOTIFY_TIMEOUT_MS 10000   /* a whole POST */
#define COORD_NOTIFY_CONNECT_MS 3000    /* its connection (and the DNS lookup before it) */
#define COORD_NOTIFY_QUEUE_MAX 10000
#define COORD_NOTIFY_THREADS 4
#define COORD_NOTIFY_PER_DEST 2         /* POSTs in flight to one host:port */
#define COORD_NOTIFY_DEST_QUEUE_MAX 1000 /* notifications waiting for one host:port */

/* A destination with notifications queued or in flight (freed when none). */
typedef struct coord_notify_dest_count {
  struct coord_notify_dest_count *next;
  char key[300]; /* host:port */
  int queued, busy;
} coord_notify_dcount_t;

typedef struct coord_notify_item {
  struct coord_notify_item *next;
  char *url;
  char *body;
  char shown[1200];    /* url with userinfo and query hidden, for the log */
  char job_id[64];
  char state[16];
  int trusted;         /* the coordinator's notify_url: not checked against the policy */
  int attempt;         /* tries made */
  int64_t due_ms;      /* monotonic */
  coord_notify_dcount_t *dest;
} coord_notify_item_t;

struct coord_notifier {
  pthread_t threads[COORD_NOTIFY_THREADS];
  int nthreads;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  coord_notify_item_t *items; /* unordered; the earliest due is searched */
  size_t n;
  coord_notify_dcount_t *dests;
  coord_notify_policy_t policy; /* the latest coord_notify_job saw */
  atomic_int stop;
  atomic_llong sent, failed;  /* POSTs that succeeded / notifications given up */
};

enum { COORD_SENT = 0, COORD_SEND_FAILED = -1, COORD_SEND_REFUSED = -2 };

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

/* The count of key, made when new; NULL when out of memory. Under mu. */
static coord_notify_dcount_t *coord_notify_dest_get(coord_notifier_t *n, const char *key) {
  for (coord_notify_dcount_t *d = n->dests; d; d = d->next)
    if (!strcmp(d->key, key)) return d;
  coord_notify_dcount_t *d = px_calloc(1, sizeof *d, "coordd.notify");
  if (!d) return NULL;
  snprintf(d->key, sizeof d->key, "%s", key);
  d->next = n->dests;
  n->dests = d;
  return d;
}

/* Frees d once nothing is queued or in flight for it. Under mu. */
static void coord_notify_dest_put(coord_notifier_t *n, coord_notify_dcount_t *d) {
  if (d->queued || d->busy) return;
  for (coord_notify_dcount_t **p = &n->dests; *p; p = &(*p)->next)
    if (*p == d) {
      *p = d->next;
      px_free(d);
      return;
    }
}

static size_t coord_notify_discard(char *p, size_t size, size_t n, void *ctx) {
  (void)p;
  (void)ctx;
  return size * n; /* the receiver's answer is not needed */
}

/* Aborts a POST in flight when the coordinator stops. */
static int coord_notify_progress(void *ctx, curl_off_t dt, curl_off_t dn, curl_off_t ut,
                                 curl_off_t un) {
  (void)dt, (void)dn, (void)ut, (void)un;
  return atomic_load(&((coord_notifier_t *)ctx)->stop) != 0;
}

/* libcurl's socket for a connection: only to an address the policy checked. */
static curl_socket_t coord_notify_open(void *ctx, curlsocktype purpose,
                                       struct curl_sockaddr *a) {
  (void)purpose;
  if (!coord_notify_dest_has(ctx, &a->addr)) return CURL_SOCKET_BAD;
  return socket(a->family, a->socktype, a->protocol);
}

/* The request's options; the pinning ones unless the item is trusted. */
static void coord_notify_setopts(CURL *curl, coord_notifier_t *n, const coord_notify_item_t *it,
                                 struct curl_slist *h, struct curl_slist *pin,
                                 coord_notify_dest_t *d, char *ebuf) {
  curl_easy_reset(curl);
  curl_easy_setopt(curl, CURLOPT_URL, it->url);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl, CURLOPT_PROXY, "");
  curl_easy_setopt(curl, CURLOPT_FORBID_REUSE, 1L);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, it->body);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)strlen(it->body));
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "pxcoordd");
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)COORD_NOTIFY_TIMEOUT_MS);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, (long)COORD_NOTIFY_CONNECT_MS);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, ebuf);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, coord_notify_discard);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, coord_notify_progress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, n);
  if (it->trusted) return;
  if (pin) curl_easy_setopt(curl, CURLOPT_RESOLVE, pin);
  curl_easy_setopt(curl, CURLOPT_OPENSOCKETFUNCTION, coord_notify_open);
  curl_easy_setopt(curl, CURLOPT_OPENSOCKETDATA, d);
}

/* One POST: COORD_SENT when the receiver answered 2xx, COORD_SEND_REFUSED
 * when the policy refuses the URL now, else COORD_SEND_FAILED; why in err. */
static int coord_notify_post(CURL *curl, coord_notifier_t *n, const coord_notify_item_t *it,
                             const coord_notify_policy_t *pol, char *err, size_t cap) {
  coord_notify_dest_t *d = px_calloc(1, sizeof *d, "coordd.notify");
  if (!d) {
    snprintf(err, cap, "out of memory");
    return COORD_SEND_FAILED;
  }
  if (!it->trusted) {
    int ok = coord_notify_check(pol, it->url, COORD_NOTIFY_CONNECT_MS, d, err, cap);
    if (ok <= 0) {
      px_free(d);
      return ok == 0 ? COORD_SEND_REFUSED : COORD_SEND_FAILED;
    }
  }
  struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
  struct curl_slist *pin = d->resolve[0] ? curl_slist_append(NULL, d->resolve) : NULL;
  char ebuf[CURL_ERROR_SIZE] = "";
  coord_notify_setopts(curl, n, it, h, pin, d, ebuf);
  CURLcode rc = curl_easy_perform(curl);
  long status = 0;
  if (rc == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_setopt(curl, CURLOPT_RESOLVE, NULL);
  curl_slist_free_all(h);
  curl_slist_free_all(pin);
  px_free(d);
  if (rc != CURLE_OK) {
    snprintf(err, cap, "%s", ebuf[0] ? ebuf : curl_easy_strerror(rc));
    return COORD_SEND_FAILED;
  }
  if (status < 200 || status > 299) {
    snprintf(err, cap, "the receiver answered HTTP %ld", status);
    return COORD_SEND_FAILED;
  }
  return COORD_SENT;
}

/* The earliest-due item whose destination has room (NULL: none); *wait_ms
 * how long until it is due (0: now). Under mu. */
static coord_notify_item_t **coord_notify_pick(coord_notifier_t *n, int64_t *wait_ms) {
  coord_notify_item_t **best = NULL;
  for (coord_notify_item_t **p = &n->items; *p; p = &(*p)->next)
    if ((*p)->dest->busy < COORD_NOTIFY_PER_DEST && (!best || (*p)->due_ms < (*best)->due_ms))
      best = p;
  int64_t now = coord_mono_ms();
  *wait_ms = best && (*best)->due_ms > now ? (*best)->due_ms - now : 0;
  return best;
}

static void coord_notify_wait(coord_notifier_t *n, int64_t wait) {
  struct timespec until = coord_notify_deadline(wait);
  pthread_cond_timedwait(&n->cv, &n->mu, &until);
}

/* After a try: logs it, and queues the item again or frees it. Under mu. */
static void coord_notify_after(coord_notifier_t *n, coord_notify_item_t *it, int outcome,
                               const char *err) {
  it->attempt++;
  if (outcome == COORD_SENT || outcome == COORD_SEND_REFUSED ||
      it->attempt >= COORD_NOTIFY_ATTEMPTS) {
    if (outcome == COORD_SENT) {
      atomic_fetch_add(&n->sent, 1);
      px_log(PX_LOG_INFO, "notify: job %s %s: posted to %s", it->job_id, it->state, it->shown);
    } else if (outcome == COORD_SEND_REFUSED) {
      atomic_fetch_add(&n->failed, 1);
      px_log(PX_LOG_ERROR, "notify: job %s %s: not sent: %s", it->job_id, it->state, err);
    } else {
      atomic_fetch_add(&n->failed, 1);
      px_log(PX_LOG_ERROR, "notify: job %s %s: %s failed %d times (last: %s); giving up",
             it->job_id, it->state, it->shown, it->attempt, err);
    }
    coord_notify_dest_put(n, it->dest);
    coord_notify_item_free(it);
    return;
  }
  int64_t backoff = (int64_t)COORD_NOTIFY_BACKOFF_MS << (it->attempt - 1);
  if (backoff > COORD_NOTIFY_BACKOFF_MAX_MS) backoff = COORD_NOTIFY_BACKOFF_MAX_MS;
  if (!atomic_load(&n->stop))
    px_log(PX_LOG_WARN, "notify: job %s %s: %s failed (%s); retrying in %lld ms (try %d of %d)",
           it->job_id, it->state, it->shown, err, (long long)backoff, it->attempt + 1,
           COORD_NOTIFY_ATTEMPTS);
  it->due_ms = coord_mono_ms() + backoff;
  it->next = n->items;
  n->items = it;
  n->n++;
  it->dest->queued++;
}

static void *coord_notify_main(void *arg) {
  coord_notifier_t *n = arg;
  CURL *curl = curl_easy_init();
  coord_notify_policy_t *pol = px_malloc(sizeof *pol, "coordd.notify");
  pthread_mutex_lock(&n->mu);
  while (!atomic_load(&n->stop)) {
    int64_t wait = 0;
    coord_notify_item_t **best = coord_notify_pick(n, &wait);
    if (!best) {
      pthread_cond_wait(&n->cv, &n->mu);
      continue;
    }
    if (wait > 0) {
      coord_notify_wait(n, wait);
      continue;
    }
    coord_notify_item_t *it = *best;
    *best = it->next;
    n->n--;
    it->dest->queued--;
    it->dest->busy++;
    if (pol) *pol = n->policy;
    pthread_mutex_unlock(&n->mu);
    char err[CURL_ERROR_SIZE + 1400] = "no libcurl handle";
    int outcome = curl && pol ? coord_notify_post(curl, n, it, pol, err, sizeof err)
                              : COORD_SEND_FAILED;
    pthread_mutex_lock(&n->mu);
    it->dest->busy--;
    coord_notify_after(n, it, outcome, err);
    pthread_cond_broadcast(&n->cv); /* its destination has room again */
  }
  pthread_mutex_unlock(&n->mu);
  px_free(pol);
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
  n->policy.public_ok = 1;
  for (int i = 0; i < COORD_NOTIFY_THREADS; i++) {
    if (pthread_create(&n->threads[i], NULL, coord_notify_main, n) != 0) break;
    n->nthreads++;
  }
  if (!n->nthreads) {
    pthread_mutex_destroy(&n->mu);
    pthread_cond_destroy(&n->cv);
    px_free(n);
    return px_set_error(PX_ERR_INTERNAL, "notify: cannot start the sender threads");
  }
  *out = n;
  return PX_OK;
}

void coord_notifier_stop(coord_notifier_t *n) {
  if (!n) return;
  pthread_mutex_lock(&n->mu);
  atomic_store(&n->stop, 1);
  pthread_cond_broadcast(&n->cv);
  pthread_mutex_unlock(&n->mu);
  for (int i = 0; i < n->nthreads; i++) pthread_join(n->threads[i], NULL);
  if (n->n)
    px_log(PX_LOG_WARN, "notify: %zu notification%s still queued at shutdown, not sent", n->n,
           n->n == 1 ? "" : "s");
  while (n->items) {
    coord_notify_item_t *it = n->items;
    n->items = it->next;
    coord_notify_item_free(it);
  }
  while (n->dests) {
    coord_notify_dcount_t *d = n->dests;
    n->dests = d->next;
    px_free(d);
  }
  pthread_mutex_destroy(&n->mu);
  pthread_cond_destroy(&n->cv);
  px_free(n);
  curl_global_cleanup();
}

/* A new item (copies of url and body), NULL when memory runs out. */
static coord_notify_item_t *coord_notify_item_new(const char *url, const char *body,
                                                  const char *job_id, const char *state) {
  coord_notify_item_t *it = px_calloc(1, sizeof *it, "coordd.notify");
  if (it) {
    it->url = px_malloc(strlen(url) + 1, "coordd.notify");
    it->body = px_malloc(strlen(body) + 1, "coordd.notify");
  }
  if (!it || !it->url || !it->body) {
    coord_notify_item_free(it);
    return NULL;
  }
  memcpy(it->url, url, strlen(url) + 1);
  memcpy(it->body, body, strlen(body) + 1);
  coord_notify_url_redact(url, it->shown, sizeof it->shown);
  snprintf(it->job_id, sizeof it->job_id, "%s", job_id);
  snprintf(it->state, sizeof it->state, "%s", state);
  it->due_ms = coord_mono_ms();
  return it;
}

/* Queues one POST (copies url and body) under the policy pol; logs and
 * drops it when the queue, or its destination's, is full, or memory runs
 * out. */
static void coord_notify_queue(coord_notifier_t *n, const coord_notify_policy_t *pol,
                               const char *url, int trusted, const char *body,
                               const char *job_id, const char *state) {
  coord_notify_item_t *it = coord_notify_item_new(url, body, job_id, state);
  char key[300] = "";
  if (!it || coord_notify_url_dest(url, key, sizeof key) != 0) {
    char shown[1200];
    coord_notify_url_redact(url, shown, sizeof shown);
    px_log(PX_LOG_ERROR, "notify: job %s %s: %s, not sent to %s", job_id, state,
           it ? "not a URL libcurl reads" : "out of memory", shown);
    coord_notify_item_free(it);
    return;
  }
  it->trusted = trusted;
  pthread_mutex_lock(&n->mu);
  n->policy = *pol;
  coord_notify_dcount_t *d = n->n < COORD_NOTIFY_QUEUE_MAX ? coord_notify_dest_get(n, key) : NULL;
  int full = !d || d->queued >= COORD_NOTIFY_DEST_QUEUE_MAX;
  if (!full) {
    it->dest = d;
    d->queued++;
    it->next = n->items;
    n->items = it;
    n->n++;
    pthread_cond_broadcast(&n->cv);
  }
  pthread_mutex_unlock(&n->mu);
  if (full) {
    px_log(PX_LOG_ERROR, "notify: job %s %s: %d notifications are queued already%s; not sent"
           " to %s", job_id, state, d ? COORD_NOTIFY_DEST_QUEUE_MAX : COORD_NOTIFY_QUEUE_MAX,
           d ? " for its destination" : "", it->shown);
    coord_notify_item_free(it);
  }
}

void coord_notify_policy_update(coord_t *c) {
  if (!c->notifier) return;
  coord_notify_policy_t pol;
  coord_notify_policy_get(c, &pol);
  pthread_mutex_lock(&c->notifier->mu);
  c->notifier->policy = pol;
  pthread_mutex_unlock(&c->notifier->mu);
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
    coord_notify_policy_t pol;
    coord_notify_policy_get(c, &pol);
    if (to_job) coord_notify_queue(c->notifier, &pol, nt.url, 0, body.p, job_id, state);
    if (to_all && (!to_job || strcmp(nt.url, c->cfg.notify_url) != 0))
      coord_notify_queue(c->notifier, &pol, c->cfg.notify_url, 1, body.p, job_id, state);
  }
  px_buf_free(&body);
}
