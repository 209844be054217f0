/* TensorBoard event files of a job's iteration and per-layer figures
 * (`pxctl export JOB --tensorboard DIR`, and while a job runs `pxctl watch
 * JOB --tensorboard DIR` and `pxctl run SPEC --tensorboard DIR`), so that a
 * run opens in TensorBoard (`tensorboard --logdir PARENT`) beside the
 * user's other runs.
 *
 * The figures are those `pxctl metrics --layers` shows: the job's iteration
 * reports from GetIterations (pxctl_iterations_page, a page at a time: one
 * per iteration, the lowest rank's), read through the report tables (prunex/report.h), so a
 * figure added there is written here too. Each iteration is one Event
 * (step: the iteration, wall_time: the report's time) with a Summary of
 * scalars (simple_value, a float); a figure not measured (a test accuracy
 * not evaluated that iteration, the phase times of a report without them,
 * a layer that is not pruned) is left out, never written as -1. The tags:
 *   train/epoch, train/loss, train/accuracy, test/accuracy,
 *   prune/density, prune/mask_drift, prune/mask_groups, prune/frozen,
 *   traffic/intra_bytes, traffic/inter_bytes, traffic/inter_bytes_dense,
 *   time/<phase>_s (local_s, intra_s, projection_s, inter_s, broadcast_s,
 *   control_s), job/<field> for any other figure of the iteration table;
 *   per layer NAME (its parameter name, "layer<N>" without one):
 *   admm/NAME/<field> (r_intra, s_intra, r_inter, s_inter, rho1, rho2,
 *   theta_norm, zi_norm, z_norm, u_norm, v_norm) and prune/density/NAME.
 * The file is events.out.tfevents.<unix time>.<host>.<pid>.pxctl in DIR
 * (made, with its parents), framed as TFRecords (pxctl_tfrecord.c) around
 * the protobufs of proto/tensorboard.proto; its first record is the Event
 * with file_version "brain.Event:2".
 *
 * While a job runs, the writer is polled (pxctl_tb_poll, between reads of
 * the watch stream) every PXCTL_TB_POLL_S (2 s): an iteration is written once a
 * later one has been reported (so that the lowest rank's report is the one
 * written), the rest when the job has ended. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "prunex/report.h"
#include "pxctl.h"
#include "pxctl_tfrecord.h"
#include "tensorboard.pb-c.h"

#define PXCTL_TB_POLL_S 2.0
#define PXCTL_TB_TAG_MAX 200

struct pxctl_tb {
  FILE *f;
  char path[PATH_MAX];
  char job_id[128];
  px_rpc_channel_t *const *ch; /* the caller's channel (replaced on a reconnect) */
  int next;                    /* the first iteration not written yet */
  size_t events, scalars;      /* iteration events and scalars written */
  double next_poll;            /* pxctl_mono_s() */
  int failed;                  /* a write failed: nothing more is written */
};

/* ---- tags ---------------------------------------------------------------------- */

/* The iteration table's figures with a tag of their own; the phase times
 * are time/<name>, any other figure job/<name>. */
static const char *const pxctl_tb_names[][2] = {
    {"epoch", "train/epoch"},
    {"loss", "train/loss"},
    {"train_accuracy", "train/accuracy"},
    {"test_accuracy", "test/accuracy"},
    {"density", "prune/density"},
    {"mask_drift", "prune/mask_drift"},
    {"mask_groups", "prune/mask_groups"},
    {"frozen", "prune/frozen"},
    {"bytes_intra", "traffic/intra_bytes"},
    {"bytes_inter", "traffic/inter_bytes"},
    {"bytes_inter_dense", "traffic/inter_bytes_dense"},
};

/* 1 for the fields that say which row it is, not what was measured. */
static int pxctl_tb_is_key(const px_report_field_t *f) {
  static const char *const keys[] = {"iteration", "rank", "time_unix_ms", "layer", "numel"};
  if (f->type == PX_REPORT_TEXT) return 1;
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    if (!strcmp(f->name, keys[i])) return 1;
  return 0;
}

