/* Human output of pxctl: tables sized to their contents, byte counts,
 * percentages, times and ages, and the state names users type. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "pxctl.h"

struct pxctl_table {
  int ncols;
  char **cells;        /* row-major; the first row is the header */
  size_t ncells, cap;
  int *right;          /* right-aligned columns */
};

pxctl_table_t *pxctl_table_create(int ncols, const char *const *headers) {
  pxctl_table_t *t = px_calloc(1, sizeof *t, "pxctl.table");
  if (!t) return NULL;
  t->ncols = ncols;
  t->right = px_calloc((size_t)ncols, sizeof *t->right, "pxctl.table.align");
  if (!t->right) {
    px_free(t);
    return NULL;
  }
  for (int i = 0; i < ncols; i++) {
    const char *h = headers[i];
    if (h[0] == '>') {
      t->right[i] = 1;
      h++;
    }
    pxctl_table_cell(t, "%s", h);
  }
  return t;
}

void pxctl_table_cell(pxctl_table_t *t, const char *fmt, ...) {
  if (!t) return;
  if (t->ncells == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 64;
    char **cells = px_realloc(t->cells, cap * sizeof *cells, "pxctl.table.cells");
    if (!cells) return;
    t->cells = cells;
    t->cap = cap;
  }
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = n >= 0 ? px_malloc((size_t)n + 1, "pxctl.table.cell") : NULL;
  if (s) vsnprintf(s, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  t->cells[t->ncells++] = s;
}

/* Display width: counts UTF-8 lead bytes, so names with accents align. */
static int pxctl__width(const char *s) {
  int w = 0;
  for (; s && *s; s++)
    if (((unsigned char)*s & 0xc0) != 0x80) w++;
  return w;
}

/* A row made by pxctl_table_line: its first cell starts with this byte. */
#define PXCTL_TABLE_LINE '\x01'

static int pxctl__is_line(const pxctl_table_t *t, size_t i) {
  size_t row = i - i % (size_t)t->ncols;
  return t->cells[row] && t->cells[row][0] == PXCTL_TABLE_LINE;
}

void pxctl_table_line(pxctl_table_t *t, const char *text) {
  if (!t || t->ncells % (size_t)t->ncols) return; /* only between rows */
  pxctl_table_cell(t, "%c%s", PXCTL_TABLE_LINE, text);
  for (int c = 1; c < t->ncols; c++) pxctl_table_cell(t, "%s", "");
}

void pxctl_table_print(pxctl_table_t *t, FILE *f, int indent) {
  if (!t) return;
  int *w = px_calloc((size_t)t->ncols, sizeof *w, "pxctl.table.width");
  if (w) {
    for (size_t i = 0; i < t->ncells; i++) {
      int c = (int)(i % (size_t)t->ncols), cw = pxctl__width(t->cells[i]);
      if (cw > w[c] && !pxctl__is_line(t, i)) w[c] = cw;
    }
    for (size_t i = 0; i < t->ncells; i++) {
      int c = (int)(i % (size_t)t->ncols);
      if (pxctl__is_line(t, i)) {
        if (c == 0) fprintf(f, "%*s%s\n", indent, "", t->cells[i] + 1);
        continue;
      }
      const char *s = t->cells[i] ? t->cells[i] : "";
      int pad = w[c] - pxctl__width(s);
      if (c == 0) fprintf(f, "%*s", indent, "");
      else fputs("  ", f);
      if (t->right[c]) fprintf(f, "%*s%s", pad, "", s);
      else if (c == t->ncols - 1) fputs(s, f);
      else fprintf(f, "%s%*s", s, pad, "");
      if (c == t->ncols - 1 || i + 1 == t->ncells) fputc('\n', f);
    }
  }
  px_free(w);
  pxctl_table_destroy(t);
}

void pxctl_table_destroy(pxctl_table_t *t) {
  if (!t) return;
  for (size_t i = 0; i < t->ncells; i++) px_free(t->cells[i]);
  px_free(t->cells);
  px_free(t->right);
  px_free(t);
}

void pxctl_fmt_bytes(char *buf, size_t cap, uint64_t bytes) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    u++;
  }
  if (u == 0) snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
  else snprintf(buf, cap, "%.*f %s", v < 10 ? 2 : v < 100 ? 1 : 0, v, units[u]);
}

