/* Reference layer ops in naive C (see px_ref.h): the ground truth the
 * oneDNN backend is tested against. Loops follow the textbook definitions
 * one output element at a time, accumulating in double. */
#include <math.h>
#include <string.h>

#include "nn/cpu/px_ref.h"
#include "prunex/ops.h"

/* ---- convolution ------------------------------------------------------------ */

void px__ref_conv_shape(px__ref_conv_t *s) {
  if (s->dilh < 1) s->dilh = 1;
  if (s->dilw < 1) s->dilw = 1;
  s->oh = (s->h + 2 * s->ph + s->xb - s->dilh * (s->kh - 1) - 1) / s->sh + 1;
  s->ow = (s->w + 2 * s->pw + s->xr - s->dilw * (s->kw - 1) - 1) / s->sw + 1;
}

#define X4(a, b, c, d, B, C, D) ((((a) * (B) + (b)) * (C) + (c)) * (D) + (d))

void px__ref_conv2d_forward(float *y, const float *x, const float *w, const float *b,
                            const px__ref_conv_t *s) {
  for (int64_t n = 0; n < s->n; n++)
    for (int64_t o = 0; o < s->c_out; o++)
      for (int64_t oy = 0; oy < s->oh; oy++)
        for (int64_t ox = 0; ox < s->ow; ox++) {
          double acc = b ? b[o] : 0.0;
          for (int64_t c = 0; c < s->c_in; c++)
            for (int64_t i = 0; i < s->kh; i++) {
              int64_t iy = oy * s->sh - s->ph + i * s->dilh;
              if (iy < 0 || iy >= s->h) continue;
              for (int64_t j = 0; j < s->kw; j++) {
                int64_t ix = ox * s->sw - s->pw + j * s->dilw;
                if (ix < 0 || ix >= s->w) continue;
                acc += (double)x[X4(n, c, iy, ix, s->c_in, s->h, s->w)] *
                       w[X4(o, c, i, j, s->c_in, s->kh, s->kw)];
              }
            }
          y[X4(n, o, oy, ox, s->c_out, s->oh, s->ow)] = (float)acc;
        }
}

void px__ref_conv2d_backward_data(float *dx, const float *dy, const float *w,
                                  const px__ref_conv_t *s) {
  /* Gather form: each input element sums the outputs whose window covers it. */
  for (int64_t n = 0; n < s->n; n++)
    for (int64_t c = 0; c < s->c_in; c++)
      for (int64_t iy = 0; iy < s->h; iy++)
        for (int64_t ix = 0; ix < s->w; ix++) {
          double acc = 0.0;
          for (int64_t i = 0; i < s->kh; i++) {
            int64_t ty = iy + s->ph - i * s->dilh;
            if (ty < 0 || ty % s->sh) continue;
            int64_t oy = ty / s->sh;
            if (oy >= s->oh) continue;
            for (int64_t j = 0; j < s->kw; j++) {
              int64_t tx = ix + s->pw - j * s->dilw;
              if (tx < 0 || tx % s->sw) continue;
              int64_t ox = tx / s->sw;
              if (ox >= s->ow) continue;
              for (int64_t o = 0; o < s->c_out; o++)
                acc += (double)dy[X4(n, o, oy, ox, s->c_out, s->oh, s->ow)] *
                       w[X4(o, c, i, j, s->c_in, s->kh, s->kw)];
            }
          }
          dx[X4(n, c, iy, ix, s->c_in, s->h, s->w)] = (float)acc;
        }
}

