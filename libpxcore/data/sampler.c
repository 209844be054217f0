/* From data set samples to float batches: sharding of an epoch's order across
 * ranks, the per-epoch permutation, the crop/flip augmentation and the
 * per-channel normalisation, plus the synthetic input stream for benchmarks.
 *
 * Nothing here keeps state: every random choice is a function of
 * (seed, epoch, sample index) or (seed, batch index), so a batch is the same
 * whichever thread builds it and whenever it does. */
#include <math.h>
#include <string.h>

#include "data_int.h"
#include "px_check.h"

px_status_t px_data_shard(int64_t n, int32_t rank, int32_t world, px_shard_mode_t mode,
                          int64_t *begin, int64_t *count) {
  PX_REQUIRE(begin && count, "px_data_shard: NULL output");
  PX_REQUIRE(n >= 0, "shard of %lld samples: the count must not be negative", (long long)n);
  PX_REQUIRE(world >= 1, "shard: world size %d must be positive", world);
  PX_REQUIRE(rank >= 0 && rank < world, "shard: rank %d out of range 0..%d", rank, world - 1);
  PX_REQUIRE(mode == PX_SHARD_SPREAD || mode == PX_SHARD_EQUAL, "shard: unknown mode %d",
             (int)mode);
  int64_t base = n / world, rem = n % world;
  if (mode == PX_SHARD_EQUAL) {
    *begin = (int64_t)rank * base;
    *count = base;
  } else {
    *begin = (int64_t)rank * base + (rank < rem ? rank : rem);
    *count = base + (rank < rem ? 1 : 0);
  }
  return PX_OK;
}

px_status_t px_data_shuffle(int64_t n, uint64_t seed, int64_t epoch, uint32_t *perm) {
  PX_REQUIRE(n >= 0 && n <= (int64_t)UINT32_MAX, "shuffle of %lld samples: must be in 0..%u",
             (long long)n, UINT32_MAX);
  PX_REQUIRE(perm != NULL || n == 0, "px_data_shuffle: perm is NULL");
  for (int64_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
  px__rng_t rng;
  px__rng_seed(&rng, px__key(PX__DOMAIN_SHUFFLE, seed, (uint64_t)epoch, 0));
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)px__rng_below(&rng, (uint64_t)i + 1);
    uint32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  return PX_OK;
}

static int px__augment_active(const px_augment_t *aug) {
  return aug && (aug->crop_pad > 0 || aug->flip || aug->rrc_scale > 0.0f);
}

/* torchvision's RandomResizedCrop in fractions of the image: up to ten draws
 * of an area fraction in [scale, 1] and a log-uniform aspect ratio in
 * [3/4, 4/3]; the first that fits is placed uniformly, else the whole
 * image. Its own stream, so that the crop/flip draws are unchanged. */
static void px__rrc_choose(float scale, uint64_t h, px_rect_t *r) {
  px__rng_t rng;
  px__rng_seed(&rng, px__mix64(h ^ 0x5252435f52454354ull)); /* "RRC_RECT" */
  double lo = log(3.0 / 4.0), hi = log(4.0 / 3.0);
  for (int attempt = 0; attempt < 10; attempt++) {
    double area = scale + (1.0 - scale) * px__rng_uniform(&rng);
    double ar = exp(lo + (hi - lo) * px__rng_uniform(&rng));
    double w = sqrt(area * ar), hh = sqrt(area / ar);
    if (w <= 1.0 && hh <= 1.0) {
      r->x = (1.0 - w) * px__rng_uniform(&rng);
      r->y = (1.0 - hh) * px__rng_uniform(&rng);
      r->w = w;
      r->h = hh;
      return;
    }
  }
  r->x = r->y = 0.0;
  r->w = r->h = 1.0;
}

void px_augment_choose(const px_augment_t *aug, uint64_t seed, int64_t epoch, int64_t index,
                       px_crop_flip_t *out) {
  int32_t pad = aug && aug->crop_pad > 0 ? aug->crop_pad : 0;
  memset(out, 0, sizeof *out); /* padding too: callers compare choices bytewise */
  out->dy = out->dx = pad;
  out->flip = 0;
  out->rect.x = out->rect.y = 0.0;
  out->rect.w = out->rect.h = 1.0;
  if (!px__augment_active(aug)) return;
  uint64_t h = px__key(PX__DOMAIN_AUGMENT, seed, (uint64_t)epoch, (uint64_t)index);
  if (aug->rrc_scale > 0.0f) px__rrc_choose(aug->rrc_scale, h, &out->rect);
  if (pad > 0) {
    uint64_t range = 2 * (uint64_t)pad + 1;
    out->dy = (int32_t)(((h >> 32) * range) >> 32);
    out->dx = (int32_t)(((h & 0xffffffffu) * range) >> 32);
  }
  if (aug->flip) out->flip = (int32_t)(px__mix64(h) >> 63);
}

