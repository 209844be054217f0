/* pxcoordd settings: defaults, one setter shared by the flags and the config
 * file, and the config file reader. The file is either `key = value` lines or
 * a YAML mapping (`key: value`), with the flags' names (listen, db,
 * advertise, heartbeat_timeout_ms, placement_timeout_ms, agent_grace_ms,
 * log_level, tls_cert, tls_key, tokens, retention_days, http, http_www,
 * http_js, http_max_per_address, http_max_per_proxy, http_trusted_proxies,
 * http_metrics_ended_s;
 * dashes or underscores), and the
 * scheduling policy (docs/operations.md): priority_weight_job,
 * priority_weight_fairshare, priority_weight_age, fairshare_half_life_s,
 * priority_max_age_s, max_running_nodes, max_queued_jobs,
 * time_limit_default_s, time_limit_max_s, preemption, preemption_grace_s,
 * and per user share.NAME,
 * max_running_nodes.NAME, max_queued_jobs.NAME; notifications notify_url
 * and notify_states, and where specs may send them, notify_allow and
 * notify_public (notify_policy.c). The policy and notifications are re-read on SIGHUP
 * (coord_config_reload_policy). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "http.h"
#include "prunex/check.h"
#include "prunex/conf.h"
#include "prunex/jobspec.h"
#include "notify_policy.h"

void coord_config_defaults(coord_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  snprintf(cfg->listen, sizeof cfg->listen, "%s", COORD_DEFAULT_LISTEN);
  cfg->heartbeat_timeout_ms = COORD_DEFAULT_HEARTBEAT_TIMEOUT_MS;
  cfg->placement_timeout_ms = COORD_DEFAULT_PLACEMENT_TIMEOUT_MS;
  cfg->agent_grace_ms = COORD_DEFAULT_AGENT_GRACE_MS;
  cfg->log_level = -1;
  cfg->http_max_per_address = COORD_DEFAULT_HTTP_PER_ADDRESS;
  cfg->http_max_per_proxy = COORD_DEFAULT_HTTP_PER_PROXY;
  cfg->http_metrics_ended_s = COORD_DEFAULT_HTTP_METRICS_ENDED_S;
  coord_sched_policy_defaults(&cfg->sched);
  snprintf(cfg->notify_states, sizeof cfg->notify_states, "end");
  cfg->notify_public = 1;
}

/* A decimal number in [lo, hi] (integers when integral), else an error
 * naming where, key and the range. */
static px_status_t coord_number(const char *value, double lo, double hi, int integral,
                                const char *key, const char *where, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(value, &end);
  PX_REQUIRE(errno == 0 && end != value && *end == '\0' && v >= lo && v <= hi &&
                 (!integral || v == (double)(int64_t)v),
             "%s: %s = '%s': expected %s in [%.0f, %.0f]", where, key, value,
             integral ? "an integer" : "a number", lo, hi);
  *out = v;
  return PX_OK;
}

/* The user's line of the policy, made when new (defaults: -1). */
static px_status_t coord_policy_user(coord_sched_policy_t *p, const char *name, const char *key,
                                     const char *where, coord_sched_user_conf_t **out) {
  PX_REQUIRE(name[0] && strlen(name) < COORD_SCHED_USER_NAME,
             "%s: %s: expected a user name after the dot (1 to %d bytes)", where, key,
             COORD_SCHED_USER_NAME - 1);
  coord_sched_user_conf_t *u = (coord_sched_user_conf_t *)coord_sched_user_conf(p, name);
  if (!u) {
    PX_REQUIRE(p->nusers < COORD_SCHED_USERS_MAX, "%s: %s: more than %d users in the policy",
               where, key, COORD_SCHED_USERS_MAX);
    u = &p->users[p->nusers++];
    snprintf(u->name, sizeof u->name, "%s", name);
    u->share = -1;
    u->max_running_nodes = u->max_queued_jobs = -1;
  }
  *out = u;
  return PX_OK;
}

/* The scheduling policy's settings; 1 when key is one (set or failed in
 * *st), 0 when it is not a policy key. */
