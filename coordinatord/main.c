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

static void coord_usage(FILE *f) {
  fprintf(f,
          "usage: pxcoordd --db PATH [--listen HOST:PORT] [--config FILE]\n"
          "                [--heartbeat-timeout-ms N] [--advertise HOST:PORT]\n"
          "                [--placement-timeout-ms N] [--agent-grace-ms N]\n"
          "                [--log-level error|warn|info|debug]\n"
          "                [--tls-cert FILE --tls-key FILE] [--tokens FILE]\n"
          "                [--retention-days N] [--read-only]\n"
          "                [--http HOST:PORT [--http-www DIR] [--http-js DIR]\n"
          "                 [--http-max-per-address N] [--http-trusted-proxies LIST]\n"
          "                 [--http-max-per-proxy N] [--http-metrics-ended-s S]]\n"
          "\n"
          "The PruneX coordinator: node registry, job queue and scheduler, rendezvous\n"
          "store, H-SADMM controller and metrics, served over gRPC (prunex.v1).\n"
          "\n"
          "  --db PATH                SQLite database (created if missing; required,\n"
          "                           here or in the config file)\n"
          "  --listen HOST:PORT       address to serve on (default %s);\n"
          "                           port 0 picks a free port\n"
          "  --config FILE            settings file: `key = value` lines or a YAML\n"
          "                           mapping with the keys listen, db, advertise,\n"
          "                           heartbeat_timeout_ms, placement_timeout_ms,\n"
          "                           agent_grace_ms, log_level; flags win\n"
          "  --heartbeat-timeout-ms N a node silent this long becomes LOST, and the\n"
          "                           job it holds FAILED naming it\n"
          "                           (default %d; agents heartbeat every N/3)\n"
          "  --placement-timeout-ms N a SCHEDULED job whose nodes have not started its\n"
          "                           ranks this long after placement fails (default %d)\n"
          "  --agent-grace-ms N       a node whose agent closed its assignment stream\n"
          "                           and did not reopen it this long is LOST (default %d)\n"
          "  --advertise HOST:PORT    address given to workers in assignments\n"
          "                           (default: the listen address and bound port,\n"
          "                           with the host name for 0.0.0.0)\n"
          "  --log-level L            stderr log threshold (default info, or the\n"
          "                           PX_LOG_LEVEL environment variable)\n"
          "  --tls-cert FILE          PEM certificate (chain): serve TLS (with --tls-key)\n"
          "  --tls-key FILE           PEM private key of the certificate\n"
          "  --tokens FILE            bearer tokens, `TOKEN NAME admin|user|node` lines,\n"
          "                           not readable by others; re-read on SIGHUP. Every\n"
          "                           call must then carry a token. Without TLS and\n"
          "                           tokens only loopback addresses are served.\n"
          "  --retention-days N       remove finished jobs (and their metrics) N days\n"
          "                           after they end (default 0: keep)\n"
          "  --http HOST:PORT         also serve HTTP: Prometheus /metrics, JSON under\n"
          "                           /api/v1 and the dashboard at / (port 0 picks a\n"
          "                           free port; printed as `http on HOST:PORT`)\n"
          "  --http-www DIR           the dashboard's files (default: the installed\n"
          "                           ones, %s)\n"
          "  --http-js DIR            JavaScript libraries from Debian packages\n"
          "                           (default %s; Chart.js from libjs-chart.js)\n"
          "  --http-max-per-address N at most N HTTP connections from one address\n"
          "                           (default %d; of %d in all); at the limit a new\n"
          "                           one closes that address's longest idle one\n"
          "  --http-trusted-proxies LIST  addresses and CIDR blocks of reverse proxies\n"
          "                           (\"127.0.0.2, ::1\"; default none): their own,\n"
          "                           larger budget of connections\n"
          "  --http-max-per-proxy N   at most N HTTP connections from each trusted\n"
          "                           proxy address (default %d)\n"
          "  --http-metrics-ended-s S a job's /metrics series stay S seconds after it\n"
          "                           ends, with its final values, then go (default %d;\n"
          "                           at least the scrape interval; 0: at once)\n"
          "  --read-only              serve the queries (GetJob, ListJobs, GetIterations,\n"
          "                           GetRankLog, ...) of an existing database and change\n"
          "                           nothing: no scheduling, no node timeouts, every\n"
          "                           other call refused (FAILED_PRECONDITION). An older\n"
          "                           schema is migrated first: give it a copy. `pxctl`\n"
          "                           starts one to read a finished run's directory\n"
          "  --help, --version\n"
          "\n"
          "Without --db or db in the config file, $STATE_DIRECTORY/coordinator.db is used\n"
          "when STATE_DIRECTORY is set (systemd's StateDirectory=prunex).\n"
          "Under systemd (Type=notify) it sends READY=1 once it serves, STATUS= lines,\n"
          "and WATCHDOG=1 from its event loop when WatchdogSec= is set.\n"
          "\n"
          "On start it prints `listening on HOST:PORT` on stdout. SIGTERM or SIGINT\n"
          "shut it down cleanly. Exit status: 0 clean shutdown, 1 runtime failure\n"
          "(database, address), 2 bad flags or configuration.\n",
          COORD_DEFAULT_LISTEN, COORD_DEFAULT_HEARTBEAT_TIMEOUT_MS,
          COORD_DEFAULT_PLACEMENT_TIMEOUT_MS, COORD_DEFAULT_AGENT_GRACE_MS, PX_WWW_DIR,
          COORD_DEFAULT_HTTP_JS, COORD_DEFAULT_HTTP_PER_ADDRESS, COORD_HTTP_MAX_CONNECTIONS,
          COORD_DEFAULT_HTTP_PER_PROXY, COORD_DEFAULT_HTTP_METRICS_ENDED_S);
}

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

