/* Checkpoints and the resume agreement of a restarted job; the
 * contract is in px_resume.h. File names: ckpt-<iteration, 8 digits>-r<rank>
 * .safetensors, one flat directory per job and node, shared by its ranks and
 * by the job's attempts. Each buffer is a 1-D tensor of its dtype; the
 * metadata holds the format, iteration, rank, world size and a checksum
 * of every buffer's bytes in table order: zlib's CRC-32 (format
 * prunex-resume-2), or for files of format prunex-resume-1,
 * which are still read so that a job restarted across an upgrade resumes,
 * the 64-bit FNV-1a that format was written with. */
#include <assert.h>
#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "prunex/comm_internal.h"
#include "prunex/text.h"
#include "px_check.h"
#include "px_clock.h"
#include "strategy/px_resume.h"

#define PX_RS_FORMAT "prunex-resume-2"    /* CRC-32 checksum: written and read */
#define PX_RS_FORMAT_V1 "prunex-resume-1" /* FNV-1a checksum: read only */
#define PX_RS_MAX_KEEP 16
#define PX_RS_MAX_ITEMS 4096
#define PX_RS_PROBLEM_MAX 256

typedef struct {
  char name[96];
  px_rs_scope_t scope;
  px_st_dtype_t dtype;
  void *data;         /* host bytes (the caller's, or host for a tensor) */
  size_t bytes;
  px_tensor_t *t;     /* NULL for a host buffer */
  void *host;         /* owned staging copy of t */
} px_rs_item_t;

struct px_resume {
  px_comm_t *comm;
  px_group_t *world, *intra;
  int rank, size, keep;
  char dir[4096];
  px_rs_item_t *items;
  int n, cap;
  px_st_tensor_t *table;   /* [n], made at the first save */
  void *scratch;           /* [max bytes] verification reads */
  size_t scratch_bytes;
  double *lists;           /* [size * PX_RS_MAX_KEEP] the agreement */
  void *snap;              /* [all bytes] the state being written */
  pthread_t thread;        /* the background writer of `pending` */
  int pending;             /* iteration being written, -1: none */
  int inline_write;        /* no thread could start: written already */
  px_status_t write_status;
  char write_error[512];
  double write_seconds;
  int complete;            /* newest iteration every rank holds; -1: none */
  int own;                 /* newest iteration of this rank's own file; -1: none */
  int own_complete;        /* this rank holds its file of `complete` (a rank that took a
                              lost one's place resumed from the others' without one) */
  char problem[PX_RS_PROBLEM_MAX]; /* why a later one is not usable ("" when none) */
};

px_status_t px__resume_create(px_comm_t *comm, const char *dir, int keep, px__resume_t **out) {
  *out = NULL;
  PX_REQUIRE(comm && dir && dir[0], "checkpoints need a communicator and a directory");
  PX_REQUIRE(keep >= 1 && keep <= PX_RS_MAX_KEEP, "recovery.keep = %d: must be in 1..%d", keep,
             PX_RS_MAX_KEEP);
  PX_REQUIRE(strlen(dir) < 4000, "checkpoint directory path too long: %s", dir);
  PX_CHECK(px_mkdirs(dir, 0755));
  px__resume_t *rs = px_calloc(1, sizeof *rs, "resume");
  if (!rs) return PX_ERR_NOMEM;
  rs->comm = comm;
  rs->world = px_comm_group(comm, PX_GROUP_WORLD);
  rs->intra = px_comm_group(comm, PX_GROUP_INTRA);
  rs->rank = px_comm_rank(comm);
  rs->size = px_comm_size(comm);
  rs->keep = keep;
  snprintf(rs->dir, sizeof rs->dir, "%s", dir);
  rs->pending = -1;
  rs->complete = -1;
  rs->own = -1;
  rs->lists = px_malloc((size_t)rs->size * PX_RS_MAX_KEEP * sizeof(double), "resume.lists");
  if (!rs->lists) {
    px_free(rs);
    return PX_ERR_NOMEM;
  }
  *out = rs;
  return PX_OK;
}