static int coord_policy_set(coord_sched_policy_t *p, const char *key, const char *value,
                            const char *where, px_status_t *st) {
  static const char *const weights[] = {"priority_weight_job", "priority_weight_fairshare",
                                        "priority_weight_age"};
  double *wp[] = {&p->weight_job, &p->weight_fairshare, &p->weight_age};
  double v = 0;
  for (int i = 0; i < 3; i++)
    if (!strcmp(key, weights[i])) {
      *st = coord_number(value, 0, 1e9, 0, key, where, &v);
      if (*st == PX_OK) *wp[i] = v;
      return 1;
    }
  static const char *const secs[] = {"fairshare_half_life_s", "priority_max_age_s",
                                     "preemption_grace_s", "time_limit_default_s",
                                     "time_limit_max_s"};
  int64_t *sp[] = {&p->half_life_s, &p->max_age_s, &p->preempt_grace_s,
                   &p->time_limit_default_s, &p->time_limit_max_s};
  for (int i = 0; i < 5; i++)
    if (!strcmp(key, secs[i])) {
      *st = coord_number(value, i < 3 ? 1 : 0, 2147483647.0, 1, key, where, &v);
      if (*st == PX_OK) *sp[i] = (int64_t)v;
      return 1;
    }
  if (!strcmp(key, "preemption")) {
    int on = !strcmp(value, "on") || !strcmp(value, "true") || !strcmp(value, "yes");
    int off = !strcmp(value, "off") || !strcmp(value, "false") || !strcmp(value, "no");
    *st = on || off ? PX_OK
                    : px_set_error(PX_ERR_INVALID, "%s: preemption = '%s': expected on or off",
                                   where, value);
    if (*st == PX_OK) p->preempt = on;
    return 1;
  }
  if (!strcmp(key, "max_running_nodes") || !strcmp(key, "max_queued_jobs")) {
    *st = coord_number(value, 0, 1e9, 1, key, where, &v);
    if (*st == PX_OK) *(key[4] == 'r' ? &p->max_running_nodes : &p->max_queued_jobs) = (int)v;
    return 1;
  }
  static const char *const per_user[] = {"share.", "max_running_nodes.", "max_queued_jobs."};
  for (int i = 0; i < 3; i++) {
    size_t n = strlen(per_user[i]);
    if (strncmp(key, per_user[i], n) != 0) continue;
    coord_sched_user_conf_t *u = NULL;
    *st = coord_policy_user(p, key + n, key, where, &u);
    if (*st == PX_OK)
      *st = i == 0 ? coord_number(value, 1e-6, 1e9, 0, key, where, &v)
                   : coord_number(value, 0, 1e9, 1, key, where, &v);
    if (*st != PX_OK) return 1;
    if (i == 0) u->share = v;
    else if (i == 1) u->max_running_nodes = (int)v;
    else u->max_queued_jobs = (int)v;
    return 1;
  }
  return 0;
}

static px_status_t coord_copy(char *dst, size_t cap, const char *v, const char *key,
                              const char *where) {
  PX_REQUIRE(v[0] != '\0', "%s: %s is empty", where, key);
  PX_REQUIRE(strlen(v) < cap, "%s: %s is longer than %zu bytes", where, key, cap - 1);
  memcpy(dst, v, strlen(v) + 1);
  return PX_OK;
}

/* Notifications: notify_url, notify_states, notify_allow
 * (repeated lines add entries) and notify_public. */
static px_status_t coord_config_notify(coord_config_t *cfg, const char *key, const char *value,
                                       const char *where) {
  if (!strcmp(key, "notify_url")) {
    PX_REQUIRE(px_jobspec_notify_url_ok(value) && value[0],
               "%s: notify_url = '%.80s': expected an http:// or https:// URL of at most 1024"
               " bytes without blanks", where, value);
    return coord_copy(cfg->notify_url, sizeof cfg->notify_url, value, "notify_url", where);
  }
  if (!strcmp(key, "notify_states")) {
    unsigned mask;
    PX_REQUIRE(px_jobspec_notify_states(value, &mask) == 0,
               "%s: notify_states = '%.80s': expected states separated by commas (pending,"
               " scheduled, running, succeeded, failed, cancelled, timeout) or end", where, value);
    return coord_copy(cfg->notify_states, sizeof cfg->notify_states, value, "notify_states",
                      where);
  }
  if (!strcmp(key, "notify_public")) {
    int on = !strcmp(value, "on") || !strcmp(value, "true") || !strcmp(value, "yes");
    int off = !strcmp(value, "off") || !strcmp(value, "false") || !strcmp(value, "no");
    PX_REQUIRE(on || off, "%s: notify_public = '%.80s': expected on or off", where, value);
    cfg->notify_public = on;
    return PX_OK;
  }
  if (strcmp(key, "notify_allow") != 0)
    return px_set_error(PX_ERR_INVALID, "%s: unknown setting '%s'", where, key);
  char err[512];
  PX_REQUIRE(coord_notify_allow_ok(value, err, sizeof err), "%s: notify_allow: %s", where, err);
  size_t used = strlen(cfg->notify_allow);
  PX_REQUIRE(used + strlen(value) + 2 <= sizeof cfg->notify_allow,
             "%s: notify_allow: longer than %zu bytes in all", where,
             sizeof cfg->notify_allow - 1);
  snprintf(cfg->notify_allow + used, sizeof cfg->notify_allow - used, "%s%s", used ? " " : "",
           value);
  return PX_OK;
}

