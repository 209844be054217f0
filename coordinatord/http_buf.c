/* The response buffer's writers shared by the HTTP handlers (http.h): a
 * Prometheus label value and sample value. Below the listener (http.c) and
 * the handlers that use them (http_metrics.c), so that neither calls the
 * other back. */
#include <math.h>

#include "prunex/text.h"

#include "http.h"

void coord_hb_plabel(coord_hbuf_t *b, const char *s) {
  for (const char *p = s ? s : ""; *p; p++) {
    if (*p == '\\') px_buf_put(b, "\\\\", 2);
    else if (*p == '"') px_buf_put(b, "\\\"", 2);
    else if (*p == '\n') px_buf_put(b, "\\n", 2);
    else px_buf_put(b, p, 1);
  }
}

void coord_hb_pnum(coord_hbuf_t *b, double v) {
  if (isnan(v)) px_buf_put(b, "NaN", 3);
  else if (isinf(v)) px_buf_printf(b, "%sInf", v > 0 ? "+" : "-");
  else if (v == floor(v) && fabs(v) < 9e15) px_buf_printf(b, "%.0f", v);
  else px_buf_printf(b, "%.9g", v);
}
