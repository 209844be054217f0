/* pxagent's settings: the one table (prunex/settings.h) that its flags, its
 * config file (/etc/prunex/pxagent.conf: `key = value` lines or a YAML
 * mapping, the flags' names with underscores), the environment variables
 * PRUNEX_COORDINATOR and PRUNEX_CA, and --help are read from. Precedence:
 * flags, then the variables, then the file, then the defaults.
 * deploy/man/pxagent.8 and docs/operations.md list the same settings (the
 * settings_docs test checks both against --help). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "prunex/settings.h"

#define F(field) offsetof(pxa_config_t, field), sizeof(((pxa_config_t *)0)->field)
#define NONE 0, 0, NULL

static int pxa_hostport_check(const char *v, char *why, size_t cap) {
  const char *colon = strrchr(v, ':');
  if (colon && colon != v && colon[1]) return 0;
  snprintf(why, cap, "expected HOST:PORT");
  return -1;
}

static int pxa_name_check(const char *v, char *why, size_t cap) {
  if (strlen(v) <= 120) return 0;
  snprintf(why, cap, "expected 1 to 120 bytes");
  return -1;
}

static int pxa_readable_check(const char *v, char *why, size_t cap) {
  if (access(v, R_OK) == 0) return 0;
  snprintf(why, cap, "cannot read the file");
  return -1;
}

/* output_root, data_root: repeatable; value lives as long as the settings. */
static int pxa_root_add(void *obj, const char *key, const char *v, char *why, size_t cap) {
  pxa_config_t *c = obj;
  int data = !strcmp(key, "data_root");
  if (v[0] != '/' || strstr(v, "/..") || strlen(v) > 1024)
    return snprintf(why, cap, "expected an absolute path without '..'"), -1;
  int *n = data ? &c->ndata_roots : &c->noutput_roots;
  if (*n >= PXA_MAX_ROOTS) return snprintf(why, cap, "at most %d of them", PXA_MAX_ROOTS), -1;
  (data ? c->data_roots : c->output_roots)[(*n)++] = v;
  return 0;
}

static const char *const pxa_levels[] = {"error", "warn", "info", "debug", NULL};

static const px_setting_t pxa_settings[] = {
    {"coordinator", PX_SETTING_STRREF, 0, F(coordinator), NONE, NULL, "HOST:PORT",
     "the coordinator (pxcoordd) to serve; required, here, in the environment or in the "
     "config file", "PRUNEX_COORDINATOR", pxa_hostport_check, NULL},
    {"config", PX_SETTING_STRREF, PX_SETTING_FLAG_ONLY | PX_SETTING_CONFIG, F(config), NONE, NULL,
     "FILE", "settings file (e.g. /etc/prunex/pxagent.conf): `key = value` lines or a YAML "
     "mapping whose keys are these settings' names (flag only); flags win", NULL, NULL, NULL},
    {"name", PX_SETTING_STRREF, 0, F(name), NONE, NULL, "NODE", "stable node name (default: the "
     "host name); an agent that registers again under it gets the same node", NULL,
     pxa_name_check, NULL},
    {"cpu_workers", PX_SETTING_INT, 0, F(cpu_workers), 1, 4096, NULL, "1", "N",
     "CPU devices to offer when no GPU is found", NULL, NULL, NULL},
    {"threads_per_worker", PX_SETTING_INT, 0, F(threads_per_worker), 1, 4096, NULL, NULL, "T",
     "compute threads per worker when the job does not set cluster.threads_per_worker "
     "(default max(1, cores / N))", NULL, NULL, NULL},
    {"work_dir", PX_SETTING_STRREF, 0, F(work_dir), NONE, NULL, "DIR", "job files "
     "(jobs/<job>/spec.pb, rank-<R>.log, the model) and metrics.db (default $STATE_DIRECTORY "
     "when set, as under systemd: /var/lib/prunex; else $TMPDIR/pxagent-<name>)", NULL, NULL,
     NULL},
    {"heartbeat_ms", PX_SETTING_INT, 0, F(heartbeat_ms), 10, 3600000, NULL, NULL, "N",
     "heartbeat at least this often (default: the interval the coordinator asks for)", NULL,
     NULL, NULL},
    {"worker", PX_SETTING_STRREF, 0, F(worker_bin), NONE, NULL, "PATH",
     "the pxworker program (default: beside pxagent)", NULL, NULL, NULL},
    {"log_level", PX_SETTING_ENUM, 0, F(log_level), 0, 0, pxa_levels, NULL, "L",
     "error, warn, info or debug (default info, or the PX_LOG_LEVEL environment variable)", NULL,
     NULL, NULL},
    {"output_root", PX_SETTING_CUSTOM, 0, F(output_roots), NONE, NULL, "DIR", "a directory "
     "(absolute) under which a job's output_dir may be, besides the work directory; repeatable",
     NULL, NULL, pxa_root_add},
    {"data_root", PX_SETTING_CUSTOM, 0, F(data_roots), NONE, NULL, "DIR", "a directory (absolute) "
     "under which a job's dataset.path may be, besides the work directory; repeatable (default "
     PXA_DEFAULT_DATA_ROOT ", where the data set packages install). Links are followed only "
     "while they stay inside", NULL, NULL, pxa_root_add},
    {"ca", PX_SETTING_STRREF, 0, F(ca), NONE, NULL, "FILE", "PEM CA bundle: talk TLS to the "
     "coordinator and verify it (unset: plain text). The node's token comes from $PRUNEX_TOKEN "
     "(role node in the coordinator's tokens file, NAME = --name); workers get their rank's "
     "secret instead", "PRUNEX_CA", pxa_readable_check, NULL},
};

static const px_settings_spec_t pxa_spec = {
    .program = "pxagent",
    .synopsis = "--coordinator HOST:PORT [--config FILE] [--name NODE] [OPTIONS]",
    .about = "The PruneX node agent: registers this node with the coordinator, heartbeats,\n"
             "starts one pxworker per assigned rank and reports how each one ended.",
    .epilogue =
        "Under systemd (Type=notify) it sends READY=1 once registered, STATUS= lines,\n"
        "and WATCHDOG=1 from its event loop when WatchdogSec= is set.\n"
        "SIGTERM or SIGINT stop the workers (SIGTERM, SIGKILL after 3 s) and then the\n"
        "agent. Exit status: 0 clean shutdown, 1 runtime failure, 2 bad flags.",
    .table = pxa_settings,
    .n = sizeof pxa_settings / sizeof pxa_settings[0],
};

int pxa_parse_args(int argc, char **argv, pxa_config_t *c) {
  memset(c, 0, sizeof *c);
  px_settings_t *s = NULL;
  if (px_settings_create(&pxa_spec, c, &s) != PX_OK || px_settings_defaults(s) != PX_OK) {
    fprintf(stderr, "pxagent: %s\n", px_last_error());
    px_settings_destroy(s);
    return 1;
  }
  c->settings = s; /* holds the values read from the file and the environment */
  int rc = px_settings_parse_args(s, argc, argv);
  if (rc >= 0) return rc;
  if (!c->coordinator) {
    fprintf(stderr, "pxagent: --coordinator HOST:PORT is required (or coordinator in --config "
                    "FILE, or the PRUNEX_COORDINATOR environment variable)\n(run pxagent --help "
                    "for the flags)\n");
    return 2;
  }
  /* Through the environment: the RPC client and the workers read it. */
  if (c->ca) setenv("PRUNEX_CA", c->ca, 1);
  return -1;
}

void pxa_config_free(pxa_config_t *c) {
  px_settings_destroy(c->settings);
  c->settings = NULL;
}
