/* `pxctl logs`: the per-rank logs of a job. Agents upload every rank's log
 * (WORK_DIR/jobs/JOB/rank-R.log on the node that ran it) to the coordinator,
 * which keeps the last MiB of each; this asks the coordinator first
 * (GetRankLog), so it works from any host. When the coordinator holds
 * nothing for the job (older agents, a job not yet started) or cannot be
 * asked, it reads the local files of this host's agent instead, and when
 * those are not here either it says so and names the nodes (and hosts)
 * that ran the job. --follow prints new lines as they arrive until the job
 * ends. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pxctl.h"

#define PXCTL_MAX_RANK_FILES 4096

typedef struct {
  int rank;
  char path[4096];
  long long offset;   /* --follow: bytes printed so far */
  char partial[4096]; /* --follow: a line not yet ended */
  size_t npartial;
} pxctl_logfile_t;

typedef struct {
  pxctl_logfile_t *f;
  size_t n, cap;
} pxctl_logset_t;

static int pxctl_rank_cmp(const void *a, const void *b) {
  return ((const pxctl_logfile_t *)a)->rank - ((const pxctl_logfile_t *)b)->rank;
}

/* Adds the rank-R.log files of dir that the set does not have yet (only
 * rank `only` when it is >= 0). Returns the count added, -1 if dir cannot be
 * read. */
static int pxctl_scan(pxctl_logset_t *s, const char *dir, int only) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int added = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int rank;
    char tail[8];
    if (sscanf(e->d_name, "rank-%d.lo%1[g]%1s", &rank, tail, tail + 2) != 2 || rank < 0) continue;
    if (only >= 0 && rank != only) continue;
    int have = 0;
    for (size_t i = 0; i < s->n; i++) have |= s->f[i].rank == rank;
    if (have || s->n >= PXCTL_MAX_RANK_FILES) continue;
    if (s->n == s->cap) {
      size_t cap = s->cap ? 2 * s->cap : 8;
      pxctl_logfile_t *f = px_realloc(s->f, cap * sizeof *f, "pxctl.logs");
      if (!f) break;
      s->f = f;
      s->cap = cap;
    }
    pxctl_logfile_t *f = &s->f[s->n++];
    memset(f, 0, sizeof *f);
    f->rank = rank;
    snprintf(f->path, sizeof f->path, "%s/%s", dir, e->d_name);
    added++;
  }
  closedir(d);
  if (s->n > 1) qsort(s->f, s->n, sizeof *s->f, pxctl_rank_cmp);
  return added;
}

/* Reads the whole file into a px_malloc'd, NUL-terminated buffer. */
static char *pxctl_slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = px_malloc(cap + 1, "pxctl.logtext");
  while (buf) {
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (n < cap) break;
    char *nb = px_realloc(buf, 2 * cap + 1, "pxctl.logtext");
    if (!nb) {
      px_free(buf);
      buf = NULL;
      break;
    }
    buf = nb;
    cap *= 2;
  }
  fclose(f);
  if (buf) buf[n] = '\0';
  *len = n;
  return buf;
}

/* Prints what was appended to f since the last call, whole lines only
 * (a line longer than the buffer is cut). prefix: "[rank R] " or none. */
static void pxctl_follow_one(pxctl_logfile_t *f, int prefix) {
  FILE *in = fopen(f->path, "rb");
  if (!in) return;
  struct stat sb;
  if (fstat(fileno(in), &sb) == 0 && sb.st_size < f->offset) f->offset = 0; /* truncated */
  if (fseeko(in, (off_t)f->offset, SEEK_SET) != 0) {
    fclose(in);
    return;
  }
  char buf[8192];
  size_t r;
  while ((r = fread(buf, 1, sizeof buf, in)) > 0) {
    f->offset += (long long)r;
    for (size_t i = 0; i < r; i++) {
      char c = buf[i];
      if (c != '\n' && f->npartial < sizeof f->partial - 1) {
        f->partial[f->npartial++] = c;
        continue;
      }
      if (prefix) printf("[rank %d] ", f->rank);
      fwrite(f->partial, 1, f->npartial, stdout);
      fputc('\n', stdout);
      f->npartial = 0;
      if (c != '\n') f->partial[f->npartial++] = c;
    }
  }
  fclose(in);
  fflush(stdout);
}

