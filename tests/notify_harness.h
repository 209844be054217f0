/* The job-notification tests' HTTP receiver (a thread answering POSTs on
 * loopback, counting them and keeping their bodies and paths), a listener
 * that accepts connections and never answers, and a pxcoordd started with
 * a config file (notify_allow and the like). Header-only (static
 * functions), as agent_harness.h. */
#ifndef PX_NOTIFY_HARNESS_H
#define PX_NOTIFY_HARNESS_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include "agent_harness.h"

#define MAX_POSTS 16

typedef struct {
  int fd, port;
  pthread_t thread;
  pthread_mutex_t mu;
  int stop;
  int fail_first;        /* answer 500 to this many requests first */
  int hang_ms;           /* hold each answer this long */
  int n;                 /* requests seen */
  char body[MAX_POSTS][4096];
  char path[MAX_POSTS][128];
} receiver_t;

/* Reads one request (headers, then Content-Length bytes) into r. */
static PXT_UNUSED void *receiver_main(void *arg) {
  receiver_t *r = arg;
  for (;;) {
    int c = accept(r->fd, NULL, NULL);
    if (c < 0) break;
    pthread_mutex_lock(&r->mu);
    int stop = r->stop;
    pthread_mutex_unlock(&r->mu);
    if (stop) {
      close(c);
      break;
    }
    char buf[8192];
    size_t got = 0;
    long want = -1;
    char *body = NULL;
    while (got < sizeof buf - 1) {
      ssize_t k = read(c, buf + got, sizeof buf - 1 - got);
      if (k <= 0) break;
      got += (size_t)k;
      buf[got] = '\0';
      char *end = strstr(buf, "\r\n\r\n");
      if (!end) continue;
      body = end + 4;
      char *cl = strcasestr(buf, "Content-Length:");
      want = cl ? atol(cl + 15) : 0;
      if ((long)(got - (size_t)(body - buf)) >= want) break;
    }
    pthread_mutex_lock(&r->mu);
    int k = r->n++;
    int fail = k < r->fail_first;
    int hang = r->hang_ms;
    if (k < MAX_POSTS && body) {
      snprintf(r->body[k], sizeof r->body[k], "%s", body);
      sscanf(buf, "POST %127s", r->path[k]);
    }
    pthread_mutex_unlock(&r->mu);
    if (hang) pxt_sleep_ms(hang);
    const char *ans = fail ? "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n"
                             "Connection: close\r\n\r\n"
                           : "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
    if (write(c, ans, strlen(ans)) < 0) { /* the coordinator gave up: fine */
    }
    close(c);
  }
  return NULL;
}

static PXT_UNUSED void receiver_start(receiver_t *r, int fail_first, int hang_ms) {
  memset(r, 0, sizeof *r);
  pthread_mutex_init(&r->mu, NULL);
  r->fail_first = fail_first;
  r->hang_ms = hang_ms;
  r->fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(r->fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(r->fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(r->fd, 16), 0);
  socklen_t len = sizeof a;
  assert_int_equal(getsockname(r->fd, (struct sockaddr *)&a, &len), 0);
  r->port = ntohs(a.sin_port);
  assert_int_equal(pthread_create(&r->thread, NULL, receiver_main, r), 0);
}

static PXT_UNUSED void receiver_stop(receiver_t *r) {
  pthread_mutex_lock(&r->mu);
  r->stop = 1;
  pthread_mutex_unlock(&r->mu);
  int c = socket(AF_INET, SOCK_STREAM, 0); /* wake accept() */
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)r->port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(c, (struct sockaddr *)&a, sizeof a) != 0) { /* already gone */
  }
  close(c);
  pthread_join(r->thread, NULL);
  close(r->fd);
  pthread_mutex_destroy(&r->mu);
}

static PXT_UNUSED int receiver_count(receiver_t *r) {
  pthread_mutex_lock(&r->mu);
  int n = r->n;
  pthread_mutex_unlock(&r->mu);
  return n;
}

static PXT_UNUSED int wait_posts(receiver_t *r, int n, int timeout_ms) {
  int64_t end = pxt_now_ms() + timeout_ms;
  while (receiver_count(r) < n && pxt_now_ms() < end) pxt_sleep_ms(20);
  return receiver_count(r) >= n;
}

static PXT_UNUSED px_status_t submit_notified(px_rpc_channel_t *ch, const char *url,
                                              const char *states, char *job, size_t cap) {
  pxt_spec_t s;
  pxt_spec_init(&s, 1, 1);
  Prunex__V1__NotifySpec n = PRUNEX__V1__NOTIFY_SPEC__INIT;
  n.url = (char *)url;
  n.states = (char *)states;
  s.spec.notify = &n;
  return pxt_submit(ch, &s, job, cap);
}

/* A loopback listener that never accepts: the kernel completes up to 64
 * connections, the requests sent on them are never answered. Its port in
 * *port; the descriptor (close it to stop). */
static PXT_UNUSED int silent_listener(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(fd, 64), 0);
  socklen_t len = sizeof a;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  *port = ntohs(a.sin_port);
  return fd;
}

/* Starts pxcoordd in a fresh directory with a config file holding text
 * (and the extra flags): 0, or -1 (its log printed). */
static PXT_UNUSED int coordd_with_config(pxt_coordd_t *d, const char *text,
                                         const char *const *extra) {
  memset(d, 0, sizeof *d);
  d->pid = -1;
  if (pxt_mkdtemp(d->dir, sizeof d->dir) != 0) return -1;
  snprintf(d->db, sizeof d->db, "%s/coord.db", d->dir);
  static char conf[400];
  snprintf(conf, sizeof conf, "%s/coord.conf", d->dir);
  FILE *f = fopen(conf, "w");
  if (!f) return -1;
  fputs(text, f);
  fclose(f);
  const char *args[16] = {"--config", conf};
  int n = 2;
  for (int i = 0; extra && extra[i] && n < 15; i++) args[n++] = extra[i];
  args[n] = NULL;
  return pxt_coordd_start(d, args);
}

#endif
