/* pxcoordd's HTTP listener: libmicrohttpd with its own polling
 * thread, so that nothing HTTP ever runs on the libuv loop (see http.h for
 * the threading). This file owns the listener, the routing, the single
 * authorisation hook (http_authorize), the static files (the dashboard from
 * the www directory, the charting library from the Debian JS directory) and
 * the small text buffer the handlers write into.
 *
 * Routes (GET and HEAD only; anything else is 405):
 *   /                         the dashboard (www/index.html)
 *   /static/NAME              a file of the www directory
 *   /js/PATH                  a file under the JS directory (/usr/share/javascript)
 *   /metrics                  Prometheus text format
 *   /api/v1/jobs              jobs, newest first, paged (limit, cursor)
 *   /api/v1/jobs/ID           one job (by id, or by name when unambiguous)
 *   /api/v1/jobs/ID/iterations  its iterations, paged
 *   /api/v1/jobs/ID/layers      its per-layer figures, paged
 *   /api/v1/nodes             nodes, paged
 *
 * Limits (idle sockets must not starve it): at most
 * COORD_HTTP_MAX_CONNECTIONS connections, and a request's headers must be
 * in within COORD_HTTP_HEADER_DEADLINE_MS of the connection's start (or of
 * the end of its previous request): a slowloris client that sends a byte
 * now and then is cut by the reaper thread, which MHD's idle timeout alone
 * would not do. Each address has a budget of connections:
 * per_address, or per_proxy for the trusted proxies' addresses (the
 * reverse proxy of the documented deployment carries every remote client).
 * At accept (http_accept), an address at its budget gets room by closing
 * its connection idle the longest, so idle connections, however many,
 * never keep a client of that address out; only when every one of them is
 * serving a request is the new one refused. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "coord.h"
#include "db/http_read.h"
#include "http.h"
#include "prunex/check.h"

/* A connection whose request headers are not all in yet (http_conn_*). */
typedef struct coord_http_conn {
  struct coord_http_conn *prev, *next;
  int fd;
  coord_http_addr_t addr; /* the client's (the budget's key) */
  int64_t since_ms;  /* CLOCK_MONOTONIC: connection start or end of its last request */
  int waiting;       /* 1 while headers are awaited; 0 while a request is served */
  int cut;           /* shut down (the reaper, or http_accept to make room) */
  int linked;        /* in coord_http_t.conns */
} coord_http_conn_t;

struct coord_http {
  struct MHD_Daemon *d;
  /* Connections, for the header deadline: added and removed by MHD's
   * thread (its connection and completion callbacks), read by the reaper
   * thread, both under cmu. MHD calls the CLOSED notification before it
   * closes the socket, so an fd in this list is always the connection's. */
  pthread_mutex_t cmu;
  pthread_cond_t stop_cv;
  int stop;
  pthread_t reaper;
  int reaper_started;
  coord_http_conn_t *conns;
  /* Budgets (http_accept, MHD's thread; fixed after start). */
  int per_address, per_proxy;
  coord_http_net_t proxies[COORD_HTTP_MAX_PROXIES];
  int nproxies;
  px_store_t *db;          /* read-only; used by the HTTP thread only */
  /* The HTTP side's own copy of the tokens file (NULL: no authentication),
   * swapped by coord_http_reload_tokens on the loop thread, read by the
   * HTTP thread under mu. */
  pthread_mutex_t mu;
  coord_tokens_t *tokens;
  char tokens_path[4096];
  char www[4096];
  char js[4096];
  int port;
  int64_t started_unix_ms;
  int metrics_ended_s;     /* an ended job's series stay this long (http_metrics_ended_s) */
};

/* ---- authorisation ------------------------------------------------------------ */

/* The one place that decides who may read what over HTTP. Without a tokens
 * file it allows every request (the listener is then meant for loopback or a
 * trusted network, like the gRPC port without security); with one it reads
 * the Authorization header, expects "Bearer TOKEN", looks the token up and
 * decides by role and path. Returns 1 to serve the request, 0 to answer
 * 401 with a `WWW-Authenticate: Bearer` challenge. */
