/* The local training loop shared by pxtrain and pxworker: data sets and
 * loaders for this rank's shard, the model, SGD with a learning-rate
 * schedule, one epoch at a time, and evaluation on the test set. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "prunex/cuda.h"
#include "prunex/data.h"
#include "nn/px_train_int.h"
#include "prunex/nn.h"
#include "px_check.h"
#include "px_clock.h"

struct px_trainer {
  px_train_config_t cfg;
  char arch[32], dataset[32], schedule[16];
  px_dataset_t *train, *test;
  px_loader_t *train_loader, *test_loader;
  px_ops_t *ops;
  px_model_t *model;
  px_sgd_t *sgd;
  int64_t steps_per_epoch;
  int64_t schedule_steps;  /* steps the learning-rate schedule spans */
  int64_t global_step;     /* optimiser steps taken */
  int64_t cursor_epoch;    /* px_trainer_steps: epoch in progress, -1 when none */
  /* epochs are numbered epoch_base + (global_step - base_step) / steps_per_epoch
   * (0 and 0 until a reshard changes the steps per epoch) */
  int64_t epoch_base, base_step;
  int32_t reshard_rank, reshard_world; /* px_trainer_reshard pending (world 0: none) */
  px_grad_hook_t hook;
  void *hook_ctx;
  px_model_t *step_model;  /* px__trainer_use: what px_trainer_steps trains (NULL: model) */
  px_sgd_t *step_sgd;      /* and with which optimiser (NULL: sgd) */
  /* an image folder's input contract (px_trainer_input_meta); classes NULL otherwise */
  char *classes;
  char in_size[48], in_side[16], in_resize[16], in_mean[64], in_std[64];
};

void px_trainer_set_grad_hook(px_trainer_t *t, px_grad_hook_t hook, void *ctx) {
  t->hook = hook;
  t->hook_ctx = ctx;
}

void px__trainer_use(px_trainer_t *t, px_model_t *m, px_sgd_t *s) {
  t->step_model = m;
  t->step_sgd = s;
}

void px__trainer_sgd_config(const px_trainer_t *t, px_sgd_config_t *out) {
  *out = (px_sgd_config_t){t->cfg.lr, t->cfg.momentum, t->cfg.weight_decay, t->cfg.nesterov};
}

void px_train_config_default(px_train_config_t *c) {
  memset(c, 0, sizeof *c);
  c->arch = "resnet20";
  c->dataset = "fashion-mnist";
  c->batch = 128;
  c->epochs = 15;
  c->lr = 0.1;
  c->momentum = 0.9;
  c->weight_decay = 5e-4;
  c->lr_schedule = "cosine";
  c->seed = 1;
  c->augment = 1;
  c->world_size = 1;
  c->device = px_device_cpu();
}

