/* pxcoordd's settings: the one table (prunex/settings.h) that its flags,
 * its config file (`key = value` lines or a YAML mapping, the flags' names
 * with underscores), --help and the SIGHUP reload are read from; the checks
 * that span settings; and the reload, which applies the settings marked
 * RELOAD (the scheduling policy, docs/operations.md, and the notifications,
 * notify_policy.c) and names the others that changed as needing a restart.
 * deploy/man/pxcoordd.8 and docs/operations.md list the same settings
 * (the settings_docs test checks both against --help). */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coord.h"
#include "http.h"
#include "prunex/check.h"
#include "prunex/jobspec.h"
#include "prunex/settings.h"
#include "notify_policy.h"

#define COORD_STR_(x) #x
#define COORD_STR(x) COORD_STR_(x)
#define F(field) offsetof(coord_config_t, field), sizeof(((coord_config_t *)0)->field)
/* the three per-user keys share the users' lines (a reload compares them whole) */
#define USERS                                            \
  offsetof(coord_config_t, sched.nusers),                \
      sizeof(coord_config_t) - offsetof(coord_config_t, sched.nusers)

static int coord_hostport_check(const char *v, char *why, size_t cap) {
  const char *colon = strrchr(v, ':');
  char *end = NULL;
  errno = 0;
  long port = colon && colon != v && colon[1] ? strtol(colon + 1, &end, 10) : -1;
  if (port < 0 || errno != 0 || *end != '\0' || port > 65535) {
    snprintf(why, cap, "expected HOST:PORT, the port a number in 0..65535");
    return -1;
  }
  return 0;
}

static int coord_proxies_check(const char *v, char *why, size_t cap) {
  coord_http_net_t nets[COORD_HTTP_MAX_PROXIES];
  int n = 0;
  if (coord_http_nets_parse(v, nets, COORD_HTTP_MAX_PROXIES, &n) == PX_OK) return 0;
  snprintf(why, cap, "%s", px_last_error());
  return -1;
}

static int coord_notify_url_check(const char *v, char *why, size_t cap) {
  if (px_jobspec_notify_url_ok(v)) return 0;
  snprintf(why, cap, "expected an http:// or https:// URL of at most 1024 bytes without blanks");
  return -1;
}

static int coord_notify_states_check(const char *v, char *why, size_t cap) {
  unsigned mask;
  if (px_jobspec_notify_states(v, &mask) == 0) return 0;
  snprintf(why, cap, "expected states separated by commas (pending, scheduled, running, "
                     "succeeded, failed, cancelled, timeout) or end");
  return -1;
}

/* notify_allow: repeated lines (or flags) add entries. */
static int coord_notify_allow_set(void *obj, const char *key, const char *v, char *why,
                                  size_t cap) {
  (void)key;
  coord_config_t *cfg = obj;
  if (!coord_notify_allow_ok(v, why, cap)) return -1;
  size_t used = strlen(cfg->notify_allow);
  if (used + strlen(v) + 2 > sizeof cfg->notify_allow) {
    snprintf(why, cap, "longer than %zu bytes in all", sizeof cfg->notify_allow - 1);
    return -1;
  }
  snprintf(cfg->notify_allow + used, sizeof cfg->notify_allow - used, "%s%s", used ? " " : "",
           v);
  return 0;
}

/* share.NAME, max_running_nodes.NAME, max_queued_jobs.NAME: the user's
 * line of the policy, made when new (its other values -1: the defaults). */
static int coord_user_set(void *obj, const char *key, const char *v, char *why, size_t cap) {
  coord_sched_policy_t *p = &((coord_config_t *)obj)->sched;
  const char *name = strchr(key, '.') + 1;
  int share = !strncmp(key, "share.", 6);
  char *end = NULL;
  errno = 0;
  double d = strtod(v, &end);
  if (strlen(name) >= COORD_SCHED_USER_NAME)
    return snprintf(why, cap, "expected a user name of 1 to %d bytes after the dot",
                    COORD_SCHED_USER_NAME - 1), -1;
  if (errno || end == v || *end || (share ? !(d >= 1e-6 && d <= 1e9)
                                          : !(d >= 0 && d <= 1e9 && d == (double)(int)d)))
    return snprintf(why, cap, "expected %s in [%s, 1000000000]",
                    share ? "a number" : "an integer", share ? "1e-06" : "0"), -1;
  coord_sched_user_conf_t *u = (coord_sched_user_conf_t *)coord_sched_user_conf(p, name);
  if (!u) {
    if (p->nusers >= COORD_SCHED_USERS_MAX)
      return snprintf(why, cap, "more than %d users in the policy", COORD_SCHED_USERS_MAX), -1;
    u = &p->users[p->nusers++];
    snprintf(u->name, sizeof u->name, "%s", name);
    u->share = -1;
    u->max_running_nodes = u->max_queued_jobs = -1;
  }
  if (share) u->share = d;
  else if (key[4] == 'r') u->max_running_nodes = (int)d;
  else u->max_queued_jobs = (int)d;
  return 0;
}

