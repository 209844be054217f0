/* Multi-process harness of the data-plane tests (tests/test_comm_*.c): runs
 * one function in N forked ranks that meet through a px_kv directory in a
 * fresh mkdtemp folder, each creating its own communicator (UCX is only ever
 * initialised after the fork). Every run is bounded: the parent reaps the
 * children until a deadline and SIGKILLs whatever is left, so a bug cannot
 * hang the suite. Children report through their exit status and through a
 * small shared-memory array (px_th_shared) the parent can read afterwards;
 * they never call cmocka (its longjmp state belongs to the parent). A rank
 * that reports success must also have freed every px_malloc'd byte. */
#ifndef PX_COMM_HARNESS_H
#define PX_COMM_HARNESS_H

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prunex/comm.h"
#include "prunex/kv.h"

#define PX_TH_MAX_RANKS 16
#define PX_TH_SHARED 4096 /* doubles */

typedef struct {
  int rank, size;
  const int *node_of;
  const char *kvdir;
  const void *arg;
  int prefix_counter; /* advanced identically on every rank by px_th_comm */
} px_th_ctx_t;

typedef int (*px_th_fn_t)(px_th_ctx_t *ctx);

/* visible to the parent and all children of the current run */
static volatile double *px_th_shared;
static int px_th_me = -1;

#define PX_TH_FAIL(...)                                                        \
  do {                                                                         \
    fprintf(stderr, "rank %d: %s:%d: ", px_th_me, __FILE__, __LINE__);         \
    fprintf(stderr, __VA_ARGS__);                                              \
    fprintf(stderr, "\n");                                                     \
    return 1;                                                                  \
  } while (0)

