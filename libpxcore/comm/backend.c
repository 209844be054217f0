/* The data plane of a job (a job spec's comm.backend): NCCL moves device
 * memory and runs one rank per GPU, so it serves a job only when every rank
 * trains on a GPU of its own; UCX moves host memory and serves any job (a
 * GPU model is staged through the host). The ranks learn where the others
 * train through the rendezvous store, and rank 0 gives the one verdict
 * every rank follows. Without CUDA every rank trains on the CPU (the
 * px_cuda_* stand-ins say so), which rules NCCL out: no stub is needed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prunex/comm.h"
#include "prunex/cuda.h"
#include "px_check.h"

/* Where a rank trains, as the choice compares it: "cpu", or
 * "<host>/<PCI bus id>" of its GPU (equal for two ranks on one GPU). */
typedef struct {
  char *where; /* px_malloc'd */
  int rank;
} px__place_t;

static int px__place_cmp(const void *a, const void *b) {
  const px__place_t *x = a, *y = b;
  int c = strcmp(x->where, y->where);
  return c ? c : x->rank - y->rank;
}

static px_status_t px__my_place(const px_comm_backend_query_t *q, char *buf, size_t cap) {
  if (q->device.kind != PX_DEVICE_CUDA) {
    snprintf(buf, cap, "cpu");
    return PX_OK;
  }
  char host[256], bus[64];
  if (gethostname(host, sizeof host) != 0)
    return px_set_error(PX_ERR_IO, "gethostname: %s", strerror(errno));
  host[sizeof host - 1] = '\0';
  PX_CHECK(px_cuda_device_bus_id(q->device.index, bus, sizeof bus));
  snprintf(buf, cap, "%s/%s", host, bus);
  return PX_OK;
}

static int64_t px__backend_clock_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads every rank's place (<prefix>/<r>) into all[world], by rank, within
 * the timeout in all. */
static px_status_t px__read_places(const px_comm_backend_query_t *q, px_kv_t *kv,
                                   px__place_t *all) {
  char key[512];
  int64_t end = px__backend_clock_ms() + q->timeout_ms;
  for (int r = 0; r < q->world; r++) {
    snprintf(key, sizeof key, "%s/%d", q->key_prefix, r);
    int64_t left = end - px__backend_clock_ms();
    void *val = NULL;
    size_t len = 0;
    px_status_t st = px_kv_get(kv, key, left > 0 ? (int)left : 0, &val, &len);
    if (st != PX_OK) {
      char why[512];
      snprintf(why, sizeof why, "%s", px_last_error());
      return px_set_error(st, "rank %d did not say where it trains within %d ms: %s", r,
                          q->timeout_ms, why);
    }
    all[r].rank = r;
    all[r].where = px_malloc(len + 1, "comm.backend.place");
    if (!all[r].where) {
      px_free(val);
      return PX_ERR_NOMEM;
    }
    if (len) memcpy(all[r].where, val, len);
    all[r].where[len] = '\0';
    px_free(val);
  }
  return PX_OK;
}

/* Rank 0's part: what rules NCCL out, from every rank's place, into why
 * ("" when nothing does). */
static px_status_t px__judge_places(const px_comm_backend_query_t *q, px_kv_t *kv, char *why,
                                    size_t cap) {
  int n = q->world;
  px__place_t *all = px_calloc((size_t)n, sizeof *all, "comm.backend.places");
  if (!all) return PX_ERR_NOMEM;
  px_status_t st = px__read_places(q, kv, all);
  why[0] = '\0';
  if (st == PX_OK) {
    qsort(all, (size_t)n, sizeof *all, px__place_cmp);
    for (int i = 0; i < n && !why[0]; i++) {
      if (!strcmp(all[i].where, "cpu"))
        snprintf(why, cap, "rank %d trains on the CPU", all[i].rank);
      else if (i + 1 < n && !strcmp(all[i].where, all[i + 1].where))
        snprintf(why, cap, "ranks %d and %d share the GPU %s", all[i].rank, all[i + 1].rank,
                 all[i].where);
    }
  }
  for (int i = 0; i < n; i++) px_free(all[i].where);
  px_free(all);
  return st;
}