static px_status_t coord_check_hostport(const char *v, const char *key, const char *where) {
  const char *colon = strrchr(v, ':');
  PX_REQUIRE(colon && colon != v && colon[1], "%s: %s = '%s': expected HOST:PORT", where, key, v);
  char *end = NULL;
  errno = 0;
  long port = strtol(colon + 1, &end, 10);
  PX_REQUIRE(errno == 0 && *end == '\0' && port >= 0 && port <= 65535,
             "%s: %s = '%s': the port must be a number in 0..65535", where, key, v);
  return PX_OK;
}

/* The HTTP listener's budgets (http.h):
 * http_max_per_address, http_max_per_proxy, http_trusted_proxies. */
static px_status_t coord_set_http_budget(coord_config_t *cfg, const char *key, const char *value,
                                         const char *where) {
  int *max = !strcmp(key, "http_max_per_address") ? &cfg->http_max_per_address
             : !strcmp(key, "http_max_per_proxy") ? &cfg->http_max_per_proxy
                                                  : NULL;
  if (max) {
    double v;
    PX_CHECK(coord_number(value, 1, COORD_HTTP_MAX_CONNECTIONS, 1, key, where, &v));
    *max = (int)v;
    return PX_OK;
  }
  PX_REQUIRE(!strcmp(key, "http_trusted_proxies"), "%s: unknown setting '%s'", where, key);
  coord_http_net_t nets[COORD_HTTP_MAX_PROXIES];
  int n = 0;
  if (coord_http_nets_parse(value, nets, COORD_HTTP_MAX_PROXIES, &n) != PX_OK) {
    char why[256]; /* the message is rewritten in the buffer it is read from */
    snprintf(why, sizeof why, "%s", px_last_error());
    return px_set_error(PX_ERR_INVALID, "%s: http_trusted_proxies = '%s': %s", where, value, why);
  }
  return coord_copy(cfg->http_trusted_proxies, sizeof cfg->http_trusted_proxies, value,
                    "http_trusted_proxies", where);
}