static void pxctl_tb_iteration_tag(const px_report_field_t *f, char *tag, size_t cap) {
  for (size_t i = 0; i < sizeof pxctl_tb_names / sizeof pxctl_tb_names[0]; i++)
    if (!strcmp(f->name, pxctl_tb_names[i][0])) {
      snprintf(tag, cap, "%s", pxctl_tb_names[i][1]);
      return;
    }
  snprintf(tag, cap, "%s/%s", (f->where & PX_REPORT_PHASE) ? "time" : "job", f->name);
}

static void pxctl_tb_layer_tag(const px_report_field_t *f, const Prunex__V1__LayerMetrics *L,
                               char *tag, size_t cap) {
  char name[128];
  if (L->name && L->name[0]) snprintf(name, sizeof name, "%s", L->name);
  else snprintf(name, sizeof name, "layer%d", L->layer);
  if (!strcmp(f->name, "density")) snprintf(tag, cap, "prune/density/%s", name);
  else snprintf(tag, cap, "admm/%s/%s", name, f->name);
}

/* ---- events -------------------------------------------------------------------- */

/* Packs ev and appends it as one record. 0, or -1 with errno set. */
static int pxctl_tb_append(pxctl_tb_t *tb, const Tensorboard__Event *ev) {
  size_t n = tensorboard__event__get_packed_size(ev);
  uint8_t *buf = px_malloc(n ? n : 1, "pxctl.tensorboard.event");
  if (!buf) {
    errno = ENOMEM;
    return -1;
  }
  tensorboard__event__pack(ev, buf);
  int rc = pxctl_tfrecord_write(tb->f, buf, n);
  px_free(buf);
  return rc;
}

/* The scalars of one iteration report (its figures, then each layer's)
 * into vals[cap] with their tags in tags[cap][PXCTL_TB_TAG_MAX]; the count
 * (at most cap). */
static size_t pxctl_tb_scalars(const Prunex__V1__IterationReport *it,
                               Tensorboard__Summary__Value *vals,
                               char (*tags)[PXCTL_TB_TAG_MAX], size_t cap) {
  size_t n = 0;
  for (int i = 0; i < px_report_count(PX_REPORT_ITERATION) && n < cap; i++) {
    const px_report_field_t *f = px_report_field(PX_REPORT_ITERATION, i);
    int present = 0;
    double v = px_report_value(f, it, &present);
    if (pxctl_tb_is_key(f) || !present) continue;
    pxctl_tb_iteration_tag(f, tags[n], PXCTL_TB_TAG_MAX);
    vals[n++].simple_value = (float)v;
  }
  for (size_t k = 0; k < it->n_layers; k++)
    for (int i = 0; i < px_report_count(PX_REPORT_LAYER) && n < cap; i++) {
      const px_report_field_t *f = px_report_field(PX_REPORT_LAYER, i);
      int present = 0;
      double v = px_report_value(f, it->layers[k], &present);
      if (pxctl_tb_is_key(f) || !present) continue;
      pxctl_tb_layer_tag(f, it->layers[k], tags[n], PXCTL_TB_TAG_MAX);
      vals[n++].simple_value = (float)v;
    }
  return n;
}