px_status_t px__resume_rebind(px__resume_t *rs, px_comm_t *comm) {
  if (px_comm_size(comm) > rs->size) { /* nodes joined: the agreement's lists grow */
    double *l = px_malloc((size_t)px_comm_size(comm) * PX_RS_MAX_KEEP * sizeof(double),
                          "resume.lists");
    if (!l) return PX_ERR_NOMEM;
    px_free(rs->lists);
    rs->lists = l;
  }
  rs->comm = comm;
  rs->world = px_comm_group(comm, PX_GROUP_WORLD);
  rs->intra = px_comm_group(comm, PX_GROUP_INTRA);
  rs->rank = px_comm_rank(comm);
  rs->size = px_comm_size(comm);
  return PX_OK;
}

void px__resume_destroy(px__resume_t *rs) {
  if (!rs) return;
  if (rs->pending >= 0 && !rs->inline_write) pthread_join(rs->thread, NULL);
  for (int i = 0; i < rs->n; i++) px_free(rs->items[i].host);
  PX_FREE_ALL(rs->items, rs->table, rs->scratch, rs->snap, rs->lists, rs);
}

static px_status_t px_rs_push(px__resume_t *rs, const char *name, px_rs_scope_t scope,
                              px_st_dtype_t dtype, void *data, size_t bytes, px_tensor_t *t) {
  PX_REQUIRE(!rs->table, "checkpoint buffer %s added after the first save", name);
  PX_REQUIRE(rs->n < PX_RS_MAX_ITEMS, "more than %d checkpoint buffers", PX_RS_MAX_ITEMS);
  PX_REQUIRE(strlen(name) < sizeof rs->items[0].name, "checkpoint buffer name too long: %s", name);
  size_t es = px_st_dtype_size(dtype);
  PX_REQUIRE(es > 0 && bytes % es == 0, "checkpoint buffer %s: %zu bytes of %s", name, bytes,
             px_st_dtype_name(dtype));
  if (rs->n == rs->cap) {
    int cap = rs->cap ? 2 * rs->cap : 32;
    px_rs_item_t *it = px_calloc((size_t)cap, sizeof *it, "resume.items");
    if (!it) return PX_ERR_NOMEM;
    if (rs->n) memcpy(it, rs->items, (size_t)rs->n * sizeof *it);
    px_free(rs->items);
    rs->items = it;
    rs->cap = cap;
  }
  px_rs_item_t *it = &rs->items[rs->n];
  memset(it, 0, sizeof *it);
  snprintf(it->name, sizeof it->name, "%s", name);
  it->scope = scope;
  it->dtype = dtype;
  it->data = data;
  it->bytes = bytes;
  it->t = t;
  if (t) {
    it->host = px_malloc(bytes ? bytes : 1, "resume.stage");
    if (!it->host) return PX_ERR_NOMEM;
    it->data = it->host;
  }
  if (bytes > rs->scratch_bytes) rs->scratch_bytes = bytes;
  rs->n++;
  return PX_OK;
}

px_status_t px__resume_add(px__resume_t *rs, const char *name, px_rs_scope_t scope,
                           px_st_dtype_t dtype, void *data, size_t bytes) {
  PX_REQUIRE(data || bytes == 0, "checkpoint buffer %s has no memory", name);
  return px_rs_push(rs, name, scope, dtype, data, bytes, NULL);
}

px_status_t px__resume_add_tensor(px__resume_t *rs, const char *name, px_rs_scope_t scope,
                                  px_tensor_t *t) {
  return px_rs_push(rs, name, scope, PX_ST_F32, NULL, px_tensor_plain_bytes(t), t);
}

/* ---- files ------------------------------------------------------------------------ */