static px_status_t px__load_data(px_trainer_t *t) {
  const px_train_config_t *c = &t->cfg;
  if (!strcmp(c->dataset, "fashion-mnist")) {
    const char *dir = c->data_dir ? c->data_dir : "/usr/share/datasets/fashion-mnist";
    PX_CHECK(px_dataset_load_fashion_mnist(dir, PX_SPLIT_TRAIN, &t->train));
    return px_dataset_load_fashion_mnist(dir, PX_SPLIT_TEST, &t->test);
  }
  if (!strcmp(c->dataset, "cifar10")) {
    PX_REQUIRE(c->data_dir != NULL, "dataset.path: cifar10 needs the directory of its .bin files");
    PX_CHECK(px_dataset_load_cifar10(c->data_dir, PX_SPLIT_TRAIN, &t->train));
    return px_dataset_load_cifar10(c->data_dir, PX_SPLIT_TEST, &t->test);
  }
  if (!strcmp(c->dataset, "synthetic")) {
    px_dataset_info_t info = {0};
    info.channels = 3;
    info.height = info.width = 32;
    info.num_classes = 10;
    for (int ch = 0; ch < 3; ch++) {
      info.mean[ch] = 0.5f;
      info.std[ch] = 0.25f;
    }
    info.n = c->synthetic_samples > 0 ? c->synthetic_samples : 10 * c->batch;
    PX_CHECK(px_dataset_create_synthetic(&info, c->seed, &t->train));
    info.n = c->batch;
    return px_dataset_create_synthetic(&info, c->seed + 1, &t->test);
  }
  if (!strcmp(c->dataset, "folder")) {
    PX_REQUIRE(c->data_dir != NULL, "dataset.path: a folder data set needs its directory");
    px_folder_config_t fc = {c->data_dir, PX_SPLIT_TRAIN, c->image_channels ? c->image_channels : 3,
                             c->image_size ? c->image_size : 32, c->cache_dir, c->data_root,
                             c->max_skipped, c->cache_root,
                             c->cache_budget};
    px_folder_report_t rep;
    PX_CHECK(px_dataset_load_folder(&fc, &rep, &t->train));
    if (rep.streamed)
      px_log(PX_LOG_INFO, "image folder %s: %lld training images, %d classes, streamed (more "
             "than the cache budget decoded)", c->data_dir, (long long)rep.files,
             rep.num_classes);
    else
      px_log(PX_LOG_INFO, "image folder %s: %lld training images (%lld skipped), %d classes, %s "
             "cache %s", c->data_dir, (long long)(rep.files - rep.skipped), (long long)rep.skipped,
             rep.num_classes, rep.built ? "decoded into" : "read from", rep.cache_path);
    PX_CHECK(px_folder_class_names(c->data_dir, &t->classes));
    fc.split = PX_SPLIT_TEST;
    return px_dataset_load_folder(&fc, NULL, &t->test);
  }
  return px_set_error(PX_ERR_INVALID,
                      "dataset.name '%s': expected fashion-mnist, cifar10, synthetic or folder",
                      c->dataset);
}

/* The loaders' batch buffers on a GPU: page-locked (px_cuda_host_alloc)
 * with the trainer's device's context (ctx: its px_device_t). */
static void *px__pinned_alloc(size_t bytes, void *ctx) {
  return px_cuda_host_alloc(((const px_device_t *)ctx)->index, bytes);
}

static void px__pinned_free(void *p, void *ctx) {
  (void)ctx;
  px_cuda_host_free(p);
}