void pxctl_fmt_clip(char *buf, size_t cap, const char *text, size_t width) {
  size_t n = strcspn(text, "\n");
  if (n <= width) {
    snprintf(buf, cap, "%.*s", (int)n, text);
    return;
  }
  /* the last space at or before width - 3 ("..." follows), after trimming
   * the punctuation a cut would leave dangling */
  size_t cut = 0;
  for (size_t i = 0; i + 3 <= width && i < n; i++)
    if (text[i] == ' ') cut = i;
  if (cut == 0) cut = strcspn(text, " \n"); /* one long first word: kept whole */
  while (cut > 0 && strchr(" ,;:(", text[cut - 1])) cut--;
  snprintf(buf, cap, "%.*s...", (int)cut, text);
}

void pxctl_fmt_macs(char *buf, size_t cap, uint64_t dense, uint64_t compact) {
  snprintf(buf, cap, "%.2f M per image dense; %.2f M (%.1f%%) compact", (double)dense / 1e6,
           (double)compact / 1e6, dense ? 100.0 * (double)compact / (double)dense : 0.0);
}

void pxctl_fmt_pct(char *buf, size_t cap, double frac) {
  if (frac < 0) snprintf(buf, cap, "-");
  else snprintf(buf, cap, "%.2f%%", 100.0 * frac);
}

void pxctl_fmt_time(char *buf, size_t cap, int64_t unix_ms) {
  if (unix_ms <= 0) {
    snprintf(buf, cap, "-");
    return;
  }
  time_t t = (time_t)(unix_ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm); /* UTC, as the logs and the dashboard */
  strftime(buf, cap, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

void pxctl_fmt_duration(char *buf, size_t cap, double s) {
  if (s < 0) s = 0;
  long long t = (long long)s;
  if (s < 60) snprintf(buf, cap, s < 10 ? "%.1fs" : "%.0fs", s);
  else if (t < 3600) snprintf(buf, cap, "%lldm%02llds", t / 60, t % 60);
  else if (t < 86400) snprintf(buf, cap, "%lldh%02lldm", t / 3600, t % 3600 / 60);
  else snprintf(buf, cap, "%lldd%02lldh", t / 86400, t % 86400 / 3600);
}

void pxctl_fmt_age(char *buf, size_t cap, int64_t unix_ms) {
  if (unix_ms <= 0) {
    snprintf(buf, cap, "-");
    return;
  }
  char d[32];
  pxctl_fmt_duration(d, sizeof d, (double)(pxctl_now_unix_ms() - unix_ms) / 1000.0);
  snprintf(buf, cap, "%s ago", d);
}

int64_t pxctl_now_unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double pxctl_mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int pxctl__parse_enum(const char *s, const char *prefix, const char *const *names, int n) {
  size_t pl = strlen(prefix);
  if (!strncasecmp(s, prefix, pl)) s += pl;
  for (int i = 1; i < n; i++)
    if (!strcasecmp(s, names[i])) return i;
  return 0;
}

int pxctl_parse_job_state(const char *s) {
  static const char *const names[] = {"unspecified", "pending", "scheduled", "running",
                                      "succeeded",   "failed",  "cancelled", "timeout"};
  if (!strcasecmp(s, "canceled")) return PRUNEX__V1__JOB_STATE__JOB_STATE_CANCELLED;
  return pxctl__parse_enum(s, "job_state_", names, 8);
}

int pxctl_job_finished(int s) {
  return s == PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED ||
         s == PRUNEX__V1__JOB_STATE__JOB_STATE_FAILED ||
         s == PRUNEX__V1__JOB_STATE__JOB_STATE_CANCELLED ||
         s == PRUNEX__V1__JOB_STATE__JOB_STATE_TIMEOUT;
}

int pxctl_parse_node_state(const char *s) {
  static const char *const names[] = {"unspecified", "ready", "busy", "lost"};
  return pxctl__parse_enum(s, "node_state_", names, 4);
}

void pxctl_csv_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const char *p = s ? s : ""; *p; p++) {
    if (*p == '"') fputc('"', f);
    fputc(*p, f);
  }
  fputc('"', f);
}