/* One iteration's Event. 0, or -1 with errno set. */
static int pxctl_tb_write_iteration(pxctl_tb_t *tb, const Prunex__V1__IterationReport *it) {
  size_t cap = (size_t)px_report_count(PX_REPORT_ITERATION) +
               it->n_layers * (size_t)px_report_count(PX_REPORT_LAYER);
  Tensorboard__Summary__Value *vals = px_calloc(cap, sizeof *vals, "pxctl.tensorboard.values");
  Tensorboard__Summary__Value **ptrs = px_calloc(cap, sizeof *ptrs, "pxctl.tensorboard.values");
  char (*tags)[PXCTL_TB_TAG_MAX] = px_calloc(cap, sizeof *tags, "pxctl.tensorboard.tags");
  int rc = -1;
  errno = ENOMEM;
  if (vals && ptrs && tags) {
    size_t n = pxctl_tb_scalars(it, vals, tags, cap);
    for (size_t i = 0; i < n; i++) {
      float v = vals[i].simple_value;
      tensorboard__summary__value__init(&vals[i]);
      vals[i].tag = tags[i];
      vals[i].value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
      vals[i].simple_value = v;
      ptrs[i] = &vals[i];
    }
    Tensorboard__Summary sum = TENSORBOARD__SUMMARY__INIT;
    sum.n_value = n;
    sum.value = ptrs;
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = (double)it->time_unix_ms / 1000.0;
    ev.step = it->iteration;
    ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
    ev.summary = &sum;
    rc = pxctl_tb_append(tb, &ev);
    if (rc == 0) {
      tb->events++;
      tb->scalars += n;
    }
  }
  px_free(vals);
  px_free(ptrs);
  px_free(tags);
  return rc;
}

/* ---- the file -------------------------------------------------------------------- */

/* mkdir -p dir (mode 0755). 0, or -1 with errno set. */
static int pxctl_tb_mkdirs(const char *dir) {
  char p[PATH_MAX];
  if ((size_t)snprintf(p, sizeof p, "%s", dir) >= sizeof p) {
    errno = ENAMETOOLONG;
    return -1;
  }
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s) continue;
    char c = *s;
    *s = '\0';
    struct stat sb;
    if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
    if (stat(p, &sb) != 0) return -1;
    if (!S_ISDIR(sb.st_mode)) {
      errno = ENOTDIR;
      return -1;
    }
    if (!c) return 0;
    *s = c;
  }
}