static void px_rs_path(const px__resume_t *rs, int iteration, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/ckpt-%08d-r%d.safetensors", rs->dir, iteration, rs->rank);
}

/* The running checksum of a file's buffers: CRC-32 for the current
 * format, FNV-1a (64-bit) for prunex-resume-1 files. */
typedef struct {
  int v1;
  uint64_t h;
} px_rs_sum_t;

static px_rs_sum_t px_rs_sum_init(int v1) {
  px_rs_sum_t s = {v1, v1 ? 0xcbf29ce484222325ull : crc32_z(0, NULL, 0)};
  return s;
}

static void px_rs_sum_add(px_rs_sum_t *s, const void *p, size_t n) {
  if (!s->v1) {
    s->h = crc32_z((uLong)s->h, p, n);
    return;
  }
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) s->h = (s->h ^ b[i]) * 0x100000001b3ull;
}

/* As the metadata spells it: 8 hex digits for CRC-32, 16 for FNV-1a. */
static void px_rs_sum_hex(const px_rs_sum_t *s, char *buf, size_t cap) {
  snprintf(buf, cap, s->v1 ? "%016" PRIx64 : "%08" PRIx64, s->h);
}

/* This rank's iterations on disk, newest first, up to cap (names only). */
static int px_rs_scan(const px__resume_t *rs, int *its, int cap, int clean) {
  DIR *d = opendir(rs->dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int it, r;
    char tail[32];
    if (sscanf(e->d_name, "ckpt-%d-r%d.%31s", &it, &r, tail) != 3 || r != rs->rank || it < 0)
      continue;
    if (clean && !strncmp(tail, "safetensors.tmp.", 16)) { /* a writer killed mid-file */
      char path[4400];
      snprintf(path, sizeof path, "%s/%s", rs->dir, e->d_name);
      unlink(path);
      continue;
    }
    if (strcmp(tail, "safetensors") != 0) continue;
    /* keep the newest cap, in descending order */
    if (n == cap && its[cap - 1] >= it) continue;
    int k = n < cap ? n++ : cap - 1;
    for (; k > 0 && its[k - 1] < it; k--) its[k] = its[k - 1];
    its[k] = it;
  }
  closedir(d);
  return n;
}

/* Reads and checks the whole file of `iteration`; with load set it is read
 * straight into the buffers (a failed check then leaves them partly
 * written: the caller fails the run). Logs why a file is unusable and
 * returns 0 then. */
static int px_rs_verify(px__resume_t *rs, int iteration, int load) {
  char path[4200];
  px_rs_path(rs, iteration, path, sizeof path);
  px_safetensors_t *f = NULL;
  px_status_t st = px_safetensors_open(path, &f);
  const char *why = NULL;
  char msg[512];
  if (st != PX_OK) {
    snprintf(msg, sizeof msg, "%s", px_last_error());
    why = msg;
  }
  const char *fmt = f ? px_safetensors_meta(f, "format") : NULL;
  const char *sum = f ? px_safetensors_meta(f, "checksum") : NULL;
  const char *world = f ? px_safetensors_meta(f, "world_size") : NULL;
  int v1 = fmt && !strcmp(fmt, PX_RS_FORMAT_V1);
  if (!why && fmt && strcmp(fmt, PX_RS_FORMAT) != 0 && !v1 && !strncmp(fmt, "prunex-resume-", 14)) {
    snprintf(msg, sizeof msg, "format %.64s, newer than this build reads (%s, %s)", fmt,
             PX_RS_FORMAT, PX_RS_FORMAT_V1);
    why = msg;
  }
  if (!why && (!fmt || (strcmp(fmt, PX_RS_FORMAT) != 0 && !v1) || !sum || !world))
    why = "not a PruneX checkpoint (format, checksum or world_size missing)";
  if (!why && atoi(world) != rs->size) {
    snprintf(msg, sizeof msg, "written by a job of %s ranks, this one has %d", world, rs->size);
    why = msg;
  }
  if (!why && px_safetensors_count(f) != rs->n) {
    snprintf(msg, sizeof msg, "%d buffers, this job's state has %d", px_safetensors_count(f),
             rs->n);
    why = msg;
  }
  px_rs_sum_t h = px_rs_sum_init(v1);
  for (int i = 0; !why && i < rs->n; i++) {
    px_rs_item_t *it = &rs->items[i];
    void *dst = load ? it->data : rs->scratch; /* one read either way */
    if (px_safetensors_read(f, it->name, dst, it->bytes) != PX_OK) {
      snprintf(msg, sizeof msg, "%s", px_last_error());
      why = msg;
      break;
    }
    px_rs_sum_add(&h, dst, it->bytes);
  }
  char want[32];
  px_rs_sum_hex(&h, want, sizeof want);
  if (!why && strcmp(want, sum) != 0) {
    snprintf(msg, sizeof msg, "checksum %s, the contents give %s: corrupt", sum, want);
    why = msg;
  }
  px_safetensors_close(f);
  if (why) {
    px_log(PX_LOG_WARN, "checkpoint %s cannot be used: %s", path, why);
    return 0;
  }
  return 1;
}