void px__ref_conv2d_backward_weights(float *dw, float *db, const float *x, const float *dy,
                                     const px__ref_conv_t *s) {
  for (int64_t o = 0; o < s->c_out; o++) {
    for (int64_t c = 0; c < s->c_in; c++)
      for (int64_t i = 0; i < s->kh; i++)
        for (int64_t j = 0; j < s->kw; j++) {
          double acc = 0.0;
          for (int64_t n = 0; n < s->n; n++)
            for (int64_t oy = 0; oy < s->oh; oy++) {
              int64_t iy = oy * s->sh - s->ph + i * s->dilh;
              if (iy < 0 || iy >= s->h) continue;
              for (int64_t ox = 0; ox < s->ow; ox++) {
                int64_t ix = ox * s->sw - s->pw + j * s->dilw;
                if (ix < 0 || ix >= s->w) continue;
                acc += (double)x[X4(n, c, iy, ix, s->c_in, s->h, s->w)] *
                       dy[X4(n, o, oy, ox, s->c_out, s->oh, s->ow)];
              }
            }
          dw[X4(o, c, i, j, s->c_in, s->kh, s->kw)] = (float)acc;
        }
    if (db) {
      double acc = 0.0;
      for (int64_t n = 0; n < s->n; n++)
        for (int64_t k = 0; k < s->oh * s->ow; k++) acc += dy[(n * s->c_out + o) * s->oh * s->ow + k];
      db[o] = (float)acc;
    }
  }
}

/* ---- batch normalisation ---------------------------------------------------- */

void px__ref_batchnorm_forward_train(float *y, float *mean, float *var, const float *x,
                                     const float *scale, const float *shift, float *running_mean,
                                     float *running_var, int64_t n, int64_t c, int64_t h, int64_t w,
                                     float eps, float momentum, int relu) {
  const int64_t hw = h * w, m = n * hw;
  for (int64_t ch = 0; ch < c; ch++) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
      for (int64_t k = 0; k < hw; k++) sum += x[(i * c + ch) * hw + k];
    const double mu = sum / (double)m;
    double sq = 0.0;
    for (int64_t i = 0; i < n; i++)
      for (int64_t k = 0; k < hw; k++) {
        double d = x[(i * c + ch) * hw + k] - mu;
        sq += d * d;
      }
    const double v = sq / (double)m;
    const double rstd = 1.0 / sqrt(v + (double)eps);
    for (int64_t i = 0; i < n; i++)
      for (int64_t k = 0; k < hw; k++) {
        int64_t idx = (i * c + ch) * hw + k;
        double out = scale[ch] * (x[idx] - mu) * rstd + shift[ch];
        y[idx] = (float)(relu && out < 0.0 ? 0.0 : out);
      }
    mean[ch] = (float)mu;
    var[ch] = (float)v;
    running_mean[ch] = (float)((1.0 - momentum) * running_mean[ch] + momentum * mu);
    running_var[ch] =
        (float)((1.0 - momentum) * running_var[ch] + momentum * v * (double)m / (double)(m - 1));
  }
}

void px__ref_batchnorm_forward_infer(float *y, const float *x, const float *scale,
                                     const float *shift, const float *running_mean,
                                     const float *running_var, int64_t n, int64_t c, int64_t h,
                                     int64_t w, float eps, int relu) {
  const int64_t hw = h * w;
  for (int64_t i = 0; i < n; i++)
    for (int64_t ch = 0; ch < c; ch++) {
      const double rstd = 1.0 / sqrt((double)running_var[ch] + (double)eps);
      for (int64_t k = 0; k < hw; k++) {
        int64_t idx = (i * c + ch) * hw + k;
        double out = scale[ch] * (x[idx] - (double)running_mean[ch]) * rstd + shift[ch];
        y[idx] = (float)(relu && out < 0.0 ? 0.0 : out);
      }
    }
}

