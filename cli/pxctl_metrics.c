/* pxctl metrics and drift: a job's iteration reports (pxctl_iterations)
 * as a table, CSV or JSON, with its membership changes (a line among the
 * rows, a "memberships" array in JSON; not in CSV, whose rows are the
 * report tables'), and its masks' drift. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prunex/report.h"
#include "pxctl.h"

/* `metrics --csv`: RFC 4180 (names are quoted, with quotes doubled), the
 * columns of the report tables (prunex/report.h); with --layers one row
 * per layer, keyed by the iteration's iteration and rank. */
static void pxctl_metrics_csv(FILE *f, Prunex__V1__IterationReport **rows, size_t n, int layers) {
  if (layers) {
    fputs("iteration,rank", f);
    px_report_csv_header(PX_REPORT_LAYER, 1, f);
    fputc('\n', f);
    for (size_t i = 0; i < n; i++)
      for (size_t k = 0; k < rows[i]->n_layers; k++) {
        fprintf(f, "%d,%d", rows[i]->iteration, rows[i]->rank);
        px_report_csv_row(PX_REPORT_LAYER, 1, rows[i]->layers[k], f);
        fputc('\n', f);
      }
  } else {
    px_report_csv_header(PX_REPORT_ITERATION, 0, f);
    fputc('\n', f);
    for (size_t i = 0; i < n; i++) {
      px_report_csv_row(PX_REPORT_ITERATION, 0, rows[i], f);
      fputc('\n', f);
    }
  }
  fflush(f);
}

/* The iteration reports of job o->pos[0] for a command that shows them:
 * connects, fetches them (from, layers, --all-ranks), runs show, frees
 * them. Exit code. */
typedef int (*pxctl_reports_fn)(pxctl_opts_t *o, const Prunex__V1__GetIterationsResponse *resp,
                                Prunex__V1__IterationReport **rows, size_t n);

static int pxctl_with_reports(pxctl_opts_t *o, int from, int layers, pxctl_reports_fn show) {
  px_rpc_channel_t *ch = pxctl_connect(o);
  if (!ch) return PXCTL_EXIT_FAIL;
  Prunex__V1__GetIterationsResponse *resp = NULL;
  Prunex__V1__IterationReport **rows = NULL;
  size_t n = 0;
  int rc;
  if (pxctl_iterations(ch, o->pos[0], from, layers, o->all_ranks, &resp, &rows, &n) != PX_OK)
    rc = resp ? pxctl_fail("%s", px_last_error()) : pxctl_rpc_fail(ch, o->pos[0]);
  else rc = show(o, resp, rows, n);
  px_free(rows);
  px_rpc_message_free(resp);
  px_rpc_channel_destroy(ch);
  return rc;
}

/* A membership change (an epoch other than an attempt's placement) as a
 * line among the iteration rows: "-- membership epoch 2 from iteration 7
 * (lost): out n2; 2 nodes (n1, n3): node n2 (ID) lost: ...". */
static void pxctl_membership_line(pxctl_table_t *t, const Prunex__V1__MembershipEpoch *e) {
  char line[1024];
  size_t u = (size_t)snprintf(line, sizeof line, "-- membership epoch %d from iteration %d (%s):",
                              e->epoch, e->from_iteration, e->kind[0] ? e->kind : "changed");
  for (size_t k = 0; k < e->n_nodes_out && u < sizeof line; k++)
    u += (size_t)snprintf(line + u, sizeof line - u, "%s%s", k ? ", " : " out ", e->nodes_out[k]);
  for (size_t k = 0; k < e->n_nodes_in && u < sizeof line; k++)
    u += (size_t)snprintf(line + u, sizeof line - u, "%s%s", k ? ", " : e->n_nodes_out ? "; in " : " in ",
                          e->nodes_in[k]);
  for (size_t k = 0; k < e->n_node_names && u < sizeof line; k++)
    u += (size_t)snprintf(line + u, sizeof line - u, "%s%s", k ? ", " : "; nodes ", e->node_names[k]);
  if (u < sizeof line) snprintf(line + u, sizeof line - u, ": %.300s", e->reason);
  pxctl_table_line(t, line);
}

/* The changes whose first iteration is before `before` (INT_MAX: all),
 * from *next on, as lines of t; *next moves past them. */
static void pxctl_membership_lines(pxctl_table_t *t, const Prunex__V1__GetIterationsResponse *resp,
                                   size_t *next, int before) {
  for (; *next < resp->n_memberships; (*next)++) {
    const Prunex__V1__MembershipEpoch *e = resp->memberships[*next];
    if (e->from_iteration >= before) return;
    if (e->epoch > 1) pxctl_membership_line(t, e);
  }
}