/* ---- save ------------------------------------------------------------------------
 * The state is copied into one snapshot buffer (memory speed), and a
 * background thread checksums and writes it while training goes on; the
 * next save (or px__resume_finish) waits for it, and the ranks agree that it
 * is complete everywhere before older files go. */

static void *px_rs_writer(void *arg) {
  px__resume_t *rs = arg;
  double t0 = px__now();
  px_rs_sum_t h = px_rs_sum_init(0);
  for (int i = 0; i < rs->n; i++) px_rs_sum_add(&h, rs->table[i].data, rs->items[i].bytes);
  char sum[32], its[16], rank[16], world[16], path[4200];
  px_rs_sum_hex(&h, sum, sizeof sum);
  snprintf(its, sizeof its, "%d", rs->pending);
  snprintf(rank, sizeof rank, "%d", rs->rank);
  snprintf(world, sizeof world, "%d", rs->size);
  const char *meta[] = {"format", PX_RS_FORMAT, "iteration", its, "rank", rank,
                        "world_size", world, "checksum", sum};
  px_rs_path(rs, rs->pending, path, sizeof path);
  rs->write_status = px_safetensors_save(path, rs->table, rs->n, meta, 5);
  if (rs->write_status != PX_OK) snprintf(rs->write_error, sizeof rs->write_error, "%s", px_last_error());
  rs->write_seconds = px__now() - t0;
  return NULL;
}

/* Removes this rank's files beyond the newest keep, except `protect` (the
 * newest checkpoint every rank holds, -1: none), so that a rank holds at
 * most keep + 1 files whatever the other ranks manage to write. (A scan
 * sees the newest PX_RS_MAX_KEEP + 1: older leftovers go one per save.) */
static void px_rs_prune(px__resume_t *rs, int protect) {
  int its[PX_RS_MAX_KEEP + 1];
  int n = px_rs_scan(rs, its, PX_RS_MAX_KEEP + 1, 0);
  for (int k = rs->keep; k < n; k++) {
    if (its[k] == protect) continue;
    char path[4200];
    px_rs_path(rs, its[k], path, sizeof path);
    if (unlink(path) != 0 && errno != ENOENT)
      px_log(PX_LOG_WARN, "%s: cannot remove: %s", path, strerror(errno));
  }
}

/* After a write that failed on some rank: every rank learns who and why
 * (the lowest failing rank's error, one allgather), for the job's status. */