static int http_authorize(coord_http_t *h, struct MHD_Connection *conn, const char *path) {
  if (!h->tokens_path[0]) return 1; /* no tokens: loopback only, like the gRPC port */
  /* The page and its scripts hold no data: the browser loads them, then
   * sends the token with every API request (the dashboard takes it from
   * #token=... in its address, kept for the tab only). */
  if (!strcmp(path, "/") || !strcmp(path, "/index.html") || !strncmp(path, "/static/", 8) ||
      !strncmp(path, "/js/", 4))
    return 1;
  const char *a = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (!a || strncmp(a, "Bearer ", 7) != 0) return 0;
  int role = 0, ok;
  pthread_mutex_lock(&h->mu);
  ok = coord_tokens_lookup(h->tokens, a + 7, NULL, 0, &role);
  pthread_mutex_unlock(&h->mu);
  /* what the Jobs service allows: users and admins (everyone sees every job) */
  return ok && (role == COORD_ROLE_ADMIN || role == COORD_ROLE_USER);
}

/* ---- connection limits and the header deadline ----------------------------- */

static int64_t http_mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* MHD's thread: a connection starts (headers awaited) or closes. */
static void http_on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                               enum MHD_ConnectionNotificationCode toe) {
  coord_http_t *h = cls;
  if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *fi =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    coord_http_conn_t *hc = px_calloc(1, sizeof *hc, "coord.http.conn");
    *socket_context = hc;
    /* without it: no deadline (MHD's idle timeout still applies), not counted */
    if (!hc || !fi) return;
    hc->fd = fi->connect_fd;
    coord_http_addr_key(ai ? ai->client_addr : NULL, &hc->addr);
    hc->since_ms = http_mono_ms();
    hc->waiting = 1;
    hc->linked = 1;
    pthread_mutex_lock(&h->cmu);
    hc->next = h->conns;
    if (h->conns) h->conns->prev = hc;
    h->conns = hc;
    pthread_mutex_unlock(&h->cmu);
    return;
  }
  coord_http_conn_t *hc = *socket_context;
  if (!hc) return;
  *socket_context = NULL;
  pthread_mutex_lock(&h->cmu);
  if (hc->linked) {
    if (hc->prev) hc->prev->next = hc->next;
    else h->conns = hc->next;
    if (hc->next) hc->next->prev = hc->prev;
  }
  pthread_mutex_unlock(&h->cmu);
  px_free(hc);
}

/* MHD's thread, before it takes a connection from addr: yes while the
 * address is within its budget, or when room is made by shutting down its
 * connection that has waited longest for a request's headers (MHD then
 * closes it; a cut connection no longer counts); no when every one of its
 * connections is serving a request. Each such event is logged: the
 * logger's limit on repeated lines keeps a flood of them to a few lines. */
static enum MHD_Result http_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
  (void)addrlen;
  coord_http_t *h = cls;
  coord_http_addr_t k;
  coord_http_addr_key(addr, &k);
  int proxy = coord_http_nets_match(h->proxies, h->nproxies, &k);
  int budget = proxy ? h->per_proxy : h->per_address, held = 0;
  int64_t idle_ms = 0;
  coord_http_conn_t *idle = NULL;
  pthread_mutex_lock(&h->cmu);
  for (coord_http_conn_t *hc = h->conns; hc; hc = hc->next) {
    if (hc->cut || hc->addr.family != k.family || memcmp(hc->addr.addr, k.addr, sizeof k.addr))
      continue;
    held++;
    if (hc->waiting && (!idle || hc->since_ms < idle->since_ms)) idle = hc;
  }
  if (held >= budget && idle) {
    shutdown(idle->fd, SHUT_RDWR);
    idle->cut = 1;
    idle_ms = http_mono_ms() - idle->since_ms;
  }
  pthread_mutex_unlock(&h->cmu);
  if (held < budget) return MHD_YES;
  char who[64];
  coord_http_addr_str(&k, who, sizeof who);
  if (idle) {
    px_log(PX_LOG_INFO,
           "http: %s holds its %d connections%s: closed the one idle longest (%lld ms) for a "
           "new one",
           who, budget, proxy ? " (a trusted proxy)" : "", (long long)idle_ms);
    return MHD_YES;
  }
  px_log(PX_LOG_WARN, "http: refused a connection from %s: its %d connections%s are all serving "
         "requests", who, budget, proxy ? " (a trusted proxy)" : "");
  return MHD_NO;
}

/* MHD's thread: the headers of a request are in (its first handler call),
 * or a request ended (the next one's headers are awaited). */