px_status_t px_trainer_create(const px_train_config_t *cfg, px_trainer_t **out) {
  *out = NULL;
  PX_REQUIRE(cfg->arch && cfg->dataset, "training config without a model or data set");
  PX_REQUIRE(cfg->batch >= 1, "train.batch_size = %d: must be >= 1", cfg->batch);
  PX_REQUIRE(cfg->epochs >= 1, "train.epochs = %d: must be >= 1", cfg->epochs);
  PX_REQUIRE(cfg->world_size >= 1 && cfg->rank >= 0 && cfg->rank < cfg->world_size,
             "rank %d of world size %d", cfg->rank, cfg->world_size);
  const char *sch = cfg->lr_schedule ? cfg->lr_schedule : "constant";
  PX_REQUIRE(!strcmp(sch, "constant") || !strcmp(sch, "cosine") || !strcmp(sch, "step"),
             "train.lr_schedule '%s': expected constant, cosine or step", sch);
  PX_REQUIRE(cfg->onnx || px_model_arch_known(cfg->arch), "model.name '%s' is not a known architecture (%s)",
             cfg->arch, px_model_arch_list());
  px_trainer_t *t = px_calloc(1, sizeof *t, "trainer");
  if (!t) return PX_ERR_NOMEM;
  t->cfg = *cfg;
  snprintf(t->arch, sizeof t->arch, "%s", cfg->arch);
  snprintf(t->dataset, sizeof t->dataset, "%s", cfg->dataset);
  snprintf(t->schedule, sizeof t->schedule, "%s", sch);
  t->cfg.arch = t->arch;
  t->cfg.dataset = t->dataset;
  t->cfg.lr_schedule = t->schedule;
  t->cfg.data_dir = NULL; /* only used while loading */
  px_status_t st = PX_OK;
  px_train_config_t load_cfg = t->cfg;
  load_cfg.data_dir = cfg->data_dir;
  t->cfg = load_cfg;
  PX_CHECK_GOTO(px__load_data(t), st, done);
  t->cfg.data_dir = NULL;

  const px_dataset_info_t *info = px_dataset_info(t->train);
  px_loader_config_t lc;
  px_loader_config_default(t->train, &lc);
  lc.batch_size = cfg->batch;
  lc.rank = cfg->rank;
  lc.world_size = cfg->world_size;
  lc.seed = cfg->seed;
  lc.drop_last = 1; /* the model is built for full batches */
  int folder = !strcmp(t->dataset, "folder");
  if (cfg->augment && folder) {
    lc.augment.rrc_scale = cfg->min_scale > 0.0f ? cfg->min_scale : 0.35f;
    lc.augment.flip = 1;
  } else if (cfg->augment) {
    lc.augment.crop_pad = 4;
    lc.augment.flip = 1;
  }
  /* decoding threads: the rank's share of the cores, as its compute threads */
  lc.threads = cfg->loader_threads > 0 ? cfg->loader_threads
               : cfg->threads > 0      ? (cfg->threads < PX_LOADER_DEFAULT_THREADS
                                              ? cfg->threads : PX_LOADER_DEFAULT_THREADS)
                                       : 0;
  if (px_dataset_streamed(t->train)) lc.prefetch = cfg->loader_prefetch > 0 ? cfg->loader_prefetch : 2;
  if (cfg->device.kind == PX_DEVICE_CUDA) { /* batches the GPU copies by DMA, no staging */
    lc.host_alloc = px__pinned_alloc;
    lc.host_free = px__pinned_free;
    lc.host_ctx = &t->cfg.device;
  }
  PX_CHECK_GOTO(px_loader_create(t->train, &lc, &t->train_loader), st, done);
  t->steps_per_epoch = px_loader_num_batches(t->train_loader);
  t->schedule_steps = t->steps_per_epoch * cfg->epochs;
  t->cursor_epoch = -1;
  if (t->steps_per_epoch < 1) {
    st = px_set_error(PX_ERR_INVALID,
                      "the training shard of rank %d has fewer samples than one batch of %d",
                      cfg->rank, cfg->batch);
    goto done;
  }
  px_loader_config_t ec;
  px_loader_config_eval(t->test, &ec);
  if (folder) {
    /* the test split is normalised with the training split's statistics */
    memcpy(ec.mean, lc.mean, sizeof ec.mean);
    memcpy(ec.std, lc.std, sizeof ec.std);
  }
  ec.batch_size = cfg->batch;
  ec.rank = cfg->rank;
  ec.world_size = cfg->world_size;
  ec.threads = lc.threads;
  if (px_dataset_streamed(t->test)) ec.prefetch = 1; /* decode overlaps the evaluation */
  ec.host_alloc = lc.host_alloc;
  ec.host_free = lc.host_free;
  ec.host_ctx = lc.host_ctx;
  PX_CHECK_GOTO(px_loader_create(t->test, &ec, &t->test_loader), st, done);

  PX_CHECK_GOTO(px_ops_create(cfg->device, cfg->threads, &t->ops), st, done);
  px_model_config_t mc = {t->arch,       info->channels, info->num_classes, cfg->batch,
                          info->height,  info->width,    cfg->widths,       cfg->nwidths,
                          cfg->precision, cfg->onnx};
  PX_CHECK_GOTO(px__model_create_ex(t->ops, &mc, cfg->onnx_sha256, &t->model), st, done);
  PX_CHECK_GOTO(px_model_init_params(t->model, cfg->seed), st, done);
  px_sgd_config_t sc = {cfg->lr, cfg->momentum, cfg->weight_decay, cfg->nesterov};
  PX_CHECK_GOTO(px_sgd_create(t->model, &sc, &t->sgd), st, done);
done:
  return PX_CREATED(st, t, out, px_trainer_destroy);
}