/* In a child: fail the rank (return 1 from the rank function) unless cond. */
#define PX_TH_CHECK(cond)                                                      \
  do {                                                                         \
    if (!(cond)) PX_TH_FAIL("check failed: %s", #cond);                        \
  } while (0)

/* In a child: fail the rank unless the call returns PX_OK. */
#define PX_TH_OK(call)                                                         \
  do {                                                                         \
    px_status_t px_th_st_ = (call);                                            \
    if (px_th_st_ != PX_OK)                                                    \
      PX_TH_FAIL("%s -> %s: %s", #call, px_status_name(px_th_st_), px_last_error()); \
  } while (0)

static inline double px_th_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline void px_th_rmdir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char path[4096];
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

/* Call first in main(). UCX reads its log settings when the library is
 * loaded, before main, so quieting it (ranks that die on purpose make UCX
 * log errors and warnings about unmatched messages) takes a re-exec with the
 * variables set. A developer's own UCX_LOG_LEVEL is kept. */
static inline void px_th_init(int argc, char **argv) {
  (void)argc;
  if (getenv("PX_TH_REEXEC")) return;
  setenv("PX_TH_REEXEC", "1", 1);
  setenv("UCX_LOG_LEVEL", "fatal", 0);
  setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 0);
  execv("/proc/self/exe", argv);
  /* exec failed: run with UCX's defaults */
}

/* Runs fn on `size` forked ranks with the given node map. codes[size] (may
 * be NULL) receives each rank's result: its exit status, 128 + signal when
 * it died of a signal, 124 when killed at the deadline. Answers the number
 * of ranks whose result is not 0. px_th_shared is zeroed before the run. */
static inline int px_th_run_codes(int size, const int *node_of, px_th_fn_t fn, const void *arg,
                                  int deadline_s, int *codes) {
  if (!px_th_shared) {
    void *m = mmap(NULL, PX_TH_SHARED * sizeof(double), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return size;
    px_th_shared = m;
  }
  memset((void *)px_th_shared, 0, PX_TH_SHARED * sizeof(double));
  char dir[] = "/tmp/pxcomm-XXXXXX";
  if (!mkdtemp(dir)) return size;
  pid_t pids[PX_TH_MAX_RANKS];
  int res[PX_TH_MAX_RANKS];
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < size; r++) {
    pid_t pid = fork();
    if (pid == 0) {
      px_th_me = r;
      alarm((unsigned)deadline_s + 10); /* belt and braces: die even if the parent is gone */
      px_th_ctx_t ctx = {r, size, node_of, dir, arg, 0};
      px_mem_stats_t m0, m1;
      px_mem_stats(&m0);
      int rc = fn(&ctx);
      /* a rank that succeeded has destroyed everything it created */
      px_mem_stats(&m1);
      if (rc == 0 && m1.live_bytes != m0.live_bytes) {
        fprintf(stderr, "rank %d: %lld bytes of px_malloc memory leaked\n", r,
                (long long)(m1.live_bytes - m0.live_bytes));
        rc = 99;
      }
      fflush(stdout);
      fflush(stderr);
      _exit(rc & 0x7f);
    }
    pids[r] = pid;
    res[r] = pid < 0 ? 125 : -1;
  }
  double deadline = px_th_now_ms() + deadline_s * 1e3;
  int left = 0;
  for (int r = 0; r < size; r++) left += res[r] < 0;
  while (left > 0) {
    for (int r = 0; r < size; r++) {
      if (res[r] >= 0) continue;
      int ws = 0;
      pid_t w = waitpid(pids[r], &ws, WNOHANG);
      if (w == pids[r]) {
        res[r] = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
        left--;
      }
    }
    if (left == 0) break;
    if (px_th_now_ms() > deadline) {
      for (int r = 0; r < size; r++)
        if (res[r] < 0) {
          fprintf(stderr, "harness: rank %d still running at the %d s deadline: killed\n", r,
                  deadline_s);
          kill(pids[r], SIGKILL);
          waitpid(pids[r], NULL, 0);
          res[r] = 124;
          left--;
        }
      break;
    }
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  px_th_rmdir(dir);
  int bad = 0;
  for (int r = 0; r < size; r++) {
    if (codes) codes[r] = res[r];
    if (res[r] != 0) bad++;
  }
  return bad;
}

static inline int px_th_run(int size, const int *node_of, px_th_fn_t fn, const void *arg,
                            int deadline_s) {
  return px_th_run_codes(size, node_of, fn, arg, deadline_s, NULL);
}

/* In a child: opens the kv directory and creates a communicator with a key
 * prefix unique to this (run, call number). opts may be NULL. */
static inline px_status_t px_th_comm(px_th_ctx_t *ctx, const px_comm_opts_t *opts,
                                     px_comm_t **out) {
  px_kv_t *kv = NULL;
  px_status_t st = px_kv_open_dir(ctx->kvdir, &kv);
  if (st != PX_OK) return st;
  px_comm_opts_t o;
  if (opts) o = *opts;
  else px_comm_opts_default(&o);
  char prefix[64];
  snprintf(prefix, sizeof prefix, "test/c%d", ctx->prefix_counter++);
  o.key_prefix = prefix;
  st = px_comm_create(ctx->rank, ctx->size, ctx->node_of, kv, &o, out);
  px_kv_destroy(kv);
  return st;
}

/* Deterministic test data: element i of world rank r under seed s. The f32
 * and f64 values are multiples of 1/1024 in [-8, 8), so sums over a few
 * ranks are exact in any order and results can be compared bit for bit. */
static inline uint64_t px_th_hash(uint64_t s, uint64_t r, uint64_t i) {
  uint64_t x = s * 0x9E3779B97F4A7C15ull ^ (r + 1) * 0xC2B2AE3D27D4EB4Full ^ (i + 7) * 0x165667B19E3779F9ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 32;
  return x;
}

static inline double px_th_val(uint64_t s, int r, size_t i) {
  return ((double)(px_th_hash(s, (uint64_t)r, i) % 16384) - 8192.0) / 1024.0;
}

static inline uint8_t px_th_u8(uint64_t s, int r, size_t i) {
  return (uint8_t)px_th_hash(s, (uint64_t)r, i);
}

/* Fills buf[count] of dtype dt with rank r's data. mask01: u8 values are 0/1. */
static inline void px_th_fill(void *buf, size_t count, px_comm_dtype_t dt, uint64_t s, int r,
                              int mask01) {
  for (size_t i = 0; i < count; i++) {
    if (dt == PX_COMM_F32) ((float *)buf)[i] = (float)px_th_val(s, r, i);
    else if (dt == PX_COMM_F64) ((double *)buf)[i] = px_th_val(s, r, i);
    else ((uint8_t *)buf)[i] = mask01 ? (uint8_t)(px_th_u8(s, r, i) % 7 == 0) : px_th_u8(s, r, i);
  }
}

#endif