/* The iteration rows as a table, the membership changes among them. */
static void pxctl_metrics_table(pxctl_opts_t *o, const Prunex__V1__GetIterationsResponse *resp,
                                Prunex__V1__IterationReport **rows, size_t n) {
  static const char *const h[] = {">ITER",    ">RANK",    ">EPOCH", ">LOSS",  ">TRAIN-ACC",
                                  ">TEST-ACC", ">DENSITY", ">DRIFT", ">INTRA", ">INTER"};
  int skip_rank = !o->all_ranks;
  const char *hh[10];
  int nc = 0;
  for (int c = 0; c < 10; c++)
    if (!(skip_rank && c == 1)) hh[nc++] = h[c];
  pxctl_table_t *t = pxctl_table_create(nc, hh);
  size_t next = 0;
  for (size_t i = 0; i < n; i++) {
    const Prunex__V1__IterationReport *it = rows[i];
    pxctl_membership_lines(t, resp, &next, it->iteration + 1);
    char tr[32], te[32], bi[32], be[32];
    pxctl_fmt_pct(tr, sizeof tr, it->train_accuracy);
    pxctl_fmt_pct(te, sizeof te, it->test_accuracy);
    pxctl_fmt_bytes(bi, sizeof bi, it->bytes_intra);
    pxctl_fmt_bytes(be, sizeof be, it->bytes_inter);
    pxctl_table_cell(t, "%d%s", it->iteration, it->frozen ? "*" : "");
    if (!skip_rank) pxctl_table_cell(t, "%d", it->rank);
    pxctl_table_cell(t, "%.2f", it->epoch);
    pxctl_table_cell(t, "%.4f", it->loss);
    pxctl_table_cell(t, "%s", tr);
    pxctl_table_cell(t, "%s", te);
    pxctl_table_cell(t, "%.4f", it->density);
    if (it->mask_groups > 0)
      pxctl_table_cell(t, "%lld/%lld", (long long)it->mask_drift, (long long)it->mask_groups);
    else pxctl_table_cell(t, "%lld", (long long)it->mask_drift);
    pxctl_table_cell(t, "%s", bi);
    pxctl_table_cell(t, "%s", be);
  }
  /* a change made at the last boundary shown, in force after it */
  if (o->limit <= 0) pxctl_membership_lines(t, resp, &next, INT_MAX);
  pxctl_table_print(t, stdout, 0);
}

/* `metrics --json`: the iterations, and the membership epochs of every
 * attempt (each change a row: kind, nodes in and out, why). */
static void pxctl_metrics_json(pxctl_opts_t *o, const Prunex__V1__GetIterationsResponse *resp,
                               Prunex__V1__IterationReport **rows, size_t n) {
  pxctl_json_t j;
  pxctl_json_init(&j, stdout);
  pxctl_json_begin_object(&j);
  pxctl_json_kv_string(&j, "job_id", o->pos[0]);
  pxctl_json_key(&j, "iterations");
  pxctl_json_begin_array(&j);
  for (size_t i = 0; i < n; i++) pxctl_json_message(&j, &rows[i]->base);
  pxctl_json_end_array(&j);
  pxctl_json_key(&j, "memberships");
  pxctl_json_begin_array(&j);
  for (size_t i = 0; i < resp->n_memberships; i++)
    pxctl_json_message(&j, &resp->memberships[i]->base);
  pxctl_json_end_array(&j);
  pxctl_json_end_object(&j);
  pxctl_json_finish(&j);
}

static int pxctl_show_metrics(pxctl_opts_t *o, const Prunex__V1__GetIterationsResponse *resp,
                              Prunex__V1__IterationReport **rows, size_t n) {
  if (o->limit > 0 && n > (size_t)o->limit) n = (size_t)o->limit;
  if (o->csv && o->json) return pxctl_usage_error(o, "--csv and --json: choose one");
  if (o->csv) {
    pxctl_metrics_csv(stdout, rows, n, o->layers);
    return PXCTL_EXIT_OK;
  }
  if (o->json) {
    pxctl_metrics_json(o, resp, rows, n);
    return PXCTL_EXIT_OK;
  }
  if (n == 0) {
    printf("job %s has no iteration reports%s\n", o->pos[0], o->from ? " from there" : " yet");
    return PXCTL_EXIT_OK;
  }
  pxctl_metrics_table(o, resp, rows, n);
  int any_frozen = 0;
  for (size_t i = 0; i < n; i++) any_frozen |= rows[i]->frozen;
  if (any_frozen) printf("(* masks frozen)\n");
  for (size_t i = 0; o->layers && i < n; i++) {
    const Prunex__V1__IterationReport *it = rows[i];
    printf("\niteration %d, rank %d: %zu layer%s\n", it->iteration, it->rank, it->n_layers,
           it->n_layers == 1 ? "" : "s");
    if (it->n_layers == 0) continue;
    static const char *const lh[] = {">LAYER",   "NAME",  ">R-INTRA", ">S-INTRA", ">R-INTER",
                                     ">S-INTER", ">RHO1", ">RHO2",    ">DENSITY"};
    pxctl_table_t *lt = pxctl_table_create(9, lh);
    for (size_t k = 0; k < it->n_layers; k++) {
      const Prunex__V1__LayerMetrics *L = it->layers[k];
      pxctl_table_cell(lt, "%d", L->layer);
      pxctl_table_cell(lt, "%s", L->name);
      pxctl_table_cell(lt, "%.3e", L->r_intra);
      pxctl_table_cell(lt, "%.3e", L->s_intra);
      pxctl_table_cell(lt, "%.3e", L->r_inter);
      pxctl_table_cell(lt, "%.3e", L->s_inter);
      pxctl_table_cell(lt, "%.4g", L->rho1);
      pxctl_table_cell(lt, "%.4g", L->rho2);
      if (L->density >= 0) pxctl_table_cell(lt, "%.4f", L->density);
      else pxctl_table_cell(lt, "-"); /* not a pruned layer */
    }
    pxctl_table_print(lt, stdout, 2);
  }
  return PXCTL_EXIT_OK;
}