void px_trainer_destroy(px_trainer_t *t) {
  if (!t) return;
  px_sgd_destroy(t->sgd);
  px_model_destroy(t->model);
  px_ops_destroy(t->ops);
  px_loader_destroy(t->train_loader);
  px_loader_destroy(t->test_loader);
  px_dataset_destroy(t->train);
  px_dataset_destroy(t->test);
  px_free(t->classes);
  px_free(t);
}

/* "%.9g,..." of a per-channel float: exact when read back as float. */
static void px__floats(char *out, size_t cap, const float *v, int n) {
  size_t len = 0;
  out[0] = '\0';
  for (int i = 0; i < n && len < cap; i++)
    len += (size_t)snprintf(out + len, cap - len, "%s%.9g", i ? "," : "", (double)v[i]);
}

int px_trainer_input_meta(px_trainer_t *t, const char **kv, int cap) {
  if (!t->classes || cap < 7) return 0;
  const px_dataset_info_t *info = px_dataset_info(t->train);
  snprintf(t->in_size, sizeof t->in_size, "%dx%dx%d", (int)info->channels, (int)info->height,
           (int)info->width);
  snprintf(t->in_side, sizeof t->in_side, "%d", (int)info->height);
  /* a streamed folder is evaluated as torchvision does: shorter side to
   * size * 256/224, then the centre crop (data.h) */
  int resize = px_dataset_streamed(t->train) ? (int)floor(info->height * 256.0 / 224.0 + 0.5)
                                              : (int)info->height;
  snprintf(t->in_resize, sizeof t->in_resize, "%d", resize);
  px__floats(t->in_mean, sizeof t->in_mean, info->mean, info->channels);
  px__floats(t->in_std, sizeof t->in_std, info->std, info->channels);
  const char *pairs[14] = {"input_dataset", "folder",      "input_size", t->in_size,
                           "input_resize",  t->in_resize,  "input_crop", t->in_side,
                           "input_mean",    t->in_mean,    "input_std",  t->in_std,
                           "classes",       t->classes};
  memcpy(kv, pairs, sizeof pairs);
  return 7;
}

px_model_t *px_trainer_model(px_trainer_t *t) { return t->model; }
px_sgd_t *px_trainer_sgd(px_trainer_t *t) { return t->sgd; }
int64_t px_trainer_steps_per_epoch(const px_trainer_t *t) { return t->steps_per_epoch; }

void px_trainer_set_schedule_steps(px_trainer_t *t, int64_t total) {
  t->schedule_steps = total > 0 ? total : 1;
}

int64_t px_trainer_global_step(const px_trainer_t *t) { return t->global_step; }

void px_trainer_position(const px_trainer_t *t, int64_t pos[3]) {
  pos[0] = t->global_step;
  pos[1] = t->cursor_epoch;
  pos[2] = t->cursor_epoch >= 0 ? px_loader_position(t->train_loader) : 0;
}

px_status_t px_trainer_set_position(px_trainer_t *t, const int64_t pos[3]) {
  PX_REQUIRE(pos[0] >= 0 && pos[1] >= -1 && pos[2] >= 0, "trainer position %lld/%lld/%lld",
             (long long)pos[0], (long long)pos[1], (long long)pos[2]);
  PX_CHECK(px_loader_end_epoch(t->train_loader));
  t->global_step = pos[0];
  t->cursor_epoch = pos[1];
  if (pos[1] >= 0) PX_CHECK(px_loader_begin_epoch_at(t->train_loader, pos[1], pos[2]));
  return PX_OK;
}

double px_trainer_lr_at(const px_trainer_t *t, int64_t step) {
  double total = (double)t->schedule_steps;
  double f = total > 0 ? (double)step / total : 0.0;
  if (f > 1.0) f = 1.0;
  if (!strcmp(t->schedule, "cosine")) return t->cfg.lr * 0.5 * (1.0 + cos(3.141592653589793 * f));
  if (!strcmp(t->schedule, "step")) return t->cfg.lr * (f < 0.5 ? 1.0 : f < 0.75 ? 0.1 : 0.01);
  return t->cfg.lr;
}

