/* `pxctl logs`: the per-rank log files a pxagent writes for the ranks it
 * runs, WORK_DIR/jobs/JOB/rank-R.log. They live on the node that ran the
 * rank, so this reads the local file system only; when the files are not
 * here it says so and, if the coordinator answers, names the nodes (and
 * their hosts) that ran the job. --follow prints new lines as they are
 * written until the job ends. */
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
    pxctl_logset_t all = {NULL, 0, 0};
    pxctl_scan(&all, dir, -1);
    char have[512] = "";
    int used = 0;
    for (size_t i = 0; i < all.n && used < (int)sizeof have - 16; i++)
      used += snprintf(have + used, sizeof have - (size_t)used, "%s%d", i ? ", " : "",
                       all.f[i].rank);
    rc = pxctl_fail("the log of rank %d of job '%s' is not on this host (%s has %s%s); it is on "
                    "the node that ran that rank",
                    o->rank, job_id, dir, all.n ? "ranks " : "no rank logs", have);
    px_free(all.f);
    goto out;
  }

  if (o->json) {
    pxctl_json_t j;
    pxctl_json_init(&j, stdout);
    pxctl_json_begin_object(&j);
    pxctl_json_key(&j, "job_id");
    pxctl_json_string(&j, job_id);
    pxctl_json_key(&j, "dir");
    pxctl_json_string(&j, dir);
    pxctl_json_key(&j, "files");
    pxctl_json_begin_array(&j);
    for (size_t i = 0; i < set.n; i++) {
      size_t len = 0;
      char *text = pxctl_slurp(set.f[i].path, &len);
      pxctl_json_begin_object(&j);
      pxctl_json_key(&j, "rank");
      pxctl_json_int(&j, set.f[i].rank);
      pxctl_json_key(&j, "path");
      pxctl_json_string(&j, set.f[i].path);
      pxctl_json_key(&j, "text");
      if (text) pxctl_json_string_n(&j, text, len);
      else pxctl_json_null(&j);
      pxctl_json_end_object(&j);
      px_free(text);
    }
    pxctl_json_end_array(&j);
    pxctl_json_end_object(&j);
    pxctl_json_finish(&j);
    goto out;
  }

  if (!o->follow) {
    if (set.n == 0) printf("(no rank logs in %s yet)\n", dir);
    for (size_t i = 0; i < set.n; i++) {
      size_t len = 0;
      char *text = pxctl_slurp(set.f[i].path, &len);
      if (set.n > 1) printf("%s==> rank %d: %s <==\n", i ? "\n" : "", set.f[i].rank, set.f[i].path);
      if (!text) {
        fprintf(stderr, "pxctl: %s: %s\n", set.f[i].path, strerror(errno));
        rc = PXCTL_EXIT_FAIL;
        continue;
      }
      fwrite(text, 1, len, stdout);
      if (len > 0 && text[len - 1] != '\n') fputc('\n', stdout);
      px_free(text);
    }
    goto out;
  }

  /* --follow: poll the files; ask the coordinator about once a second
   * whether the job is over; Ctrl-C ends it quietly. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = pxctl_logs_on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  double last_check = 0;
  int over = 0;
  while (!pxctl_logs_stop) {
    pxctl_scan(&set, dir, o->rank);
    for (size_t i = 0; i < set.n; i++) pxctl_follow_one(&set.f[i], set.n > 1 || o->rank < 0);
    if (over) break;
    if (ch && pxctl_mono_s() - last_check >= 1.0) {
      last_check = pxctl_mono_s();
      int nf;
      Prunex__V1__Job *jb = pxctl_logs_job(ch, job_id, &nf);
      if (jb) {
        int s = jb->state;
        over = s == PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED ||
               s == PRUNEX__V1__JOB_STATE__JOB_STATE_FAILED ||
               s == PRUNEX__V1__JOB_STATE__JOB_STATE_CANCELLED;
        px_rpc_message_free(jb);
        if (over) continue; /* one more pass for the last lines */
      }
    }
    struct timespec ts = {0, 250 * 1000000L};
    nanosleep(&ts, NULL);
  }
  for (size_t i = 0; i < set.n; i++) /* a last line without its newline */
    if (set.f[i].npartial) {
      if (set.n > 1 || o->rank < 0) printf("[rank %d] ", set.f[i].rank);
      printf("%.*s\n", (int)set.f[i].npartial, set.f[i].partial);
    }
out:
  px_rpc_message_free(job);
  px_free(set.f);
  px_rpc_channel_destroy(ch);
  return rc;
}