static px_status_t px_rs_note_failure(px__resume_t *rs, int it) {
  char *all = px_calloc((size_t)rs->size, PX_RS_PROBLEM_MAX, "resume.problems");
  char mine[PX_RS_PROBLEM_MAX] = "", note[96] = "", newest[32] = "none";
  if (!all) return PX_ERR_NOMEM;
  /* a rank without the file of the newest complete one (a new node's
   * rank, resumed from the others' state) says what it does hold: the
   * message names that iteration, which this rank never wrote */
  if (rs->complete >= 0 && !rs->own_complete) {
    if (rs->own >= 0) snprintf(newest, sizeof newest, "iteration %d", rs->own);
    snprintf(note, sizeof note, " (rank %d holds no file of iteration %d; its newest: %s)",
             rs->rank, rs->complete, newest);
  }
  if (rs->write_status != PX_OK) {
    /* all of it fits px_rs_settle's problem: a long error keeps its start
     * and its end (the reason) */
    int room = PX_RS_PROBLEM_MAX - 41 - (int)strlen(note), len = (int)strlen(rs->write_error);
    int head = len > room ? room / 2 : len, tail = len > room ? room - head - 3 : 0;
    snprintf(mine, sizeof mine, "%.*s%s%s%s", head, rs->write_error, tail ? "..." : "",
             rs->write_error + len - tail, note);
  }
  px_status_t st = px_comm_allgather(rs->world, mine, all, PX_RS_PROBLEM_MAX, PX_COMM_U8);
  for (int r = 0; st == PX_OK && r < rs->size; r++) {
    const char *why = all + (size_t)r * PX_RS_PROBLEM_MAX;
    if (!why[0]) continue;
    snprintf(rs->problem, sizeof rs->problem, "iteration %d: rank %d: %.*s", it, r,
             PX_RS_PROBLEM_MAX - 40, why);
    break;
  }
  px_free(all);
  return st;
}

/* Waits for the background write, agrees with the other ranks that it
 * landed everywhere, and then removes this rank's files beyond keep (and,
 * when it did not land everywhere, beyond keep plus the newest one that
 * did). Collective on every save and at the end, pending or not: a rank
 * that joined an elastic job after the others' last save has no write
 * pending, and its part is that it holds no file of that iteration (so the
 * checkpoint is not complete in the new world: its older one stays). */
static px_status_t px_rs_settle(px__resume_t *rs) {
  int mine = rs->pending;
  if (mine >= 0 && !rs->inline_write) pthread_join(rs->thread, NULL);
  rs->inline_write = 0;
  rs->pending = -1;
  /* the newest write pending anywhere, whether some rank has none, whether
   * one failed, and the newest complete one (a joined rank has none) */
  double v[4] = {mine, -mine, mine >= 0 && rs->write_status != PX_OK, rs->complete};
  PX_CHECK(px_comm_allreduce(rs->world, v, v, 4, PX_COMM_F64, PX_COMM_MAX));
  if ((int)v[3] != rs->complete) {
    rs->complete = (int)v[3];
    rs->own_complete = 0;
  }
  if (v[0] < 0) return PX_OK; /* nothing pending anywhere */
  int it = (int)v[0];
  if (mine != it) {
    rs->write_status = PX_ERR_STATE;
    snprintf(rs->write_error, sizeof rs->write_error, "joined after the other ranks saved "
             "iteration %d: holds no file of it", it);
  } else if (rs->write_status != PX_OK) {
    px_log(PX_LOG_WARN, "rank %d: checkpoint of iteration %d not written: %s", rs->rank, it,
           rs->write_error);
  } else {
    rs->own = it;
    px_log(rs->rank == 0 ? PX_LOG_INFO : PX_LOG_DEBUG,
           "rank %d: checkpoint of iteration %d written in the background in %.1f ms", rs->rank,
           it, rs->write_seconds * 1e3);
  }
  if (v[2] != 0 || (int)-v[1] != it) {
    PX_CHECK(px_rs_note_failure(rs, it));
    if (rs->rank == 0) {
      char since[32];
      snprintf(since, sizeof since, "%d", rs->complete);
      px_log(PX_LOG_WARN, "no usable checkpoint since %s%s: %s",
             rs->complete >= 0 ? "iteration " : "", rs->complete >= 0 ? since : "the start",
             rs->problem);
    }
    px_rs_prune(rs, rs->complete);
    return PX_OK;
  }
  rs->complete = it;
  rs->own_complete = 1;
  rs->problem[0] = '\0';
  px_rs_prune(rs, it);
  return PX_OK;
}