void px_augment_apply_u8(const uint8_t *src, int32_t c, int32_t h, int32_t w, int32_t pad,
                         const px_crop_flip_t *cf, uint8_t *dst) {
  for (int32_t ch = 0; ch < c; ch++) {
    const uint8_t *s = src + (size_t)ch * h * w;
    uint8_t *d = dst + (size_t)ch * h * w;
    for (int32_t y = 0; y < h; y++) {
      int32_t sy = y + cf->dy - pad;
      for (int32_t x = 0; x < w; x++) {
        int32_t sx = (cf->flip ? w - 1 - x : x) + cf->dx - pad;
        int inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
        d[(size_t)y * w + x] = inside ? s[(size_t)sy * w + sx] : 0;
      }
    }
  }
}

void px_data_normalize_u8(const uint8_t *src, int32_t c, int64_t hw, const float *mean,
                          const float *std, float *dst) {
  for (int32_t ch = 0; ch < c; ch++) {
    /* (v/255 - m)/s as one multiply-add; the same expression as the batch path. */
    float a = 1.0f / (255.0f * std[ch]), b = -mean[ch] / std[ch];
    const uint8_t *s = src + (size_t)ch * (size_t)hw;
    float *d = dst + (size_t)ch * (size_t)hw;
    for (int64_t i = 0; i < hw; i++) d[i] = (float)s[i] * a + b;
  }
}

/* One augmented, normalised image: the crop and flip folded into the read. */
static void px__sample_to_float(const uint8_t *src, int32_t c, int32_t h, int32_t w, int32_t pad,
                                const px_crop_flip_t *cf, const float *a, const float *b,
                                float *dst) {
  for (int32_t ch = 0; ch < c; ch++) {
    const uint8_t *s = src + (size_t)ch * h * w;
    float *d = dst + (size_t)ch * h * w;
    float zero = b[ch]; /* a padding pixel is 0 before normalisation */
    for (int32_t y = 0; y < h; y++) {
      int32_t sy = y + cf->dy - pad;
      float *drow = d + (size_t)y * w;
      if (sy < 0 || sy >= h) {
        for (int32_t x = 0; x < w; x++) drow[x] = zero;
        continue;
      }
      const uint8_t *srow = s + (size_t)sy * w;
      int32_t shift = cf->dx - pad;
      for (int32_t x = 0; x < w; x++) {
        int32_t sx = (cf->flip ? w - 1 - x : x) + shift;
        drow[x] = (sx >= 0 && sx < w) ? (float)srow[sx] * a[ch] + b[ch] : zero;
      }
    }
  }
}