/* Whether NCCL can serve the job: every rank puts where it trains; rank 0
 * reads them all, judges, and puts the verdict ("nccl", or "ucx " and what
 * rules NCCL out) under <prefix>/verdict, which the other ranks read: one
 * answer for every rank, and O(world) reads of the store in all. */
static px_status_t px__gpus_exclusive(const px_comm_backend_query_t *q, px_kv_t *kv, char *why,
                                      size_t cap) {
  char mine[384], key[512], verdict[512];
  PX_CHECK(px__my_place(q, mine, sizeof mine));
  snprintf(key, sizeof key, "%s/%d", q->key_prefix, q->rank);
  PX_CHECK(px_kv_put(kv, key, mine, strlen(mine)));
  snprintf(key, sizeof key, "%s/verdict", q->key_prefix);
  if (q->rank == 0) {
    PX_CHECK(px__judge_places(q, kv, why, cap));
    snprintf(verdict, sizeof verdict, "%s%s", why[0] ? "ucx " : "nccl", why);
    return px_kv_put(kv, key, verdict, strlen(verdict));
  }
  void *val = NULL;
  size_t len = 0;
  px_status_t st = px_kv_get(kv, key, q->timeout_ms, &val, &len);
  if (st != PX_OK) {
    char err[512];
    snprintf(err, sizeof err, "%s", px_last_error());
    return px_set_error(st, "rank 0 did not choose the data plane within %d ms: %s",
                        q->timeout_ms, err);
  }
  snprintf(verdict, sizeof verdict, "%.*s", (int)len, (const char *)val);
  px_free(val);
  snprintf(why, cap, "%s", strncmp(verdict, "ucx ", 4) ? "" : verdict + 4);
  return PX_OK;
}

px_status_t px_comm_choose_backend(const px_comm_backend_query_t *q, px_kv_t *kv,
                                   px_comm_opts_t *opts, char *why, size_t cap) {
  PX_REQUIRE(q && q->backend && q->cluster_device && q->key_prefix && opts && why && cap > 0,
             "px_comm_choose_backend: NULL argument");
  PX_REQUIRE(!strcmp(q->backend, "auto") || !strcmp(q->backend, "ucx") ||
                 !strcmp(q->backend, "nccl"),
             "comm.backend '%s': must be auto, ucx or nccl", q->backend);
  PX_REQUIRE(q->world >= 1 && q->rank >= 0 && q->rank < q->world,
             "px_comm_choose_backend: rank %d of %d", q->rank, q->world);
  PX_REQUIRE(kv || !strcmp(q->cluster_device, "cpu") || !strcmp(q->backend, "ucx"),
             "px_comm_choose_backend: comm.backend %s on cluster.device %s needs a rendezvous "
             "store",
             q->backend, q->cluster_device);
  why[0] = '\0';
  int nccl = 0;
  /* the ranks compare their GPUs only when some may have one */
  if (!strcmp(q->cluster_device, "cpu")) {
    snprintf(why, cap, "cluster.device is cpu");
  } else if (strcmp(q->backend, "ucx") != 0) {
    PX_CHECK(px__gpus_exclusive(q, kv, why, cap));
    nccl = !why[0];
  }
  if (!strcmp(q->backend, "nccl") && !nccl)
    return px_set_error(PX_ERR_INVALID,
                        "comm.backend is nccl, but %s (NCCL needs a GPU of its own for every "
                        "rank; use comm.backend auto or ucx)",
                        why);
  opts->nccl = nccl;
  opts->cuda_device = nccl ? (int)q->device.index : 0;
  return PX_OK;
}