static const char *const coord_levels[] = {"error", "warn", "info", "debug", NULL};

enum { R = PX_SETTING_RELOAD };
#define NUM(lo, hi) (double)(lo), (double)(hi), NULL
#define NONE 0, 0, NULL
#define STR(field, def, arg, help, check) \
  PX_SETTING_STRING, 0, F(field), NONE, def, arg, help, NULL, check, NULL

static const px_setting_t coord_settings[] = {
    {"config", PX_SETTING_STRING, PX_SETTING_FLAG_ONLY | PX_SETTING_CONFIG, F(config_path), NONE,
     NULL, "FILE", "settings file: `key = value` lines or a YAML mapping whose keys are these "
     "settings' names (flag only); flags win over it", NULL, NULL, NULL},
    {"db", STR(db, NULL, "PATH", "SQLite database, created if missing (default "
     "$STATE_DIRECTORY/coordinator.db when STATE_DIRECTORY is set, as under systemd; else "
     "required)", NULL)},
    {"listen", STR(listen, COORD_DEFAULT_LISTEN, "HOST:PORT",
     "address to serve gRPC on; port 0 picks a free port", coord_hostport_check)},
    {"advertise", STR(advertise, NULL, "HOST:PORT", "address given to workers in assignments "
     "(default: the listen address and bound port, with the host name for 0.0.0.0)",
     coord_hostport_check)},
    {"heartbeat_timeout_ms", PX_SETTING_INT, 0, F(heartbeat_timeout_ms), NUM(10, INT_MAX / 2),
     COORD_STR(COORD_DEFAULT_HEARTBEAT_TIMEOUT_MS), "N", "a node silent this long becomes LOST, "
     "and the job it holds FAILED naming it; agents heartbeat every N/3", NULL, NULL, NULL},
    {"placement_timeout_ms", PX_SETTING_INT, 0, F(placement_timeout_ms), NUM(10, INT_MAX / 2),
     COORD_STR(COORD_DEFAULT_PLACEMENT_TIMEOUT_MS), "N", "a SCHEDULED job whose nodes have not "
     "started its ranks this long after placement fails", NULL, NULL, NULL},
    {"agent_grace_ms", PX_SETTING_INT, 0, F(agent_grace_ms), NUM(10, INT_MAX / 2),
     COORD_STR(COORD_DEFAULT_AGENT_GRACE_MS), "N", "a node whose agent closed its assignment "
     "stream and did not reopen it this long is LOST", NULL, NULL, NULL},
    {"blacklist_window_ms", PX_SETTING_INT, 0, F(blacklist_window_ms), NUM(1, INT_MAX / 2),
     COORD_STR(COORD_DEFAULT_BLACKLIST_WINDOW_MS), "N", "an elastic job that loses a node twice "
     "within this does not take the node back for --blacklist-cooldown-ms", NULL, NULL, NULL},
    {"blacklist_cooldown_ms", PX_SETTING_INT, 0, F(blacklist_cooldown_ms), NUM(1, INT_MAX / 64),
     COORD_STR(COORD_DEFAULT_BLACKLIST_COOLDOWN_MS), "N", "how long an elastic job does not take "
     "back a node it lost twice within --blacklist-window-ms; doubled for each further loss, "
     "at most 64 times", NULL, NULL, NULL},
    {"log_level", PX_SETTING_ENUM, 0, F(log_level), 0, 0, coord_levels, NULL, "L",
     "stderr log threshold: error, warn, info or debug (default info, or the PX_LOG_LEVEL "
     "environment variable)", NULL, NULL, NULL},
    {"tls_cert", STR(tls_cert, NULL, "FILE", "PEM certificate (chain): serve TLS (with "
     "--tls-key)", NULL)},
    {"tls_key", STR(tls_key, NULL, "FILE", "PEM private key of the certificate", NULL)},
    {"tokens", STR(tokens, NULL, "FILE", "bearer tokens, `TOKEN NAME admin|user|node` lines, not "
     "readable by others; the file is re-read on SIGHUP. Every call must then carry a token. "
     "Without TLS and tokens only loopback addresses are served", NULL)},
    {"retention_days", PX_SETTING_INT, 0, F(retention_days), NUM(0, 36500), "0", "N",
     "remove finished jobs (and their metrics) N days after they end; 0 keeps them", NULL, NULL,
     NULL},
    {"read_only", PX_SETTING_BOOL, PX_SETTING_FLAG_ONLY, F(read_only), NONE, NULL, NULL,
     "serve the queries (GetJob, ListJobs, GetIterations, GetRankLog, ...) of an existing "
     "database and change nothing: no scheduling, no node timeouts, no retention, every other "
     "call refused (FAILED_PRECONDITION). An older schema is migrated first: give it a copy. "
     "`pxctl` starts one to read a finished run's directory (flag only)", NULL, NULL, NULL},
    {"http", STR(http, NULL, "HOST:PORT", "also serve HTTP (loopback only): Prometheus /metrics, "
     "JSON under /api/v1 and the dashboard at / (port 0 picks a free port; printed as `http on "
     "HOST:PORT`)", coord_hostport_check)},
    {"http_www", STR(http_www, NULL, "DIR", "the dashboard's files (default: the installed "
     "ones, " PX_WWW_DIR ")", NULL)},
    {"http_js", STR(http_js, COORD_DEFAULT_HTTP_JS, "DIR", "JavaScript libraries from Debian "
     "packages (Chart.js from libjs-chart.js)", NULL)},
    {"http_max_per_address", PX_SETTING_INT, 0, F(http_max_per_address),
     NUM(1, COORD_HTTP_MAX_CONNECTIONS), COORD_STR(COORD_DEFAULT_HTTP_PER_ADDRESS), "N",
     "at most N HTTP connections from one address (of " COORD_STR(COORD_HTTP_MAX_CONNECTIONS)
     " in all); at the limit a new one closes that address's longest idle one", NULL, NULL,
     NULL},
    {"http_trusted_proxies", STR(http_trusted_proxies, NULL, "LIST", "addresses and CIDR blocks "
     "of reverse proxies (\"127.0.0.2, ::1\"; default none): their own, larger budget of "
     "connections", coord_proxies_check)},
    {"http_max_per_proxy", PX_SETTING_INT, 0, F(http_max_per_proxy),
     NUM(1, COORD_HTTP_MAX_CONNECTIONS), COORD_STR(COORD_DEFAULT_HTTP_PER_PROXY), "N",
     "at most N HTTP connections from each trusted proxy address", NULL, NULL, NULL},
    {"http_metrics_ended_s", PX_SETTING_INT, 0, F(http_metrics_ended_s), NUM(0, 86400),
     COORD_STR(COORD_DEFAULT_HTTP_METRICS_ENDED_S), "S", "a job's /metrics series stay S seconds "
     "after it ends, with its final values, then go (at least the scrape interval; 0: at once)",
     NULL, NULL, NULL},
    /* the scheduling policy (docs/operations.md, "Scheduling policy") */
    {"priority_weight_job", PX_SETTING_NUMBER, R, F(sched.weight_job), NUM(0, 1e9),
     COORD_STR(COORD_SCHED_WEIGHT_JOB), "W", "weight of the job factor (spec priority / 1000)",
     NULL, NULL, NULL},
    {"priority_weight_fairshare", PX_SETTING_NUMBER, R, F(sched.weight_fairshare), NUM(0, 1e9),
     COORD_STR(COORD_SCHED_WEIGHT_FAIRSHARE), "W", "weight of the user's fair-share factor",
     NULL, NULL, NULL},
    {"priority_weight_age", PX_SETTING_NUMBER, R, F(sched.weight_age), NUM(0, 1e9),
     COORD_STR(COORD_SCHED_WEIGHT_AGE), "W", "weight of the age factor", NULL, NULL, NULL},
    {"fairshare_half_life_s", PX_SETTING_INT, R, F(sched.half_life_s), NUM(1, INT_MAX),
     COORD_STR(COORD_SCHED_HALF_LIFE_S), "S", "usage decay half-life", NULL, NULL, NULL},
    {"priority_max_age_s", PX_SETTING_INT, R, F(sched.max_age_s), NUM(1, INT_MAX),
     COORD_STR(COORD_SCHED_MAX_AGE_S), "S", "queue time at which the age factor reaches 1", NULL,
     NULL, NULL},
    {"max_running_nodes", PX_SETTING_INT, R, F(sched.max_running_nodes), NUM(0, 1e9), "0", "N",
     "nodes one user's running jobs may hold; 0: no limit", NULL, NULL, NULL},
    {"max_queued_jobs", PX_SETTING_INT, R, F(sched.max_queued_jobs), NUM(0, 1e9), "0", "N",
     "unfinished jobs one user may have (more are refused); 0: no limit", NULL, NULL, NULL},
    {"time_limit_default_s", PX_SETTING_INT, R, F(sched.time_limit_default_s), NUM(0, INT_MAX),
     "0", "S", "time limit of jobs that give none; 0: none", NULL, NULL, NULL},
    {"time_limit_max_s", PX_SETTING_INT, R, F(sched.time_limit_max_s), NUM(0, INT_MAX), "0", "S",
     "the most time a job may ask for; 0: no maximum", NULL, NULL, NULL},
    {"preemption", PX_SETTING_BOOL, R, F(sched.preempt), NONE, "off", "on|off",
     "on: the first waiting job may take nodes from lower-priority elastic jobs above their "
     "min_nodes (they go on), else preempt lower-priority jobs that checkpoint", NULL, NULL,
     NULL},
    {"preemption_grace_s", PX_SETTING_INT, R, F(sched.preempt_grace_s), NUM(1, INT_MAX),
     COORD_STR(COORD_PREEMPT_GRACE_S), "S", "a preempted job not stopped at its checkpoint this "
     "long after being asked is cancelled", NULL, NULL, NULL},
    {"share.", PX_SETTING_CUSTOM, R | PX_SETTING_PREFIX | PX_SETTING_FILE_ONLY, USERS, NONE, NULL,
     "S", "user NAME's share of the cluster (a positive number, relative to the others'; "
     "default 1)", NULL, NULL, coord_user_set},
    {"max_running_nodes.", PX_SETTING_CUSTOM, R | PX_SETTING_PREFIX | PX_SETTING_FILE_ONLY, USERS,
     NONE, NULL, "N", "nodes user NAME's running jobs may hold (default: max_running_nodes)",
     NULL, NULL, coord_user_set},
    {"max_queued_jobs.", PX_SETTING_CUSTOM, R | PX_SETTING_PREFIX | PX_SETTING_FILE_ONLY, USERS,
     NONE, NULL, "N", "unfinished jobs user NAME may have (default: max_queued_jobs)", NULL,
     NULL, coord_user_set},
    /* notifications (notify.c, notify_policy.c) */
    {"notify_url", PX_SETTING_STRING, R, F(notify_url), NONE, NULL, "URL", "POST every job's "
     "state changes here (http or https; default none)", NULL, coord_notify_url_check, NULL},
    {"notify_states", PX_SETTING_STRING, R, F(notify_states), NONE, "end", "LIST", "which: "
     "states separated by commas; end = succeeded, failed, cancelled, timeout", NULL,
     coord_notify_states_check, NULL},
    {"notify_allow", PX_SETTING_CUSTOM, R, F(notify_allow), NONE, NULL, "LIST", "where specs' "
     "notify.url may also go: addresses, CIDRs, host names (*.example.org) or URL prefixes, never "
     "pxcoordd's own ports; repeated, they add up (default none)", NULL, NULL,
     coord_notify_allow_set},
    {"notify_public", PX_SETTING_BOOL, R, F(notify_public), NONE, "on", "on|off",
     "specs may notify any public address; off: only what notify_allow names", NULL, NULL, NULL},
};