/* The totals of a run of steps that began at t0 (px__now) with wait
 * seconds spent waiting for data: time, mean loss, accuracy, throughput. */
static void px__stats_close(px_epoch_stats_t *out, double t0, double wait, double loss_sum,
                            int64_t correct_sum) {
  out->seconds = px__now() - t0;
  out->data_wait_seconds = wait;
  if (out->samples > 0) {
    out->loss = loss_sum / out->samples;
    out->accuracy = (double)correct_sum / out->samples;
    out->images_per_sec = out->samples / out->seconds;
  }
}

px_status_t px_trainer_epoch(px_trainer_t *t, int64_t epoch, px_step_cb_t cb, void *ctx,
                             px_epoch_stats_t *out) {
  memset(out, 0, sizeof *out);
  out->epoch = epoch;
  double t0 = px__now(), wait = 0, loss_sum = 0;
  int64_t correct_sum = 0;
  PX_CHECK(px_loader_begin_epoch(t->train_loader, epoch));
  px_status_t st = PX_OK;
  for (;;) {
    px_batch_t b;
    double w0 = px__now();
    px_status_t r = px_loader_next(t->train_loader, &b);
    wait += px__now() - w0;
    if (r < 0) {
      st = r;
      break;
    }
    if (r == 0) break;
    px_sgd_set_lr(t->sgd, px_trainer_lr_at(t, t->global_step));
    float loss;
    int64_t correct;
    PX_CHECK_GOTO(px_model_train_step(t->model, b.x, b.y, &loss, &correct), st, end);
    PX_CHECK_GOTO(px_sgd_step(t->sgd), st, end);
    if (!isfinite(loss)) {
      st = px_set_error(PX_ERR_INVALID, "training diverged: loss is %g at epoch %lld step %lld",
                        loss, (long long)epoch, (long long)out->steps);
      goto end;
    }
    out->steps++;
    t->global_step++;
    out->samples += b.n;
    loss_sum += (double)loss * b.n;
    correct_sum += correct;
    if (cb && cb(ctx, out->steps, t->steps_per_epoch, loss_sum / out->samples,
                 (double)correct_sum / out->samples))
      break;
  }
end:
  px_loader_end_epoch(t->train_loader);
  px__stats_close(out, t0, wait, loss_sum, correct_sum);
  return st;
}

/* The epoch the data stream is in or begins next (see epoch_base). */
static int64_t px__epoch_at(const px_trainer_t *t) {
  return t->epoch_base + (t->global_step - t->base_step) / t->steps_per_epoch;
}

/* The shard of a pending px_trainer_reshard, from epoch e on. */
static px_status_t px__apply_reshard(px_trainer_t *t, int64_t e) {
  int32_t rank = t->reshard_rank, world = t->reshard_world;
  PX_CHECK(px_loader_reshard(t->train_loader, rank, world));
  t->reshard_world = 0;
  int64_t spe = px_loader_num_batches(t->train_loader);
  if (spe < 1)
    return px_set_error(PX_ERR_INVALID, "the training shard of rank %d of %d has fewer samples "
                        "than one batch of %d", (int)rank, (int)world, t->cfg.batch);
  t->steps_per_epoch = spe;
  t->epoch_base = e;
  t->base_step = t->global_step;
  px_log(PX_LOG_INFO, "epoch %lld on: rank %d of %d, %lld steps per epoch", (long long)e,
         (int)rank, (int)world, (long long)spe);
  return PX_OK;
}

/* Begins the next epoch of the px_trainer_steps stream, with the shard of
 * a pending px_trainer_reshard. */
static px_status_t px__begin_stream_epoch(px_trainer_t *t) {
  int64_t e = px__epoch_at(t);
  if (t->reshard_world > 0) PX_CHECK(px__apply_reshard(t, e));
  t->cursor_epoch = e;
  return px_loader_begin_epoch(t->train_loader, e);
}