int px__resume_complete(const px__resume_t *rs, char *problem, size_t cap) {
  if (problem && cap) snprintf(problem, cap, "%s", rs->problem);
  return rs->complete;
}

static px_status_t px_rs_snapshot(px__resume_t *rs, uint64_t *bytes) {
  size_t total = 0;
  for (int i = 0; i < rs->n; i++) total += rs->items[i].bytes;
  if (!rs->table) {
    rs->table = px_calloc((size_t)(rs->n ? rs->n : 1), sizeof *rs->table, "resume.table");
    rs->snap = px_malloc(total ? total : 1, "resume.snapshot");
    if (!rs->table || !rs->snap) return PX_ERR_NOMEM;
  }
  size_t off = 0;
  for (int i = 0; i < rs->n; i++) {
    px_rs_item_t *it = &rs->items[i];
    unsigned char *dst = (unsigned char *)rs->snap + off;
    if (it->t) PX_CHECK(px_tensor_copy_to_host(it->t, dst, it->bytes));
    else if (it->bytes) memcpy(dst, it->data, it->bytes);
    px_st_tensor_t *t = &rs->table[i];
    memset(t, 0, sizeof *t);
    t->name = it->name;
    t->dtype = it->dtype;
    t->ndim = 1;
    t->shape[0] = (int64_t)(it->bytes / px_st_dtype_size(it->dtype));
    t->data = dst;
    off += it->bytes;
  }
  *bytes = total;
  return PX_OK;
}

px_status_t px__resume_save(px__resume_t *rs, int iteration, uint64_t *bytes, double *seconds) {
  double t0 = px__now();
  *bytes = 0;
  PX_CHECK(px_rs_settle(rs));
  PX_CHECK(px_rs_snapshot(rs, bytes));
  rs->pending = iteration;
  rs->write_status = PX_OK;
  int e = pthread_create(&rs->thread, NULL, px_rs_writer, rs);
  if (e != 0) { /* write it here instead */
    rs->pending = -1;
    px_rs_writer(rs);
    rs->pending = iteration;
    rs->thread = pthread_self();
    rs->inline_write = 1;
  }
  *seconds = px__now() - t0;
  return PX_OK;
}

px_status_t px__resume_finish(px__resume_t *rs, double *seconds) {
  double t0 = px__now();
  px_status_t st = px_rs_settle(rs);
  *seconds = px__now() - t0;
  return st;
}

/* ---- load -------------------------------------------------------------------------- */

static int px_rs_holds(const double *list, double it) {
  for (int k = 0; k < PX_RS_MAX_KEEP; k++)
    if (list[k] == it) return 1;
  return 0;
}

/* The newest iteration every rank with a list holds; -1 when none. */
static int px_rs_agree(const px__resume_t *rs) {
  int best = -1;
  for (int r = 0; r < rs->size; r++) {
    for (int k = 0; k < PX_RS_MAX_KEEP; k++) {
      double it = rs->lists[r * PX_RS_MAX_KEEP + k];
      if (it < 0 || (int)it <= best) continue;
      int all = 1;
      for (int q = 0; q < rs->size && all; q++) {
        const double *l = rs->lists + q * PX_RS_MAX_KEEP;
        if (l[0] >= 0 && !px_rs_holds(l, it)) all = 0;
      }
      if (all) best = (int)it;
    }
  }
  return best;
}