static const px_settings_spec_t coord_spec = {
    .program = "pxcoordd",
    .synopsis = "--db PATH [--listen HOST:PORT] [--config FILE] [OPTIONS]",
    .about = "The PruneX coordinator: node registry, job queue and scheduler, rendezvous\n"
             "store, H-SADMM controller and metrics, served over gRPC (prunex.v1).",
    .epilogue =
        "Under systemd (Type=notify) it sends READY=1 once it serves, STATUS= lines,\n"
        "and WATCHDOG=1 from its event loop when WatchdogSec= is set.\n"
        "\n"
        "On start it prints `listening on HOST:PORT` on stdout. SIGTERM or SIGINT\n"
        "shut it down cleanly; SIGHUP re-reads the tokens file and the config file's\n"
        "settings marked so above (a changed other one is logged as needing a\n"
        "restart). Exit status: 0 clean shutdown, 1 runtime failure (database,\n"
        "address), 2 bad flags or configuration.",
    .table = coord_settings,
    .n = sizeof coord_settings / sizeof coord_settings[0],
};

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

/* What spans settings, and the database's home under systemd: at the start
 * and on every reload (so that a reload compares like with like). */
static px_status_t coord_config_finish(coord_config_t *cfg) {
  const char *src = cfg->config_path[0] ? cfg->config_path : "the settings";
  PX_REQUIRE(!cfg->sched.time_limit_max_s ||
                 cfg->sched.time_limit_default_s <= cfg->sched.time_limit_max_s,
             "%s: time_limit_default_s = %lld is above time_limit_max_s = %lld", src,
             (long long)cfg->sched.time_limit_default_s, (long long)cfg->sched.time_limit_max_s);
  PX_REQUIRE(cfg->sched.weight_job + cfg->sched.weight_fairshare + cfg->sched.weight_age > 0,
             "%s: the priority weights are all 0", src);
  const char *state_dir = getenv("STATE_DIRECTORY");
  if (!cfg->db[0] && state_dir && state_dir[0]) {
    size_t n = strcspn(state_dir, ":"); /* the first of a colon-separated list */
    PX_REQUIRE(snprintf(cfg->db, sizeof cfg->db, "%.*s/coordinator.db", (int)n, state_dir) <
                   (int)sizeof cfg->db,
               "STATE_DIRECTORY '%s' is too long for a database path", state_dir);
  }
  PX_REQUIRE(cfg->db[0], "no database: give --db PATH (or db in --config, or run with "
                         "STATE_DIRECTORY set)");
  PX_REQUIRE(!cfg->tls_cert[0] == !cfg->tls_key[0],
             "TLS needs both --tls-cert and --tls-key (tls_cert, tls_key)");
  /* The HTTP listener speaks plain HTTP: it stays on loopback (a TLS reverse
   * proxy exposes it; docs/security.md). */
  PX_REQUIRE(!cfg->http[0] || coord_listen_loopback(cfg->http),
             "http = %s is not a loopback address: the HTTP listener has no TLS; bind it to "
             "127.0.0.1 and put a TLS reverse proxy in front of it (see docs/security.md)",
             cfg->http);
  PX_REQUIRE(coord_listen_loopback(cfg->listen) || (cfg->tls_cert[0] && cfg->tokens[0]),
             "listen = %s is not a loopback address: serving other hosts needs TLS and tokens "
             "(--tls-cert, --tls-key, --tokens; see docs/security.md), so that nobody on the "
             "network can drive the cluster unauthenticated",
             cfg->listen);
  return PX_OK;
}

