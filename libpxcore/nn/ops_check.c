/* The argument contract every backend's ops check their tensors against
 * (nn/px_ops_int.h): a tensor given to an op has storage and the op's spec,
 * with a message naming the op and the argument when it does not. Below
 * the dispatcher (ops_dispatch.c) and the backends, which both use it. */
#include <stdio.h>

#include "nn/px_ops_int.h"
#include "prunex/ops_internal.h"
#include "px_check.h"

static void px__spec_str(const px_tensor_t *t, char *buf, size_t len) {
  char dev[16];
  int k = snprintf(buf, len, "%s dtype %d [", px_device_str(t->device, dev, sizeof dev),
                   (int)t->dtype);
  for (int i = 0; i < t->ndim && k > 0 && (size_t)k < len; i++)
    k += snprintf(buf + k, len - (size_t)k, i ? ",%lld" : "%lld", (long long)t->dims[i]);
  if (k > 0 && (size_t)k < len) snprintf(buf + k, len - (size_t)k, "] %s", px_layout_name(t->layout));
}

/* px__ops_check_tensor with the message's subject in two words (op, arg),
 * joined only when a check fails: the calls allocate and format nothing. */
px_status_t px__ops_check_as(const px_tensor_t *t, const px_tensor_t *spec, const char *op,
                             const char *arg) {
  const char *sep = arg ? " " : "";
  if (!arg) arg = "";
  if (!t) return px_set_error(PX_ERR_INVALID, "%s%s%s is NULL", op, sep, arg);
  if (!t->data) return px_set_error(PX_ERR_INVALID, "%s%s%s has no storage", op, sep, arg);
  if (!px_tensor_same_spec(t, spec)) {
    char a[112], b[112];
    px__spec_str(t, a, sizeof a);
    px__spec_str(spec, b, sizeof b);
    return px_set_error(PX_ERR_INVALID, "%s%s%s: tensor %s does not match the op's %s", op, sep,
                        arg, a, b);
  }
  if (t->nbytes < spec->nbytes)
    return px_set_error(PX_ERR_INVALID, "%s%s%s: storage of %zu bytes, %zu needed", op, sep, arg,
                        t->nbytes, spec->nbytes);
  return PX_OK;
}

px_status_t px__ops_check_tensor(const px_tensor_t *t, const px_tensor_t *spec, const char *what) {
  return px__ops_check_as(t, spec, what, NULL);
}

/* ---- the argument contract of the layers with weights --------------------------- */

/* b in the forward direction, db in the backward one. */
static px_status_t px__wlayer_check_bias(const px__wlayer_t *l, const px_tensor_t *b, int forward) {
  if (l->bias) return px__ops_check_as(b, &l->b_spec, l->name, forward ? "forward b" : "backward db");
  if (b == NULL) return PX_OK;
  if (forward)
    return px_set_error(PX_ERR_INVALID, "%s forward: bias given to a %s without bias", l->name,
                        l->noun);
  return px_set_error(PX_ERR_INVALID, "%s backward: bias gradient asked of a %s without bias",
                      l->name, l->noun);
}

px_status_t px__wlayer_check_forward(const px__wlayer_t *l, const px_tensor_t *y,
                                     const px_tensor_t *x, const px_tensor_t *w,
                                     const px_tensor_t *b) {
  PX_CHECK(px__ops_check_as(x, &l->x_spec, l->name, "forward x"));
  PX_CHECK(px__ops_check_as(w, &l->w_spec, l->name, "forward w"));
  PX_CHECK(px__ops_check_as(y, &l->y_spec, l->name, "forward y"));
  return px__wlayer_check_bias(l, b, 1);
}

px_status_t px__wlayer_check_backward_data(const px__wlayer_t *l, const px_tensor_t *dx,
                                           const px_tensor_t *dy, const px_tensor_t *w) {
  PX_CHECK(px__ops_check_as(dy, &l->y_spec, l->name, "backward dy"));
  PX_CHECK(px__ops_check_as(w, &l->w_spec, l->name, "backward w"));
  return px__ops_check_as(dx, &l->x_spec, l->name, "backward dx");
}

px_status_t px__wlayer_check_backward_weights(const px__wlayer_t *l, const px_tensor_t *dw,
                                              const px_tensor_t *db, const px_tensor_t *x,
                                              const px_tensor_t *dy) {
  PX_CHECK(px__ops_check_as(x, &l->x_spec, l->name, "backward x"));
  PX_CHECK(px__ops_check_as(dy, &l->y_spec, l->name, "backward dy"));
  PX_CHECK(px__ops_check_as(dw, &l->w_spec, l->name, "backward dw"));
  return px__wlayer_check_bias(l, db, 0);
}
