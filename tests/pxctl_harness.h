/* Test harness for the pxctl tests: runs the real pxctl program with
 * arguments and extra environment, captures its exit code, stdout and
 * stderr (bounded in time), and reads JSON output with json-c (strict,
 * through prunex/json.h) so that tests can check keys and types. Header-only (static
 * functions), like coord_harness.h, which it builds on. */
#ifndef PXCTL_HARNESS_H
#define PXCTL_HARNESS_H

#include <ctype.h>
#include <dirent.h>
#include <math.h>

#include <json-c/json.h>

#include "coord_harness.h"
#include "prunex/json.h"

#define PXT_PXCTL PX_BINARY_DIR "/cli/pxctl"
#define PXT_PXAGENT PX_BINARY_DIR "/agent/pxagent"
#define PXT_PXWORKER PX_BINARY_DIR "/agent/pxworker"

/* ---- running pxctl ------------------------------------------------------- */

typedef struct {
  int code;        /* exit code, 128 + signal, -1 on timeout */
  char out[1 << 16];
  char err[1 << 16];
} pxt_result_t;

/* Builds argv/envp for pxctl: env_extra entries ("K=V") replace or add to
 * the environment. */
static PXT_UNUSED char **pxt__envp(const char *const *env_extra) {
  size_t n = 0, m = 0;
  while (environ[n]) n++;
  while (env_extra && env_extra[m]) m++;
  char **envp = calloc(n + m + 1, sizeof *envp);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    int replaced = 0;
    for (size_t j = 0; j < m; j++) {
      const char *eq = strchr(env_extra[j], '=');
      size_t kl = eq ? (size_t)(eq - env_extra[j]) + 1 : strlen(env_extra[j]);
      replaced |= !strncmp(environ[i], env_extra[j], kl);
    }
    if (!replaced) envp[k++] = environ[i];
  }
  for (size_t j = 0; j < m; j++) envp[k++] = (char *)env_extra[j];
  envp[k] = NULL;
  return envp;
}

/* Starts pxctl with args (NULL-terminated, argv[0] excluded), stdout and
 * stderr to the files out_path and err_path. Returns the pid or -1. */
static PXT_UNUSED pid_t pxt_pxctl_start(const char *const *args, const char *const *env_extra,
                                        const char *out_path, const char *err_path) {
  const char *argv[40];
  int n = 0;
  argv[n++] = PXT_PXCTL;
  for (int i = 0; args[i] && n < 39; i++) argv[n++] = args[i];
  argv[n] = NULL;
  char **envp = pxt__envp(env_extra);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, PXT_PXCTL, &fa, NULL, (char *const *)argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  free(envp);
  return rc == 0 ? pid : -1;
}

static PXT_UNUSED void pxt_read_file(const char *path, char *buf, size_t cap) {
  buf[0] = '\0';
  FILE *f = fopen(path, "rb");
  if (!f) return;
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  fclose(f);
}

/* Runs pxctl to completion within timeout_ms (then SIGKILL). The output
 * goes through files in dir (which must exist). */
static PXT_UNUSED int pxt_pxctl(pxt_result_t *r, const char *dir, const char *const *args,
                                const char *const *env_extra, int timeout_ms) {
  char op[320], ep[320];
  snprintf(op, sizeof op, "%s/pxctl-stdout.txt", dir);
  snprintf(ep, sizeof ep, "%s/pxctl-stderr.txt", dir);
  pid_t pid = pxt_pxctl_start(args, env_extra, op, ep);
  r->code = -1;
  r->out[0] = r->err[0] = '\0';
  if (pid < 0) return -1;
  int status = pxt_wait_pid(pid, timeout_ms);
  if (status == -1) {
    kill(pid, SIGKILL);
    pxt_wait_pid(pid, 5000);
  } else if (WIFEXITED(status)) {
    r->code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r->code = 128 + WTERMSIG(status);
  }
  pxt_read_file(op, r->out, sizeof r->out);
  pxt_read_file(ep, r->err, sizeof r->err);
  unlink(op);
  unlink(ep);
  return r->code;
}

/* Prints what a failing pxctl call said. */
/* pxctl args against coordinator d as the user of token (no TLS), into *r
 * (its exit status in r->code). */
static PXT_UNUSED void pxt_pxctl_as(pxt_result_t *r, const pxt_coordd_t *d, const char *token,
                                    const char *const *args) {
  char coord[96], tok[96];
  snprintf(coord, sizeof coord, "PRUNEX_COORDINATOR=%s", d->target);
  snprintf(tok, sizeof tok, "PRUNEX_TOKEN=%s", token);
  const char *env[] = {coord, tok, NULL};
  pxt_pxctl(r, d->dir, args, env, 30000);
}

static PXT_UNUSED void pxt_show(const char *what, const pxt_result_t *r) {
  fprintf(stderr, "---- %s: exit %d\n---- stdout:\n%s\n---- stderr:\n%s\n", what, r->code, r->out,
          r->err);
}

/* The last non-empty line of text, copied to buf. */
static PXT_UNUSED const char *pxt_last_line(const char *text, char *buf, size_t cap) {
  size_t n = strlen(text);
  while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r')) n--;
  size_t start = n;
  while (start > 0 && text[start - 1] != '\n') start--;
  size_t len = n - start < cap - 1 ? n - start : cap - 1;
  memcpy(buf, text + start, len);
  buf[len] = '\0';
  return buf;
}

