/* sd_notify glue for the daemons (see px_service.h): libsystemd's
 * sd_notify and sd_watchdog_enabled, and a libuv timer for the watchdog so
 * that the keep-alive proves the event loop is turning, not merely that
 * the process exists. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>

#include "prunex/px.h"
#include "prunex/service.h"

int px_service_notify(const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  int rc = sd_notify(0, msg);
  if (rc < 0) px_log(PX_LOG_DEBUG, "sd_notify(%s): error %d", msg, rc);
  return rc;
}

static void px__watchdog_tick(uv_timer_t *t) {
  px_service_watchdog_t *w = t->data;
  if (sd_notify(0, "WATCHDOG=1") > 0) w->pings++;
}

int px_service_watchdog_start(px_service_watchdog_t *w, uv_loop_t *loop) {
  uint64_t usec = 0;
  int rc = sd_watchdog_enabled(0, &usec);
  if (rc <= 0 || usec == 0) {
    if (rc < 0) px_log(PX_LOG_WARN, "watchdog settings ignored (WATCHDOG_USEC): error %d", rc);
    return 0;
  }
  w->interval_ms = usec / 2000;
  if (w->interval_ms == 0) w->interval_ms = 1;
  uv_timer_init(loop, &w->timer);
  w->timer.data = w;
  w->active = 1;
  uv_timer_start(&w->timer, px__watchdog_tick, 0, w->interval_ms);
  uv_unref((uv_handle_t *)&w->timer);
  px_log(PX_LOG_INFO, "service watchdog: WATCHDOG=1 every %llu ms (WatchdogSec %.3f s)",
         (unsigned long long)w->interval_ms, (double)usec / 1e6);
  return 1;
}

void px_service_watchdog_close(px_service_watchdog_t *w) {
  if (!w->active) return;
  w->active = 0;
  uv_timer_stop(&w->timer);
  uv_close((uv_handle_t *)&w->timer, NULL);
}

int px_service_stderr_is_journal(void) {
  const char *js = getenv("JOURNAL_STREAM");
  if (!js || !js[0]) return 0;
  unsigned long long dev = 0, ino = 0;
  if (sscanf(js, "%llu:%llu", &dev, &ino) != 2) return 0;
  struct stat sb;
  if (fstat(2, &sb) != 0) return 0;
  return (unsigned long long)sb.st_dev == dev && (unsigned long long)sb.st_ino == ino;
}