/* Flag name -> config key; NULL for flags that are not settings. */
static const char *coord_flag_key(const char *flag) {
  static const char *const map[][2] = {
      {"--listen", "listen"},
      {"--db", "db"},
      {"--advertise", "advertise"},
      {"--heartbeat-timeout-ms", "heartbeat_timeout_ms"},
      {"--placement-timeout-ms", "placement_timeout_ms"},
      {"--agent-grace-ms", "agent_grace_ms"},
      {"--log-level", "log_level"},
      {"--tls-cert", "tls_cert"},
      {"--tls-key", "tls_key"},
      {"--tokens", "tokens"},
      {"--retention-days", "retention_days"},
      {"--http", "http"},
      {"--http-www", "http_www"},
      {"--http-js", "http_js"},
      {"--http-max-per-address", "http_max_per_address"},
      {"--http-trusted-proxies", "http_trusted_proxies"},
      {"--http-max-per-proxy", "http_max_per_proxy"},
      {"--http-metrics-ended-s", "http_metrics_ended_s"},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (!strcmp(flag, map[i][0])) return map[i][1];
  return NULL;
}

/* 1 when the host of HOST:PORT is a loopback address (127.0.0.0/8, ::1,
 * localhost): the only ones served without TLS and tokens. */
static int coord_listen_loopback(const char *listen) {
  const char *colon = strrchr(listen, ':');
  size_t n = colon ? (size_t)(colon - listen) : strlen(listen);
  char host[256];
  if (n >= sizeof host) return 0;
  memcpy(host, listen, n);
  host[n] = '\0';
  if (!strcmp(host, "localhost") || !strcmp(host, "[::1]") || !strcmp(host, "::1")) return 1;
  if (!strncmp(host, "ipv4:", 5)) memmove(host, host + 5, strlen(host + 5) + 1);
  if (strncmp(host, "127.", 4) != 0) return 0;
  for (const char *p = host + 4; *p; p++)
    if (!(*p == '.' || (*p >= '0' && *p <= '9'))) return 0;
  return 1;
}

/* Returns -1 to go on, else the exit status. */
static int coord_parse_args(int argc, char **argv, coord_config_t *cfg) {
  coord_config_defaults(cfg);
  /* The config file first, so that flags override it wherever they are. */
  const char *config = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--config")) {
      if (i + 1 >= argc) return coord_bad_usage("%s needs a value", argv[i]);
      config = argv[++i];
    } else if (!strncmp(argv[i], "--config=", 9)) {
      config = argv[i] + 9;
    }
  }
  if (config && coord_config_load(config, cfg) != PX_OK) {
    fprintf(stderr, "pxcoordd: %s\n", px_last_error());
    return 2;
  }
  if (config) { /* SIGHUP re-reads its policy, whatever the directory then */
    char *abs = realpath(config, NULL);
    snprintf(cfg->config_path, sizeof cfg->config_path, "%s", abs ? abs : config);
    free(abs);
  }
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
      coord_usage(stdout);
      return 0;
    }
    if (!strcmp(arg, "--version")) {
      printf("pxcoordd %s\n", px_version());
      return 0;
    }
    if (!strcmp(arg, "--read-only")) {
      cfg->read_only = 1;
      continue;
    }
    char flag[64];
    const char *value = NULL;
    const char *eq = strchr(arg, '=');
    if (eq && !strncmp(arg, "--", 2) && (size_t)(eq - arg) < sizeof flag) {
      memcpy(flag, arg, (size_t)(eq - arg));
      flag[eq - arg] = '\0';
      value = eq + 1;
    } else {
      snprintf(flag, sizeof flag, "%s", arg);
    }
    if (!strcmp(flag, "--config")) {
      if (!value) i++;
      continue;
    }
    const char *key = coord_flag_key(flag);
    if (!key) return coord_bad_usage("unknown argument '%s'", arg);
    if (!value) {
      if (i + 1 >= argc) return coord_bad_usage("%s needs a value", flag);
      value = argv[++i];
    }
    if (coord_config_set(cfg, key, value, flag) != PX_OK) {
      fprintf(stderr, "pxcoordd: %s\n(run pxcoordd --help for the flags)\n", px_last_error());
      return 2;
    }
  }
  /* Under systemd (StateDirectory=prunex) the database has a natural home. */
  const char *state_dir = getenv("STATE_DIRECTORY");
  if (!cfg->db[0] && state_dir && state_dir[0]) {
    size_t n = strcspn(state_dir, ":"); /* the first of a colon-separated list */
    if (snprintf(cfg->db, sizeof cfg->db, "%.*s/coordinator.db", (int)n, state_dir) >=
        (int)sizeof cfg->db)
      return coord_bad_usage("STATE_DIRECTORY '%s' is too long for a database path", state_dir);
  }
  if (!cfg->db[0])
    return coord_bad_usage("%s", "no database: give --db PATH (or db in --config, or run with "
                                 "STATE_DIRECTORY set)");
  if (cfg->read_only && access(cfg->db, F_OK) != 0)
    return coord_bad_usage("--read-only: the database %s: %s (a read-only coordinator creates "
                           "nothing)", cfg->db, strerror(errno));
  if (cfg->read_only) cfg->retention_days = 0; /* removes nothing either */
  if (!cfg->tls_cert[0] != !cfg->tls_key[0])
    return coord_bad_usage("%s", "TLS needs both --tls-cert and --tls-key (tls_cert, tls_key)");
  /* The HTTP listener speaks plain HTTP: it stays on loopback (a TLS reverse
   * proxy exposes it; docs/security.md). */
  if (cfg->http[0] && !coord_listen_loopback(cfg->http))
    return coord_bad_usage("http = %s is not a loopback address: the HTTP listener has no TLS; "
                           "bind it to 127.0.0.1 and put a TLS reverse proxy in front of it "
                           "(see docs/security.md)",
                           cfg->http);
  if (!coord_listen_loopback(cfg->listen) && !(cfg->tls_cert[0] && cfg->tokens[0]))
    return coord_bad_usage("listen = %s is not a loopback address: serving other hosts needs "
                           "TLS and tokens (--tls-cert, --tls-key, --tokens; see "
                           "docs/security.md), so that nobody on the network can drive the "
                           "cluster unauthenticated",
                           cfg->listen);
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

/* SIGHUP: re-read the scheduling policy of the config file and the tokens
 * file (a bad file keeps what is in force). */
static void coord_on_sighup(uv_signal_t *h, int signum) {
  (void)signum;
  coord_t *c = h->data;
  if (c->cfg.config_path[0]) {
    if (coord_config_reload_policy(&c->cfg) != PX_OK)
      px_log(PX_LOG_ERROR, "SIGHUP: %s (the previous scheduling policy stays in force)",
             px_last_error());
    else px_log(PX_LOG_INFO, "SIGHUP: scheduling policy re-read from %s", c->cfg.config_path);
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