static PXT_UNUSED int pxt_exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* Entries of dir other than . and .. (-1 if it cannot be read). */
static PXT_UNUSED int pxt_dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

/* Pids of the processes whose command line mentions text. */
static PXT_UNUSED int pxt_procs_mentioning(const char *text, pid_t *pids, int cap) {
  int n = 0;
  DIR *d = opendir("/proc");
  struct dirent *e;
  while (d && (e = readdir(d))) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    char buf[8192];
    long len = *end || pid <= 0 || pid == getpid() ? -1 : pxt_proc_read(pid, "cmdline", buf, sizeof buf);
    for (long i = 0; i < len; i++)
      if (buf[i] == '\0') buf[i] = ' ';
    if (len > 0 && strstr(buf, text) && n < cap) pids[n++] = (pid_t)pid;
  }
  if (d) closedir(d);
  return n;
}

/* ---- JSON, read with json-c (prunex/json.h) ----------------------------------
 * The programs' JSON is read back with the library they write it with, in
 * its strict mode (prunex/json.h's px_json_parse), into a plain tree that
 * the tests walk. */

typedef enum { PXJ_NULL, PXJ_BOOL, PXJ_NUM, PXJ_STR, PXJ_ARR, PXJ_OBJ } pxj_type_t;

typedef struct pxj pxj_t;
struct pxj {
  pxj_type_t type;
  double num;
  int b;
  char *str;       /* PXJ_STR (UTF-8, NUL-terminated) */
  char **keys;     /* PXJ_OBJ: keys[i] names items[i] */
  pxj_t **items;   /* PXJ_ARR, PXJ_OBJ */
  size_t n;
};

static PXT_UNUSED void pxj_free(pxj_t *v) {
  if (!v) return;
  for (size_t i = 0; i < v->n; i++) {
    pxj_free(v->items[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
  free(v->str);
  free(v);
}

/* The tree of json-c object o (NULL: null). */
static pxj_t *pxj__from(struct json_object *o) {
  pxj_t *v = calloc(1, sizeof *v);
  switch (json_object_get_type(o)) {
  case json_type_null: v->type = PXJ_NULL; break;
  case json_type_boolean: v->type = PXJ_BOOL; v->b = json_object_get_boolean(o); break;
  case json_type_double:
  case json_type_int: v->type = PXJ_NUM; v->num = json_object_get_double(o); break;
  case json_type_string: v->type = PXJ_STR; v->str = strdup(json_object_get_string(o)); break;
  case json_type_array:
    v->type = PXJ_ARR;
    v->n = json_object_array_length(o);
    v->items = calloc(v->n + 1, sizeof *v->items);
    for (size_t i = 0; i < v->n; i++) v->items[i] = pxj__from(json_object_array_get_idx(o, i));
    break;
  case json_type_object: {
    v->type = PXJ_OBJ;
    size_t cap = (size_t)json_object_object_length(o) + 1, i = 0;
    v->items = calloc(cap, sizeof *v->items);
    v->keys = calloc(cap, sizeof *v->keys);
    json_object_object_foreach(o, k, m) {
      v->keys[i] = strdup(k);
      v->items[i++] = pxj__from(m);
    }
    v->n = i;
    break;
  }
  }
  return v;
}

/* Parses text that must be exactly one JSON value (whitespace around it
 * allowed); NULL when it is not (why on stderr). The caller frees the
 * result (pxj_free). */
static PXT_UNUSED pxj_t *pxj_parse(const char *text) {
  struct json_object *o = NULL;
  if (px_json_parse(text, strlen(text), (size_t)1 << 30, &o) != PX_OK) {
    fprintf(stderr, "not JSON: %s: %.200s\n", px_last_error(), text);
    return NULL;
  }
  pxj_t *v = pxj__from(o);
  json_object_put(o);
  return v;
}

/* The member key of an object, NULL when absent (or v is not an object). */
static PXT_UNUSED const pxj_t *pxj_get(const pxj_t *v, const char *key) {
  if (!v || v->type != PXJ_OBJ) return NULL;
  for (size_t i = 0; i < v->n; i++)
    if (!strcmp(v->keys[i], key)) return v->items[i];
  return NULL;
}

/* Checks that every key of the NULL-terminated list is present, printing
 * the first missing one; 1 when all are. */
static PXT_UNUSED int pxj_has_keys(const pxj_t *v, const char *const *keys) {
  for (int i = 0; keys[i]; i++)
    if (!pxj_get(v, keys[i])) {
      fprintf(stderr, "JSON object lacks key '%s'\n", keys[i]);
      return 0;
    }
  return 1;
}

/* The string member key, or "" when absent or not a string. */
static PXT_UNUSED const char *pxj_str(const pxj_t *v, const char *key) {
  const pxj_t *m = pxj_get(v, key);
  return m && m->type == PXJ_STR ? m->str : "";
}

/* The number member key, or NAN when absent or not a number. */
static PXT_UNUSED double pxj_num(const pxj_t *v, const char *key) {
  const pxj_t *m = pxj_get(v, key);
  return m && m->type == PXJ_NUM ? m->num : NAN;
}

#endif