px_status_t px_trainer_reshard(px_trainer_t *t, int32_t rank, int32_t world_size) {
  PX_REQUIRE(world_size >= 1 && rank >= 0 && rank < world_size,
             "px_trainer_reshard: rank %d of world size %d", (int)rank, (int)world_size);
  PX_CHECK(px_loader_reshard(t->test_loader, rank, world_size));
  t->reshard_rank = rank;
  t->reshard_world = world_size;
  /* between epochs already: from the one that begins next */
  return t->cursor_epoch < 0 ? px__apply_reshard(t, px__epoch_at(t)) : PX_OK;
}

void px__trainer_stream(const px_trainer_t *t, int64_t s[4]) {
  s[0] = t->global_step;
  s[1] = t->cursor_epoch >= 0 ? t->cursor_epoch : px__epoch_at(t);
  s[2] = t->cursor_epoch >= 0 ? t->steps_per_epoch - px_loader_position(t->train_loader) : 0;
  if (s[2] < 0) s[2] = 0;
  s[3] = t->cursor_epoch >= 0 ? 0 : 1; /* between epochs: s[1] begins next */
}

px_status_t px__trainer_follow(px_trainer_t *t, const int64_t s[4], int32_t rank,
                               int32_t world_size) {
  PX_REQUIRE(s[0] >= 0 && s[1] >= 0 && s[2] >= 0,
             "trainer stream %lld/%lld/%lld to follow", (long long)s[0], (long long)s[1],
             (long long)s[2]);
  if (t->cursor_epoch >= 0) PX_CHECK(px_loader_end_epoch(t->train_loader));
  t->cursor_epoch = -1;
  PX_CHECK(px_trainer_reshard(t, rank, world_size)); /* at once: between epochs */
  t->global_step = s[0];
  t->epoch_base = s[1];
  t->base_step = s[0];
  if (s[3] || s[2] == 0) {
    if (s[2] == 0 && !s[3]) t->epoch_base = s[1] + 1; /* its last step was taken */
    return PX_OK;
  }
  /* mid-epoch: this shard's epoch ends where the others' does, when it is
   * long enough (else it ends first and the next one begins early) */
  int64_t q = t->steps_per_epoch - s[2];
  if (q < 0) q = 0;
  t->base_step = s[0] - q;
  t->cursor_epoch = s[1];
  return px_loader_begin_epoch_at(t->train_loader, s[1], q);
}

double px__trainer_epochs(const px_trainer_t *t) {
  return (double)t->epoch_base +
         (double)(t->global_step - t->base_step) / (double)t->steps_per_epoch;
}

px_status_t px_trainer_steps(px_trainer_t *t, int64_t n, px_epoch_stats_t *out) {
  memset(out, 0, sizeof *out);
  px_model_t *m = t->step_model ? t->step_model : t->model;
  px_sgd_t *sgd = t->step_sgd ? t->step_sgd : t->sgd;
  double t0 = px__now(), wait = 0, loss_sum = 0;
  int64_t correct_sum = 0;
  px_status_t st = PX_OK;
  while (out->steps < n) {
    if (t->cursor_epoch < 0) PX_CHECK(px__begin_stream_epoch(t));
    px_batch_t b;
    double w0 = px__now();
    px_status_t r = px_loader_next(t->train_loader, &b);
    wait += px__now() - w0;
    if (r < 0) return r;
    if (r == 0) { /* epoch over: the next step starts the next one */
      px_loader_end_epoch(t->train_loader);
      t->cursor_epoch = -1;
      continue;
    }
    px_sgd_set_lr(sgd, px_trainer_lr_at(t, t->global_step));
    float loss;
    int64_t correct;
    PX_CHECK(px_model_train_step(m, b.x, b.y, &loss, &correct));
    if (t->hook) PX_CHECK(t->hook(t->hook_ctx, m));
    PX_CHECK(px_sgd_step(sgd));
    if (!isfinite(loss))
      return px_set_error(PX_ERR_INVALID, "training diverged: loss is %g at step %lld", loss,
                          (long long)t->global_step);
    out->epoch = t->cursor_epoch;
    out->steps++;
    t->global_step++;
    out->samples += b.n;
    loss_sum += (double)loss * b.n;
    correct_sum += correct;
  }
  px__stats_close(out, t0, wait, loss_sum, correct_sum);
  return st;
}

