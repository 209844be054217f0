/* What pxctl needs the engine for, done by the engine's own program. pxctl
 * links the client part of libpxcore alone (its client objects: no oneDNN, UCX or
 * CUDA), so that a login node submits and follows jobs without the engine;
 * the compact model of a checkpoint (pxctl export, the end of pxctl run, the
 * sizes pxctl status prints) is built by `pxtrain --export ... --report` or
 * `pxtrain --count`, found where pxctl run finds pxcoordd and pxagent
 * ($PRUNEX_BIN_DIR, beside pxctl, PATH), and read back as `key value`
 * lines: the same px_export_report_t and the same message on failure as
 * px_export_file gave in the process. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prunex/check.h"
#include "prunex/export.h"
#include "pxctl.h"
#include "pxctl_supervise.h"

#define PXCTL_ENGINE_OUT_MAX 16384 /* a report is under 8 KiB (paths, widths) */

/* Runs pxtrain with argv[1..] (argv[0] is set here) and reads its stdout
 * into out[cap]. PX_OK when it exited 0; else the error it printed
 * ("error MESSAGE"), or why it could not run. */
static px_status_t pxctl_engine_run(const char **argv, char *out, size_t cap) {
  char bin[PATH_MAX], err[3 * PATH_MAX + 256];
  if (pxctl_find_program("pxtrain", "cli", bin, sizeof bin, err, sizeof err) != 0)
    return px_set_error(PX_ERR_NOT_BUILT, "the compact model needs PruneX's engine (pxtrain): %s",
                        err);
  argv[0] = bin;
  int fd[2];
  if (pipe2(fd, O_CLOEXEC) != 0) return px_set_error(PX_ERR_IO, "pipe: %s", strerror(errno));
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], STDOUT_FILENO);
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  close(fd[1]);
  /* read to the end (what does not fit is dropped: the child never blocks) */
  size_t len = 0;
  ssize_t n;
  char drop[512];
  while (pid > 0) {
    int full = len == cap - 1;
    n = full ? read(fd[0], drop, sizeof drop) : read(fd[0], out + len, cap - 1 - len);
    if (n == 0 || (n < 0 && errno != EINTR)) break;
    if (n > 0 && !full) len += (size_t)n;
  }
  out[len] = '\0';
  close(fd[0]);
  int status = 0;
  if (pid < 0) return px_set_error(PX_ERR_IO, "fork: %s", strerror(errno));
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return PX_OK;
  const char *e = !strncmp(out, "error ", 6) ? out + 6 : strstr(out, "\nerror ");
  if (e && e != out + 6) e += 7;
  if (e) return px_set_error(PX_ERR_INVALID, "%.*s", (int)strcspn(e, "\n"), e);
  return px_set_error(PX_ERR_BACKEND, "%s %s failed (exit status %d)", bin, argv[1],
                      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

/* The value of key in lines of `key value` (the rest of the line), copied
 * into val[cap]; 0 when the key is missing. */
static int pxctl_engine_get(const char *out, const char *key, char *val, size_t cap) {
  size_t k = strlen(key);
  for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    if (!strncmp(l, key, k) && l[k] == ' ') {
      snprintf(val, cap, "%.*s", (int)strcspn(l + k + 1, "\n"), l + k + 1);
      return 1;
    }
  }
  return 0;
}

static int pxctl_engine_u64(const char *out, const char *key, uint64_t *v) {
  char s[32], *end;
  if (!pxctl_engine_get(out, key, s, sizeof s) || !s[0]) return 0;
  errno = 0;
  *v = strtoull(s, &end, 10);
  return errno == 0 && *end == '\0';
}

static px_status_t pxctl_engine_bad(const char *key) {
  return px_set_error(PX_ERR_FORMAT, "pxtrain's report lacks %s (a pxtrain of another version?)",
                      key);
}

/* The counts both reports carry: arch, parameters and MACs. */
static px_status_t pxctl_engine_counts(const char *out, px_export_report_t *r) {
  uint64_t dp = 0, cp = 0;
  if (!pxctl_engine_get(out, "arch", r->arch, sizeof r->arch)) return pxctl_engine_bad("arch");
  if (!pxctl_engine_u64(out, "dense_params", &dp)) return pxctl_engine_bad("dense_params");
  if (!pxctl_engine_u64(out, "compact_params", &cp)) return pxctl_engine_bad("compact_params");
  if (!pxctl_engine_u64(out, "dense_macs", &r->dense_macs)) return pxctl_engine_bad("dense_macs");
  if (!pxctl_engine_u64(out, "compact_macs", &r->compact_macs))
    return pxctl_engine_bad("compact_macs");
  r->dense_params = (size_t)dp;
  r->compact_params = (size_t)cp;
  return PX_OK;
}

px_status_t pxctl_engine_export(const char *model, const char *dir, int onnx,
                                const char *dataset, px_export_report_t *r) {
  const char *argv[12] = {NULL, "--export", model, "--out", dir, "--report"};
  int n = 6;
  if (onnx) argv[n++] = "--onnx";
  if (dataset) {
    argv[n++] = "--dataset";
    argv[n++] = dataset;
  }
  memset(r, 0, sizeof *r);
  char out[PXCTL_ENGINE_OUT_MAX];
  PX_CHECK(pxctl_engine_run(argv, out, sizeof out));
  PX_CHECK(pxctl_engine_counts(out, r));
  if (!pxctl_engine_u64(out, "dense_bytes", &r->dense_bytes))
    return pxctl_engine_bad("dense_bytes");
  if (!pxctl_engine_u64(out, "compact_bytes", &r->compact_bytes))
    return pxctl_engine_bad("compact_bytes");
  if (!pxctl_engine_u64(out, "onnx_bytes", &r->onnx_bytes)) return pxctl_engine_bad("onnx_bytes");
  if (!pxctl_engine_get(out, "widths", r->widths, sizeof r->widths))
    return pxctl_engine_bad("widths");
  if (!pxctl_engine_get(out, "compact_path", r->compact_path, sizeof r->compact_path))
    return pxctl_engine_bad("compact_path");
  if (!pxctl_engine_get(out, "onnx_path", r->onnx_path, sizeof r->onnx_path))
    return pxctl_engine_bad("onnx_path");
  return PX_OK;
}

px_status_t pxctl_engine_count(const char *model, px_export_report_t *r) {
  const char *argv[4] = {NULL, "--count", model, NULL};
  memset(r, 0, sizeof *r);
  char out[PXCTL_ENGINE_OUT_MAX];
  PX_CHECK(pxctl_engine_run(argv, out, sizeof out));
  return pxctl_engine_counts(out, r);
}
