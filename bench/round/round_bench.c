/* bench/round: the time of one H-SADMM round by phase, on the host path the
 * round runs today and on the device path (the state on the device), for a model's
 * parameters (resnet50 by default: the CIFAR-size model of model.c).
 *
 * Both paths run the phase functions of admm/hsadmm_state.h that the round
 * runs, the host with the CPU table over host buffers, the device with the
 * CUDA table over device buffers (the device-state round of px_hsadmm_t).
 * The phases, as a leader runs them (the collectives are left out: they
 * are the same bytes on both paths, and the device path hands the exchange
 * only the packed buffer):
 *   intra        s = theta + u
 *   z_i          z_i update
 *   projection   host: px_sparsity_project; device: px__hss_project (the
 *                group norms on the device, down to the host, the choice
 *                up, the zeroing on the device; coupled groups included)
 *   pack         s = z_i + v, the masks into the plan, then shrink into the
 *                packed buffer (host: the pack plan; device: px__hss_pack_set
 *                and px__hss_shrink), then the packed buffer down to the host
 *   expand       the packed buffer up (device), the mean (x 1/M), and the
 *                expansion into z
 *   duals        v += z_i - z, u += theta - z_i and the residual sums
 * Each phase is timed after a synchronisation of the device; the best of
 * --rounds rounds after one warm-up counts.
 *
 *   px_bench_round [--model resnet50] [--rounds 3] [--channel-keep 0.5]
 *
 * Prints a table and RESULT lines round_host_ms and, with a GPU,
 * round_device_ms and round_device_speedup (host / device). Without a GPU
 * (or CUDA) it prints the host path and says the device half was skipped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "admm/hsadmm_state.h"
#include "prunex/cuda.h"
#include "prunex/cuda_kernels.h"
#include "prunex/nn.h"
#include "prunex/ops.h"
#include "prunex/prune.h"
#include "prunex/prune_internal.h"
#include "prunex/strategy.h"

enum { PH_INTRA, PH_ZI, PH_PROJECT, PH_PACK, PH_EXPAND, PH_DUALS, NPH };
static const char *const k_phase[NPH] = {"intra", "z_i", "projection", "pack", "expand",
                                         "duals"};
#define M_NODES 2
#define P_RANKS 2

typedef struct {
  int np;
  px_hsadmm_param_t *hp;
  size_t *numel;
  px_prune_keep_t keep;
  px_sparsity_t *sp;
  px_pack_plan_t *plan;
  uint8_t *mask;          /* [mbytes] host masks */
  const uint8_t **mptrs;  /* [np] into mask, NULL for dense */
  size_t mbytes;
  double *rho1, *rho2, *sums;
} bench_t;

/* What one path holds: its state, theta on its side, and the device extras. */
typedef struct {
  px__hss_t st;
  float *theta_buf;
  const float **theta;    /* [np] */
  float **src, **dst;     /* [np] tensors of s and z (host path, for the plan) */
  px__hss_dev_t dv;       /* device path: blocks, masks, packed buffer, norms */
} path_t;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what) {
  fprintf(stderr, "px_bench_round: %s: %s\n", what, px_last_error());
  return 1;
}

#define TRY(call, what)          \
  do {                           \
    if ((call) < 0) return fail(what); \
  } while (0)

/* The model's parameter list, its sparsity set, masks and pack plan. */
static int bench_setup(bench_t *b, const char *arch, double channel_keep) {
  px_ops_t *ops = NULL;
  px_model_t *m = NULL;
  px_model_config_t mc = {arch, 3, 10, 1, 32, 32, NULL, 0, 0, NULL};
  TRY(px_ops_create(px_device_cpu(), 1, &ops), "ops");
  TRY(px_model_create(ops, &mc, &m), "model");
  TRY(px_model_init_params(m, 1), "model parameters");
  b->np = px_model_num_params(m);
  b->hp = calloc((size_t)b->np, sizeof *b->hp);
  b->numel = calloc((size_t)b->np, sizeof *b->numel);
  px_sparsity_param_t *spp = calloc((size_t)b->np, sizeof *spp);
  px_param_desc_t *desc = calloc((size_t)b->np, sizeof *desc);
  const char **names = calloc((size_t)b->np, sizeof *names);
  b->rho1 = calloc((size_t)b->np, sizeof(double));
  b->rho2 = calloc((size_t)b->np, sizeof(double));
  b->sums = calloc((size_t)b->np * PX__NSUMS, sizeof(double));
  b->mptrs = calloc((size_t)b->np, sizeof *b->mptrs);
  if (!b->hp || !b->numel || !spp || !desc || !names || !b->rho1 || !b->rho2 || !b->sums ||
      !b->mptrs)
    return fail("host memory");
  px_strategy_hsadmm_params(m, NULL, 0, b->hp);
  for (int i = 0; i < b->np; i++) {
    b->numel[i] = b->hp[i].numel;
    b->rho1[i] = 0.05;
    b->rho2[i] = 0.05;
    names[i] = b->hp[i].name;
    spp[i].prunable = b->hp[i].prunable;
    spp[i].shape = b->hp[i].shape;
    spp[i].consumer = b->hp[i].has_consumer ? b->hp[i].consumer : -1;
  }
  b->keep = (px_prune_keep_t){1.0, channel_keep, 1.0, 0, 0, 0};
  TRY(px_sparsity_create(spp, names, b->np, &b->keep, &b->sp), "sparsity set");
  b->mbytes = px_sparsity_mask_bytes(b->sp);
  b->mask = malloc(b->mbytes ? b->mbytes : 1);
  if (!b->mask) return fail("host memory");
  memset(b->mask, 1, b->mbytes ? b->mbytes : 1);
  for (int i = 0; i < b->np; i++) {
    desc[i].name = names[i];
    if (spp[i].prunable) {
      desc[i].kind = PX_PARAM_CONV;
      desc[i].shape = spp[i].shape;
      desc[i].layout = px_sparsity_layout(b->sp, i);
      b->mptrs[i] = b->mask + px_sparsity_mask_offset(b->sp, i);
    } else {
      desc[i].kind = PX_PARAM_DENSE;
      desc[i].numel = b->numel[i];
    }
  }
  TRY(px_pack_plan_create(desc, b->np, 0, &b->plan), "pack plan");
  free(spp);
  free(desc);
  free(names); /* the plan and the set borrow the names: hp's stay the model's */
  /* the model stays alive for its names (hp[i].name); released at exit */
  return 0;
}