/* The job as the coordinator knows it (NULL when it cannot say), and the
 * nodes (NULL likewise). *not_found is set when the coordinator answered
 * that there is no such job. */
static Prunex__V1__Job *pxctl_logs_job(px_rpc_channel_t *ch, const char *job_id,
                                       int *not_found) {
  *not_found = 0;
  if (!ch) return NULL;
  Prunex__V1__Job *job = NULL;
  if (px_rpc_get_job(ch, job_id, 3000, &job) != PX_OK) {
    *not_found = px_rpc_last_code() == PX_RPC_NOT_FOUND;
    return NULL;
  }
  return job;
}

/* Explains where the logs are when they are not here. Returns 1. */
static int pxctl_logs_elsewhere(px_rpc_channel_t *ch, const Prunex__V1__Job *job,
                                const char *job_id, const char *dir, int dir_errno,
                                const char *work_dir, const char *coordinator) {
  char host[256] = "this host";
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "this host");
  host[sizeof host - 1] = '\0';
  fprintf(stderr, "pxctl: the logs of job '%s' are not on this host (%s): %s %s\n", job_id, host,
          dir, dir_errno == ENOENT || dir_errno == 0 ? "does not exist" : strerror(dir_errno));
  if (!job) {
    fprintf(stderr,
            "pxctl: they are in WORK_DIR/jobs/%s/ on the nodes that ran it (the coordinator at %s "
            "could not be asked which); the work directory here is %s (--work-dir, "
            "PRUNEX_WORK_DIR)\n",
            job_id, coordinator, work_dir);
    return PXCTL_EXIT_FAIL;
  }
  if (job->n_node_ids == 0) {
    fprintf(stderr, "pxctl: job '%s' is %s and has not been placed on any node yet\n", job_id,
            px_rpc_job_state_name(job->state));
    return PXCTL_EXIT_FAIL;
  }
  Prunex__V1__ListNodesRequest req = PRUNEX__V1__LIST_NODES_REQUEST__INIT;
  Prunex__V1__ListNodesResponse *nodes = NULL;
  if (px_rpc_list_nodes(ch, &req, 3000, &nodes) != PX_OK) nodes = NULL;
  fprintf(stderr, "pxctl: job '%s' ran on:\n", job_id);
  for (size_t i = 0; i < job->n_node_ids; i++) {
    const Prunex__V1__Node *n = NULL;
    for (size_t k = 0; nodes && k < nodes->n_nodes; k++)
      if (!strcmp(nodes->nodes[k]->node_id, job->node_ids[i])) n = nodes->nodes[k];
    if (n) fprintf(stderr, "  node %zu: %s (%s) on host %s\n", i, n->name, n->node_id, n->hostname);
    else fprintf(stderr, "  node %zu: %s\n", i, job->node_ids[i]);
  }
  fprintf(stderr,
          "pxctl: run 'pxctl logs %s' on those hosts, or give --work-dir if this host's agent "
          "uses a work directory other than %s\n",
          job_id, work_dir);
  px_rpc_message_free(nodes);
  return PXCTL_EXIT_FAIL;
}


static volatile sig_atomic_t pxctl_logs_stop;
static void pxctl_logs_on_signal(int sig) {
  (void)sig;
  pxctl_logs_stop = 1;
}

/* ---- through the coordinator ----------------------------------------------- */

#define PXCTL_REMOTE_GRACE_S 5.0 /* after the job ends: wait this long for the last uploads */
#define PXCTL_REMOTE_SILENT_S 30.0 /* logs complete, coordinator silent: stop after this */

typedef struct {
  int64_t offset;     /* bytes printed (or read) so far */
  int eof, found;
  int64_t size, start_offset;
  char partial[4096]; /* --follow: a line not yet ended */
  size_t npartial;
} pxctl_remote_rank_t;

static int pxctl_job_over(int s) { return pxctl_job_finished(s); }

static int pxctl_job_nranks(const Prunex__V1__Job *job) {
  const Prunex__V1__ClusterSpec *c = job->spec ? job->spec->cluster : NULL;
  int m = c && c->nodes > 0 ? c->nodes : 1, p = c && c->workers_per_node > 0 ? c->workers_per_node : 1;
  return m * p;
}

