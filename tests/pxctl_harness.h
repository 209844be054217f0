/* Test harness for the pxctl tests: runs the real pxctl program with
 * arguments and extra environment, captures its exit code, stdout and
 * stderr (bounded in time), and parses JSON output with a small strict
 * parser so that tests can check keys and types. Header-only (static
 * functions), like coord_harness.h, which it builds on. */
#ifndef PXCTL_HARNESS_H
#define PXCTL_HARNESS_H

#include <ctype.h>
#include <dirent.h>
#include <math.h>

#include "coord_harness.h"

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

/* ---- a strict little JSON parser -------------------------------------------- */

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

typedef struct {
  const char *p;
  int depth;
} pxj__in_t;

static void pxj__ws(pxj__in_t *in) {
  while (*in->p == ' ' || *in->p == '\t' || *in->p == '\n' || *in->p == '\r') in->p++;
}

static int pxj__hex4(const char *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return -1;
  }
  *out = v;
  return 0;
}

static char *pxj__string(pxj__in_t *in) {
  if (*in->p != '"') return NULL;
  in->p++;
  size_t cap = 64, n = 0;
  char *s = malloc(cap);
  for (;;) {
    if (n + 8 > cap) s = realloc(s, cap *= 2);
    unsigned char c = (unsigned char)*in->p;
    if (c == '\0' || c < 0x20) {
      free(s);
      return NULL;
    }
    in->p++;
    if (c == '"') break;
    if (c != '\\') {
      s[n++] = (char)c;
      continue;
    }
    char e = *in->p++;
    unsigned cp;
    switch (e) {
      case '"': s[n++] = '"'; break;
      case '\\': s[n++] = '\\'; break;
      case '/': s[n++] = '/'; break;
      case 'b': s[n++] = '\b'; break;
      case 'f': s[n++] = '\f'; break;
      case 'n': s[n++] = '\n'; break;
      case 'r': s[n++] = '\r'; break;
      case 't': s[n++] = '\t'; break;
      case 'u':
        if (pxj__hex4(in->p, &cp) != 0) {
          free(s);
          return NULL;
        }
        in->p += 4;
        if (cp >= 0xd800 && cp <= 0xdbff) {
          unsigned lo;
          if (in->p[0] != '\\' || in->p[1] != 'u' || pxj__hex4(in->p + 2, &lo) != 0 ||
              lo < 0xdc00 || lo > 0xdfff) {
            free(s);
            return NULL;
          }
          in->p += 6;
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        if (cp < 0x80) s[n++] = (char)cp;
        else if (cp < 0x800) {
          s[n++] = (char)(0xc0 | (cp >> 6));
          s[n++] = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
          s[n++] = (char)(0xe0 | (cp >> 12));
          s[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
          s[n++] = (char)(0x80 | (cp & 0x3f));
        } else {
          s[n++] = (char)(0xf0 | (cp >> 18));
          s[n++] = (char)(0x80 | ((cp >> 12) & 0x3f));
          s[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
          s[n++] = (char)(0x80 | (cp & 0x3f));
        }
        break;
      default: free(s); return NULL;
    }
  }
  s[n] = '\0';
  return s;
}

static pxj_t *pxj__value(pxj__in_t *in);

static int pxj__push(pxj_t *v, char *key, pxj_t *item) {
  v->items = realloc(v->items, (v->n + 1) * sizeof *v->items);
  if (v->type == PXJ_OBJ) {
    v->keys = realloc(v->keys, (v->n + 1) * sizeof *v->keys);
    v->keys[v->n] = key;
  }
  v->items[v->n++] = item;
  return 0;
}

static pxj_t *pxj__value(pxj__in_t *in) {
  pxj__ws(in);
  if (++in->depth > 64) return NULL;
  pxj_t *v = calloc(1, sizeof *v);
  const char *p = in->p;
  if (*p == '{' || *p == '[') {
    int obj = *p == '{';
    v->type = obj ? PXJ_OBJ : PXJ_ARR;
    in->p++;
    pxj__ws(in);
    if (*in->p == (obj ? '}' : ']')) {
      in->p++;
      in->depth--;
      return v;
    }
    for (;;) {
      char *key = NULL;
      if (obj) {
        pxj__ws(in);
        key = pxj__string(in);
        pxj__ws(in);
        if (!key || *in->p != ':') {
          free(key);
          pxj_free(v);
          return NULL;
        }
        in->p++;
      }
      pxj_t *item = pxj__value(in);
      if (!item) {
        free(key);
        pxj_free(v);
        return NULL;
      }
      pxj__push(v, key, item);
      pxj__ws(in);
      if (*in->p == ',') {
        in->p++;
        continue;
      }
      if (*in->p == (obj ? '}' : ']')) {
        in->p++;
        break;
      }
      pxj_free(v);
      return NULL;
    }
  } else if (*p == '"') {
    v->type = PXJ_STR;
    if (!(v->str = pxj__string(in))) {
      pxj_free(v);
      return NULL;
    }
  } else if (!strncmp(p, "true", 4) || !strncmp(p, "false", 5)) {
    v->type = PXJ_BOOL;
    v->b = *p == 't';
    in->p += v->b ? 4 : 5;
  } else if (!strncmp(p, "null", 4)) {
    v->type = PXJ_NULL;
    in->p += 4;
  } else if (*p == '-' || isdigit((unsigned char)*p)) {
    /* JSON's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
    const char *q = p;
    if (*q == '-') q++;
    if (*q == '0') q++;
    else if (isdigit((unsigned char)*q)) {
      while (isdigit((unsigned char)*q)) q++;
    } else {
      goto bad;
    }
    if (*q == '.') {
      q++;
      if (!isdigit((unsigned char)*q)) goto bad;
      while (isdigit((unsigned char)*q)) q++;
    }
    if (*q == 'e' || *q == 'E') {
      q++;
      if (*q == '+' || *q == '-') q++;
      if (!isdigit((unsigned char)*q)) goto bad;
      while (isdigit((unsigned char)*q)) q++;
    }
    v->type = PXJ_NUM;
    v->num = strtod(p, NULL);
    in->p = q;
  } else {
    goto bad;
  }
  in->depth--;
  return v;
bad:
  pxj_free(v);
  return NULL;
}

/* Parses text that must be exactly one JSON value (whitespace around it
 * allowed); NULL when it is not. The caller frees the result (pxj_free). */
static PXT_UNUSED pxj_t *pxj_parse(const char *text) {
  pxj__in_t in = {text, 0};
  pxj_t *v = pxj__value(&in);
  if (!v) return NULL;
  pxj__ws(&in);
  if (*in.p) {
    pxj_free(v);
    return NULL;
  }
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