/* The calibration reads the batches training takes next: from where the
 * stream stands in its epoch (between epochs: the next one, with the shard
 * it has now), wrapping to that epoch's start, and puts the stream back.
 * Taking them from the stream instead ended its epochs early, and as an
 * epoch's number follows the optimiser steps, the same permutation began
 * again: with a calibration of 20 batches every 40 steps, a 2-epoch job's
 * 11 took 220 of its 468 batches' worth, and what was trained depended on
 * eval_every. */
px_status_t px_trainer_calibrate_with(px_trainer_t *t, px_train_batch_fn fn,
                                     px_bn_momentum_fn mom, void *ctx, int64_t n) {
  int64_t pos[3];
  px_trainer_position(t, pos);
  int64_t epoch = pos[1];
  px_status_t st = PX_OK;
  if (epoch < 0) st = px_loader_begin_epoch(t->train_loader, epoch = px__epoch_at(t));
  for (int64_t i = 0; i < n && st >= 0; i++) {
    px_batch_t b;
    st = px_loader_next(t->train_loader, &b);
    if (st == 0) { /* the epoch's end: its first batches (an epoch has one at least) */
      if ((st = px_loader_end_epoch(t->train_loader)) >= 0)
        st = px_loader_begin_epoch_at(t->train_loader, epoch, 0);
      i--;
      continue;
    }
    if (st < 0) break;
    if (mom) mom(ctx, (float)(1.0 / (double)(i + 1))); /* batch i + 1 of the average */
    st = fn(ctx, b.x);
  }
  if (mom) mom(ctx, 0.0f); /* the layers' own momentum again, also after a failure */
  px_status_t back = px_trainer_set_position(t, pos);
  return st < 0 ? st : back;
}

static px_status_t px__forward_train(void *ctx, const float *x) {
  return px_model_forward_train(ctx, x);
}

static void px__model_momentum(void *ctx, float momentum) {
  px_model_set_bn_momentum(ctx, momentum);
}

px_status_t px_trainer_calibrate_bn(px_trainer_t *t, int64_t n) {
  return px_trainer_calibrate_with(t, px__forward_train, px__model_momentum, t->model, n);
}

static px_status_t px__eval_model(void *ctx, const float *x, const int32_t *y, int32_t n,
                                  double *loss_sum, int64_t *correct) {
  return n ? px_model_eval_batch(ctx, x, y, n, loss_sum, correct) : PX_OK; /* n = 0: the end */
}

px_status_t px_trainer_evaluate(px_trainer_t *t, px_eval_stats_t *out) {
  return px_trainer_evaluate_with(t, px__eval_model, t->model, out);
}

px_status_t px_trainer_evaluate_with(px_trainer_t *t, px_eval_batch_fn fn, void *ctx,
                                     px_eval_stats_t *out) {
  memset(out, 0, sizeof *out);
  double t0 = px__now(), loss = 0;
  int64_t correct = 0;
  PX_CHECK(px_loader_begin_epoch(t->test_loader, 0));
  px_status_t st = PX_OK;
  for (;;) {
    px_batch_t b;
    px_status_t r = px_loader_next(t->test_loader, &b);
    if (r <= 0) {
      st = r;
      break;
    }
    PX_CHECK_GOTO(fn(ctx, b.x, b.y, b.n, &loss, &correct), st, end);
    out->samples += b.n;
  }
  if (st == PX_OK) st = fn(ctx, NULL, NULL, 0, &loss, &correct); /* the deferred samples */
end:
  px_loader_end_epoch(t->test_loader);
  out->seconds = px__now() - t0;
  if (out->samples > 0) {
    out->loss = loss / out->samples;
    out->accuracy = (double)correct / out->samples;
  }
  return st;
}