int pxctl_tb_open(const char *dir, const char *job_id, pxctl_tb_t **out) {
  *out = NULL;
  if (pxctl_tb_mkdirs(dir) != 0)
    return pxctl_fail("tensorboard: cannot create the directory %s: %s", dir, strerror(errno));
  pxctl_tb_t *tb = px_calloc(1, sizeof *tb, "pxctl.tensorboard");
  if (!tb) return pxctl_fail("out of memory");
  char host[256] = "localhost";
  if (gethostname(host, sizeof host) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = '\0';
  for (char *c = host; *c; c++)
    if (*c == '/') *c = '_';
  snprintf(tb->job_id, sizeof tb->job_id, "%s", job_id ? job_id : "");
  int fd = -1;
  if ((size_t)snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%010lld.%s.%d.pxctl",
                       dir, (long long)time(NULL), host, (int)getpid()) >= sizeof tb->path)
    errno = ENAMETOOLONG;
  else fd = open(tb->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 || !(tb->f = fdopen(fd, "wb"))) {
    int e = errno;
    if (fd >= 0) close(fd);
    px_free(tb);
    return pxctl_fail("tensorboard: cannot write in %s: %s", dir, strerror(e));
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
  ev.wall_time = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
  ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
  ev.file_version = "brain.Event:2";
  if (pxctl_tb_append(tb, &ev) != 0 || fflush(tb->f) != 0) {
    int e = errno;
    fclose(tb->f);
    unlink(tb->path);
    int rc = pxctl_fail("tensorboard: cannot write %s: %s", tb->path, strerror(e));
    px_free(tb);
    return rc;
  }
  *out = tb;
  return 0;
}

/* Reports asked for per GetIterations (iteration x rank; with layers some
 * KB each), so that a long job's export stays far below the RPC's size
 * and time limits. $PRUNEX_TENSORBOARD_PAGE sets it (the tests page by
 * threes). */
static int pxctl_tb_page_size(void) {
  const char *v = getenv("PRUNEX_TENSORBOARD_PAGE");
  int n = v ? atoi(v) : 0;
  return n > 0 ? n : 256;
}

/* One page of reports from tb->next on, written. The page's newest
 * iteration waits for the next page when the page is full, and for the
 * next iteration while the job runs (a lower rank's report of it may
 * still come), unless it is the page's only one (so that paging moves
 * on). *more: the page was full. 0, or the exit status. */
static int pxctl_tb_page(pxctl_tb_t *tb, px_rpc_channel_t *ch, int final, int *more) {
  Prunex__V1__GetIterationsResponse *resp = NULL;
  Prunex__V1__IterationReport **rows = NULL;
  size_t n = 0;
  int rc = 0, limit = pxctl_tb_page_size();
  *more = 0;
  if (pxctl_iterations_page(ch, tb->job_id, tb->next, limit, 1, 0, &resp, &rows, &n) != PX_OK) {
    /* while the job runs, the next poll tries again (watch itself says
     * when the coordinator is gone) */
    if (final) rc = resp ? pxctl_fail("%s", px_last_error()) : pxctl_rpc_fail(ch, tb->job_id);
    n = 0;
  }
  int full = resp && !rc && resp->n_iterations >= (size_t)limit;
  size_t upto = n;
  if (n > 0 && (full || !final) && !(full && n == 1)) upto = n - 1;
  for (size_t i = 0; i < upto && !rc; i++) {
    if (pxctl_tb_write_iteration(tb, rows[i]) != 0) {
      tb->failed = 1;
      rc = pxctl_fail("tensorboard: cannot write %s: %s; no more events are written", tb->path,
                      strerror(errno));
    }
    tb->next = rows[i]->iteration + 1;
  }
  *more = full && !rc;
  px_free(rows);
  px_rpc_message_free(resp);
  return rc;
}

int pxctl_tb_sync(pxctl_tb_t *tb, px_rpc_channel_t *ch, int final) {
  if (tb->failed) return PXCTL_EXIT_FAIL;
  int rc = 0, more = 1;
  while (!rc && more) rc = pxctl_tb_page(tb, ch, final, &more);
  if (!rc && fflush(tb->f) != 0) {
    tb->failed = 1;
    rc = pxctl_fail("tensorboard: cannot write %s: %s", tb->path, strerror(errno));
  }
  return rc;
}

void pxctl_tb_follow(pxctl_tb_t *tb, px_rpc_channel_t *const *ch, const char *job_id) {
  tb->ch = ch;
  if (job_id) snprintf(tb->job_id, sizeof tb->job_id, "%s", job_id);
  tb->next_poll = 0;
}

/* Seconds between polls: PXCTL_TB_POLL_S, or $PRUNEX_TENSORBOARD_POLL_S
 * (0.05 to 60; the tests poll a job of a few short iterations every 0.2 s,
 * so that its file grows while it runs on a fast machine too). */
static double pxctl_tb_poll_s(void) {
  const char *v = getenv("PRUNEX_TENSORBOARD_POLL_S");
  double s = v ? atof(v) : 0;
  return s >= 0.05 && s <= 60 ? s : PXCTL_TB_POLL_S;
}

int pxctl_tb_poll(void *arg) {
  pxctl_tb_t *tb = arg;
  if (!tb || tb->failed || !tb->ch || !*tb->ch || pxctl_mono_s() < tb->next_poll) return 0;
  pxctl_tb_sync(tb, *tb->ch, 0);
  tb->next_poll = pxctl_mono_s() + pxctl_tb_poll_s();
  return 0;
}

const char *pxctl_tb_file(const pxctl_tb_t *tb) { return tb->path; }

void pxctl_tb_counts(const pxctl_tb_t *tb, size_t *events, size_t *scalars) {
  *events = tb->events;
  *scalars = tb->scalars;
}

int pxctl_tb_close(pxctl_tb_t *tb) {
  if (!tb) return 0;
  int rc = tb->failed ? PXCTL_EXIT_FAIL : 0;
  if (fclose(tb->f) != 0 && !rc)
    rc = pxctl_fail("tensorboard: cannot write %s: %s", tb->path, strerror(errno));
  px_free(tb);
  return rc;
}