/* One GetRankLog from r->offset; the answer, or NULL when the call failed. */
static Prunex__V1__RankLog *pxctl_get_rank_log(px_rpc_channel_t *ch, const char *job_id, int rank,
                                                int64_t offset) {
  Prunex__V1__GetRankLogRequest req = PRUNEX__V1__GET_RANK_LOG_REQUEST__INIT;
  req.job_id = (char *)job_id;
  req.rank = rank;
  req.offset = offset;
  Prunex__V1__RankLog *log = NULL;
  if (px_rpc_get_rank_log(ch, &req, 10000, &log) != PX_OK) return NULL;
  return log;
}

/* The whole log of a rank as the coordinator holds it (px_malloc'd, NUL
 * terminated), with the rank's fields in r. NULL when the call failed. */
static char *pxctl_read_rank_log(px_rpc_channel_t *ch, const char *job_id, int rank,
                                 pxctl_remote_rank_t *r, size_t *len) {
  size_t n = 0, cap = 0;
  char *text = NULL;
  int64_t offset = 0;
  for (;;) {
    Prunex__V1__RankLog *log = pxctl_get_rank_log(ch, job_id, rank, offset);
    if (!log) {
      px_free(text);
      return NULL;
    }
    r->found = log->found;
    r->eof = log->eof;
    r->size = log->size;
    r->start_offset = log->start_offset;
    if (n + log->data.len + 1 > cap) {
      cap = (n + log->data.len + 1) * 2;
      char *t = px_realloc(text, cap, "pxctl.ranklog");
      if (!t) {
        px_rpc_message_free(log);
        px_free(text);
        return NULL;
      }
      text = t;
    }
    if (log->data.len) memcpy(text + n, log->data.data, log->data.len);
    n += log->data.len;
    offset = log->offset + (int64_t)log->data.len;
    int more = log->data.len > 0 && offset < log->size;
    px_rpc_message_free(log);
    if (!more) break;
  }
  if (!text && !(text = px_malloc(1, "pxctl.ranklog"))) return NULL;
  text[n] = '\0';
  *len = n;
  r->offset = offset;
  return text;
}

/* Prints data as whole lines (prefix "[rank R] "), keeping an unended line. */
static void pxctl_remote_lines(pxctl_remote_rank_t *r, int rank, int prefix, const uint8_t *d,
                               size_t n) {
  for (size_t i = 0; i < n; i++) {
    char c = (char)d[i];
    if (c != '\n' && r->npartial < sizeof r->partial - 1) {
      r->partial[r->npartial++] = c;
      continue;
    }
    if (prefix) printf("[rank %d] ", rank);
    fwrite(r->partial, 1, r->npartial, stdout);
    fputc('\n', stdout);
    r->npartial = 0;
    if (c != '\n') r->partial[r->npartial++] = c;
  }
}

/* Whether the coordinator holds any log of the job's ranks (first..last):
 * 1 yes, 0 no, -1 it could not be asked. */
static int pxctl_remote_has_logs(px_rpc_channel_t *ch, const char *job_id, int first, int last) {
  for (int rank = first; rank <= last; rank++) {
    Prunex__V1__GetRankLogRequest req = PRUNEX__V1__GET_RANK_LOG_REQUEST__INIT;
    req.job_id = (char *)job_id;
    req.rank = rank;
    req.max_bytes = 1;
    Prunex__V1__RankLog *log = NULL;
    if (px_rpc_get_rank_log(ch, &req, 5000, &log) != PX_OK) return -1;
    int found = log->found;
    px_rpc_message_free(log);
    if (found) return 1;
  }
  return 0;
}

