/* pxcoordd: the PruneX coordinator daemon (docs/architecture.md, "Processes";
 * its API: proto/prunex.proto).
 *
 * Parses the flags and the optional config file, opens (and migrates) the
 * SQLite database, serves prunex.v1.Coordinator and prunex.v1.Jobs over
 * gRPC on a libuv loop, and shuts down cleanly on SIGTERM or SIGINT. With
 * port 0 it listens on a free port; the first line on stdout is always
 * `listening on HOST:PORT`, so scripts and tests can find it.
 *
 * Exit status: 0 after a clean shutdown, 1 when it cannot run (database,
 * address), 2 for bad flags or configuration. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db/db_core.h"
#include "prunex/service.h"

/* The service manager's watchdog keep-alive (px_service.h): loop thread. */
static px_service_watchdog_t coord_watchdog;
#include "http.h"
#include "notify_policy.h"

static int coord_bad_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int coord_bad_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "pxcoordd: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(run pxcoordd --help for the flags)\n");
  va_end(ap);
  return 2;
}

/* Returns -1 to go on, else the exit status. */
static int coord_parse_args(int argc, char **argv, coord_config_t *cfg) {
  int rc = coord_config_parse(argc, argv, cfg);
  if (rc >= 0) return rc;
  if (cfg->read_only && access(cfg->db, F_OK) != 0)
    return coord_bad_usage("--read-only: the database %s: %s (a read-only coordinator creates "
                           "nothing)", cfg->db, strerror(errno));
  return -1;
}

/* ---- shutdown ------------------------------------------------------------------- */

static void coord_server_done(px_rpc_server_t *srv, void *arg) {
  coord_t *c = arg;
  px_rpc_server_destroy(srv);
  c->srv = NULL;
  px_log(PX_LOG_INFO, "server stopped");
}

static void coord_stop(coord_t *c, const char *why) {
  if (c->stopping) return;
  c->stopping = 1;
  px_log(PX_LOG_INFO, "shutting down (%s)", why);
  px_service_notify("STOPPING=1\nSTATUS=shutting down (%s)", why);
  px_service_watchdog_close(&coord_watchdog);
  coord_nodes_stop(c);
  uv_signal_stop(&c->sigterm);
  uv_signal_stop(&c->sigint);
  uv_signal_stop(&c->sighup);
  uv_timer_stop(&c->retention);
  uv_close((uv_handle_t *)&c->sigterm, NULL);
  uv_close((uv_handle_t *)&c->sigint, NULL);
  uv_close((uv_handle_t *)&c->sighup, NULL);
  uv_close((uv_handle_t *)&c->retention, NULL);
  coord_kv_cancel_all(c);
  coord_http_stop(c->http); /* its thread never touches c: stopping it here is safe */
  c->http = NULL;
  px_rpc_server_shutdown(c->srv, coord_server_done, c);
}

/* The dashboard's directory: the configured one, else the one installed
 * beside this binary (PX_WWW_REL from its directory: `cmake --install
 * --prefix DIR` moves both), else the configured prefix's, else (a build
 * tree that was never installed) the source tree's. */
static const char *coord_www_dir(const coord_config_t *cfg) {
  static char beside[4096];
  if (cfg->http_www[0]) return cfg->http_www;
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  char *slash = n > 0 ? (exe[n] = '\0', strrchr(exe, '/')) : NULL;
  if (slash) {
    *slash = '\0';
    char page[4096 + 16];
    if (snprintf(beside, sizeof beside, "%s/" PX_WWW_REL, exe) < (int)sizeof beside &&
        snprintf(page, sizeof page, "%s/index.html", beside) < (int)sizeof page &&
        access(page, R_OK) == 0)
      return beside;
  }
  if (access(PX_WWW_DIR "/index.html", R_OK) == 0) return PX_WWW_DIR;
  return PX_WWW_SRC_DIR;
}