void px__ref_batchnorm_backward(float *dx, float *dscale, float *dshift, const float *dy,
                                const float *x, const float *scale, const float *shift,
                                const float *mean, const float *var, int64_t n, int64_t c,
                                int64_t h, int64_t w, float eps, int relu) {
  const int64_t hw = h * w, m = n * hw;
  for (int64_t ch = 0; ch < c; ch++) {
    const double mu = mean[ch], rstd = 1.0 / sqrt((double)var[ch] + (double)eps);
    /* g = dL/d(bn output): the ReLU mask is recomputed from the output. */
    double sg = 0.0, sgx = 0.0;
    for (int64_t i = 0; i < n; i++)
      for (int64_t k = 0; k < hw; k++) {
        int64_t idx = (i * c + ch) * hw + k;
        double xhat = (x[idx] - mu) * rstd;
        double g = dy[idx];
        if (relu && scale[ch] * xhat + shift[ch] <= 0.0) g = 0.0;
        sg += g;
        sgx += g * xhat;
      }
    dshift[ch] = (float)sg;
    dscale[ch] = (float)sgx;
    for (int64_t i = 0; i < n; i++)
      for (int64_t k = 0; k < hw; k++) {
        int64_t idx = (i * c + ch) * hw + k;
        double xhat = (x[idx] - mu) * rstd;
        double g = dy[idx];
        if (relu && scale[ch] * xhat + shift[ch] <= 0.0) g = 0.0;
        dx[idx] = (float)(scale[ch] * rstd * (g - sg / (double)m - xhat * sgx / (double)m));
      }
  }
}

/* ---- ReLU and add --------------------------------------------------------------- */

void px__ref_relu_forward(float *y, const float *x, size_t count) {
  for (size_t i = 0; i < count; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void px__ref_relu_backward(float *dx, const float *dy, const float *y, size_t count) {
  for (size_t i = 0; i < count; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void px__ref_add(float *y, const float *a, const float *b, size_t count, int relu) {
  for (size_t i = 0; i < count; i++) {
    float v = a[i] + b[i];
    y[i] = relu && v < 0.0f ? 0.0f : v;
  }
}

/* ---- pooling ---------------------------------------------------------------------- */

/* One axis's output size, PyTorch's ceil rule with ceil. */
static int64_t px__ref_pool_out(int64_t in, int64_t k, int64_t st, int64_t p0, int64_t p1,
                                int64_t d, int ceil) {
  const int64_t span = in + p0 + p1 - d * (k - 1) - 1;
  int64_t o = (ceil ? (span + st - 1) / st : span / st) + 1;
  if (ceil && (o - 1) * st >= in + p0) o--;
  return o;
}

void px__ref_pool_shape(px__ref_pool_t *s) {
  if (s->dilh < 1) s->dilh = 1;
  if (s->dilw < 1) s->dilw = 1;
  s->oh = px__ref_pool_out(s->h, s->kh, s->sh, s->ph, s->ph + s->xb, s->dilh, s->ceil);
  s->ow = px__ref_pool_out(s->w, s->kw, s->sw, s->pw, s->pw + s->xr, s->dilw, s->ceil);
}

/* Window (oy, ox)'s positions: *npos of them in the padded input (for
 * PX_POOL_AVG), the real ones' indices into idx (first in row-major order),
 * their count returned. */
static int64_t px__window(const px__ref_pool_t *s, int64_t oy, int64_t ox, int64_t *idx,
                          int64_t *npos) {
  int64_t n = 0;
  *npos = 0;
  for (int64_t i = 0; i < s->kh; i++) {
    const int64_t iy = oy * s->sh - s->ph + i * s->dilh;
    if (iy >= s->h + s->ph + s->xb) continue;
    for (int64_t j = 0; j < s->kw; j++) {
      const int64_t ix = ox * s->sw - s->pw + j * s->dilw;
      if (ix >= s->w + s->pw + s->xr) continue;
      ++*npos;
      if (iy >= 0 && iy < s->h && ix >= 0 && ix < s->w) idx[n++] = iy * s->w + ix;
    }
  }
  return n;
}

void px__ref_pool2d_forward(float *y, const float *x, const px__ref_pool_t *s) {
  int64_t idx[4096], npos; /* windows of at most 4096 positions */
  for (int64_t p = 0; p < s->n * s->c; p++) {
    const float *xp = x + p * s->h * s->w;
    for (int64_t oy = 0; oy < s->oh; oy++)
      for (int64_t ox = 0; ox < s->ow; ox++) {
        const int64_t nr = px__window(s, oy, ox, idx, &npos);
        double acc = s->mode == PX_POOL_MAX ? -INFINITY : 0.0;
        for (int64_t e = 0; e < nr; e++) {
          double v = xp[idx[e]];
          if (s->mode == PX_POOL_MAX)
            acc = v > acc ? v : acc;
          else
            acc += v;
        }
        if (s->mode == PX_POOL_AVG) acc /= (double)npos;
        if (s->mode == PX_POOL_AVG_EXCLUDE_PAD) acc /= (double)nr;
        y[(p * s->oh + oy) * s->ow + ox] = (float)acc;
      }
  }
}

void px__ref_pool2d_backward(float *dx, const float *dy, const float *x, const px__ref_pool_t *s) {
  int64_t idx[4096], npos; /* windows of at most 4096 positions */
  memset(dx, 0, (size_t)(s->n * s->c * s->h * s->w) * sizeof *dx);
  for (int64_t p = 0; p < s->n * s->c; p++) {
    const float *xp = x + p * s->h * s->w;
    float *dxp = dx + p * s->h * s->w;
    for (int64_t oy = 0; oy < s->oh; oy++)
      for (int64_t ox = 0; ox < s->ow; ox++) {
        const int64_t nr = px__window(s, oy, ox, idx, &npos);
        const float g = dy[(p * s->oh + oy) * s->ow + ox];
        if (s->mode == PX_POOL_MAX) {
          int64_t best = idx[0];
          for (int64_t e = 1; e < nr; e++)
            if (xp[idx[e]] > xp[best]) best = idx[e];
          dxp[best] += g;
        } else {
          double div = s->mode == PX_POOL_AVG ? (double)npos : (double)nr;
          for (int64_t e = 0; e < nr; e++) dxp[idx[e]] += (float)(g / div);
        }
      }
  }
}

/* ---- fully connected ------------------------------------------------------------------- */

void px__ref_fc_forward(float *y, const float *x, const float *w, const float *b, int64_t n,
                        int64_t in, int64_t out) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t o = 0; o < out; o++) {
      double acc = b ? b[o] : 0.0;
      for (int64_t k = 0; k < in; k++) acc += (double)x[i * in + k] * w[o * in + k];
      y[i * out + o] = (float)acc;
    }
}

void px__ref_fc_backward_data(float *dx, const float *dy, const float *w, int64_t n, int64_t in,
                              int64_t out) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t k = 0; k < in; k++) {
      double acc = 0.0;
      for (int64_t o = 0; o < out; o++) acc += (double)dy[i * out + o] * w[o * in + k];
      dx[i * in + k] = (float)acc;
    }
}