static void http_conn_waiting(coord_http_t *h, struct MHD_Connection *conn, int waiting) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  coord_http_conn_t *hc = ci ? ci->socket_context : NULL;
  if (!hc) return;
  pthread_mutex_lock(&h->cmu);
  hc->waiting = waiting;
  hc->since_ms = http_mono_ms();
  pthread_mutex_unlock(&h->cmu);
}

static void http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                              enum MHD_RequestTerminationCode toe) {
  (void)con_cls;
  (void)toe;
  http_conn_waiting(cls, conn, 1);
}

/* The reaper: every 250 ms, shuts down the sockets whose headers are late.
 * shutdown(), not close(): MHD then sees the end of the stream and closes
 * the connection itself, on its own thread. */
static void *http_reaper(void *arg) {
  coord_http_t *h = arg;
  pthread_mutex_lock(&h->cmu);
  while (!h->stop) {
    int64_t now = http_mono_ms();
    for (coord_http_conn_t *hc = h->conns; hc; hc = hc->next)
      if (hc->waiting && !hc->cut && now - hc->since_ms > COORD_HTTP_HEADER_DEADLINE_MS) {
        shutdown(hc->fd, SHUT_RDWR);
        hc->cut = 1;
      }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 250 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&h->stop_cv, &h->cmu, &ts);
  }
  pthread_mutex_unlock(&h->cmu);
  return NULL;
}

/* ---- responses -------------------------------------------------------------- */

static enum MHD_Result http_send(struct MHD_Connection *conn, unsigned status,
                                 const char *type, coord_hbuf_t *body) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(body->len, body->p ? body->p : (void *)"",
                                      MHD_RESPMEM_MUST_COPY);
  px_buf_free(body);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
  if (status == MHD_HTTP_UNAUTHORIZED)
    MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"prunex\"");
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  enum MHD_Result ret = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result http_error(struct MHD_Connection *conn, unsigned status, const char *msg) {
  coord_hbuf_t b = COORD_HBUF_INIT;
  coord_http_error_body(&b, msg);
  return http_send(conn, status, "application/json", &b);
}

static const char *http_mime(const char *path) {
  const char *dot = strrchr(path, '.');
  if (!dot) return "application/octet-stream";
  static const char *const map[][2] = {
      {".html", "text/html; charset=utf-8"}, {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"}, {".css", "text/css; charset=utf-8"},
      {".map", "application/json"}, {".png", "image/png"}, {".svg", "image/svg+xml"},
      {".json", "application/json"}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (!strcmp(dot, map[i][0])) return map[i][1];
  return "application/octet-stream";
}

/* A relative path made only of [A-Za-z0-9._-] segments separated by '/',
 * none empty or starting with '.', so it cannot leave its directory. */
static int http_safe_relpath(const char *p) {
  size_t n = strlen(p);
  if (n == 0 || n > 256) return 0;
  int seg_start = 1;
  for (const char *s = p; *s; s++) {
    char ch = *s;
    if (ch == '/') {
      if (seg_start) return 0;
      seg_start = 1;
      continue;
    }
    if (seg_start && ch == '.') return 0;
    seg_start = 0;
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
          ch == '.' || ch == '_' || ch == '-'))
      return 0;
  }
  return !seg_start;
}

static enum MHD_Result http_file(struct MHD_Connection *conn, const char *dir, const char *rel) {
  if (!http_safe_relpath(rel)) return http_error(conn, MHD_HTTP_NOT_FOUND, "no such file");
  char path[4400];
  snprintf(path, sizeof path, "%s/%s", dir, rel);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    if (fd >= 0) close(fd);
    return http_error(conn, MHD_HTTP_NOT_FOUND, "no such file");
  }
  struct MHD_Response *r = MHD_create_response_from_fd((uint64_t)sb.st_size, fd);
  if (!r) {
    close(fd);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, http_mime(rel));
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
  MHD_destroy_response(r);
  return ret;
}

/* ---- routing ---------------------------------------------------------------- */