/* Broadcasts the buffers of `scope` from group rank root (bytes). */
static px_status_t px_rs_bcast(px__resume_t *rs, px_group_t *g, px_rs_scope_t scope, int root) {
  for (int i = 0; i < rs->n; i++) {
    px_rs_item_t *it = &rs->items[i];
    if (it->scope != scope || it->bytes == 0) continue;
    PX_CHECK(px_comm_broadcast(g, it->data, it->bytes, PX_COMM_U8, root));
  }
  return PX_OK;
}

px_status_t px__resume_load(px__resume_t *rs, int *iteration, int *node_fresh, int *rank_fresh) {
  *iteration = -1;
  *node_fresh = *rank_fresh = 1;
  if (!rs->scratch) {
    rs->scratch = px_malloc(rs->scratch_bytes ? rs->scratch_bytes : 1, "resume.scratch");
    if (!rs->scratch) return PX_ERR_NOMEM;
  }
  int its[PX_RS_MAX_KEEP], n = px_rs_scan(rs, its, PX_RS_MAX_KEEP, 1), good = 0;
  double *mine = rs->lists + (size_t)rs->rank * PX_RS_MAX_KEEP;
  for (size_t k = 0; k < (size_t)rs->size * PX_RS_MAX_KEEP; k++) rs->lists[k] = -1;
  for (int k = 0; k < n; k++)
    if (px_rs_verify(rs, its[k], 0)) mine[good++] = its[k];
  PX_CHECK(px_comm_allreduce(rs->world, rs->lists, rs->lists, (size_t)rs->size * PX_RS_MAX_KEEP,
                             PX_COMM_F64, PX_COMM_MAX));
  int R = px_rs_agree(rs);
  if (R < 0) {
    int any = 0;
    for (int r = 0; r < rs->size; r++) any |= rs->lists[r * PX_RS_MAX_KEEP] >= 0;
    if (any && rs->rank == 0)
      px_log(PX_LOG_WARN, "no checkpoint is held by every rank that has some: starting afresh");
    return PX_OK;
  }
  int have = px_rs_holds(mine, R), all = 1, src = -1;
  for (int r = 0; r < rs->size; r++) {
    int h = px_rs_holds(rs->lists + r * PX_RS_MAX_KEEP, R);
    all &= h;
    if (h && src < 0) src = r;
  }
  if (have && !px_rs_verify(rs, R, 1))
    return px_set_error(PX_ERR_IO, "rank %d: checkpoint of iteration %d changed while resuming",
                        rs->rank, R);
  if (!all) {
    /* the shared state from the lowest rank that has it (world rank ==
     * world group rank), the node's from a node mate that has it */
    PX_CHECK(px_rs_bcast(rs, rs->world, PX_RS_GLOBAL, src));
    int P = px_group_size(rs->intra), nsrc = -1;
    for (int i = 0; i < P && nsrc < 0; i++)
      if (px_rs_holds(rs->lists + px_group_world_rank(rs->intra, i) * PX_RS_MAX_KEEP, R)) nsrc = i;
    if (nsrc >= 0) PX_CHECK(px_rs_bcast(rs, rs->intra, PX_RS_NODE, nsrc));
    *node_fresh = nsrc < 0;
  } else {
    *node_fresh = 0;
  }
  *rank_fresh = !have;
  for (int i = 0; i < rs->n; i++) {
    px_rs_item_t *it = &rs->items[i];
    if (!it->t) continue;
    if (it->scope == PX_RS_RANK && !have) continue;
    if (it->scope == PX_RS_NODE && *node_fresh) continue;
    PX_CHECK(px_tensor_copy_from_host(it->t, it->host, it->bytes));
  }
  *iteration = R;
  rs->complete = R;
  rs->own = good ? (int)mine[0] : -1;
  rs->own_complete = have;
  if (rs->rank == 0)
    px_log(PX_LOG_INFO, "resuming from the checkpoint of iteration %d (%s)", R,
           all ? "every rank has its own" : "some ranks restart their own state");
  return PX_OK;
}