/* The state on ops' side, filled with the same pseudo-random values on both
 * paths (theta near z, small duals). */
static int path_setup(const bench_t *b, path_t *p, const px__hss_ops_t *ops) {
  memset(p, 0, sizeof *p);
  TRY(px__hss_create(&p->st, ops, b->np, b->numel), ops->name);
  size_t total = p->st.total, fb = total * sizeof(float);
  float *h = malloc(fb);
  p->theta = calloc((size_t)b->np, sizeof *p->theta);
  p->src = calloc((size_t)b->np, sizeof *p->src);
  p->dst = calloc((size_t)b->np, sizeof *p->dst);
  if (!h || !p->theta || !p->src || !p->dst) return fail("host memory");
  TRY(ops->alloc(fb, "bench.theta", (void **)&p->theta_buf), "theta");
  float *fams[] = {p->st.zi, p->st.z, p->st.u, p->st.v, p->theta_buf};
  for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
    uint32_t x = 2463534242u + (uint32_t)f;
    for (size_t j = 0; j < total; j++) {
      x ^= x << 13, x ^= x >> 17, x ^= x << 5;
      h[j] = ((float)(x >> 8) / 16777216.0f - 0.5f) * (f >= 2 && f <= 3 ? 0.01f : 0.2f);
    }
    TRY(ops->upload(fams[f], h, fb), "upload");
  }
  free(h);
  for (int i = 0; i < b->np; i++) {
    p->theta[i] = p->theta_buf + p->st.off[i];
    p->src[i] = p->st.s + p->st.off[i];
    p->dst[i] = p->st.z + p->st.off[i];
  }
  if (!ops->device) return 0;
  TRY(px__hss_dev_create(&p->dv, &p->st, b->sp), "device round buffers");
  return 0;
}

/* ---- the host round --------------------------------------------------------------- */

static px_status_t host_phase(bench_t *b, path_t *p, int ph) {
  px__hss_t *st = &p->st;
  switch (ph) {
    case PH_INTRA: return px__hss_theta_u(st, p->theta);
    case PH_ZI: return px__hss_zi(st, b->rho1, b->rho2, 0.0, M_NODES, P_RANKS);
    case PH_PROJECT: return px_sparsity_project(b->sp, st->zi, st->off, b->mask);
    case PH_PACK: {
      px_status_t s = px_pack_plan_set_masks(b->plan, b->mptrs);
      if (s == PX_OK) s = px__hss_pack_source(st);
      for (int k = 0; s == PX_OK && k < px_pack_num_buckets(b->plan); k++)
        s = px_pack_shrink_bucket(b->plan, k, (const float *const *)p->src);
      return s;
    }
    case PH_EXPAND: {
      px_status_t s = px__hss_copy(st, st->z_prev, st->z);
      if (s == PX_OK)
        s = px__hss_scale(st, px_pack_buffer(b->plan), 1.0f / M_NODES,
                          px_pack_packed_floats(b->plan));
      if (s == PX_OK) px_pack_expand(b->plan, p->dst);
      return s;
    }
    default: {
      px_status_t s = px__hss_dual_v(st);
      return s == PX_OK ? px__hss_residuals(st, p->theta, 0, 1, b->rho1, b->rho2, b->sums) : s;
    }
  }
}

/* ---- the device round -------------------------------------------------------------- */