/* The logs of ranks first..last from the coordinator, printed or as JSON. */
static int pxctl_logs_remote_print(pxctl_opts_t *o, px_rpc_channel_t *ch, const char *job_id,
                                   int first, int n, pxctl_remote_rank_t *rr) {
  int rc = PXCTL_EXIT_OK;
  pxctl_json_t j;
  if (o->json) {
    pxctl_json_init(&j, stdout);
    pxctl_json_begin_object(&j);
    pxctl_json_kv_string(&j, "job_id", job_id);
    pxctl_json_kv_string(&j, "source", "coordinator");
    pxctl_json_key(&j, "files");
    pxctl_json_begin_array(&j);
  }
  for (int k = 0; k < n; k++) {
    size_t len = 0;
    char *text = pxctl_read_rank_log(ch, job_id, first + k, &rr[k], &len);
    if (!text) {
      rc = pxctl_rpc_fail(ch, NULL);
      break;
    }
    if (o->json) {
      pxctl_json_begin_object(&j);
      pxctl_json_kv_int(&j, "rank", first + k);
      pxctl_json_key(&j, "text");
      if (rr[k].found) pxctl_json_string_n(&j, text, len);
      else pxctl_json_null(&j);
      pxctl_json_kv_int(&j, "size", rr[k].size);
      pxctl_json_kv_int(&j, "start_offset", rr[k].start_offset);
      pxctl_json_kv_bool(&j, "eof", rr[k].eof);
      pxctl_json_end_object(&j);
    } else if (rr[k].found) {
      if (n > 1) printf("%s==> rank %d <==\n", k ? "\n" : "", first + k);
      if (rr[k].start_offset > 0)
        printf("[... the first %lld bytes of rank %d's log were dropped: the coordinator keeps "
               "the last ones]\n",
               (long long)rr[k].start_offset, first + k);
      fwrite(text, 1, len, stdout);
      if (len > 0 && text[len - 1] != '\n') fputc('\n', stdout);
    } else if (n > 1) {
      printf("%s==> rank %d: no log yet <==\n", k ? "\n" : "", first + k);
    }
    px_free(text);
  }
  if (o->json && rc == PXCTL_EXIT_OK) {
    pxctl_json_end_array(&j);
    pxctl_json_end_object(&j);
    pxctl_json_finish(&j);
  } else if (o->json) {
    pxctl_json_discard(&j); /* a failure: no half document on stdout */
  }
  return rc;
}

/* --follow: poll each unfinished rank twice a second; after the job ends,
 * wait PXCTL_REMOTE_GRACE_S at most for the ranks' last uploads. Ranks whose
 * logs are complete do not end it: the job does (its state may come a moment
 * after the last line), or a coordinator silent for PXCTL_REMOTE_SILENT_S. */
static void pxctl_logs_remote_follow(px_rpc_channel_t *ch, const char *job_id, int first, int n,
                                     int prefix, pxctl_remote_rank_t *rr) {
  double over_at = -1, last_check = 0, last_answer = pxctl_mono_s();
  while (!pxctl_logs_stop) {
    int open = 0;
    for (int k = 0; k < n; k++) {
      if (rr[k].eof) continue;
      for (;;) {
        Prunex__V1__RankLog *log = pxctl_get_rank_log(ch, job_id, first + k, rr[k].offset);
        if (!log) break;
        if (log->offset > rr[k].offset) /* the kept tail starts past what we printed */
          printf("[rank %d: %lld bytes dropped]\n", first + k,
                 (long long)(log->offset - rr[k].offset));
        pxctl_remote_lines(&rr[k], first + k, prefix, log->data.data, log->data.len);
        rr[k].offset = log->offset + (int64_t)log->data.len;
        rr[k].eof = log->eof && rr[k].offset >= log->size;
        int more = log->data.len > 0 && rr[k].offset < log->size;
        px_rpc_message_free(log);
        if (!more) break;
      }
      open += !rr[k].eof;
    }
    fflush(stdout);
    if (over_at >= 0 && (open == 0 || pxctl_mono_s() - over_at >= PXCTL_REMOTE_GRACE_S)) break;
    if (over_at < 0 && (open == 0 || pxctl_mono_s() - last_check >= 1.0)) {
      last_check = pxctl_mono_s();
      Prunex__V1__Job *jb = NULL;
      if (px_rpc_get_job(ch, job_id, 3000, &jb) == PX_OK) {
        last_answer = last_check;
        if (pxctl_job_over(jb->state)) over_at = pxctl_mono_s();
        px_rpc_message_free(jb);
        if (over_at >= 0 && open == 0) break;
      } else if (open == 0 && last_check - last_answer >= PXCTL_REMOTE_SILENT_S) {
        fprintf(stderr, "pxctl: the logs of job '%s' are complete, but the coordinator has not "
                        "answered for %.0f s: stopped without its final state\n",
                job_id, PXCTL_REMOTE_SILENT_S);
        break;
      }
    }
    struct timespec ts = {0, 500 * 1000000L};
    nanosleep(&ts, NULL);
  }
  for (int k = 0; k < n; k++) /* a last line without its newline */
    if (rr[k].npartial) {
      if (prefix) printf("[rank %d] ", first + k);
      printf("%.*s\n", (int)rr[k].npartial, rr[k].partial);
    }
  fflush(stdout);
}

