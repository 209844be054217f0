/* `pxctl acct`: the coordinator's accounting records, like
 * Slurm's sacct: one row per job with its node-seconds, then per-user
 * totals; --json and --csv for scripts. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pxctl.h"

#define PXCTL_ACCT_DEADLINE_MS 30000
#define PXCTL_ACCT_REASON 60 /* the table's reason, cut at a word (--csv: whole) */

int pxctl_parse_since(const char *v, int64_t *out) {
  size_t n = strlen(v);
  if (n >= 2 && n < 16 && isdigit((unsigned char)v[0]) && strchr("smhd", v[n - 1])) {
    char *end = NULL;
    long long k = strtoll(v, &end, 10);
    if (end != v + n - 1 || k < 0 || k > 100LL * 365 * 86400) return -1;
    long long unit = v[n - 1] == 's' ? 1 : v[n - 1] == 'm' ? 60 : v[n - 1] == 'h' ? 3600 : 86400;
    long long back = k * unit * 1000;
    int64_t now = (int64_t)time(NULL) * 1000;
    *out = back >= now ? 0 : now - back;
    return 0;
  }
  struct tm tm;
  memset(&tm, 0, sizeof tm);
  const char *end = strptime(v, "%Y-%m-%d", &tm);
  if (end && *end == 'T') {
    const char *t = strptime(end + 1, "%H:%M:%S", &tm);
    end = t ? t : strptime(end + 1, "%H:%M", &tm);
  }
  if (!end || *end) return -1;
  time_t s = timegm(&tm);
  if (s < 0) return -1;
  *out = (int64_t)s * 1000;
  return 0;
}

/* ISO 8601 UTC for CSV; "" for 0. */
static void pxctl_acct_iso(char *buf, size_t cap, int64_t unix_ms) {
  buf[0] = '\0';
  if (unix_ms <= 0) return;
  time_t t = (time_t)(unix_ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void pxctl_acct_csv(const Prunex__V1__GetAccountingResponse *r) {
  fputs("job_id,user,name,nodes,devices,submit,start,end,node_seconds,state,attempts,reason\n",
        stdout);
  for (size_t i = 0; i < r->n_records; i++) {
    const Prunex__V1__AcctRecord *a = r->records[i];
    char t[3][40];
    pxctl_acct_iso(t[0], sizeof t[0], a->submit_unix_ms);
    pxctl_acct_iso(t[1], sizeof t[1], a->start_unix_ms);
    pxctl_acct_iso(t[2], sizeof t[2], a->end_unix_ms);
    printf("%s,", a->job_id);
    pxctl_csv_string(stdout, a->owner);
    fputc(',', stdout);
    pxctl_csv_string(stdout, a->name);
    printf(",%d,%d,%s,%s,%s,%.3f,%s,%d,", a->num_nodes, a->devices, t[0], t[1], t[2],
           a->node_seconds, px_rpc_job_state_name(a->state), a->attempts);
    pxctl_csv_string(stdout, a->reason);
    fputc('\n', stdout);
  }
}

static void pxctl_acct_table(const Prunex__V1__GetAccountingResponse *r) {
  if (r->n_records == 0) {
    printf("no accounting records\n");
    return;
  }
  static const char *const h[] = {"JOB",     "USER",      "NAME",  ">NODES", ">DEVICES",
                                  "SUBMITTED", "START",   "END",     ">ELAPSED", ">NODE-S",
                                  "STATE",     ">ATTEMPTS", "REASON"};
  pxctl_table_t *t = pxctl_table_create(13, h);
  int64_t now = (int64_t)time(NULL) * 1000;
  for (size_t i = 0; i < r->n_records; i++) {
    const Prunex__V1__AcctRecord *a = r->records[i];
    char when[48], start[48], end[48], el[32], why[PXCTL_ACCT_REASON + 8];
    pxctl_fmt_time(when, sizeof when, a->submit_unix_ms);
    pxctl_fmt_time(start, sizeof start, a->start_unix_ms); /* "-": not yet */
    pxctl_fmt_time(end, sizeof end, a->end_unix_ms);
    pxctl_fmt_clip(why, sizeof why, a->reason, PXCTL_ACCT_REASON);
    if (a->start_unix_ms > 0)
      pxctl_fmt_duration(el, sizeof el,
                         (double)((a->end_unix_ms > 0 ? a->end_unix_ms : now) - a->start_unix_ms) /
                             1000.0);
    else snprintf(el, sizeof el, "-");
    pxctl_table_cell(t, "%s", a->job_id);
    pxctl_table_cell(t, "%s", a->owner[0] ? a->owner : "-");
    pxctl_table_cell(t, "%s", a->name);
    pxctl_table_cell(t, "%d", a->num_nodes);
    pxctl_table_cell(t, "%d", a->devices);
    pxctl_table_cell(t, "%s", when);
    pxctl_table_cell(t, "%s", start);
    pxctl_table_cell(t, "%s", end);
    pxctl_table_cell(t, "%s", el);
    pxctl_table_cell(t, "%.1f", a->node_seconds);
    pxctl_table_cell(t, "%s", px_rpc_job_state_name(a->state));
    pxctl_table_cell(t, "%d", a->attempts);
    pxctl_table_cell(t, "%s", why);
  }
  pxctl_table_print(t, stdout, 0);
  if (r->truncated)
    printf("(more jobs match: --limit N shows more; the totals cover them all)\n");
  printf("\n");
  static const char *const th[] = {"USER", ">JOBS", ">NODE-SECONDS", ">NODE-HOURS"};
  pxctl_table_t *tt = pxctl_table_create(4, th);
  for (size_t i = 0; i < r->n_totals; i++) {
    const Prunex__V1__AcctUserTotal *u = r->totals[i];
    pxctl_table_cell(tt, "%s", u->user[0] ? u->user : "-");
    pxctl_table_cell(tt, "%lld", (long long)u->jobs);
    pxctl_table_cell(tt, "%.1f", u->node_seconds);
    pxctl_table_cell(tt, "%.3f", u->node_seconds / 3600.0);
  }
  pxctl_table_print(tt, stdout, 0);
}

int pxctl_cmd_acct(pxctl_opts_t *o) {
  if (o->json && o->csv) return pxctl_usage_error(o, "--json and --csv: give one");
  if (o->limit > 5000) return pxctl_usage_error(o, "--limit %d: at most 5000", o->limit);
  px_rpc_channel_t *ch = pxctl_connect(o);
  if (!ch) return PXCTL_EXIT_FAIL;
  Prunex__V1__GetAccountingRequest req = PRUNEX__V1__GET_ACCOUNTING_REQUEST__INIT;
  req.user = (char *)(o->user ? o->user : "");
  req.since_unix_ms = o->since_unix_ms;
  req.state = (Prunex__V1__JobState)o->state;
  req.limit = o->limit;
  Prunex__V1__GetAccountingResponse *r = NULL;
  int rc = PXCTL_EXIT_OK;
  if (px_rpc_get_accounting(ch, &req, PXCTL_ACCT_DEADLINE_MS, &r) != PX_OK) {
    rc = pxctl_rpc_fail(ch, NULL);
  } else if (o->json) {
    pxctl_json_print_message(&r->base);
  } else if (o->csv) {
    pxctl_acct_csv(r);
  } else {
    pxctl_acct_table(r);
  }
  px_rpc_message_free(r);
  px_rpc_channel_destroy(ch);
  return rc;
}
