/* pxcoordd settings: defaults, one setter shared by the flags and the config
 * file, and the config file reader. The file is either `key = value` lines or
 * a YAML mapping (`key: value`), with the flags' names (listen, db,
 * advertise, heartbeat_timeout_ms, placement_timeout_ms, agent_grace_ms,
 * log_level, tls_cert, tls_key, tokens, retention_days, http, http_www,
 * http_js, http_max_per_address; dashes or underscores). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "prunex/check.h"
#include "prunex/conf.h"

void coord_config_defaults(coord_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  snprintf(cfg->listen, sizeof cfg->listen, "%s", COORD_DEFAULT_LISTEN);
  cfg->heartbeat_timeout_ms = COORD_DEFAULT_HEARTBEAT_TIMEOUT_MS;
  cfg->placement_timeout_ms = COORD_DEFAULT_PLACEMENT_TIMEOUT_MS;
  cfg->agent_grace_ms = COORD_DEFAULT_AGENT_GRACE_MS;
  cfg->log_level = -1;
  cfg->http_max_per_address = COORD_DEFAULT_HTTP_PER_ADDRESS;
}

static px_status_t coord_copy(char *dst, size_t cap, const char *v, const char *key,
                              const char *where) {
  PX_REQUIRE(v[0] != '\0', "%s: %s is empty", where, key);
  PX_REQUIRE(strlen(v) < cap, "%s: %s is longer than %zu bytes", where, key, cap - 1);
  memcpy(dst, v, strlen(v) + 1);
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

px_status_t coord_config_set(coord_config_t *cfg, const char *key_in, const char *value,
                             const char *where) {
  char key[64];
  snprintf(key, sizeof key, "%s", key_in);
  for (char *p = key; *p; p++)
    if (*p == '-') *p = '_';
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
  if (!strcmp(key, "http_max_per_address")) {
    char *end = NULL;
    errno = 0;
    long v = strtol(value, &end, 10);
    PX_REQUIRE(errno == 0 && end != value && *end == '\0' && v >= 1 && v <= 1000,
               "%s: http_max_per_address = '%s': expected connections from one address, "
               "1 to 1000",
               where, value);
    cfg->http_max_per_address = (int)v;
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
  /* issue 12: TLS, tokens, retention (docs/security.md) */
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
  return px_conf_load(path, coord_config_file_set, cfg);
}