static px_status_t dev_phase(bench_t *b, path_t *p, int ph) {
  px__hss_t *st = &p->st;
  size_t nf = px_pack_packed_floats(b->plan);
  float *host_packed = px_pack_buffer(b->plan);
  px_status_t s = PX_OK;
  switch (ph) {
    case PH_PROJECT: return px__hss_project(st, &p->dv, b->sp, st->zi, b->mask);
    case PH_PACK:
      s = px_pack_plan_set_masks(b->plan, b->mptrs);
      if (s == PX_OK) s = px__hss_pack_set(&p->dv, st, b->plan, b->sp, b->mask);
      if (s == PX_OK) s = px__hss_pack_source(st);
      if (s == PX_OK) s = px__hss_shrink(st, &p->dv, st->s);
      /* only the packed buffer goes to the host (UCX); with NCCL not even that */
      return s == PX_OK ? px_cuda_kernels_download(px_pack_buffer(b->plan), p->dv.packed,
                                                    px_pack_packed_bytes(b->plan))
                        : s;
    case PH_EXPAND:
      s = px_cuda_kernels_upload(p->dv.packed, host_packed, nf * 4);
      if (s == PX_OK) s = px__hss_copy(st, st->z_prev, st->z);
      if (s == PX_OK) s = px__hss_scale(st, p->dv.packed, 1.0f / M_NODES, nf);
      return s == PX_OK ? px__hss_expand(st, &p->dv, st->z) : s;
    default: return host_phase(b, p, ph); /* the state table runs on the device */
  }
}

/* Best time of each phase over rounds (after one warm-up round). */
static int run_path(bench_t *b, path_t *p, int device, int rounds, double *best) {
  for (int k = 0; k < NPH; k++) best[k] = 1e30;
  for (int r = 0; r <= rounds; r++)
    for (int k = 0; k < NPH; k++) {
      double t0 = now();
      px_status_t s = device ? dev_phase(b, p, k) : host_phase(b, p, k);
      if (s == PX_OK && device) s = px_cuda_kernels_sync(NULL);
      if (s != PX_OK) return fail(k_phase[k]);
      double t = now() - t0;
      if (r > 0 && t < best[k]) best[k] = t;
    }
  return 0;
}

static const char *device_missing(void) {
  int n = 0;
  if (!px_cuda_built()) return "libpxcore was built without CUDA";
  if (px_cuda_device_count(&n) != PX_OK || n == 0) return "no CUDA device on this machine";
  return NULL;
}

int main(int argc, char **argv) {
  const char *arch = "resnet50";
  int rounds = 3;
  double channel_keep = 0.5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--model")) arch = argv[i + 1];
    else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--channel-keep")) channel_keep = atof(argv[i + 1]);
    else {
      fprintf(stderr, "px_bench_round: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (rounds < 1 || !px_model_arch_known(arch) || !(channel_keep > 0 && channel_keep <= 1)) {
    fprintf(stderr, "px_bench_round: --model one of %s, --rounds >= 1, --channel-keep in (0, 1]\n",
            px_model_arch_list());
    return 2;
  }
  bench_t b;
  memset(&b, 0, sizeof b);
  if (bench_setup(&b, arch, channel_keep)) return 1;
  path_t host, dev;
  double th[NPH], td[NPH];
  if (path_setup(&b, &host, &px__hss_host_ops) || run_path(&b, &host, 0, rounds, th)) return 1;
  const char *why = device_missing();
  if (!why && (path_setup(&b, &dev, &px__hss_cuda_ops) || run_path(&b, &dev, 1, rounds, td)))
    return 1;
  printf("px_bench_round: %s, %zu parameters in %d tensors, channel keep %g, %zu packed floats, "
         "best of %d rounds\n",
         arch, host.st.total, b.np, channel_keep, px_pack_packed_floats(b.plan), rounds);
  printf("%-12s %12s %12s %9s\n", "phase", "host ms", "device ms", "speedup");
  double sh = 0, sd = 0;
  for (int k = 0; k < NPH; k++) {
    sh += th[k];
    if (why) {
      printf("%-12s %12.3f %12s %9s\n", k_phase[k], 1e3 * th[k], "-", "-");
      continue;
    }
    sd += td[k];
    printf("%-12s %12.3f %12.3f %8.1fx\n", k_phase[k], 1e3 * th[k], 1e3 * td[k], th[k] / td[k]);
  }
  if (why) printf("%-12s %12.3f %12s %9s\n", "round", 1e3 * sh, "-", "-");
  else printf("%-12s %12.3f %12.3f %8.1fx\n", "round", 1e3 * sh, 1e3 * sd, sh / sd);
  printf("RESULT round_host_ms %.3f\n", 1e3 * sh);
  if (why) {
    printf("px_bench_round: device path skipped: %s\n", why);
    return 0;
  }
  printf("RESULT round_device_ms %.3f\nRESULT round_device_speedup %.2f\n", 1e3 * sd, sh / sd);
  return 0;
}