int pxctl_cmd_metrics(pxctl_opts_t *o) {
  return pxctl_with_reports(o, o->from, o->layers, pxctl_show_metrics);
}

static int pxctl_show_drift(pxctl_opts_t *o, const Prunex__V1__GetIterationsResponse *resp,
                            Prunex__V1__IterationReport **rows, size_t n) {
  (void)resp;
  /* The first iteration whose report says frozen, and the last one that
   * still changed the masks. */
  int frozen_at = -1, last_change = -1;
  for (size_t i = 0; i < n; i++) {
    if (rows[i]->frozen && frozen_at < 0) frozen_at = rows[i]->iteration;
    if (rows[i]->mask_drift != 0) last_change = rows[i]->iteration;
  }
  if (o->json) {
    pxctl_json_t j;
    pxctl_json_init(&j, stdout);
    pxctl_json_begin_object(&j);
    pxctl_json_kv_string(&j, "job_id", o->pos[0]);
    pxctl_json_kv_bool(&j, "frozen", frozen_at >= 0);
    pxctl_json_key(&j, "frozen_at_iteration");
    if (frozen_at >= 0) pxctl_json_int(&j, frozen_at);
    else pxctl_json_null(&j);
    pxctl_json_key(&j, "last_change_iteration");
    if (last_change >= 0) pxctl_json_int(&j, last_change);
    else pxctl_json_null(&j);
    pxctl_json_key(&j, "iterations");
    pxctl_json_begin_array(&j);
    for (size_t i = 0; i < n; i++) {
      pxctl_json_begin_object(&j);
      pxctl_json_kv_int(&j, "iteration", rows[i]->iteration);
      pxctl_json_kv_int(&j, "rank", rows[i]->rank);
      pxctl_json_kv_int(&j, "mask_drift", rows[i]->mask_drift);
      pxctl_json_key(&j, "mask_groups");
      if (rows[i]->mask_groups > 0) pxctl_json_int(&j, rows[i]->mask_groups);
      else pxctl_json_null(&j);
      pxctl_json_kv_double(&j, "density", rows[i]->density);
      pxctl_json_kv_bool(&j, "frozen", rows[i]->frozen);
      pxctl_json_end_object(&j);
    }
    pxctl_json_end_array(&j);
    pxctl_json_end_object(&j);
    pxctl_json_finish(&j);
    return PXCTL_EXIT_OK;
  }
  if (n == 0) {
    printf("job %s has no iteration reports yet\n", o->pos[0]);
    return PXCTL_EXIT_OK;
  }
  static const char *const h[] = {">ITER", ">RANK", ">DRIFT", ">DENSITY", "MASKS"};
  static const char *const h1[] = {">ITER", ">DRIFT", ">DENSITY", "MASKS"};
  pxctl_table_t *t = o->all_ranks ? pxctl_table_create(5, h) : pxctl_table_create(4, h1);
  for (size_t i = 0; i < n; i++) {
    pxctl_table_cell(t, "%d", rows[i]->iteration);
    if (o->all_ranks) pxctl_table_cell(t, "%d", rows[i]->rank);
    if (rows[i]->mask_groups > 0)
      pxctl_table_cell(t, "%lld of %lld groups", (long long)rows[i]->mask_drift,
                       (long long)rows[i]->mask_groups);
    else pxctl_table_cell(t, "%lld", (long long)rows[i]->mask_drift);
    pxctl_table_cell(t, "%.4f", rows[i]->density);
    pxctl_table_cell(t, "%s", rows[i]->frozen ? "frozen" : "-");
  }
  pxctl_table_print(t, stdout, 0);
  if (frozen_at >= 0)
    printf("masks froze at iteration %d%s", frozen_at, last_change >= 0 ? "" : "\n");
  else printf("masks not frozen%s", last_change >= 0 ? "" : "\n");
  if (last_change >= 0)
    printf("; last change at iteration %d\n", last_change);
  return PXCTL_EXIT_OK;
}

int pxctl_cmd_drift(pxctl_opts_t *o) {
  return pxctl_with_reports(o, 0, 0, pxctl_show_drift);
}