px_status_t px_data_fill_batch(const px_dataset_t *ds, const uint32_t *indices, int32_t n,
                               const px_augment_t *aug, const float *mean, const float *std,
                               uint64_t seed, int64_t epoch, float *x, int32_t *y) {
  PX_REQUIRE(ds && mean && std, "px_data_fill_batch: NULL argument");
  PX_REQUIRE(n >= 0, "px_data_fill_batch: negative batch size %d", n);
  PX_REQUIRE(n == 0 || (indices && x && y), "px_data_fill_batch: NULL buffer");
  PX_REQUIRE(!ds->stream, "px_data_fill_batch: %s is streamed (decoded by a loader, not held "
             "in memory)", ds->name);
  const px_dataset_info_t *info = &ds->info;
  int32_t c = info->channels, h = info->height, w = info->width;
  size_t img = (size_t)c * h * w;
  float a[PX_DATA_MAX_CHANNELS], b[PX_DATA_MAX_CHANNELS];
  for (int32_t ch = 0; ch < c; ch++) {
    PX_REQUIRE(std[ch] > 0.0f, "normalisation std[%d] = %g: must be positive", ch,
               (double)std[ch]);
    a[ch] = 1.0f / (255.0f * std[ch]);
    b[ch] = -mean[ch] / std[ch];
  }
  int active = px__augment_active(aug);
  int rrc = active && aug->rrc_scale > 0.0f;
  int32_t pad = active && aug->crop_pad > 0 ? aug->crop_pad : 0;
  for (int32_t i = 0; i < n; i++) {
    uint32_t k = indices[i];
    PX_REQUIRE((int64_t)k < info->n, "batch sample %d: index %u out of range 0..%lld", i, k,
               (long long)info->n - 1);
    const uint8_t *src = ds->images + (size_t)k * img;
    float *dst = x + (size_t)i * img;
    y[i] = ds->labels[k];
    if (active) {
      px_crop_flip_t cf;
      px_augment_choose(aug, seed, epoch, k, &cf);
      if (rrc) {
        px_rect_t r = {cf.rect.x * w, cf.rect.y * h, cf.rect.w * w, cf.rect.h * h};
        px_image_resample(src, w, h, c, w, 1, h * w, &r, w, h, cf.flip, a, b, dst);
      } else {
        px__sample_to_float(src, c, h, w, pad, &cf, a, b, dst);
      }
    } else {
      for (int32_t ch = 0; ch < c; ch++) {
        const uint8_t *s = src + (size_t)ch * h * w;
        float *d = dst + (size_t)ch * h * w;
        for (size_t p = 0; p < (size_t)h * w; p++) d[p] = (float)s[p] * a[ch] + b[ch];
      }
    }
  }
  return PX_OK;
}

/* ---- synthetic stream ----------------------------------------------------- */

void px_synth_config_default(px_synth_config_t *out) {
  memset(out, 0, sizeof *out);
  out->channels = 3;
  out->height = 32;
  out->width = 32;
  out->num_classes = 10;
  out->dist = PX_SYNTH_UNIFORM;
  out->loc = 0.0f;
  out->scale = 1.0f;
  out->seed = 0;
}

px_status_t px_synth_batch(const px_synth_config_t *cfg, int64_t batch_index, int32_t n,
                           float *x, int32_t *y) {
  PX_REQUIRE(cfg != NULL, "px_synth_batch: config is NULL");
  PX_REQUIRE(cfg->channels >= 1 && cfg->height >= 1 && cfg->width >= 1,
             "synthetic input shape %dx%dx%d: every dimension must be positive", cfg->channels,
             cfg->height, cfg->width);
  PX_REQUIRE(cfg->num_classes >= 1, "synthetic classes %d: must be positive", cfg->num_classes);
  PX_REQUIRE(cfg->dist == PX_SYNTH_UNIFORM || cfg->dist == PX_SYNTH_NORMAL,
             "synthetic distribution %d unknown", (int)cfg->dist);
  PX_REQUIRE(cfg->scale >= 0.0f, "synthetic scale %g: must not be negative", (double)cfg->scale);
  PX_REQUIRE(n >= 0, "synthetic batch size %d: must not be negative", n);
  PX_REQUIRE(n == 0 || (x && y), "px_synth_batch: NULL buffer");
  px__rng_t rng;
  px__rng_seed(&rng, px__key(PX__DOMAIN_SYNTH, cfg->seed, (uint64_t)batch_index, 0));
  size_t total = (size_t)n * (size_t)cfg->channels * (size_t)cfg->height * (size_t)cfg->width;
  double loc = cfg->loc, scale = cfg->scale;
  if (cfg->dist == PX_SYNTH_UNIFORM) {
    for (size_t i = 0; i < total; i++) {
      x[i] = (float)(loc + scale * (2.0 * px__rng_uniform(&rng) - 1.0));
    }
  } else {
    /* Box-Muller, both outputs of each pair used. */
    for (size_t i = 0; i < total; i += 2) {
      double u1 = px__rng_uniform(&rng), u2 = px__rng_uniform(&rng);
      double r = sqrt(-2.0 * log(1.0 - u1)); /* 1 - u1 is in (0, 1] */
      double t = 6.283185307179586 * u2;
      x[i] = (float)(loc + scale * r * cos(t));
      if (i + 1 < total) x[i + 1] = (float)(loc + scale * r * sin(t));
    }
  }
  for (int32_t i = 0; i < n; i++) {
    y[i] = (int32_t)px__rng_below(&rng, (uint64_t)cfg->num_classes);
  }
  return PX_OK;
}