static void coord_on_signal(uv_signal_t *h, int signum) {
  coord_stop(h->data, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* SIGHUP: re-read the config file's reloadable settings (the scheduling
 * policy, the notifications) and the tokens file (a bad file keeps what is
 * in force); a changed other setting is logged as needing a restart. */
static void coord_on_sighup(uv_signal_t *h, int signum) {
  (void)signum;
  coord_t *c = h->data;
  if (c->cfg.config_path[0]) {
    char restart[512];
    int n = coord_config_reload(&c->cfg, restart, sizeof restart);
    if (n < 0)
      px_log(PX_LOG_ERROR, "SIGHUP: %s (the previous scheduling policy stays in force)",
             px_last_error());
    else px_log(PX_LOG_INFO, "SIGHUP: scheduling policy re-read from %s", c->cfg.config_path);
    if (n > 0)
      px_log(PX_LOG_WARN, "SIGHUP: %s changed in %s: %s a restart (the running value%s stay%s)",
             restart, c->cfg.config_path, n == 1 ? "needs" : "need", n == 1 ? "" : "s",
             n == 1 ? "s" : "");
    coord_notify_policy_update(c); /* the senders' copy of notify_allow */
    if (!c->cfg.read_only) coord_schedule(c); /* quotas or shares may let jobs start now */
  }
  if (!c->cfg.tokens[0]) {
    px_log(PX_LOG_INFO, "SIGHUP: no tokens file configured, nothing to re-read");
    return;
  }
  if (coord_auth_reload(c) != PX_OK) {
    px_log(PX_LOG_ERROR, "SIGHUP: %s (the previous tokens stay in force)", px_last_error());
    return;
  }
  /* A removed token loses the streams it opened, not only its next call. */
  size_t ended = coord_auth_revoke_streams(c);
  if (ended) px_log(PX_LOG_INFO, "SIGHUP: %zu stream%s of revoked tokens closed", ended,
                    ended == 1 ? "" : "s");
  if (coord_http_reload_tokens(c->http) != PX_OK)
    px_log(PX_LOG_ERROR, "SIGHUP: http: %s (the previous tokens stay in force)", px_last_error());
}

static void coord_on_retention(uv_timer_t *t) { coord_retention_run(t->data); }

/* ---- start ----------------------------------------------------------------------- */

/* The database holds every job's data and the rank secrets: it and its
 * -wal, -shm and -journal files must be readable by the service user only.
 * 0 when path (missing is fine) has no group or other permission bits;
 * else -1 after saying which file and how to fix it. */
static int coord_check_private(const char *path, int fd) {
  struct stat sb;
  if ((fd >= 0 ? fstat(fd, &sb) : stat(path, &sb)) != 0) {
    if (errno == ENOENT) return 0;
    fprintf(stderr, "pxcoordd: %s: %s\n", path, strerror(errno));
    return -1;
  }
  if (!(sb.st_mode & 077)) return 0;
  fprintf(stderr,
          "pxcoordd: %s: mode %04o lets other users read the coordinator's database (rank "
          "secrets, every job's data); run chmod 600 %s (and its -wal and -shm files) or "
          "remove it\n",
          path, (unsigned)(sb.st_mode & 07777), path);
  return -1;
}

/* Holds an exclusive lock on the database file for the life of the process
 * so that two coordinators never share a database. The file is created here
 * (before SQLite sees it) with mode 0600 whatever the umask; SQLite gives
 * its -wal and -shm files the database file's mode. An existing database
 * (or -wal, -shm, -journal file) that others may read is refused. */
static int coord_lock_db(const char *path) {
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd >= 0) {
    if (fchmod(fd, 0600) != 0) { /* a umask cannot widen it, but 0277 narrows it */
      fprintf(stderr, "pxcoordd: %s: chmod 600: %s\n", path, strerror(errno));
      close(fd);
      return -1;
    }
  } else if (errno == EEXIST) {
    fd = open(path, O_RDWR | O_CLOEXEC);
  }
  if (fd < 0) {
    fprintf(stderr, "pxcoordd: %s: cannot open the database file: %s\n", path, strerror(errno));
    return -1;
  }
  if (coord_check_private(path, fd) != 0) {
    close(fd);
    return -1;
  }
  static const char *const side[] = {"-wal", "-shm", "-journal"};
  for (size_t i = 0; i < sizeof side / sizeof side[0]; i++) {
    char p[4200];
    snprintf(p, sizeof p, "%s%s", path, side[i]);
    if (coord_check_private(p, -1) != 0) {
      close(fd);
      return -1;
    }
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    fprintf(stderr, "pxcoordd: %s: %s\n", path,
            errno == EWOULDBLOCK ? "the database is in use by another pxcoordd"
                                 : strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

static void coord_advertise(coord_t *c, int port) {
  if (c->cfg.advertise[0]) {
    snprintf(c->advertise, sizeof c->advertise, "%s", c->cfg.advertise);
    return;
  }
  char host[256];
  const char *colon = strrchr(c->cfg.listen, ':');
  size_t n = (size_t)(colon - c->cfg.listen);
  if (n >= sizeof host) n = sizeof host - 1;
  memcpy(host, c->cfg.listen, n);
  host[n] = '\0';
  if (!strcmp(host, "0.0.0.0") || !strcmp(host, "[::]") || !strcmp(host, "::") || !host[0]) {
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
  }
  snprintf(c->advertise, sizeof c->advertise, "%s:%d", host, port);
}

/* Up to COORD_HTTP_MAX_CONNECTIONS HTTP connections besides gRPC's and
 * SQLite's descriptors: more than the usual soft limit of 1024, so the soft
 * limit is raised to the hard one (at most 65536). Nothing here uses
 * select(), so descriptors past FD_SETSIZE are fine. */
static void coord_raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) return;
  rlim_t want = rl.rlim_max < 65536 ? rl.rlim_max : 65536;
  if (want <= rl.rlim_cur) return;
  rl.rlim_cur = want;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
    px_log(PX_LOG_WARN, "cannot raise the open-file limit: %s", strerror(errno));
}

/* The database (locked, migrated), its key and the tokens. Returns the exit
 * status of a failure (everything closed), or -1 to go on. */
static int coord_open_state(coord_t *c, int *lock_fd) {
  *lock_fd = coord_lock_db(c->cfg.db);
  if (*lock_fd < 0) return 1;
  px_store_options_t opt = coord_db_options(0, !c->cfg.read_only, 5000);
  if (px_store_open(c->cfg.db, &opt, &c->db) != PX_OK) {
    fprintf(stderr, "pxcoordd: cannot use the database: %s\n", px_last_error());
    close(*lock_fd);
    return 1;
  }
  px_log(PX_LOG_INFO, "database %s (schema version %d)", c->cfg.db,
         px_store_schema_version(c->db));
  int rc = -1;
  if (c->cfg.read_only) {
    /* Any write from here on fails (SQLITE_READONLY) instead of changing the
     * file; the rank-secret key is not needed by the queries. */
    if (coord_db_query_only(c) != PX_OK) rc = 1;
  } else if (coord_secret_key_load(c) != PX_OK || coord_rank_secrets_upgrade(c) != PX_OK) {
    rc = 1;
  }
  if (rc < 0 && c->cfg.tokens[0] && coord_auth_reload(c) != PX_OK) rc = 2;
  if (rc < 0) return -1;
  fprintf(stderr, "pxcoordd: %s\n", px_last_error());
  px_store_close(c->db);
  close(*lock_fd);
  return rc;
}

/* The HTTP listener (metrics, JSON API, dashboard); a failure stops the
 * coordinator. */
static void coord_start_http(coord_t *c) {
  const char *js = c->cfg.http_js[0] ? c->cfg.http_js : COORD_DEFAULT_HTTP_JS;
  coord_http_limits_t lim = {c->cfg.http_max_per_address, c->cfg.http_max_per_proxy,
                             c->cfg.http_trusted_proxies, c->cfg.http_metrics_ended_s};
  if (coord_http_start(c->cfg.http, c->cfg.db, coord_www_dir(&c->cfg), js, c->cfg.tokens, &lim,
                       &c->http) != PX_OK) {
    fprintf(stderr, "pxcoordd: %s\n", px_last_error());
    c->exit_code = 1;
    coord_stop(c, "the HTTP listener could not start");
    return;
  }
  const char *colon = strrchr(c->cfg.http, ':');
  printf("http on %.*s:%d\n", (int)(colon - c->cfg.http), c->cfg.http, coord_http_port(c->http));
  c->own_ports[1] = coord_http_port(c->http);
  fflush(stdout);
  px_log(PX_LOG_INFO, "HTTP (metrics, JSON, dashboard from %s) on port %d",
         coord_www_dir(&c->cfg), coord_http_port(c->http));
}

/* Signals, the retention timer, the listeners' lines on stdout, READY=1
 * and the first scheduling pass: the coordinator serves. */
static void coord_serve(coord_t *c, uv_loop_t *loop, int port) {
  uv_signal_init(loop, &c->sigterm);
  uv_signal_init(loop, &c->sigint);
  uv_signal_init(loop, &c->sighup);
  uv_timer_init(loop, &c->retention);
  c->sigterm.data = c->sigint.data = c->sighup.data = c;
  c->retention.data = c;
  uv_signal_start(&c->sigterm, coord_on_signal, SIGTERM);
  uv_signal_start(&c->sigint, coord_on_signal, SIGINT);
  uv_signal_start(&c->sighup, coord_on_sighup, SIGHUP);
  if (c->cfg.retention_days > 0) uv_timer_start(&c->retention, coord_on_retention, 1000, 60 * 1000);
  const char *colon = strrchr(c->cfg.listen, ':');
  printf("listening on %.*s:%d\n", (int)(colon - c->cfg.listen), c->cfg.listen, port);
  fflush(stdout);
  if (c->cfg.http[0]) coord_start_http(c);
  px_log(PX_LOG_INFO, "pxcoordd %s listening on port %d (advertised as %s), heartbeat timeout %d ms",
         px_version(), port, c->advertise, c->cfg.heartbeat_timeout_ms);
  px_log(PX_LOG_INFO, "security: %s, %s", c->cfg.tls_cert[0] ? "TLS" : "plain text (loopback only)",
         c->tokens ? "bearer tokens required" : "no authentication (loopback only)");
  /* Only now can it serve: the port is bound and the server started. */
  px_service_notify("READY=1\nSTATUS=serving on port %d (advertised as %s), database %s", port,
                    c->advertise, c->cfg.db);
  px_service_watchdog_start(&coord_watchdog, loop);
  if (c->cfg.read_only) px_log(PX_LOG_INFO, "read-only: serving queries of %s", c->cfg.db);
  else coord_schedule(c);
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  coord_raise_nofile();
  coord_t c;
  memset(&c, 0, sizeof c);
  c.started_ms = coord_now_ms();
  int rc = coord_parse_args(argc, argv, &c.cfg);
  if (rc >= 0) return rc;
  if (c.cfg.log_level >= 0) px_log_set_level((px_log_level_t)c.cfg.log_level);
  else if (!getenv("PX_LOG_LEVEL")) px_log_set_level(PX_LOG_INFO);
  /* a daemon: a cause repeated past the burst is counted, not written */
  px_log_set_rate(PX_LOG_RATE_BURST, PX_LOG_RATE_INTERVAL_MS);
  int lock_fd;
  if ((rc = coord_open_state(&c, &lock_fd)) >= 0) return rc;

  uv_loop_t loop;
  uv_loop_init(&loop);
  c.loop = &loop;
  px_rpc_server_options_t sopt = {
      .tls_cert_file = c.cfg.tls_cert[0] ? c.cfg.tls_cert : NULL,
      .tls_key_file = c.cfg.tls_key[0] ? c.cfg.tls_key : NULL,
      .max_receive = 2 << 20,
      .authorize = coord_authorize,
  };
  if (px_rpc_server_create_ex(&loop, c.cfg.listen, coord_methods, coord_nmethods, &c, &sopt,
                              &c.srv) != PX_OK) {
    fprintf(stderr, "pxcoordd: %s\n", px_last_error());
    uv_run(&loop, UV_RUN_DEFAULT); /* lets the server's handle close */
    uv_loop_close(&loop);
    coord_tokens_free(c.tokens);
    px_store_close(c.db);
    close(lock_fd);
    return 1;
  }
  int port = px_rpc_server_port(c.srv);
  coord_advertise(&c, port);
  c.own_ports[0] = port;
  /* job notifications: a sender thread, whether or not any job asks yet */
  if (!c.cfg.read_only && coord_notifier_start(&c.notifier) != PX_OK)
    px_log(PX_LOG_ERROR, "%s: jobs will not be notified", px_last_error());
  /* Read-only: nodes keep the state the database holds (no LOST marking, no
   * heartbeat sweep); the timer exists only for coord_nodes_stop. */
  if (c.cfg.read_only) uv_timer_init(&loop, &c.sweep);
  if (!c.cfg.read_only && coord_nodes_start(&c) != PX_OK) {
    fprintf(stderr, "pxcoordd: %s\n", px_last_error());
    c.exit_code = 1;
    c.stopping = 1;
    px_rpc_server_shutdown(c.srv, coord_server_done, &c);
  } else {
    coord_serve(&c, &loop, port);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&loop) != 0) px_log(PX_LOG_WARN, "event loop closed with handles open");
  coord_notifier_stop(c.notifier);
  coord_tokens_free(c.tokens);
  coord_queue_destroy(&c);
  px_store_close(c.db);
  close(lock_fd);
  px_log(PX_LOG_INFO, "stopped");
  return c.exit_code;
}