void px__ref_fc_backward_weights(float *dw, float *db, const float *x, const float *dy, int64_t n,
                                 int64_t in, int64_t out) {
  for (int64_t o = 0; o < out; o++) {
    for (int64_t k = 0; k < in; k++) {
      double acc = 0.0;
      for (int64_t i = 0; i < n; i++) acc += (double)dy[i * out + o] * x[i * in + k];
      dw[o * in + k] = (float)acc;
    }
    if (db) {
      double acc = 0.0;
      for (int64_t i = 0; i < n; i++) acc += dy[i * out + o];
      db[o] = (float)acc;
    }
  }
}

/* ---- softmax cross-entropy --------------------------------------------------------------- */

void px__ref_softmax_ce(float *dlogits, double *loss, int64_t *correct, const float *logits,
                        const int32_t *labels, int64_t n, int64_t k) {
  double total = 0.0;
  int64_t hits = 0;
  for (int64_t i = 0; i < n; i++) {
    const float *row = logits + i * k;
    int64_t arg = 0;
    for (int64_t j = 1; j < k; j++)
      if (row[j] > row[arg]) arg = j;
    double sum = 0.0;
    for (int64_t j = 0; j < k; j++) sum += exp((double)row[j] - row[arg]);
    double lse = row[arg] + log(sum);
    total += lse - row[labels[i]];
    hits += arg == labels[i];
    if (dlogits)
      for (int64_t j = 0; j < k; j++)
        dlogits[i * k + j] = (float)((exp(row[j] - lse) - (j == labels[i])) / (double)n);
  }
  *loss = total / (double)n;
  *correct = hits;
}