static enum MHD_Result http_answer(void *cls, struct MHD_Connection *conn, const char *url,
                                   const char *method, const char *version,
                                   const char *upload_data, size_t *upload_data_size,
                                   void **con_cls) {
  (void)version;
  (void)upload_data;
  (void)upload_data_size;
  coord_http_t *h = cls;
  /* The first call for a request: its headers are in. */
  if (!*con_cls) {
    *con_cls = h;
    http_conn_waiting(h, conn, 0);
  }
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
    return http_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD are served");
  if (!http_authorize(h, conn, url))
    return http_error(conn, MHD_HTTP_UNAUTHORIZED, "a bearer token is required");
  if (!strcmp(url, "/") || !strcmp(url, "/index.html")) return http_file(conn, h->www, "index.html");
  if (!strncmp(url, "/static/", 8)) return http_file(conn, h->www, url + 8);
  if (!strncmp(url, "/js/", 4)) return http_file(conn, h->js, url + 4);

  coord_hbuf_t b = COORD_HBUF_INIT;
  int status;
  const char *type = "application/json";
  coord_http_page_t pg = {
      MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit"),
      MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "cursor"),
  };
  if (!strcmp(url, "/metrics")) {
    status = coord_http_metrics(h->db, h->started_unix_ms, h->metrics_ended_s, &b);
    type = "text/plain; version=0.0.4; charset=utf-8";
  } else if (!strcmp(url, "/api/v1/jobs")) {
    status = coord_http_jobs(h->db, &pg, &b);
  } else if (!strcmp(url, "/api/v1/nodes")) {
    status = coord_http_nodes(h->db, &pg, &b);
  } else if (!strncmp(url, "/api/v1/jobs/", 13)) {
    char job[160];
    const char *rest = url + 13, *slash = strchr(rest, '/');
    size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
    if (n == 0 || n >= sizeof job) return http_error(conn, MHD_HTTP_NOT_FOUND, "no such job");
    memcpy(job, rest, n);
    job[n] = '\0';
    if (!slash) status = coord_http_job(h->db, job, &b);
    else if (!strcmp(slash, "/iterations")) status = coord_http_iterations(h->db, job, &pg, &b);
    else if (!strcmp(slash, "/layers")) status = coord_http_layers(h->db, job, &pg, &b);
    else return http_error(conn, MHD_HTTP_NOT_FOUND, "no such resource");
  } else {
    return http_error(conn, MHD_HTTP_NOT_FOUND, "no such resource");
  }
  if (b.oom) {
    px_buf_free(&b);
    return http_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR,
                      "the response grew past its limit (use a smaller page)");
  }
  return http_send(conn, (unsigned)status, type, &b);
}

static void http_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  size_t n = strlen(msg);
  while (n && msg[n - 1] == '\n') msg[--n] = '\0';
  px_log(PX_LOG_WARN, "http: %s", msg);
}

/* ---- start / stop ------------------------------------------------------------- */

/* Frees what coord_http_start made (the daemon already stopped or never
 * started). */
static void coord_http_free(coord_http_t *h) {
  while (h->conns) { /* none once MHD has told of every close; never leak one */
    coord_http_conn_t *next = h->conns->next;
    px_free(h->conns);
    h->conns = next;
  }
  px_store_close(h->db);
  coord_tokens_free(h->tokens);
  pthread_cond_destroy(&h->stop_cv);
  pthread_mutex_destroy(&h->cmu);
  pthread_mutex_destroy(&h->mu);
  px_free(h);
}

px_status_t coord_http_reload_tokens(coord_http_t *h) {
  if (!h || !h->tokens_path[0]) return PX_OK;
  coord_tokens_t *t = NULL;
  PX_CHECK(coord_tokens_load(h->tokens_path, &t));
  pthread_mutex_lock(&h->mu);
  coord_tokens_t *old = h->tokens;
  h->tokens = t;
  pthread_mutex_unlock(&h->mu);
  coord_tokens_free(old);
  return PX_OK;
}

