/* Inter-node bytes per H-SADMM synchronisation, dense against compacted.
 *
 * For each model (default resnet18, resnet152, wrn50_2; CIFAR shapes, 10
 * classes) two ranks on two nodes (forked processes, UCX on loopback, the
 * real data plane) run three H-SADMM rounds on the model's parameters at the
 * given channel keep (--keep, default 0.5) and filter keep (--filter,
 * default 1). The figures of the third round are the data plane's inter-tier
 * counters, summed over both ranks: the compacted exchange (packed z_i + v_i,
 * the group masks and the small residual allreduce) beside what the same
 * allreduce moves for the dense parameters. No training happens:
 * traffic depends on the shapes and the masks, not on the values. Both ranks
 * start from the same model, as every rank of a job starts from the same
 * consensus, so their masks agree (the steady state once drift is zero). Prints a
 * row per model and `RESULT <model>_inter_reduction <fraction>` (1 - packed
 * / dense; higher is better). A model argument ending in .onnx is an
 * imported graph (at the file's own input size and classes;
 * tests/onnx_import_nets.py export NET OUT 3 32 32 10 writes one,
 * tests/onnx_zoo.py export NET 13 OUT torchvision's, bench/zoo/run.sh runs
 * this on each of those), named by its file's base name. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prunex/hsadmm.h"
#include "prunex/kv.h"
#include "prunex/nn.h"
#include "prunex/strategy.h"

typedef struct {
  double inter_bytes, inter_dense, packed, dense, density;
  int ok;
} shared_t;

static px_status_t keep_going(void *ctx, const px_hsadmm_round_t *r, px_hsadmm_decision_t *d) {
  (void)ctx;
  (void)r;
  (void)d;
  return PX_OK;
}

static int rank_main(int rank, const char *arch, double fkeep, double keep, const char *kvdir,
                     shared_t *out) {
  px_ops_t *ops;
  px_model_t *m;
  size_t al = strlen(arch);
  int onnx = al > 5 && !strcmp(arch + al - 5, ".onnx"); /* an imported graph */
  px_model_onnx_info_t info = {3, 32, 32, 10, 0, 0, ""};
  if (onnx && px_model_onnx_check(arch, &info)) {
    fprintf(stderr, "rank %d: %s\n", rank, px_last_error());
    return 1;
  }
  px_model_config_t mc = {onnx ? "" : arch, info.in_channels, info.num_classes, 1, info.height,
                          info.width, NULL, 0, PX_PRECISION_FP32, onnx ? arch : NULL};
  if (px_ops_create(px_device_cpu(), 1, &ops) || px_model_create(ops, &mc, &m) ||
      px_model_init_params(m, 1)) {
    fprintf(stderr, "rank %d: %s\n", rank, px_last_error());
    return 1;
  }
  int np = px_model_num_params(m);
  px_hsadmm_param_t *hp = calloc((size_t)np, sizeof *hp);
  px_strategy_hsadmm_params(m, NULL, 0, hp);
  px_kv_t *kv;
  px_comm_t *c;
  int nodes[2] = {0, 1};
  px_comm_opts_t o;
  px_comm_opts_default(&o);
  o.timeout_ms = 600000;
  if (px_kv_open_dir(kvdir, &kv) || px_comm_create(rank, 2, nodes, kv, &o, &c)) {
    fprintf(stderr, "rank %d: %s\n", rank, px_last_error());
    return 1;
  }
  px_hsadmm_config_t cfg = {0, 1e-3, 1e-3, 5e-4, {fkeep, keep, 1.0, 0, 0, 0}, 0};
  px_hsadmm_t *h;
  if (px_hsadmm_create(c, hp, np, &cfg, &h)) {
    fprintf(stderr, "rank %d: %s\n", rank, px_last_error());
    return 1;
  }
  /* the masks are chosen in round 0; round 2 is a steady-state round */
  for (int round = 0; round < 3; round++) {
    px_hsadmm_round_t *rd;
    int stop;
    if (px_hsadmm_sync(h, &rd) || px_hsadmm_decide(h, keep_going, NULL, &stop)) {
      fprintf(stderr, "rank %d: %s\n", rank, px_last_error());
      return 1;
    }
    if (rank == 0 && round == 2) {
      out->inter_bytes = (double)rd->bytes_inter;
      out->inter_dense = (double)rd->bytes_inter_dense;
      out->packed = (double)rd->packed_bytes;
      out->dense = (double)rd->dense_bytes;
      out->density = rd->density;
      out->ok = 1;
    }
  }
  px_hsadmm_destroy(h);
  px_comm_destroy(c);
  px_kv_destroy(kv);
  px_model_destroy(m);
  px_ops_destroy(ops);
  free(hp);
  return 0;
}

int main(int argc, char **argv) {
  double keep = 0.5, fkeep = 1.0;
  const char *models[32];
  int nm = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--keep") && i + 1 < argc) keep = atof(argv[++i]);
    else if (!strcmp(argv[i], "--filter") && i + 1 < argc) fkeep = atof(argv[++i]);
    else if (nm < 32) models[nm++] = argv[i];
  }
  if (nm == 0) {
    models[0] = "resnet18";
    models[1] = "resnet152";
    models[2] = "wrn50_2";
    nm = 3;
  }
  shared_t *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  printf("H-SADMM inter-node bytes per synchronisation, 2 nodes x 1 rank, channel keep %.2f, "
         "filter keep %.2f\n", keep, fkeep);
  printf("%-22s %14s %14s %10s %10s\n", "model", "dense MB", "compacted MB", "reduction", "density");
  char results[32][128] = {{0}}; /* a model that fails prints none */
  int bad = 0;
  for (int k = 0; k < nm; k++) {
    memset(sh, 0, sizeof *sh);
    char dir[] = "/tmp/pxtraffic-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    pid_t pid[2];
    for (int r = 0; r < 2; r++) {
      pid[r] = fork();
      if (pid[r] == 0) {
        alarm(900);
        _exit(rank_main(r, models[k], fkeep, keep, dir, sh));
      }
    }
    int failed = 0;
    for (int r = 0; r < 2; r++) {
      int ws;
      waitpid(pid[r], &ws, 0);
      failed |= !WIFEXITED(ws) || WEXITSTATUS(ws) != 0;
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    if (failed || !sh->ok) {
      fprintf(stderr, "%s: a rank failed\n", models[k]);
      bad = 1;
      continue;
    }
    double red = 1.0 - sh->inter_bytes / sh->inter_dense;
    const char *base = strrchr(models[k], '/') ? strrchr(models[k], '/') + 1 : models[k];
    int bl = (int)strlen(base) - (strstr(base, ".onnx") ? 5 : 0);
    printf("%-22.*s %14.2f %14.2f %9.1f%% %10.3f\n", bl, base, sh->inter_dense / 1e6,
           sh->inter_bytes / 1e6, 100 * red, sh->density);
    snprintf(results[k], sizeof results[k], "RESULT %.*s_inter_reduction %.3f fraction", bl, base,
             red);
  }
  for (int k = 0; k < nm; k++)
    if (results[k][0]) printf("%s\n", results[k]);
  return bad;
}