/* cfg's defaults, bound to a settings handle the caller destroys. */
static px_status_t coord_config_begin(coord_config_t *cfg, px_settings_t **s) {
  memset(cfg, 0, sizeof *cfg);
  PX_CHECK(px_settings_create(&coord_spec, cfg, s));
  return px_settings_defaults(*s);
}

int coord_config_parse(int argc, char **argv, coord_config_t *cfg) {
  px_settings_t *s = NULL;
  if (coord_config_begin(cfg, &s) != PX_OK) {
    fprintf(stderr, "pxcoordd: %s\n", px_last_error());
    px_settings_destroy(s);
    return 1;
  }
  int rc = px_settings_parse_args(s, argc, argv);
  px_settings_destroy(s); /* no STRREF settings: nothing of it is kept */
  if (rc >= 0) return rc;
  cfg->argc = argc;
  cfg->argv = argv;
  if (cfg->config_path[0]) { /* SIGHUP re-reads it, whatever the directory then */
    char *abs = realpath(cfg->config_path, NULL);
    if (abs && strlen(abs) < sizeof cfg->config_path) strcpy(cfg->config_path, abs);
    free(abs);
  }
  if (cfg->read_only) cfg->retention_days = 0; /* removes nothing either */
  if (coord_config_finish(cfg) != PX_OK) {
    fprintf(stderr, "pxcoordd: %s\n(run pxcoordd --help for the flags)\n", px_last_error());
    return 2;
  }
  return -1;
}

int coord_config_reload(coord_config_t *cfg, char *restart, size_t cap) {
  PX_REQUIRE(cfg->config_path[0], "no config file (--config) to re-read");
  coord_config_t *fresh = px_malloc(sizeof *fresh, "coordd.config");
  if (!fresh) return PX_ERR_NOMEM;
  px_settings_t *s = NULL;
  px_status_t st = coord_config_begin(fresh, &s);
  if (st == PX_OK) st = px_settings_load(s, cfg->config_path);
  if (st == PX_OK) st = px_settings_apply_args(s, cfg->argc, cfg->argv); /* flags still win */
  memcpy(fresh->config_path, cfg->config_path, sizeof fresh->config_path);
  fresh->argc = cfg->argc;
  fresh->argv = cfg->argv;
  if (fresh->read_only) fresh->retention_days = 0;
  if (st == PX_OK) st = coord_config_finish(fresh);
  int n = st == PX_OK ? px_settings_reload(&coord_spec, cfg, fresh, restart, cap) : st;
  px_settings_destroy(s);
  px_free(fresh);
  return n;
}