/* The logs of ranks first..last from the coordinator: printed, as JSON,
 * or followed until the job ends. */
static int pxctl_logs_remote(pxctl_opts_t *o, px_rpc_channel_t *ch, const char *job_id,
                             int first, int last) {
  int n = last - first + 1, rc = PXCTL_EXIT_OK;
  pxctl_remote_rank_t *rr = px_calloc((size_t)n, sizeof *rr, "pxctl.logs.remote");
  if (!rr) return pxctl_fail("out of memory");
  if (o->follow) pxctl_logs_remote_follow(ch, job_id, first, n, n > 1 || o->rank < 0, rr);
  else rc = pxctl_logs_remote_print(o, ch, job_id, first, n, rr);
  px_free(rr);
  return rc;
}

/* A rank asked for whose log this host does not have: which it has. */
static int pxctl_logs_no_rank(int rank, const char *job_id, const char *dir) {
  pxctl_logset_t all = {NULL, 0, 0};
  pxctl_scan(&all, dir, -1);
  char have[512] = "";
  int used = 0;
  for (size_t i = 0; i < all.n && used < (int)sizeof have - 16; i++)
    used += snprintf(have + used, sizeof have - (size_t)used, "%s%d", i ? ", " : "",
                     all.f[i].rank);
  int rc = pxctl_fail("the log of rank %d of job '%s' is not on this host (%s has %s%s); it is "
                      "on the node that ran that rank",
                      rank, job_id, dir, all.n ? "ranks " : "no rank logs", have);
  px_free(all.f);
  return rc;
}

static void pxctl_logs_local_json(const pxctl_logset_t *set, const char *job_id, const char *dir) {
  pxctl_json_t j;
  pxctl_json_init(&j, stdout);
  pxctl_json_begin_object(&j);
  pxctl_json_kv_string(&j, "job_id", job_id);
  pxctl_json_kv_string(&j, "dir", dir);
  pxctl_json_key(&j, "files");
  pxctl_json_begin_array(&j);
  for (size_t i = 0; i < set->n; i++) {
    size_t len = 0;
    char *text = pxctl_slurp(set->f[i].path, &len);
    pxctl_json_begin_object(&j);
    pxctl_json_kv_int(&j, "rank", set->f[i].rank);
    pxctl_json_kv_string(&j, "path", set->f[i].path);
    pxctl_json_key(&j, "text");
    if (text) pxctl_json_string_n(&j, text, len);
    else pxctl_json_null(&j);
    pxctl_json_end_object(&j);
    px_free(text);
  }
  pxctl_json_end_array(&j);
  pxctl_json_end_object(&j);
  pxctl_json_finish(&j);
}

static int pxctl_logs_local_print(const pxctl_logset_t *set, const char *dir) {
  int rc = PXCTL_EXIT_OK;
  if (set->n == 0) printf("(no rank logs in %s yet)\n", dir);
  for (size_t i = 0; i < set->n; i++) {
    size_t len = 0;
    char *text = pxctl_slurp(set->f[i].path, &len);
    if (set->n > 1)
      printf("%s==> rank %d: %s <==\n", i ? "\n" : "", set->f[i].rank, set->f[i].path);
    if (!text) {
      fprintf(stderr, "pxctl: %s: %s\n", set->f[i].path, strerror(errno));
      rc = PXCTL_EXIT_FAIL;
      continue;
    }
    fwrite(text, 1, len, stdout);
    if (len > 0 && text[len - 1] != '\n') fputc('\n', stdout);
    px_free(text);
  }
  return rc;
}

/* --follow on this host's files: poll them; ask the coordinator about once
 * a second whether the job is over; Ctrl-C ends it quietly. */