px_status_t coord_config_set(coord_config_t *cfg, const char *key_in, const char *value,
                             const char *where) {
  char key[COORD_SCHED_USER_NAME + 64];
  snprintf(key, sizeof key, "%s", key_in);
  /* dashes are underscores in the setting's name, not in a user's name */
  for (char *p = key; *p && *p != '.'; p++)
    if (*p == '-') *p = '_';
  px_status_t pst = PX_OK;
  if (coord_policy_set(&cfg->sched, key, value, where, &pst)) return pst;
  if (!strncmp(key, "notify_", 7)) return coord_config_notify(cfg, key, value, where);
  if (!strcmp(key, "listen")) {
    PX_CHECK(coord_check_hostport(value, "listen", where));
    return coord_copy(cfg->listen, sizeof cfg->listen, value, "listen", where);
  }
  if (!strcmp(key, "advertise")) {
    PX_CHECK(coord_check_hostport(value, "advertise", where));
    return coord_copy(cfg->advertise, sizeof cfg->advertise, value, "advertise", where);
  }
  if (!strcmp(key, "db")) return coord_copy(cfg->db, sizeof cfg->db, value, "db", where);
  if (!strcmp(key, "http")) {
    PX_CHECK(coord_check_hostport(value, "http", where));
    return coord_copy(cfg->http, sizeof cfg->http, value, "http", where);
  }
  if (!strcmp(key, "http_www"))
    return coord_copy(cfg->http_www, sizeof cfg->http_www, value, "http_www", where);
  if (!strncmp(key, "http_max_per_", 13) || !strcmp(key, "http_trusted_proxies"))
    return coord_set_http_budget(cfg, key, value, where);
  if (!strcmp(key, "http_metrics_ended_s")) {
    double v;
    PX_CHECK(coord_number(value, 0, 86400, 1, key, where, &v));
    cfg->http_metrics_ended_s = (int)v;
    return PX_OK;
  }
  if (!strcmp(key, "http_js"))
    return coord_copy(cfg->http_js, sizeof cfg->http_js, value, "http_js", where);
  if (!strcmp(key, "heartbeat_timeout_ms")) {
    char *end = NULL;
    errno = 0;
    long v = strtol(value, &end, 10);
    PX_REQUIRE(errno == 0 && end != value && *end == '\0' && v >= 10 && v <= INT_MAX / 2,
               "%s: heartbeat_timeout_ms = '%s': expected milliseconds, at least 10", where,
               value);
    cfg->heartbeat_timeout_ms = (int)v;
    return PX_OK;
  }
  if (!strcmp(key, "placement_timeout_ms") || !strcmp(key, "agent_grace_ms")) {
    char *end = NULL;
    errno = 0;
    long v = strtol(value, &end, 10);
    PX_REQUIRE(errno == 0 && end != value && *end == '\0' && v >= 10 && v <= INT_MAX / 2,
               "%s: %s = '%s': expected milliseconds, at least 10", where, key, value);
    if (key[0] == 'p') cfg->placement_timeout_ms = (int)v;
    else cfg->agent_grace_ms = (int)v;
    return PX_OK;
  }
  if (!strcmp(key, "log_level")) {
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
      if (!strcmp(value, names[i])) {
        cfg->log_level = i;
        return PX_OK;
      }
    return px_set_error(PX_ERR_INVALID, "%s: log_level = '%s': expected error, warn, info or debug",
                        where, value);
  }
  /* TLS, tokens, retention (docs/security.md) */
  if (!strcmp(key, "tls_cert"))
    return coord_copy(cfg->tls_cert, sizeof cfg->tls_cert, value, "tls_cert", where);
  if (!strcmp(key, "tls_key"))
    return coord_copy(cfg->tls_key, sizeof cfg->tls_key, value, "tls_key", where);
  if (!strcmp(key, "tokens"))
    return coord_copy(cfg->tokens, sizeof cfg->tokens, value, "tokens", where);
  if (!strcmp(key, "retention_days")) {
    char *end = NULL;
    errno = 0;
    long v = strtol(value, &end, 10);
    PX_REQUIRE(errno == 0 && end != value && *end == '\0' && v >= 0 && v <= 36500,
               "%s: retention_days = '%s': expected days, 0 (keep forever) to 36500", where,
               value);
    cfg->retention_days = (int)v;
    return PX_OK;
  }
  return px_set_error(PX_ERR_INVALID, "%s: unknown setting '%s'", where, key_in);
}

static px_status_t coord_config_file_set(void *ctx, const char *key, const char *value,
                                         const char *where) {
  return coord_config_set(ctx, key, value, where);
}

/* The file is read by libpxcore's settings reader (px_conf.c, shared with
 * pxagent): `key = value` lines or a YAML mapping, errors naming FILE:LINE. */
px_status_t coord_config_load(const char *path, coord_config_t *cfg) {
  PX_CHECK(px_conf_load(path, coord_config_file_set, cfg));
  PX_REQUIRE(!cfg->sched.time_limit_max_s ||
                 cfg->sched.time_limit_default_s <= cfg->sched.time_limit_max_s,
             "%s: time_limit_default_s = %lld is above time_limit_max_s = %lld", path,
             (long long)cfg->sched.time_limit_default_s, (long long)cfg->sched.time_limit_max_s);
  PX_REQUIRE(cfg->sched.weight_job + cfg->sched.weight_fairshare + cfg->sched.weight_age > 0,
             "%s: the priority weights are all 0", path);
  return PX_OK;
}

px_status_t coord_config_reload_policy(coord_config_t *cfg) {
  PX_REQUIRE(cfg->config_path[0], "no config file (--config) to re-read");
  coord_config_t *fresh = px_malloc(sizeof *fresh, "coordd.config");
  if (!fresh) return PX_ERR_NOMEM;
  coord_config_defaults(fresh);
  px_status_t st = coord_config_load(cfg->config_path, fresh);
  if (st == PX_OK) {
    cfg->sched = fresh->sched;
    memcpy(cfg->notify_url, fresh->notify_url, sizeof cfg->notify_url);
    memcpy(cfg->notify_states, fresh->notify_states, sizeof cfg->notify_states);
    memcpy(cfg->notify_allow, fresh->notify_allow, sizeof cfg->notify_allow);
    cfg->notify_public = fresh->notify_public;
  }
  px_free(fresh);
  return st;
}