px_status_t coord_http_start(const char *listen, const char *db_path, const char *www_dir,
                             const char *js_dir, const char *tokens_path,
                             const coord_http_limits_t *lim, coord_http_t **out) {
  *out = NULL;
  assert(lim->per_address >= 1 && lim->per_proxy >= 1);
  coord_http_net_t proxies[COORD_HTTP_MAX_PROXIES] = {{0}};
  int nproxies = 0;
  if (lim->trusted_proxies &&
      coord_http_nets_parse(lim->trusted_proxies, proxies, COORD_HTTP_MAX_PROXIES, &nproxies) !=
          PX_OK) {
    char why[256]; /* the message is rewritten in the buffer it is read from */
    snprintf(why, sizeof why, "%s", px_last_error());
    return px_set_error(PX_ERR_INVALID, "http_trusted_proxies: %s", why);
  }
  const char *colon = strrchr(listen, ':');
  PX_REQUIRE(colon, "http = '%s': expected HOST:PORT", listen);
  char host[256];
  size_t hn = (size_t)(colon - listen);
  PX_REQUIRE(hn < sizeof host, "http = '%s': host too long", listen);
  memcpy(host, listen, hn);
  host[hn] = '\0';
  if (hn >= 2 && host[0] == '[' && host[hn - 1] == ']') {
    memmove(host, host + 1, hn - 2);
    host[hn - 2] = '\0';
  }
  struct addrinfo hints = {0}, *ai = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int gai = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &ai);
  if (gai != 0)
    return px_set_error(PX_ERR_IO, "http = '%s': cannot resolve: %s", listen, gai_strerror(gai));

  coord_http_t *h = px_calloc(1, sizeof *h, "coord.http");
  if (!h) {
    freeaddrinfo(ai);
    return PX_ERR_NOMEM;
  }
  h->per_address = lim->per_address;
  h->per_proxy = lim->per_proxy;
  h->metrics_ended_s = lim->metrics_ended_s;
  memcpy(h->proxies, proxies, sizeof proxies);
  h->nproxies = nproxies;
  snprintf(h->www, sizeof h->www, "%s", www_dir);
  snprintf(h->js, sizeof h->js, "%s", js_dir);
  pthread_mutex_init(&h->mu, NULL);
  pthread_mutex_init(&h->cmu, NULL);
  pthread_cond_init(&h->stop_cv, NULL);
  snprintf(h->tokens_path, sizeof h->tokens_path, "%s", tokens_path ? tokens_path : "");
  px_status_t tst = coord_http_reload_tokens(h);
  if (tst != PX_OK) {
    px_status_t st = tst;
    coord_http_free(h);
    freeaddrinfo(ai);
    return st;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  h->started_unix_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  /* Opened read-only: the HTTP side can never write the database, and WAL
   * lets it read while the loop thread writes. */
  if (coord_db_http_open(db_path, &h->db) != PX_OK) {
    px_status_t st = px_set_error(PX_ERR_IO, "http: cannot open %s read-only: %s", db_path,
                                  px_last_error());
    coord_http_free(h);
    freeaddrinfo(ai);
    return st;
  }

  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_USE_POLL;
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  /* the budgets per address are http_accept's (MHD's per-IP limit has one
   * figure for all and refuses rather than closing an idle connection) */
  h->d = MHD_start_daemon(
      flags, 0, http_accept, h, http_answer, h, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)COORD_HTTP_MAX_CONNECTIONS,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)COORD_HTTP_IDLE_TIMEOUT_S,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
      MHD_OPTION_NOTIFY_CONNECTION, http_on_connection, h,
      MHD_OPTION_NOTIFY_COMPLETED, http_on_completed, h,
      MHD_OPTION_EXTERNAL_LOGGER, http_log, NULL, MHD_OPTION_END);
  freeaddrinfo(ai);
  if (!h->d) {
    coord_http_free(h);
    return px_set_error(PX_ERR_IO, "http = '%s': cannot listen (address in use or not local?)",
                        listen);
  }
  if (pthread_create(&h->reaper, NULL, http_reaper, h) != 0) {
    MHD_stop_daemon(h->d);
    coord_http_free(h);
    return px_set_error(PX_ERR_IO, "http: cannot start the header-deadline thread");
  }
  h->reaper_started = 1;
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
  h->port = info ? info->port : atoi(colon + 1);
  *out = h;
  return PX_OK;
}

int coord_http_port(const coord_http_t *h) { return h->port; }

void coord_http_stop(coord_http_t *h) {
  if (!h) return;
  if (h->reaper_started) {
    pthread_mutex_lock(&h->cmu);
    h->stop = 1;
    pthread_cond_signal(&h->stop_cv);
    pthread_mutex_unlock(&h->cmu);
    pthread_join(h->reaper, NULL);
  }
  MHD_stop_daemon(h->d); /* closes every connection: the CLOSED notes empty the list */
  coord_http_free(h);
}