static void pxctl_logs_local_follow(pxctl_logset_t *set, px_rpc_channel_t *ch, const char *job_id,
                                    const char *dir, int rank, const struct sigaction *sa) {
  sigaction(SIGINT, sa, NULL);
  sigaction(SIGTERM, sa, NULL);
  double last_check = 0;
  int over = 0;
  while (!pxctl_logs_stop) {
    pxctl_scan(set, dir, rank);
    for (size_t i = 0; i < set->n; i++) pxctl_follow_one(&set->f[i], set->n > 1 || rank < 0);
    if (over) break;
    if (ch && pxctl_mono_s() - last_check >= 1.0) {
      last_check = pxctl_mono_s();
      int nf;
      Prunex__V1__Job *jb = pxctl_logs_job(ch, job_id, &nf);
      if (jb) {
        int s = jb->state;
        over = pxctl_job_finished(s);
        px_rpc_message_free(jb);
        if (over) continue; /* one more pass for the last lines */
      }
    }
    struct timespec ts = {0, 250 * 1000000L};
    nanosleep(&ts, NULL);
  }
  for (size_t i = 0; i < set->n; i++) /* a last line without its newline */
    if (set->f[i].npartial) {
      if (set->n > 1 || rank < 0) printf("[rank %d] ", set->f[i].rank);
      printf("%.*s\n", (int)set->f[i].npartial, set->f[i].partial);
    }
}

int pxctl_cmd_logs(pxctl_opts_t *o) {
  const char *job_id = o->pos[0];
  if (!job_id[0] || strchr(job_id, '/') || !strcmp(job_id, ".") || !strcmp(job_id, ".."))
    return pxctl_usage_error(o, "'%s' is not a job id", job_id);
  if (o->json && o->follow) return pxctl_usage_error(o, "--json does not go with --follow");
  const char *env = getenv("PRUNEX_WORK_DIR");
  const char *work_dir = o->work_dir ? o->work_dir : env && env[0] ? env : PXCTL_DEFAULT_WORK_DIR;
  char dir[4096];
  if (snprintf(dir, sizeof dir, "%s/jobs/%s", work_dir, job_id) >= (int)sizeof dir)
    return pxctl_usage_error(o, "--work-dir: path too long");

  px_rpc_channel_t *ch = NULL;
  if (px_rpc_channel_create(o->coordinator, &ch) != PX_OK) ch = NULL;
  pxctl_logset_t set = {NULL, 0, 0};
  int rc = PXCTL_EXIT_OK;
  Prunex__V1__Job *job = NULL;
  struct stat sb;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = pxctl_logs_on_signal;

  /* The coordinator first: it holds what the agents uploaded. */
  int unknown = 0;
  job = pxctl_logs_job(ch, job_id, &unknown);
  if (job) {
    int nranks = pxctl_job_nranks(job);
    if (o->rank >= nranks) {
      rc = pxctl_fail("job '%s' has ranks 0..%d, not %d", job_id, nranks - 1, o->rank);
      goto out;
    }
    int first = o->rank >= 0 ? o->rank : 0, last = o->rank >= 0 ? o->rank : nranks - 1;
    int has = pxctl_remote_has_logs(ch, job_id, first, last);
    int local = stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode);
    /* Following a job that has not uploaded yet: wait for it at the
     * coordinator, unless this host has its files. */
    if (has == 1 || (has == 0 && o->follow && !local && !pxctl_job_over(job->state))) {
      if (o->follow) {
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
      }
      rc = pxctl_logs_remote(o, ch, job_id, first, last);
      goto out;
    }
    px_rpc_message_free(job);
    job = NULL;
  }
  errno = 0;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    int dir_errno = errno, not_found;
    job = pxctl_logs_job(ch, job_id, &not_found);
    if (not_found) rc = pxctl_fail("no job '%s' (coordinator %s), and no logs of it in %s", job_id,
                                   o->coordinator, dir);
    else rc = pxctl_logs_elsewhere(ch, job, job_id, dir, dir_errno, work_dir, o->coordinator);
    goto out;
  }
  if (pxctl_scan(&set, dir, o->rank) < 0) {
    rc = pxctl_fail("%s: %s", dir, strerror(errno));
    goto out;
  }
  if (o->rank >= 0 && set.n == 0 && !o->follow) {
    rc = pxctl_logs_no_rank(o->rank, job_id, dir);
    goto out;
  }
  if (o->json) pxctl_logs_local_json(&set, job_id, dir);
  else if (!o->follow) rc = pxctl_logs_local_print(&set, dir);
  else pxctl_logs_local_follow(&set, ch, job_id, dir, o->rank, &sa);
out:
  px_rpc_message_free(job);
  px_free(set.f);
  px_rpc_channel_destroy(ch);
  return rc;
}
